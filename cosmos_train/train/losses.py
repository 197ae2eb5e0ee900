"""SFT loss: token-level cross entropy summed, divided by a normaliser the caller chooses.

Gradient accumulation and data parallelism both sum per-token losses and divide once by the global
number of label tokens in the optimizer step, so a step's loss is the exact token mean over the whole
global batch however it is split into micro-batches and ranks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

IGNORE = -100


def token_ce_sum(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(sum of CE over label tokens, number of label tokens); logits [B, L, V] predict labels shifted by one."""
    shift_logits = logits[:, :-1, :].float()
    shift_labels = labels[:, 1:].to(shift_logits.device)
    loss = F.cross_entropy(
        shift_logits.reshape(-1, shift_logits.size(-1)), shift_labels.reshape(-1), ignore_index=IGNORE, reduction="sum"
    )
    return loss, int((shift_labels != IGNORE).sum())
