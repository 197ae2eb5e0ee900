"""SFT loss: token-level cross entropy summed, then scaled by what `sft_loss_scales` gives each micro-batch.

Each micro-batch's backward takes its summed token cross entropy times its scale, so the gradients that
accumulate over the micro-batches (and that FSDP averages over the data-parallel ranks) are the step's
gradient under train.train_policy.loss_denominator: cosmos-rl's mean of per-micro-batch token means, or our one
token mean over the whole step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from cosmos_train.distributed import DistInfo, all_reduce_sum

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


def sft_loss_scales(
    local_tokens: Sequence[int], dist: DistInfo, denominator: str, balance_dp_token: bool
) -> tuple[list[float], float]:
    """(what each of this rank's micro-batches multiplies its summed token cross entropy by, the step's label
    tokens over every rank). `local_tokens`: each micro-batch's label tokens on this rank (labels shifted by one).

    FSDP averages the gradients over the dp_size data-parallel ranks; the scales make the step's gradient:
    - denominator "micro_batch" (cosmos-rl's SFT: `async_safe_ce` with loss_scaling_factor = 1 / mini-batches):
      1 / M times the sum over the step's M micro-batches of each one's token mean. With balance_dp_token its
      tokens are summed over the replica's dp_shard ranks and the loss multiplied by dp_shard (cosmos-rl's
      all-reduce over the dp_shard group and num_dp_workers), so the mean is over the micro-batch's rows on
      every shard rank; without, each rank's own mean. Replicas are averaged (cosmos-rl reduces only dp_shard).
    - denominator "update" (ours): one token mean over the step's label tokens on every rank (balance_dp_token
      false: each rank's own step, ranks averaged), so the split into micro-batches changes only memory.
    A micro-batch with no label tokens has scale 0 (its sum is 0; cosmos-rl divides 0 by 1e-8).
    One all-reduce: a [dp_replicate, M] table of counts, each rank adding its own to its replica's row.
    """
    m = len(local_tokens)
    table = torch.zeros(dist.dp_replicate, m, dtype=torch.float64)
    replica = dist.dp_rank // dist.dp_shard
    table[replica] = torch.tensor(list(local_tokens), dtype=torch.float64)
    # the ranks of one TP x CP group hold the same rows: count them once
    table = all_reduce_sum(table, dist.device).cpu() / (dist.tp * dist.cp)
    total = float(table.sum())
    if denominator == "update":
        tokens, ranks = (total, dist.dp_size) if balance_dp_token else (float(sum(local_tokens)), 1)
        return [ranks / tokens if tokens else 0.0] * m, total
    counts = table[replica].tolist() if balance_dp_token else [float(c) for c in local_tokens]
    ranks = dist.dp_shard if balance_dp_token else 1
    return [ranks / (m * c) if c else 0.0 for c in counts], total
