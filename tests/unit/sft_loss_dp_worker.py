"""The gloo ranks of tests/unit/test_cosmos_rl_sft_loss.py: each rank's SFT loss and gradient w.r.t. its logits,
cosmos-rl's `async_safe_ce` (its all-reduce of the token count over the dp_shard group) beside ours
(`sft_loss.sft_loss_scales`), for every DP_CASES layout. A module of its own so that the spawned ranks import only
torch, our loss and the oracle, not the trainer the test module loads."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from cosmos_train.distributed import DistInfo
from cosmos_train.train import sft_loss
from cosmos_train.train.sft_loss import IGNORE, token_ce_sum
from tests.cosmos_rl_oracle import oracle_config, oracle_function, oracle_module

SFT_TRAINER = "cosmos_rl.policy.trainer.llm_trainer.sft_trainer"
# (name, dp_replicate, dp_shard, balance_dp_token) on 2 ranks. cosmos-rl all-reduces the token count over the
# dp_shard group, and only with balance_dp_token and dp_shard > 1 (else its dp_group is None).
DP_CASES = [("shard", 1, 2, True), ("shard-unbalanced", 1, 2, False), ("replicate", 2, 1, True)]
# per rank, per mini-batch: how many of the 2 x 7 label positions are kept (a different count everywhere)
KEPT = [[2, 9], [5, 12]]

LossOf = Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]  # (mini-batch index, logits, labels) -> loss


def theirs() -> tuple[Callable[..., torch.Tensor], Any]:
    """cosmos-rl's async_safe_ce and the cross entropy its SFT trainer gives it (torch's: liger is not installed)."""
    ce = oracle_module("cosmos_rl.policy.kernel.loss").CrossEntropyLoss(oracle_config())
    return oracle_function(SFT_TRAINER, "async_safe_ce"), ce


def step_tokens_under_cosmos_rl_key(original: Callable[..., Any]) -> Callable[..., Any]:
    """The mutation of `sft_loss.sft_loss_scales`: every micro-batch normalised by the step's tokens whatever
    loss_denominator says."""

    def mutated(local_tokens: list[int], dist_info: DistInfo, denominator: str, balance: bool) -> Any:
        return original(local_tokens, dist_info, "update", balance)

    return mutated


def rank_batches(rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The rank's mini-batches: (logits [2, 8, 11], labels [2, 8] with KEPT[rank][m] label tokens)."""
    gen = torch.Generator().manual_seed(rank)
    out = []
    for kept in KEPT[rank]:
        logits = torch.randn(2, 8, 11, generator=gen)
        labels = torch.randint(11, (2, 8), generator=gen)
        drop = torch.randperm(14, generator=gen)[kept:]
        shifted = labels[:, 1:].reshape(-1).clone()  # labels shift by one: position 0 never counts
        shifted[drop] = IGNORE
        labels[:, 1:] = shifted.view(2, 7)
        out.append((logits, labels))
    return out


def loss_and_grad(batches: list[tuple[torch.Tensor, torch.Tensor]], loss_of: LossOf) -> list[float]:
    """[the rank's loss (the sum over its mini-batches), then its gradient w.r.t. every logit]."""
    total, grads = 0.0, []
    for m, (logits, labels) in enumerate(batches):
        x = logits.clone().requires_grad_(True)
        loss = loss_of(m, x, labels)
        (g,) = torch.autograd.grad(loss, x)
        total += float(loss.detach())
        grads.append(g.reshape(-1))
    return [total, *torch.cat(grads).tolist()]


def _scaled(scales: list[float]) -> LossOf:
    """Ours: micro-batch m's summed token cross entropy times its scale."""
    return lambda m, x, y: token_ce_sum(x, y)[0] * scales[m]


def _async_safe_ce(n: int, group: Any) -> LossOf:
    """Theirs: async_safe_ce with loss_scaling_factor = 1 / n mini-batches and its dp_group."""
    async_safe_ce, ce = theirs()
    return lambda m, x, y: async_safe_ce(x, y, ce, loss_scaling_factor=1.0 / n, dp_group=group)


def dp_worker(rank: int, world: int, port: int, out: str) -> None:
    """One rank: writes {"<case>/<theirs|ours|mutated|update>": loss_and_grad, "<case>/step_tokens": [n]} to
    out/<rank>.json."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    batches = rank_batches(rank)
    counts = [int((labels[:, 1:] != IGNORE).sum()) for _, labels in batches]
    mutated = step_tokens_under_cosmos_rl_key(sft_loss.sft_loss_scales)
    results: dict[str, list[float]] = {}
    for name, replicate, shard, balance in DP_CASES:
        # the loss needs the rank's coordinates only (its one all-reduce is over every rank)
        info = DistInfo(rank, world, 0, torch.device("cpu"), None, replicate, shard, 1)  # type: ignore[arg-type]
        group = dist.group.WORLD if balance and shard > 1 else None
        results[f"{name}/theirs"] = loss_and_grad(batches, _async_safe_ce(len(batches), group))
        for key, fn, denominator in (
            ("ours", sft_loss.sft_loss_scales, "micro_batch"),
            ("mutated", mutated, "micro_batch"),
            ("update", sft_loss.sft_loss_scales, "update"),
        ):
            scales, total = fn(counts, info, denominator, balance)
            results[f"{name}/{key}"] = loss_and_grad(batches, _scaled(scales))
        results[f"{name}/step_tokens"] = [total]
    Path(out, f"{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()
