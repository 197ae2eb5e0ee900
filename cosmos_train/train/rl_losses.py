"""GRPO's advantages and policy loss: plain tensor functions the GRPO trainer calls.

Shapes: a batch of B completions, T token positions each, `mask` [B, T] = 1 on completion tokens.
`logprobs` are the trainer's (with gradient), `old_logprobs` those the update is measured against
(detached: the engine's, or recomputed before the first mini-batch), `ref_logprobs` the frozen
reference model's (KL), `behav_logprobs` the engine's when old_logprobs were recomputed (truncated
importance sampling corrects the engine/trainer mismatch).

Aggregation (`loss_type`), as verl and TRL name them:
- "token-mean": sum of per-token losses / `normaliser`, the number of completion tokens of the whole
  optimizer step (all micro-batches and ranks), so gradient accumulation and data parallelism add
  up to exactly the full batch's token mean (DAPO's default). Without a normaliser: this batch's.
- "seq-mean-token-mean": each completion's token mean, then the mean over completions (GRPO paper);
  with a normaliser, the sum over completions / normaliser (the step's completion count).
- "seq-mean-token-sum": each completion's token sum / normaliser, a constant (Dr.GRPO: the max
  completion length), so long and short completions weigh by their tokens; without one, / T.

Facts behind the numbers are in shared/reference/grpo.md: clip 0.2 / 0.28 (DAPO clip-higher), dual
clip c = 3 for negative advantages, k3 KL, IS cap 2-3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

LossType = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"]
# exp() of a log-ratio above ~88 overflows float32; 20 (a ratio of 5e8) is far past any clip, so
# the clamp only stops an inf * 0 = nan from a token the mask drops anyway.
LOG_RATIO_BOUND = 20.0


def group_advantages(rewards: torch.Tensor, group_size: int, scale_by_std: bool = True, eps: float = 1e-6) -> torch.Tensor:
    """Per-completion advantage: reward minus its group's mean, divided by the group's std + eps
    (GRPO) or not (Dr.GRPO: scale_by_std False). Groups are consecutive runs of `group_size` in
    `rewards` [P * group_size]. std is the unbiased one (torch.std), as TRL computes it."""
    grouped = rewards.float().reshape(-1, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if scale_by_std:
        std = grouped.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(centred[:, :1])
        centred = centred / (std + eps)
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


def overlong_penalty(lengths: torch.Tensor, max_length: int, buffer_length: int, penalty_factor: float) -> torch.Tensor:
    """DAPO's soft overlong penalty per completion: 0 up to max_length - buffer_length, then falling
    linearly to -penalty_factor at max_length (and below it past max_length)."""
    start = max_length - buffer_length
    over = (lengths.float() - start).clamp(min=0)
    return -penalty_factor * over / buffer_length


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, loss_type: LossType, normaliser: float | None = None) -> torch.Tensor:
    """One scalar from per-token values [B, T] under `mask` (module docstring)."""
    mask = mask.to(per_token.dtype)
    masked = per_token * mask
    if loss_type == "token-mean":
        return masked.sum() / (normaliser if normaliser is not None else mask.sum().clamp(min=1))
    if loss_type == "seq-mean-token-mean":
        per_seq = masked.sum(dim=1) / mask.sum(dim=1).clamp(min=1)
        return per_seq.sum() / (normaliser if normaliser is not None else per_seq.numel())
    if loss_type == "seq-mean-token-sum":
        per_seq = masked.sum(dim=1)
        return per_seq.sum() / (normaliser if normaliser is not None else per_token.shape[1] * per_seq.numel())
    raise ValueError(f"unknown loss_type {loss_type!r}")


@dataclass
class PolicyLossConfig:
    """The clip and correction settings of one policy loss (train.train_policy keys in brackets)."""

    epsilon_low: float = 0.2  # [epsilon_low] ratio kept >= 1 - epsilon_low for negative advantages
    epsilon_high: float = 0.2  # [epsilon_high] ratio kept <= 1 + epsilon_high for positive ones
    dual_clip: float | None = 3.0  # [lower_bound_ratio] c: loss of a negative advantage <= -c * A
    sequence_ratio: bool = False  # GSPO: one ratio per completion, exp(mean token log-ratio)
    kl_beta: float = 0.0  # [kl_beta] weight of the k3 KL to the reference
    is_cap: float | None = None  # [behav_imp_weight_cap] truncated IS weight cap (engine vs trainer)
    loss_type: LossType = "token-mean"  # [loss_type]


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
    Per token: ratio r = exp(logp - old); loss = -min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A);
    for A < 0 the dual clip bounds it by -c * A. With behav_logprobs and is_cap, each token's loss is
    multiplied by min(exp(old - behav), cap), detached. Metrics: clip fractions (the tokens whose
    clipped term is the one taken), dual-clip fraction, ratio mean / max, KL mean, IS weight mean and
    capped fraction; all over masked tokens of this batch.
    """
    mask_f = mask.to(logprobs.dtype)
    count = mask_f.sum().clamp(min=1)
    adv = advantages.to(logprobs.dtype)
    if adv.dim() == 1:
        adv = adv.unsqueeze(1).expand_as(logprobs)
    log_ratio = (logprobs - old_logprobs.detach()).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    if cfg.sequence_ratio:
        seq = (log_ratio * mask_f).sum(dim=1, keepdim=True) / mask_f.sum(dim=1, keepdim=True).clamp(min=1)
        # GSPO: the sequence ratio's value, with each token's gradient (stop-gradient trick)
        log_ratio = seq.detach() + logprobs - logprobs.detach()
        log_ratio = log_ratio.clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    clipped = ratio.clamp(1 - cfg.epsilon_low, 1 + cfg.epsilon_high)
    unclipped_loss, clipped_loss = -ratio * adv, -clipped * adv
    per_token = torch.maximum(unclipped_loss, clipped_loss)
    dual = torch.zeros_like(per_token, dtype=torch.bool)
    if cfg.dual_clip is not None:
        bound = -cfg.dual_clip * adv
        dual = (adv < 0) & (per_token > bound)
        per_token = torch.where(adv < 0, torch.minimum(per_token, bound), per_token)
    metrics: dict[str, float] = {}
    if behav_logprobs is not None and cfg.is_cap is not None:
        weight = torch.exp((old_logprobs - behav_logprobs).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)).detach()
        capped = weight > cfg.is_cap
        weight = weight.clamp(max=cfg.is_cap)
        per_token = per_token * weight
        metrics["is_weight_mean"] = float((weight * mask_f).sum() / count)
        metrics["is_capped_fraction"] = float((capped.to(mask_f.dtype) * mask_f).sum() / count)
    if ref_logprobs is not None:
        kl = k3_kl(logprobs, ref_logprobs.detach())
        metrics["kl"] = float((kl.detach() * mask_f).sum() / count)
        if cfg.kl_beta:
            per_token = per_token + cfg.kl_beta * kl
    loss = aggregate(per_token, mask, cfg.loss_type, normaliser)
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
