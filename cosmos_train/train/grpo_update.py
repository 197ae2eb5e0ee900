"""One GRPO update's pieces: its micro-batches, how each enters the loss (`LossScales`), and a micro-batch's loss.

    settings = UpdateSettings.of(cfg)
    parts = micro_batches_per_rl_step(samples, filler, settings, rope_index, dist)   # [part][micro-batch]
    scales = loss_scales(parts[0], settings, dist, ranks_sharing_rows)
    loss, values, tokens = micro_batch_loss(parts[0][i], logits, kept, scales, i, settings)

The loop over them is the trainer's step (`GRPOTrainer.train_on`, train/grpo.py), which calls `micro_batch_loss` on
each forward; the step itself is described once, in docs/grpo.md. The formulas are `rl_losses`' (cosmos-rl's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from cosmos_train.config import Config
from cosmos_train.distributed import DistInfo, all_reduce_max, all_reduce_sum
from cosmos_train.train.batching import MicroBatch, split_micro_batches
from cosmos_train.train.cp_language import KeptSlice
from cosmos_train.train.rl_batch import RLSample, shared_prefix_batch
from cosmos_train.train.rl_losses import LossType, PolicyLossConfig, aggregate, policy_loss, token_entropy
from cosmos_train.train.rollout.groups import grpo_policy
from cosmos_train.train.step import forward_logits
from cosmos_train.train.vision_forward import media_in_micro_batches

# policy_loss metrics averaged over the step's completion tokens
TOKEN_METRICS = (
    "kl",
    "clip_low_fraction",
    "clip_high_fraction",
    "dual_clip_fraction",
    "ratio_mean",
    "is_weight_mean",
    "is_capped_fraction",
    "entropy",
)


@dataclass(frozen=True)
class UpdateSettings:
    """What a GRPO update reads from the config ([train.train_policy], rollout.max_response_length)."""

    loss: PolicyLossConfig
    loss_type: LossType
    loss_denominator: str  # "micro_batch" (cosmos-rl's) or "update"
    balance_dp_token: bool
    entropy_coeff: float
    # the trainer's log-probs are of softmax(logits / temperature), as in cosmos-rl; the engine samples at
    # rollout.sampling_config.temperature (config checks they agree where engine log-probs count)
    temperature: float
    micro_batch: int
    mu_iterations: int
    old_from_engine: bool  # old_logprobs = "engine"
    max_response_length: int
    # cosmos-rl's steps in one step here: 1, or n_generation / train_batch_per_replica when a group is more than a
    # step's completions; each makes mu_iterations optimizer updates and one schedule tick
    rl_steps_per_step: int

    @classmethod
    def of(cls, cfg: Config) -> UpdateSettings:
        p = grpo_policy(cfg)
        loss = PolicyLossConfig(
            epsilon_low=p.epsilon_low,
            epsilon_high=p.epsilon_high,
            dual_clip=p.lower_bound_ratio,
            sequence_ratio=p.variant == "gspo",
            kl_beta=p.kl_beta,
            unbiased_kl=p.unbiased_kl_estimate,
            decoupled=p.use_decoupled_loss,
            is_cap=p.behav_imp_weight_cap,
            loss_type=p.loss_type,
            max_tokens=p.unbiased_loss_max_tokens,
        )
        return cls(
            loss=loss,
            loss_type=p.loss_type,
            loss_denominator=p.loss_denominator,
            balance_dp_token=bool(p.balance_dp_token),  # unset: false for GRPO (cosmos-rl's default)
            entropy_coeff=p.entropy_coeff,
            temperature=p.temperature,
            micro_batch=p.micro_batch,
            mu_iterations=p.mu_iterations,
            old_from_engine=p.old_logprobs == "engine",
            max_response_length=cfg.rollout.max_response_length,
            rl_steps_per_step=cfg.rl_steps_per_step,
        )


class RLMicroBatch:
    """One micro-batch of RL samples in the shared-prompt layout (`rl_batch.shared_prefix_batch`), with
    what the loss needs beside the logits, as [samples, longest completion] grids."""

    def __init__(self, samples: list[RLSample], rope_index: Any, weight: float = 1.0):
        self.batch, self.layout = shared_prefix_batch(samples, rope_index)
        # weight 0: a copy that only keeps this rank's collectives in step with the others
        in_loss = torch.tensor([float(s.in_loss) * weight > 0 for s in samples])
        ignore = torch.tensor([s.ignore_prefix for s in samples])
        after_prefix = torch.arange(self.layout.width).unsqueeze(0) >= ignore.unsqueeze(1)
        self.mask = self.layout.token_mask() & in_loss.unsqueeze(1) & after_prefix
        self.count = len(samples) if weight > 0 else 0  # completions of the rank's update it holds
        self.advantages = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
        self.behav = self.layout.grid(torch.cat([s.behav_logprobs.float() for s in samples]))
        self.completions_in_loss = int(in_loss.sum())
        self.old: torch.Tensor | None = None
        self.ref: torch.Tensor | None = None


@dataclass(frozen=True)
class LossScales:
    """How the micro-batches of one optimizer update enter its loss (`loss_scales`)."""

    normalisers: list[float | None]  # per micro-batch: the loss's denominator (None: its own tokens / completions)
    shares: list[float]  # per micro-batch: its completions / the rank's completions in the update
    dp_factor: float  # the loss x this: dp_size where the denominator spans the ranks (FSDP then averages)
    whole_update: bool = False  # loss_denominator = "update"
    total: float = 0.0  # completion tokens of the update on every rank (0: nothing to learn)


def micro_batches_per_rl_step(
    samples: list[RLSample], filler: RLSample, settings: UpdateSettings, rope_index: Any, dist: DistInfo
) -> list[list[RLMicroBatch]]:
    """This rank's samples in `rl_steps_per_step` contiguous parts (one per cosmos-rl step), each as its
    micro-batches; every rank ends with the same number of micro-batches per part (FSDP collectives pair up), a
    rank short of samples (dynamic sampling keeps unequal counts) adding weight-0 copies of `filler`.
    rope_index: the model's `get_rope_index` (None: a text-only model)."""
    k = settings.rl_steps_per_step
    bounds = [round(i * len(samples) / k) for i in range(k + 1)]
    parts = [samples[bounds[i] : bounds[i + 1]] for i in range(k)]
    counts = [len(split_micro_batches(p, settings.micro_batch)) if p else 0 for p in parts]
    most = [int(c) for c in all_reduce_max(torch.tensor(counts, dtype=torch.float64), dist.device).tolist()]
    out = []
    for part, n in zip(parts, most):
        micro = [RLMicroBatch(m, rope_index) for m in split_micro_batches(part, settings.micro_batch)]
        while len(micro) < n:
            micro.append(RLMicroBatch([filler], rope_index, weight=0.0))
        out.append(micro)
    return out


def kept_slice(mb: MicroBatch, keep: torch.Tensor, dist: DistInfo) -> KeptSlice | None:
    """With context parallel, which of `mb`'s kept positions this rank's logits hold (`step.forward_logits`)."""
    cp = dist.cp_group
    if not cp.active:
        return None
    assert mb.logit_positions is not None  # the shared-prompt layout always names them
    return KeptSlice(cp, mb.logit_positions, keep)


@torch.no_grad()
def score_reference(model: torch.nn.Module, micro: list[RLMicroBatch], dist: DistInfo, temperature: float) -> None:
    """The reference model's log-probs of every micro-batch (no gradient) into micro[i].ref."""
    model.eval()
    flags = media_in_micro_batches([m.batch for m in micro], dist.device)
    for m, run_vision in zip(micro, flags):
        mb = m.batch.to(dist.device)
        logits, keep, _ = forward_logits(model, mb, run_vision, dist.cp_group)
        m.ref = m.layout.to(logits.device).logprobs(logits, temperature, kept_slice(mb, keep, dist))


def _update_normaliser(
    micro: list[RLMicroBatch], settings: UpdateSettings, dist: DistInfo, ranks_sharing_rows: int
) -> float:
    """loss_denominator = "update": one denominator for the whole update on every rank (tokens for token-mean,
    completions otherwise, x rollout.max_response_length for seq-mean-token-sum)."""
    if settings.loss_type == "token-mean":
        local = sum(float(m.mask.sum()) for m in micro)
    else:
        local = sum(float(m.completions_in_loss) for m in micro)
        if settings.loss_type == "seq-mean-token-sum":
            local *= settings.max_response_length
    return float(all_reduce_sum(local, dist.device)) / ranks_sharing_rows


def loss_scales(
    micro: list[RLMicroBatch], settings: UpdateSettings, dist: DistInfo, ranks_sharing_rows: int
) -> LossScales:
    """How each micro-batch's loss enters one update (`LossScales`), as cosmos-rl's compute_loss and
    step_training weigh its mini-batches: normalised over its own tokens (or completions), times its share
    of the rank's completions, ranks averaged by FSDP. balance_dp_token (token-mean): each micro-batch's
    tokens summed over the data-parallel ranks, the loss x dp so the average becomes that global mean."""
    n = len(micro)
    if settings.loss_denominator == "update":
        total = _update_normaliser(micro, settings, dist, ranks_sharing_rows)
        return LossScales([total] * n, [1.0] * n, float(dist.dp_size), whole_update=True, total=total)
    held = sum(m.count for m in micro)
    shares = [m.count / held if held else 0.0 for m in micro]
    tokens = (
        all_reduce_sum(torch.tensor([float(m.mask.sum()) for m in micro], dtype=torch.float64), dist.device)
        / ranks_sharing_rows
    )
    total = float(tokens.sum())
    if settings.loss_type == "token-mean" and settings.balance_dp_token:
        return LossScales([float(t) or None for t in tokens.tolist()], shares, float(dist.dp_size), total=total)
    return LossScales([None] * n, shares, 1.0, total=total)


def micro_batch_loss(
    m: RLMicroBatch,
    logits: torch.Tensor,
    kept: KeptSlice | None,
    scales: LossScales,
    i: int,
    settings: UpdateSettings,
) -> tuple[torch.Tensor, dict[str, float], float]:
    """(micro-batch i's share of the update's loss, its policy_loss metrics and entropy, its loss tokens), from
    the logits at its kept positions (`kept`: this rank's slice with context parallel; the log-probs of every token
    are gathered, so each rank of the group computes the same loss, its backward its own tokens'). The first pass
    over a micro-batch keeps its log-probs as the old ones of the later passes (unless they are the engine's)."""
    norm = scales.normalisers[i]
    layout = m.layout.to(logits.device)
    logp = layout.logprobs(logits, settings.temperature, kept)
    mask, behav = m.mask.to(logp.device), m.behav.to(logp.device)
    if settings.old_from_engine:
        old = behav
    else:  # the trainer's own: this forward's in the part's first pass, kept for the later ones
        if m.old is None:
            m.old = logp.detach()
        old = m.old
    loss, values = policy_loss(
        logp,
        old,
        m.advantages.to(logp.device),
        mask,
        settings.loss,
        ref_logprobs=m.ref,
        behav_logprobs=behav,
        normaliser=norm,
    )
    # FSDP averages gradients over the dp ranks (dp_factor undoes it where the denominator is global)
    loss = loss * scales.dp_factor
    with torch.set_grad_enabled(bool(settings.entropy_coeff)):  # logged always, trained on when asked
        entropy = layout.per_position(token_entropy(logits.float() / (settings.temperature or 1.0)), kept)
    if settings.entropy_coeff:  # cosmos-rl: the mean over the micro-batch's tokens, whatever loss_type
        bonus = (
            aggregate(entropy, mask, settings.loss_type, norm) * scales.dp_factor
            if scales.whole_update
            else aggregate(entropy, mask, "token-mean")
        )
        loss = loss - settings.entropy_coeff * bonus
    loss = loss * scales.shares[i]
    n = float(mask.sum())
    values["entropy"] = float((entropy.detach() * mask).sum() / max(n, 1.0))
    return loss, values, n


def add_token_metrics(sums: dict[str, float], values: dict[str, float], tokens: float) -> None:
    """Add a micro-batch's `TOKEN_METRICS` (weighted by its loss tokens) and its tokens to the update's sums."""
    for key in TOKEN_METRICS:
        if key in values:
            sums[key] = sums.get(key, 0.0) + values[key] * tokens
    sums["tokens"] = sums.get("tokens", 0.0) + tokens


def step_update_metrics(
    sums: dict[str, float], flops: float, dist: DistInfo, ranks_sharing_rows: int
) -> tuple[dict[str, float], float]:
    """(the token metrics' means over every rank's loss tokens, with clip_fraction; the update's model FLOPs on
    every rank): one all-reduce of the step's sums."""
    sums = {**sums, "model_flops": flops}
    keys = sorted(sums)
    total = all_reduce_sum(torch.tensor([sums[k] for k in keys], dtype=torch.float64), dist.device)
    glob = dict(zip(keys, (total / ranks_sharing_rows).tolist()))
    update_flops = glob.pop("model_flops")
    tokens = max(glob.pop("tokens", 0.0), 1.0)
    out = {k: v / tokens for k, v in glob.items()}
    out["clip_fraction"] = out.get("clip_low_fraction", 0.0) + out.get("clip_high_fraction", 0.0)
    return out, update_flops
