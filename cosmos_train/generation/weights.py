"""Weights handed to an engine's update_weights: one iterator over (name, tensor), whatever the source.

A DTensor (a trainer's FSDP2 / TP shard) is gathered to the full tensor as it is read.
A folder is an exported safetensors checkpoint (`cosmos_train.models.hf_folder`: shards + index, or one
model.safetensors); its tensors are read one at a time, so pushing a 7B model never holds a second
copy in memory. A mapping is a state dict; any other iterable is taken as (name, tensor) pairs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from cosmos_train.errors import ModelError
from cosmos_train.generation.base import WeightSource


def safetensors_files(folder: Path) -> list[Path]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ModelError(
            f"update_weights: {folder} holds no *.safetensors file; pass an exported checkpoint "
            "folder (safetensors/step_N or safetensors/final of a run)"
        )
    return files


def iter_weights(source: WeightSource) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, tensor) pairs of `source`, in its order."""
    if isinstance(source, (str, Path)):
        folder = Path(source)
        if not folder.is_dir():
            raise ModelError(f"update_weights: {folder} is not a folder; pass an exported safetensors folder")
        for file in safetensors_files(folder):
            with safe_open(str(file), framework="pt") as f:
                for name in f.keys():  # noqa: SIM118 (safe_open has no __iter__)
                    yield name, f.get_tensor(name)
        return
    items: Any = source.items() if isinstance(source, Mapping) else source
    for name, tensor in items:
        if hasattr(tensor, "full_tensor"):
            # an FSDP2 / TP shard (DTensor): gathering is a collective, so every rank of its mesh
            # must walk the same stream, even ranks that hold no engine
            tensor = tensor.full_tensor()
        yield name, tensor


def unknown_names_error(unknown: list[str], known: int, engine: str) -> ModelError:
    shown = ", ".join(unknown[:5]) + (f" and {len(unknown) - 5} more" if len(unknown) > 5 else "")
    return ModelError(
        f"update_weights ({engine} engine): {len(unknown)} tensor name(s) are not parameters of the loaded "
        f"model ({known} are): {shown}. The weights come from another architecture or carry a wrapper "
        "prefix (e.g. FSDP's '_orig_mod.' or DDP's 'module.'); push the unwrapped model's state dict"
    )
