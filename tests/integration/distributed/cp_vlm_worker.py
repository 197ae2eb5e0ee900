"""Worker for test_cp_vlm.py: one forward + backward of the tiny VLM with context parallel against cp = 1.

    python -m torch.distributed.run --standalone --nproc_per_node=4 \
        -m tests.integration.distributed.cp_vlm_worker MODEL OUT CASES

CASES: comma-separated "cp x dp_shard [x tp]" layouts over the launched ranks (e.g. "4x1,2x2,2x1x2"). For each,
every rank builds the same global batch (two video chats and two text-only ones, odd lengths so cp padding is
exercised), takes its data-parallel share, and runs on the FSDP2 + CP model the trainers' path
(`step.backward_micro_batches`) for:
- SFT, padded and packed: each CP rank's cross-entropy sum over its slice's tokens x dp / global tokens, and the
  same with the LM head fused into the loss (`linear_ce_sum` on the slice's hidden states);
- a GRPO update's loss on the shared-prompt layout (4D mask): per-token log-probs gathered (`KeptSlice`), the
  GSPO sequence-ratio loss (not a sum over tokens) with seq-mean-token-mean aggregation.
The CP model trains with activation checkpointing (recomputed layers redo their all-to-alls in backward).
Each rank also runs the same whole batch through an unsharded copy of the model at cp = 1 (plain forward), and
writes OUT/rank{R}.json: per case, the largest gradient difference relative to the gradient's scale and the two
losses.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.distributed.tensor import DTensor

from cosmos_train.config import ParallelismConfig, config_from_dict
from cosmos_train.context_parallel import NO_CP, CpGroup
from cosmos_train.data.chat import encode_chat
from cosmos_train.distributed import all_reduce_sum, init_distributed, teardown
from cosmos_train.models.families import family_of
from cosmos_train.models.load import load_model, load_processor
from cosmos_train.models.parallelize import parallelize
from cosmos_train.train.batching import MicroBatch, collate_packed, collate_padded
from cosmos_train.train.cp_language import KeptSlice
from cosmos_train.train.linear_ce import head_weight, linear_ce_sum
from cosmos_train.train.rl_batch import RLSample, SharedPrefixLayout, shared_prefix_batch
from cosmos_train.train.rl_losses import PolicyLossConfig, policy_loss
from cosmos_train.train.sft_loss import kept_ce_sum
from cosmos_train.train.step import backward_micro_batches, forward_logits
from tests.media import moving_square_mp4

GSPO = PolicyLossConfig(sequence_ratio=True, loss_type="seq-mean-token-mean")


def chats(folder: Path | None) -> list[list[dict]]:
    """The batch's chats; folder None (a text-only model): the video chats without their video."""

    def chat(video: Path | None, q: str, a: str) -> list[dict]:
        content: list[dict] = [{"type": "text", "text": q}]
        if video is not None:
            content.insert(0, {"type": "video", "video": str(video), "min_pixels": 3136, "max_pixels": 3136})
        return [{"role": "user", "content": content}, {"role": "assistant", "content": a}]

    return [
        chat(folder and moving_square_mp4(folder / "a.mp4", 0), "Which way does the square move?", "It moves right. B"),
        chat(None, "A text-only question about gravity, odd length.", "Things fall down."),
        chat(
            folder and moving_square_mp4(folder / "b.mp4", 11), "Does it move?", "Yes, it moves to the right quickly."
        ),
        chat(None, "Short one.", "Yes."),
    ]


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            g = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
            out[name.replace("_fsdp_wrapped_module.", "")] = g.detach().clone()
    return out


def compare(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> float:
    """The largest |difference| over all gradients, relative to the largest |gradient| (0 = equal)."""
    assert got.keys() == want.keys(), sorted(set(got) ^ set(want))[:5]
    scale = max(float(g.abs().max()) for g in want.values())
    return max(float((got[k] - want[k]).abs().max()) for k in want) / scale


def sft_loss(dp: int, tokens: float):
    def loss_fn(i: int, mb: MicroBatch, logits: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        return kept_ce_sum(logits, mb.labels, keep)[0] * (dp / tokens)

    return loss_fn


def fused_loss(dp: int, tokens: float):
    """SFT's fused LM head + cross entropy (train.fused_linear_ce) from the hidden states at the kept positions."""

    def head_loss_fn(
        i: int, mb: MicroBatch, hidden: torch.Tensor, lm_head: torch.nn.Module, keep: torch.Tensor
    ) -> torch.Tensor:
        targets = mb.labels[:, keep + 1].reshape(-1)
        return linear_ce_sum(hidden.reshape(-1, hidden.shape[-1]), head_weight(lm_head), targets, 3)[0] * (dp / tokens)

    return head_loss_fn


def rl_samples(encoded: list) -> list[RLSample]:
    """Two groups (a video prompt, a text prompt) of 2 completions each, fixed tokens / advantages / old log-probs."""
    out = []
    for p, prompt in enumerate(encoded[:2]):
        for c in range(2):
            tokens = [100 + 7 * p + c, 200 + c, 300 + p, 17][: 3 + c]
            behav = torch.linspace(-2.0, -1.0, len(tokens)) - 0.1 * c
            out.append(RLSample(prompt, tokens, advantage=(-1.0) ** c * (0.5 + p), behav_logprobs=behav))
    return out


def grpo_loss(micro: list[tuple[MicroBatch, SharedPrefixLayout, list[RLSample]]], cp: CpGroup):
    def loss_fn(i: int, mb: MicroBatch, logits: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        _, layout, samples = micro[i]
        assert mb.logit_positions is not None  # the shared-prompt layout names them
        kept = KeptSlice(cp, mb.logit_positions, keep) if cp.active else None
        logp = layout.logprobs(logits, 1.0, kept)
        old = layout.grid(torch.cat([s.behav_logprobs for s in samples]))
        adv = torch.tensor([s.advantage for s in samples])
        loss, _ = policy_loss(logp, old, adv, layout.token_mask(), GSPO)
        return loss  # dp = 1 in the GRPO cases: FSDP divides by 1

    return loss_fn


def reference(model, batches: list[MicroBatch], loss_fn) -> tuple[float, dict[str, torch.Tensor]]:
    model.zero_grad()
    total = 0.0
    for i, mb in enumerate(batches):
        logits, keep, _ = forward_logits(model, mb, run_vision=False)
        loss = loss_fn(i, mb, logits, keep)
        loss.backward()
        total += float(loss)
    return total, grads(model)


def main() -> None:
    model_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
    layouts = [[int(x) for x in case.split("x")] + [1] for case in sys.argv[3].split(",")]
    proc = load_processor(model_dir)
    out.mkdir(parents=True, exist_ok=True)
    ref = load_model(model_dir, dtype=torch.float32)
    media = out / f"media{os.environ['RANK']}"  # each rank writes its own copy: no rank reads a half-written clip
    media.mkdir()
    encoded = [encode_chat(proc, c, max_length=512) for c in chats(None if family_of(ref).text_only else media)]
    ref.eval()  # no dropout anywhere: the two paths must see the same function
    cfg = config_from_dict(
        {
            # activation checkpointing: backward recomputes each layer, its all-to-alls included
            "policy": {"model_name_or_path": str(model_dir), "model_gradient_checkpointing": True},
            "train": {"train_policy": {"dataset": {"name": "x"}}},
        }
    )
    results = {}
    for cp_size, shard, tp, *_ in layouts:
        dist = init_distributed(ParallelismConfig(cp_size=cp_size, dp_shard_size=shard, tp_size=tp))
        name = f"{cp_size}x{shard}" + (f"x{tp}" if tp > 1 else "")
        model = parallelize(load_model(model_dir, dtype=torch.float32), dist, cfg)
        model.train()  # as the trainers run it (the tiny model has no dropout); checkpointing runs in training only
        # the global batch: every sample, split over the data-parallel ranks (the CP ranks of a group share theirs)
        mine = encoded[dist.dp_rank :: dist.dp_size]
        total = float(sum(collate_padded([s], 0).n_label_tokens for s in encoded))
        for kind in ("padded", "packed"):
            collate = (lambda s: collate_padded(s, 0)) if kind == "padded" else collate_packed
            micro = [collate(mine[:1]), collate(mine[1:])]
            model.zero_grad()
            sums: list[float] = []
            fn = sft_loss(dist.dp_size, total)

            def record(i, mb, logits, keep, fn=fn, sums=sums):
                loss = fn(i, mb, logits, keep)
                sums.append(float(loss))
                return loss

            backward_micro_batches(model, micro, dist, loss_fn=record)
            loss = float(all_reduce_sum(sum(sums), dist.device)) / dist.dp_size / tp  # TP ranks: the same sums
            want_loss, want = reference(ref, [collate([s]) for s in encoded], sft_loss(1, total))
            results[f"sft-{kind}-cp{name}"] = {
                "loss": loss,
                "ref": want_loss,
                "grad": compare(grads(model), want),
            }
        # the fused LM head + cross entropy (`forward_head_loss`: the head gets this rank's slice's hidden states)
        micro = [collate_padded(mine[:1], 0), collate_padded(mine[1:], 0)]
        model.zero_grad()
        fused_sums: list[float] = []
        fused = fused_loss(dist.dp_size, total)

        def record_fused(i, mb, hidden, lm_head, keep, fn=fused, sums=fused_sums):
            loss = fn(i, mb, hidden, lm_head, keep)
            sums.append(float(loss))
            return loss

        backward_micro_batches(model, micro, dist, head_loss_fn=record_fused)
        want_loss, want = reference(ref, [collate_padded([s], 0) for s in encoded], sft_loss(1, total))
        results[f"sft-fused-cp{name}"] = {
            "loss": float(all_reduce_sum(sum(fused_sums), dist.device)) / dist.dp_size / tp,
            "ref": want_loss,
            "grad": compare(grads(model), want),
        }
        if shard == 1:  # GRPO: one data-parallel rank, every rank the same groups
            samples = rl_samples(encoded)
            rope: Any = getattr(ref.model, "get_rope_index", None)  # None: a text-only model (1D positions)
            micro_rl = [(*shared_prefix_batch(samples[k : k + 2], rope), samples[k : k + 2]) for k in (0, 2)]
            model.zero_grad()
            rl_sums: list[float] = []
            fn = grpo_loss(micro_rl, dist.cp_group)

            def record_rl(i, mb, logits, keep, fn=fn, sums=rl_sums):
                loss = fn(i, mb, logits, keep)
                sums.append(float(loss))
                return loss

            backward_micro_batches(model, [m[0] for m in micro_rl], dist, loss_fn=record_rl)
            want_loss, want = reference(ref, [m[0] for m in micro_rl], grpo_loss(micro_rl, NO_CP))
            results[f"grpo-cp{cp_size}"] = {"loss": sum(rl_sums), "ref": want_loss, "grad": compare(grads(model), want)}
    (out / f"rank{torch.distributed.get_rank()}.json").write_text(json.dumps(results, indent=1))
    teardown()


if __name__ == "__main__":
    main()
