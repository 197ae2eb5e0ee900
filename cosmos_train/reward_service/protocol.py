"""The wire protocol of the reference reward service (nvidia-cosmos/cosmos-rl, reward_service/), parsed
strictly.

An enqueue body is `<JSON object, UTF-8>\\n<tensor bytes>`:
    {"prompts": [...], "reward_fn": {name: weight}, "video_infos": [{...}], "media_type": "video"}
media_type: latent | video ([B, C, T, H, W]) | image ([B, H, W, C]), pixels in [0, 255]; ours also
takes "text" (no tensor) for rewards that read `completions` (+ `samples`: per item the row's
`reference` / `options`), the VLM rule rewards and the judge.
The tensor is a `.npy` file (np.save) read with allow_pickle=False, or a torch.save file read with
torch.load(weights_only=True); never an unrestricted unpickle.

Every problem is a `ProtocolError(status, message)` naming the field, answered as that status.
"""

from __future__ import annotations

import io
import json
import math
import pickle
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from cosmos_train.reward_service.handlers.base import MEDIA_TYPES, Batch, Handler

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"  # torch.save's (zip) format
MEDIA_NDIM = {"latent": 5, "video": 5, "image": 4}
MEDIA_LAYOUT = {"latent": "[B, C, T, H, W]", "video": "[B, C, T, H, W]", "image": "[B, H, W, C]"}


class ProtocolError(Exception):
    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


@dataclass
class Enqueued:
    """A parsed enqueue request: what to score, with what, and what to echo back."""

    batch: Batch
    weights: dict[str, float]
    input_info: dict[str, Any]


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
    if not isinstance(meta, dict):
        raise _bad("body: the first line must be a JSON object")
    return meta, tensor


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


def decode_tensor(data: bytes) -> tuple[np.ndarray, str]:
    """The tensor as numpy and its dtype's name as the sender had it ("torch.bfloat16", "torch.uint8")."""
    if data.startswith(NPY_MAGIC):
        try:
            arr = np.load(io.BytesIO(data), allow_pickle=False)
        except ValueError as e:
            if "pickle" in str(e).lower():
                raise _bad("tensor: an object (pickled) .npy array is refused; send a numeric array") from None
            raise _bad(f"tensor: not a complete .npy file ({e})") from None
        except (OSError, EOFError) as e:
            raise _bad(f"tensor: not a complete .npy file ({e})") from None
        name = f"torch.{arr.dtype.name}"
    elif data.startswith(ZIP_MAGIC):
        try:
            obj = torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
        except pickle.UnpicklingError as e:
            raise _bad(f"tensor: refused by torch.load(weights_only=True): {str(e).splitlines()[0]}") from None
        except Exception as e:  # a truncated / corrupt zip surfaces as RuntimeError or others
            raise _bad(f"tensor: not a complete torch.save file ({type(e).__name__}: {str(e)[:200]})") from None
        if not isinstance(obj, torch.Tensor):
            raise _bad(f"tensor: the torch.save file holds a {type(obj).__name__}, not a tensor")
        name = str(obj.dtype)
        if obj.dtype in (torch.bfloat16, torch.float16):
            obj = obj.float()  # numpy has no bfloat16
        arr = obj.detach().contiguous().numpy()
    else:
        raise _bad("tensor: neither a .npy (np.save) nor a torch.save file; pickles and other formats are refused")
    if arr.dtype.kind not in "biuf":
        raise _bad(f"tensor: dtype {arr.dtype} is not numeric")
    return arr, name


def parse_enqueue(body: bytes, handlers: Mapping[str, Handler]) -> Enqueued:
    meta, tensor = split_body(body)
    weights = read_weights(meta, handlers)
    media_type = meta.get("media_type", "video")
    if media_type not in MEDIA_TYPES:
        raise _bad(f"media_type: must be one of {' | '.join(MEDIA_TYPES)}, got {media_type!r}")
    prompts = _list_of(meta, "prompts", str, "strings")
    video_infos = _list_of(meta, "video_infos", dict, "objects")
    completions = _list_of(meta, "completions", str, "strings")
    samples = _list_of(meta, "samples", dict, "objects")

    media, dtype_name, input_info = None, None, {}
    if media_type == "text":
        if tensor:
            raise _bad("tensor: media_type 'text' takes no tensor bytes after the JSON line")
        size = len(completions)
        if size == 0:
            raise _bad("completions: media_type 'text' needs at least one completion")
    else:
        if not tensor:
            raise _bad(f"tensor: media_type {media_type!r} needs tensor bytes after the JSON line")
        media, dtype_name = decode_tensor(tensor)
        if media.ndim != MEDIA_NDIM[media_type] or 0 in media.shape:
            raise _bad(
                f"tensor: media_type {media_type!r} takes shape {MEDIA_LAYOUT[media_type]}, got {list(media.shape)}"
            )
        size = int(media.shape[0])
        input_info = {
            "shape": list(media.shape),
            "dtype": dtype_name,
            "min": f"{float(media.min()):.3f}",
            "max": f"{float(media.max()):.3f}",
        }
    for key, items in (("prompts", prompts), ("video_infos", video_infos), ("completions", completions)):
        if items and len(items) != size:
            raise _bad(f"{key}: {len(items)} items for a batch of {size}")
    if samples and len(samples) != len(completions):
        raise _bad(f"samples: {len(samples)} items for {len(completions)} completions")
    if video_infos:
        input_info["video_infos"] = video_infos
    for name in weights:
        why = handlers[name].refuse(media_type, bool(completions))
        if why:
            raise _bad(f"reward_fn.{name}: {why}")
    batch = Batch(
        media_type=media_type,
        size=size,
        media=media,
        prompts=prompts,
        video_infos=video_infos,
        completions=completions,
        samples=samples,
    )
    return Enqueued(batch=batch, weights=weights, input_info=input_info)
