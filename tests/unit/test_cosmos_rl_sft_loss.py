"""SFT's loss under cosmos-rl's keys is cosmos-rl's: its SFT trainer's own `async_safe_ce`, called once per
mini-batch (our micro-batch) with loss_scaling_factor = 1 / mini-batches and gradients accumulated, as its
`step_training` does. Ours under our own key (loss_denominator = "update") is one token mean over the step.

- One process, the real `SFTTrainer.train_step` (padded, packed, and with the LM head fused into the loss) on
  mini-batches holding different numbers of label tokens: its loss and every parameter's gradient equal cosmos-rl's
  on the same model and rows.
- Data-parallel ranks (2 gloo processes): the token counts summed over the dp_shard ranks (cosmos-rl's all-reduce
  and num_dp_workers, balance_dp_token), each rank's own (balance_dp_token = false), and replicas, which cosmos-rl
  never sums over: `sft_loss.sft_loss_scales` gives each rank cosmos-rl's loss and gradient.
- Mutation checks: ours normalised over the step's tokens under cosmos-rl's key fails both comparisons.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from cosmos_train.config import load_config
from cosmos_train.data.chat import EncodedChat, encode_chat
from cosmos_train.distributed import init_distributed
from cosmos_train.net import free_port
from cosmos_train.train import sft, sft_loss, step
from cosmos_train.train.batching import collate_padded, model_inputs, split_micro_batches
from cosmos_train.train.sft_loss import IGNORE, token_ce_sum
from tests.spawn_ranks import spawn_ranks
from tests.unit.sft_loss_dp_worker import (
    DP_CASES,
    KEPT,
    dp_worker,
    loss_and_grad,
    rank_batches,
    step_tokens_under_cosmos_rl_key,
    theirs,
)

TOL = 1e-5
MINI_BATCH = 2
# six rows, three mini-batches of two: very different numbers of label tokens in each
ANSWERS = [
    "A",
    "The red ball rolls down the ramp, hits the wall and stops there.",
    "No.",
    "Yes.",
    "It moves to the left, slowly at first and then faster and faster until it leaves the picture.",
    "B",
]


def test_loss_denominator_key_reads_for_either_run_type() -> None:
    """cosmos-rl's meaning by default; our key alone leaves the run SFT (both tables have it), and a GRPO table
    reads its own."""
    assert load_config(None, [], env={}, check_paths=False).train.train_policy.loss_denominator == "micro_batch"
    ours = load_config(None, ["train.train_policy.loss_denominator='update'"], env={}, check_paths=False)
    assert ours.policy_type == "sft" and ours.train.train_policy.loss_denominator == "update"
    grpo = ["train.train_policy.loss_denominator='update'", "train.train_policy.kl_beta=0.1"]
    assert load_config(None, grpo, env={}, check_paths=False).policy_type == "grpo"


# ------------------------------------------------------------------------------- one process, the real step
@pytest.fixture(scope="module")
def trainers(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[bool, sft.SFTTrainer]]:
    """{sequence_packing: an SFTTrainer on one process} over the tiny model; the process group ends with the module."""
    root = tmp_path_factory.mktemp("sft-loss")
    rows = root / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps(
                {"conversations": [{"role": "user", "content": "What happens?"}, {"role": "assistant", "content": a}]}
            )
            + "\n"
            for a in ANSWERS
        )
    )
    env = {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        out = {}
        for packing in (False, True):
            cfg = load_config(
                None,
                [
                    f"train.output_dir='{root / 'out'}'",
                    f"train.train_batch_per_replica={len(ANSWERS)}",
                    "train.param_dtype='float32'",
                    "train.optm_grad_norm_clip=0",  # the gradients as the loss makes them, unclipped
                    f"train.sequence_packing={str(packing).lower()}",
                    "train.train_policy.type='sft'",
                    f"train.train_policy.mini_batch={MINI_BATCH}",
                    f"train.train_policy.dataset.name='{rows}'",
                    f"policy.model_name_or_path='{tiny_model_dir}'",
                    "policy.model_max_length=512",
                    "policy.model_gradient_checkpointing=false",
                ],
                env={},
            )
            out[packing] = sft.SFTTrainer(cfg, root / f"run-{packing}", init_distributed(cfg.policy.parallelism))
        yield out
    if dist.is_initialized():
        dist.destroy_process_group()


def _samples(trainer: sft.SFTTrainer) -> list[EncodedChat]:
    chats = [[{"role": "user", "content": "What happens?"}, {"role": "assistant", "content": a}] for a in ANSWERS]
    samples = [encode_chat(trainer.processor, c, max_length=512) for c in chats]
    counts = [
        sum(int((s.labels[1:] != IGNORE).sum()) for s in part) for part in split_micro_batches(samples, MINI_BATCH)
    ]
    assert len(set(counts)) == len(counts), counts  # the mini-batches hold different numbers of label tokens
    return samples


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def _our_step(trainer: sft.SFTTrainer, samples: list[EncodedChat]) -> tuple[float, dict[str, torch.Tensor]]:
    """The trainer's own train_step; its gradients are read before the update, which is not made (every
    comparison starts from the same weights)."""
    grads: dict[str, torch.Tensor] = {}

    def read_then_skip(optimizer: torch.optim.Optimizer, scheduler: Any, finite: bool) -> bool:
        grads.update(_grads(trainer.model))
        return step.apply_update(optimizer, None, False)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sft, "apply_update", read_then_skip)
        out = trainer.train_step(samples)
    return out["loss"], grads


def _reference(
    trainer: sft.SFTTrainer,
    samples: list[EncodedChat],
    loss_of: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor],
) -> tuple[float, dict[str, torch.Tensor]]:
    """cosmos-rl's step_training on one process: each mini-batch through the whole model (all logits), its loss
    `loss_of(logits, labels, n_mini_batches)` backward, gradients accumulated; the loss logged is their sum."""
    model = trainer.model
    model.train()
    model.zero_grad(set_to_none=True)
    parts = split_micro_batches(samples, MINI_BATCH)
    total = 0.0
    for part in parts:
        mb = collate_padded(part, trainer.pad_id)
        logits = model(**model_inputs(model, mb), use_cache=False).logits
        loss = loss_of(logits, mb.labels, len(parts))
        loss.backward()
        total += float(loss.detach())
    grads = _grads(model)
    model.zero_grad(set_to_none=True)
    return total, grads


def _difference(a: tuple[float, dict[str, torch.Tensor]], b: tuple[float, dict[str, torch.Tensor]]) -> float:
    """The larger of the losses' relative difference and the gradients' largest difference relative to the
    largest gradient element."""
    assert a[1].keys() == b[1].keys() and a[1]
    scale = max(float(g.abs().max()) for g in b[1].values())
    grad = max(float((a[1][k] - b[1][k]).abs().max()) for k in a[1]) / scale
    return max(abs(a[0] - b[0]) / abs(b[0]), grad)


def ours_vs_cosmos_rl(trainer: sft.SFTTrainer) -> float:
    async_safe_ce, ce = theirs()
    samples = _samples(trainer)
    want = _reference(
        trainer, samples, lambda logits, labels, n: async_safe_ce(logits, labels, ce, loss_scaling_factor=1.0 / n)
    )
    return _difference(_our_step(trainer, samples), want)


def ours_vs_step_token_mean(trainer: sft.SFTTrainer) -> float:
    """loss_denominator = "update" against the hand-computed token mean over the whole step: every mini-batch's
    summed cross entropy over the step's label tokens."""
    samples = _samples(trainer)
    step_tokens = sum(int((s.labels[1:] != IGNORE).sum()) for s in samples)
    policy = trainer.cfg.train.train_policy
    policy.loss_denominator = "update"
    try:
        ours = _our_step(trainer, samples)
    finally:
        policy.loss_denominator = "micro_batch"
    return _difference(
        ours, _reference(trainer, samples, lambda logits, labels, n: token_ce_sum(logits, labels)[0] / step_tokens)
    )


LAYOUTS = {"padded": (False, False), "packed": (True, False), "fused-head": (False, True)}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_sft_step_equals_cosmos_rl(trainers: dict[bool, sft.SFTTrainer], layout: str) -> None:
    """Three mini-batches of 2 rows with different label-token counts (gradient accumulation), padded, packed into one
    sequence, or with the LM head fused into the loss: the step's loss and gradients are cosmos-rl's."""
    packing, fused = LAYOUTS[layout]
    trainer = trainers[packing]
    assert trainer.cfg.train.train_policy.loss_denominator == "micro_batch"  # the default: cosmos-rl's meaning
    trainer.cfg.train.fused_linear_ce = fused
    try:
        assert ours_vs_cosmos_rl(trainer) < TOL
    finally:
        trainer.cfg.train.fused_linear_ce = False


def test_update_denominator_is_one_token_mean_over_the_step(trainers: dict[bool, sft.SFTTrainer]) -> None:
    assert ours_vs_step_token_mean(trainers[False]) < TOL
    assert ours_vs_step_token_mean(trainers[True]) < TOL


def test_mutation_step_normaliser_is_caught(
    trainers: dict[bool, sft.SFTTrainer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sft, "sft_loss_scales", step_tokens_under_cosmos_rl_key(sft_loss.sft_loss_scales))
    # the issue measured 0.58-0.76 (relative) on its rows; these differ by far more than the tolerance
    assert ours_vs_cosmos_rl(trainers[False]) > 100 * TOL


# ------------------------------------------------------------------------------- data-parallel ranks (gloo)
@pytest.fixture(scope="module")
def dp_results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, list[float]]]:
    """Each of the 2 gloo ranks' losses and logit gradients, cosmos-rl's and ours, for every DP_CASES layout."""
    out = tmp_path_factory.mktemp("dp")
    spawn_ranks(dp_worker, 2, free_port(), str(out))
    return [json.loads((out / f"{r}.json").read_text()) for r in range(2)]


def _largest(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("case", [c[0] for c in DP_CASES])
def test_dp_ranks_equal_cosmos_rl(dp_results: list[dict[str, list[float]]], case: str) -> None:
    """Every rank's loss and gradient (FSDP then averages both the same way) equal cosmos-rl's."""
    for rank in dp_results:
        assert _largest(rank[f"{case}/ours"], rank[f"{case}/theirs"]) < TOL


@pytest.mark.parametrize("case", [c[0] for c in DP_CASES])
def test_mutation_dp_step_normaliser_is_caught(dp_results: list[dict[str, list[float]]], case: str) -> None:
    assert max(_largest(rank[f"{case}/mutated"], rank[f"{case}/theirs"]) for rank in dp_results) > 100 * TOL


def test_dp_update_denominator_is_the_step_token_mean(dp_results: list[dict[str, list[float]]]) -> None:
    """loss_denominator = "update" with balance_dp_token: each rank's loss is dp x its summed cross entropy over the
    step's tokens on both ranks (FSDP's average over the 2 ranks makes it the global token mean); by hand."""
    step_tokens = sum(sum(kept) for kept in KEPT)
    assert dp_results[0]["shard/step_tokens"] == [step_tokens]
    for rank, got in enumerate(dp_results):
        batches = rank_batches(rank)
        want = loss_and_grad(batches, lambda m, x, y: 2 * token_ce_sum(x, y)[0] / step_tokens)
        assert _largest(got["shard/update"], want) < TOL
        assert _largest(got["replicate/update"], want) < TOL  # ours sums over replicas too
    assert not math.isclose(dp_results[0]["shard/update"][0], dp_results[0]["shard/theirs"][0], rel_tol=1e-3)
