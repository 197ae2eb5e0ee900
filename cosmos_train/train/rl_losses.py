"""GRPO's advantages and policy loss: plain tensor functions the GRPO trainer calls.

Shapes: a batch of B completions, T token positions each, `mask` [B, T] = 1 on completion tokens.
`logprobs` are the trainer's (with gradient), `old_logprobs` those the update is measured against
(detached: the engine's, or the trainer's own before the first update), `ref_logprobs` the frozen
reference model's (KL), `behav_logprobs` the engine's as sampled (the decoupled loss's importance weight).

Every formula is cosmos-rl's (`compute_loss` in its GRPO trainer, `GRPO.compute_advantage`), checked on the
same tensors by tests/unit/test_cosmos_rl_parity.py against the installed cosmos-rl. Aggregation
(`loss_type`) over one micro-batch (cosmos-rl's "mini-batch"):
- "token-mean": sum of per-token losses / the micro-batch's completion tokens (with `normaliser`: that
  count instead, e.g. over every data-parallel rank for balance_dp_token, or over the whole update);
- "seq-mean-token-mean": each completion's token mean (Dr.GRPO's `max_tokens`: its token sum / max_tokens),
  then the mean over the micro-batch's completions;
- "seq-mean-token-sum": each completion's token sum, then the mean over completions;
- "token-sum": the sum.

Facts behind the numbers are in docs/COSMOS_RL_KEYS.md: clip 0.2 / 0.28 (DAPO clip-higher), dual clip
c = 3 for negative advantages (not for GSPO), k3 KL clamped to [-10, 10], GSPO's sequence log-ratio
capped at 10.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

LossType = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-sum"]
AdvantageStd = Literal["population", "sample"]
# exp() of a log-ratio above ~88 overflows float32; 20 (a ratio of 5e8) is far past any clip, so
# the clamp only stops an inf * 0 = nan from a token the mask drops anyway (cosmos-rl's bound too).
LOG_RATIO_BOUND = 20.0
# GSPO's sequence log-ratio is capped above only (cosmos-rl: "clamp for numerical stability").
SEQUENCE_LOG_RATIO_MAX = 10.0
# cosmos-rl clamps each token's k3 KL term to this range.
KL_BOUND = 10.0


def group_advantages(
    rewards: torch.Tensor,
    group_size: int,
    scale_by_std: bool = True,
    eps: float = 1e-6,
    std: AdvantageStd = "population",
) -> torch.Tensor:
    """Per-completion advantage: reward minus its group's mean, divided by the group's std + eps
    (GRPO) or not (Dr.GRPO: scale_by_std False). Groups are consecutive runs of `group_size` in
    `rewards` [P * group_size]. std is the population one (numpy's np.std, as cosmos-rl computes it);
    std = "sample" is torch.std's (TRL's), sqrt(n / (n - 1)) times larger."""
    grouped = rewards.float().reshape(-1, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_by_std:
        correction = 1 if std == "sample" else 0
        spread = (
            grouped.std(dim=1, keepdim=True, correction=correction)
            if group_size > correction
            else torch.zeros_like(centred[:, :1])
        )
        centred = centred / (spread + eps)
    return centred.reshape(-1)


def zero_std_groups(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """bool [P]: groups whose rewards are all equal. They carry no signal (zero advantage): DAPO's
    dynamic sampling drops them; the fraction is worth logging either way."""
    grouped = rewards.reshape(-1, group_size)
    return (grouped == grouped[:, :1]).all(dim=1)


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(policy || reference): exp(ref - logp) - (ref - logp) - 1 (>= 0)."""
    diff = (ref_logprobs - logprobs).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    return torch.exp(diff) - diff - 1


def aggregate(
    per_token: torch.Tensor,
    mask: torch.Tensor,
    loss_type: LossType,
    normaliser: float | None = None,
    max_tokens: int | None = None,
) -> torch.Tensor:
    """One scalar from per-token values [B, T] under `mask` (module docstring). `normaliser` replaces the
    token count of "token-mean"; `max_tokens` each completion's length in "seq-mean-token-mean" (Dr.GRPO)."""
    mask = mask.to(per_token.dtype)
    masked = per_token * mask
    if loss_type == "token-mean":
        return masked.sum() / (normaliser if normaliser is not None else mask.sum().clamp(min=1))
    if loss_type == "token-sum":
        return masked.sum()
    per_seq = masked.sum(dim=1)
    if loss_type == "seq-mean-token-mean":
        per_seq = per_seq / (max_tokens if max_tokens else mask.sum(dim=1).clamp(min=1))
    elif loss_type != "seq-mean-token-sum":
        raise ValueError(f"unknown loss_type {loss_type!r}")
    return per_seq.sum() / max(per_seq.numel(), 1)


@dataclass
class PolicyLossConfig:
    """The clip and correction settings of one policy loss (train.train_policy keys in brackets)."""

    epsilon_low: float = 0.2  # [epsilon_low] ratio kept >= 1 - epsilon_low for negative advantages
    epsilon_high: float = 0.2  # [epsilon_high] ratio kept <= 1 + epsilon_high for positive ones
    dual_clip: float | None = 3.0  # [lower_bound_ratio] c: loss of a negative advantage <= -c * A (not GSPO)
    sequence_ratio: bool = False  # GSPO: one ratio per completion, exp(mean token log-ratio)
    kl_beta: float = 0.0  # [kl_beta] weight of the k3 KL to the reference
    unbiased_kl: bool = False  # [unbiased_kl_estimate] k3 weighted by the current / old ratio
    decoupled: bool = False  # [use_decoupled_loss] tokens weighted by exp(old - behav) (engine vs trainer)
    is_cap: float | None = None  # [behav_imp_weight_cap] decoupled weights above it zero their token
    loss_type: LossType = "token-mean"  # [loss_type]
    max_tokens: int | None = None  # [unbiased_loss_max_tokens] Dr.GRPO's per-completion constant


def uses_dual_clip(cfg: PolicyLossConfig) -> bool:
    """The dual clip bounds negative advantages' losses for token ratios only (cosmos-rl: not for GSPO)."""
    return cfg.dual_clip is not None and not cfg.sequence_ratio


def policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: PolicyLossConfig,
    ref_logprobs: torch.Tensor | None = None,
    behav_logprobs: torch.Tensor | None = None,
    normaliser: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped policy-gradient loss (+ kl_beta * KL) and what to log about it.

    advantages: [B] per completion (broadcast over its tokens) or [B, T].
    Per token: ratio r = exp(logp - old) (GSPO: exp of the completion's mean log-ratio, capped at 10, its
    gradient through that mean); loss = -min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A); for A < 0 the
    dual clip bounds it by -c * A (not for GSPO). With `cfg.decoupled` and behav_logprobs, each token's loss
    is multiplied by exp(old - behav), and a weight above `cfg.is_cap` zeroes its token. KL: k3 (or the
    importance-weighted k3 with `cfg.unbiased_kl`) clamped to [-10, 10], aggregated like the loss. Metrics:
    clip fractions (the tokens whose clipped term is the one taken), dual-clip fraction, ratio mean / max,
    KL mean, IS weight mean and capped fraction; all over masked tokens of this batch.
    """
    mask_f = mask.to(logprobs.dtype)
    count = mask_f.sum().clamp(min=1)
    adv = advantages.to(logprobs.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(1).expand_as(logprobs)
    old = old_logprobs.detach()
    if cfg.sequence_ratio:
        seq = ((logprobs - old) * mask_f).sum(dim=1, keepdim=True) / mask_f.sum(dim=1, keepdim=True).clamp(min=1)
        log_ratio = seq.clamp(max=SEQUENCE_LOG_RATIO_MAX).expand_as(logprobs)
    else:
        log_ratio = (logprobs - old).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    clipped = ratio.clamp(1 - cfg.epsilon_low, 1 + cfg.epsilon_high)
    unclipped_loss, clipped_loss = -ratio * adv, -clipped * adv
    per_token = torch.maximum(unclipped_loss, clipped_loss)
    dual = torch.zeros_like(per_token, dtype=torch.bool)
    if uses_dual_clip(cfg):
        assert cfg.dual_clip is not None  # uses_dual_clip checked it
        bound = -cfg.dual_clip * adv
        dual = (adv < 0) & (per_token > bound)
        per_token = torch.where(adv < 0, torch.minimum(per_token, bound), per_token)
    metrics: dict[str, float] = {}
    if cfg.decoupled and behav_logprobs is not None:
        weight = torch.exp(old - behav_logprobs.detach())
        capped = weight > cfg.is_cap if cfg.is_cap is not None else torch.zeros_like(weight, dtype=torch.bool)
        weight = torch.where(capped, torch.zeros_like(weight), weight)
        per_token = per_token * weight
        metrics["is_weight_mean"] = float((weight * mask_f).sum() / count)
        metrics["is_capped_fraction"] = float((capped.to(mask_f.dtype) * mask_f).sum() / count)
    loss = aggregate(per_token, mask, cfg.loss_type, normaliser, cfg.max_tokens)
    if ref_logprobs is not None:
        kl = k3_kl(logprobs, ref_logprobs.detach())
        if cfg.unbiased_kl:
            kl = torch.exp(logprobs - old) * kl
        kl = kl.clamp(-KL_BOUND, KL_BOUND)
        metrics["kl"] = float((kl.detach() * mask_f).sum() / count)
        if cfg.kl_beta:
            loss = loss + cfg.kl_beta * aggregate(kl, mask, cfg.loss_type, normaliser, cfg.max_tokens)
    took_clip = (clipped_loss > unclipped_loss) & ~dual
    on = mask.bool()
    metrics.update(
        clip_low_fraction=float((took_clip & (ratio < 1 - cfg.epsilon_low) & on).sum() / count),
        clip_high_fraction=float((took_clip & (ratio > 1 + cfg.epsilon_high) & on).sum() / count),
        dual_clip_fraction=float((dual & on).sum() / count),
        ratio_mean=float((ratio.detach() * mask_f).sum() / count),
        ratio_max=float(ratio.detach().masked_fill(~on, float("-inf")).max()) if on.any() else 0.0,
    )
    return loss, metrics


def token_entropy(logits: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """Entropy of each position's distribution [..., V] -> [...], computed `chunk` positions at a
    time so a 152k vocabulary never needs a second full-size probability tensor."""
    flat = logits.reshape(-1, logits.shape[-1])
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=logits.device)
    for start in range(0, flat.shape[0], chunk):
        part = flat[start : start + chunk].float()
        logp = torch.log_softmax(part, dim=-1)
        out[start : start + chunk] = -(logp.exp() * logp).sum(dim=-1)
    return out.reshape(logits.shape[:-1])
