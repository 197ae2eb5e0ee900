"""Names that training wrappers (torch.compile, FSDP, activation checkpointing, DDP) add to a model, taken off
again: what LoRA, the HF folder writer and the engines' weight sync all need to see a model's own names."""

from __future__ import annotations

import torch
from torch import nn

# Names that wrappers insert into parameter paths; none of them is ever part of a Hugging Face name.
WRAPPER_TOKENS = ("_orig_mod.", "_checkpoint_wrapped_module.", "_fsdp_wrapped_module.")


def strip_wrappers(name: str) -> str:
    for token in WRAPPER_TOKENS:
        name = name.replace(token, "")
    return name


def unwrap(model: nn.Module) -> nn.Module:
    """The model under torch.compile / DDP wrappers (FSDP2 keeps the class, so nothing to do for it)."""
    while True:
        if hasattr(model, "_orig_mod") and isinstance(model._orig_mod, nn.Module):
            model = model._orig_mod
        elif isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model
