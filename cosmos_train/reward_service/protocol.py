"""The wire protocol of the reference reward service (nvidia-cosmos/cosmos-rl, reward_service/), parsed
strictly and within bounds.

An enqueue body is `<JSON object, UTF-8>\\n<tensor bytes>`:
    {"prompts": [...], "reward_fn": {name: weight}, "video_infos": [{...}], "media_type": "video"}
media_type: latent ([B, C, T, H, W], decoded to pixels by the service's Wan VAE before the pixel rewards) |
video ([B, C, T, H, W]) | image ([B, H, W, C]), pixels in [0, 255]. A missing media_type means latent, as
the reference reads it (cosmos-rl's world-model RemoteReward sends latents without one). Ours also takes
"text" (no tensor) for rewards that read `completions` (+ `samples`: per item the row's `reference` /
`options`), the VLM rule rewards and the judge.
The tensor is a `.npy` file (np.save) or a torch.save file, checked by `tensors` before it is allocated;
never an unrestricted unpickle.

Parsing is two steps, so the service can weigh a request before it allocates it:
    incoming = inspect_enqueue(body, handlers, decoder, max_decoded_bytes)   # headers only; .weight in bytes
    enqueued = decode_enqueue(incoming)                                      # the arrays
Every problem is a `ProtocolError(status, message)` naming the field, answered as that status.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cosmos_train.reward_service.errors import ProtocolError
from cosmos_train.reward_service.handlers.base import MEDIA_TYPES, Batch, Handler
from cosmos_train.reward_service.latents import LatentDecoder, from_wire
from cosmos_train.reward_service.tensors import TensorInfo, check_finite, decode_tensor, inspect_tensor

MEDIA_NDIM = {"latent": 5, "video": 5, "image": 4}
MEDIA_LAYOUT = {"latent": "[B, C, T, H, W]", "video": "[B, C, T, H, W]", "image": "[B, H, W, C]"}
DEFAULT_MEDIA_TYPE = "latent"  # the reference's reading of a body without media_type
LATENT_DTYPES = ("torch.float32", "torch.float16", "torch.bfloat16", "torch.float64")

__all__ = ["Enqueued", "Incoming", "ProtocolError", "decode_enqueue", "inspect_enqueue"]


@dataclass
class Enqueued:
    """A parsed enqueue request: what to score, with what, and what to echo back."""

    batch: Batch
    weights: dict[str, float]
    input_info: dict[str, Any]


@dataclass
class Incoming:
    """An enqueue body checked up to its tensor's header: what it asks and what it takes in memory."""

    weights: dict[str, float]
    media_type: str
    size: int
    prompts: list[str]
    video_infos: list[dict[str, Any]]
    completions: list[str]
    samples: list[dict[str, Any]]
    tensor: TensorInfo | None = None
    tensor_bytes: bytes = b""
    weight: int = 0  # bytes held while queued and scored: the decoded tensor (+ the pixels of decoded latents)
    decoded_shape: tuple[int, ...] | None = field(default=None)


def _bad(message: str) -> ProtocolError:
    return ProtocolError(400, message)


def split_body(body: bytes) -> tuple[dict[str, Any], bytes]:
    head, sep, tensor = body.partition(b"\n")
    if not sep and not head.strip():
        raise _bad("body: empty; send a JSON line, a newline, then the tensor bytes")
    try:
        meta = json.loads(head.decode("utf-8"))
    except UnicodeDecodeError:
        raise _bad("body: the first line is not UTF-8 JSON") from None
    except json.JSONDecodeError as e:
        raise _bad(f"body: the first line is not JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise _bad("body: the first line's JSON nests too deep; send a flat object") from None
    if not isinstance(meta, dict):
        raise _bad("body: the first line must be a JSON object")
    return meta, tensor


def reward_names(body: bytes) -> list[str] | None:
    """The reward set a body asks for, read without checking the rest (None: unreadable)."""
    try:
        meta, _ = split_body(body)
    except ProtocolError:
        return None
    spec = meta.get("reward_fn")
    return sorted(spec) if isinstance(spec, dict) else None


def read_weights(meta: Mapping[str, Any], handlers: Mapping[str, Handler]) -> dict[str, float]:
    spec = meta.get("reward_fn")
    if not isinstance(spec, dict) or not spec:
        raise _bad("reward_fn: must be a non-empty object {name: weight}")
    weights = {}
    for name, w in spec.items():
        if name not in handlers:
            raise _bad(f"reward_fn.{name}: unknown reward; known: {', '.join(sorted(handlers))}")
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w < 0:
            raise _bad(f"reward_fn.{name}: weight must be a finite number >= 0, got {w!r}")
        weights[name] = float(w)
    return weights


def _list_of(meta: Mapping[str, Any], key: str, kind: type, what: str) -> list[Any]:
    value = meta.get(key, [])
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, kind) for v in value):
        raise _bad(f"{key}: must be a list of {what}")
    return value


def _media_type(meta: Mapping[str, Any]) -> str:
    media_type = meta.get("media_type", DEFAULT_MEDIA_TYPE)
    if not isinstance(media_type, str) or media_type.lower() not in MEDIA_TYPES:
        raise _bad(f"media_type: must be one of {' | '.join(MEDIA_TYPES)}, got {media_type!r}")
    return media_type.lower()


def _check_media_shape(
    media_type: str, info: TensorInfo, named: bool, decoder: LatentDecoder, decode: bool
) -> tuple[int, ...]:
    """The shape the handlers (or, for latents, the VAE) will see; 400 when it is not one they take."""
    # a body without media_type is read as latents (the reference's reading): say so, since the sender may
    # have meant pixels
    unnamed = "" if named else ' (no media_type sent: read as latent, as the reference does; send "video" for pixels)'
    shape = info.shape
    if len(shape) != MEDIA_NDIM[media_type] or 0 in shape:
        raise _bad(
            f"tensor: media_type {media_type!r}{unnamed} takes shape {MEDIA_LAYOUT[media_type]}, got {list(shape)}"
        )
    if media_type != "latent":
        return shape
    if info.format == "npy" and info.dtype_name == "torch.uint8":
        # numpy has no bfloat16: the reference reads uint8 latents as bfloat16 bytes (a view), halving the last axis
        if shape[-1] % 2:
            raise _bad(f"tensor: uint8 latents are read as bfloat16 bytes, but the last axis ({shape[-1]}) is odd")
        shape = (*shape[:-1], shape[-1] // 2)
    elif info.dtype_name not in LATENT_DTYPES:
        raise _bad(
            f"tensor: latents must be float ({', '.join(LATENT_DTYPES)}) or bfloat16 bytes as .npy uint8, "
            f"got {info.dtype_name}"
        )
    why = decoder.refuse(shape) if decode else None  # handlers that read latents themselves need no VAE
    if why:
        raise _bad(f"media_type latent{unnamed}: {why}")
    return shape


def reads_pixels(handler: Handler, media_type: str) -> bool:
    """Whether `handler` scores this request's latents as the pixels they decode to (a pixel handler), rather
    than reading the latents themselves (a handler whose media_types name "latent")."""
    return media_type == "latent" and "latent" not in handler.media_types


def inspect_enqueue(
    body: bytes, handlers: Mapping[str, Handler], decoder: LatentDecoder, max_decoded_bytes: int
) -> Incoming:
    """The request checked from its JSON line and its tensor's header, nothing allocated: 400 / 413 naming
    what is wrong. `.weight` is what it will hold in memory once decoded."""
    meta, tensor_bytes = split_body(body)
    weights = read_weights(meta, handlers)
    media_type = _media_type(meta)
    incoming = Incoming(
        weights=weights,
        media_type=media_type,
        size=0,
        prompts=_list_of(meta, "prompts", str, "strings"),
        video_infos=_list_of(meta, "video_infos", dict, "objects"),
        completions=_list_of(meta, "completions", str, "strings"),
        samples=_list_of(meta, "samples", dict, "objects"),
        tensor_bytes=tensor_bytes,
        weight=len(body),
    )
    if media_type == "text":
        if tensor_bytes:
            raise _bad("tensor: media_type 'text' takes no tensor bytes after the JSON line")
        incoming.size = len(incoming.completions)
        if incoming.size == 0:
            raise _bad("completions: media_type 'text' needs at least one completion")
    else:
        if not tensor_bytes:
            raise _bad(f"tensor: media_type {media_type!r} needs tensor bytes after the JSON line")
        info = inspect_tensor(tensor_bytes, max_decoded_bytes)
        decode = media_type == "latent" and any(reads_pixels(handlers[name], media_type) for name in weights)
        shape = _check_media_shape(media_type, info, "media_type" in meta, decoder, decode)
        incoming.tensor, incoming.size, incoming.weight = info, info.shape[0], info.nbytes
        if media_type == "latent":
            incoming.weight = math.prod(shape) * 4  # decoded as float32
        if decode:
            incoming.decoded_shape = decoder.decoded_shape(shape)
            pixels = math.prod(incoming.decoded_shape)  # uint8
            if pixels > max_decoded_bytes:
                raise ProtocolError(
                    413,
                    f"tensor: latents {list(info.shape)} decode to {list(incoming.decoded_shape)} pixels "
                    f"({pixels / 2**20:.1f} MiB), over the service's max_decoded_mb "
                    f"({max_decoded_bytes / 2**20:.1f} MiB); send smaller batches",
                )
            incoming.weight += pixels
    size = incoming.size
    for key, items in (
        ("prompts", incoming.prompts),
        ("video_infos", incoming.video_infos),
        ("completions", incoming.completions),
    ):
        if items and len(items) != size:
            raise _bad(f"{key}: {len(items)} items for a batch of {size}")
    if incoming.samples and len(incoming.samples) != len(incoming.completions):
        raise _bad(f"samples: {len(incoming.samples)} items for {len(incoming.completions)} completions")
    for name in weights:
        scored_as = "video" if reads_pixels(handlers[name], media_type) else media_type
        why = handlers[name].refuse(scored_as, bool(incoming.completions))
        if why:
            raise _bad(f"reward_fn.{name}: {why}")
    return incoming


def decode_enqueue(incoming: Incoming) -> Enqueued:
    """The arrays of an inspected request (values checked finite); latents stay latents until a worker
    decodes them."""
    media, input_info = None, {}
    if incoming.tensor is not None:
        media = decode_tensor(incoming.tensor_bytes, incoming.tensor)
        if incoming.media_type == "latent":
            media = from_wire(media)  # float32; bfloat16 bytes (npy uint8) read as the reference reads them
            check_finite(media)
        input_info = {
            "shape": list(media.shape),
            "dtype": incoming.tensor.dtype_name,
            "min": f"{float(media.min()):.3f}",
            "max": f"{float(media.max()):.3f}",
        }
    if incoming.video_infos:
        input_info["video_infos"] = incoming.video_infos
    batch = Batch(
        media_type=incoming.media_type,
        size=incoming.size,
        media=media,
        prompts=incoming.prompts,
        video_infos=incoming.video_infos,
        completions=incoming.completions,
        samples=incoming.samples,
    )
    return Enqueued(batch=batch, weights=incoming.weights, input_info=input_info)


def parse_enqueue(
    body: bytes, handlers: Mapping[str, Handler], decoder: LatentDecoder, max_decoded_bytes: int
) -> Enqueued:
    """Both steps at once (a restart re-reading its queued bodies)."""
    return decode_enqueue(inspect_enqueue(body, handlers, decoder, max_decoded_bytes))
