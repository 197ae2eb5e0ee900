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


def label_positions(labels: torch.Tensor) -> torch.Tensor:
    """1D indices of the positions whose logits any row needs (position t predicts label t+1).

    Passed to the model as `logits_to_keep`, the LM head and the loss run on these positions only:
    in SFT most tokens are prompt and vision, and for a 152k vocabulary the skipped logits are most
    of the memory of a step.
    """
    needed = (labels[:, 1:] != IGNORE).any(dim=0)
    return needed.nonzero(as_tuple=True)[0]


def kept_ce_sum(logits: torch.Tensor, labels: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, int]:
    """token_ce_sum for logits computed at `positions` only ([B, K, V]): the same value, less work."""
    targets = labels[:, positions + 1].to(logits.device)
    loss = F.cross_entropy(
        logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=IGNORE, reduction="sum"
    )
    return loss, int((targets != IGNORE).sum())
