"""World-model RL losses: Flow-GRPO's clipped policy term on SDE steps, and DDRL's data (flow-matching) term.

    adv = advantages(rewards, group_size=4, clip=5.0)                       # [B]
    loss, stats = policy_step_loss(log_prob, old_log_prob, adv, clip_range=1e-4, kl=kl, kl_beta=0.004)
    loss = loss + data_beta * flow_matching_loss(v_pred, x0, noise)         # DDRL

Flow-GRPO (arXiv 2505.05470): per denoising step, ratio = exp(log p_theta(x_next | x) - log p_old(x_next | x));
loss = mean_B max(-A ratio, -A clip(ratio, 1 - c, 1 + c)) + kl_beta * KL(step || reference step).
DDRL (arXiv 2512.04332) replaces the reverse KL to a reference model by the forward KL to the data distribution,
which is the ordinary diffusion loss on dataset samples: ||v_theta(x_sigma, sigma, c) - (eps - x0)||^2 with
x_sigma = (1 - sigma) x0 + sigma eps; the reward term is the same clipped policy term on on-policy samples.
"""

from __future__ import annotations

import torch

from cosmos_train.train.rl_losses import LOG_RATIO_BOUND, group_advantages
from cosmos_train.wfm.sde import sample_mean


def advantages(rewards: torch.Tensor, group_size: int, clip: float) -> torch.Tensor:
    """GRPO's group-normalised advantages (groups = consecutive runs sharing a prompt and initial noise),
    clipped to [-clip, clip] (Flow-GRPO: 5), over the sample std (torch.std, Flow-GRPO's own)."""
    return group_advantages(rewards, group_size, std="sample").clamp(-clip, clip)


def policy_step_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    adv: torch.Tensor,
    clip_range: float,
    kl: torch.Tensor | None = None,
    kl_beta: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """One denoising step's loss, averaged over the batch [B]; stats: clip fraction, mean ratio, the KL term."""
    log_ratio = (log_prob - old_log_prob.detach()).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip_range, 1.0 + clip_range)
    loss = torch.maximum(unclipped, clipped).mean()
    stats = {"clip_frac": float(((ratio - 1).abs() > clip_range).float().mean()), "ratio": float(ratio.detach().mean())}
    if kl is not None and kl_beta > 0:
        kl_mean = kl.mean()
        loss = loss + kl_beta * kl_mean
        stats["kl"] = float(kl_mean.detach())
    return loss, stats


def flow_matching_loss(
    v_pred: torch.Tensor, x0: torch.Tensor, noise: torch.Tensor, weight: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean squared error of the predicted velocity against the rectified-flow target eps - x0; with `weight`
    (video2world's generated-frame indicator [B, 1, T, 1, 1]) each sample's mean over its weighted elements only,
    then the batch mean."""
    per_element = (v_pred.float() - (noise - x0).float()) ** 2
    return per_element.mean() if weight is None else sample_mean(per_element, weight).mean()


def noised(x0: torch.Tensor, noise: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
    """x_sigma = (1 - sigma) x0 + sigma eps, sigma [B] broadcast over each sample."""
    s = sigma.to(x0.dtype).reshape(-1, *([1] * (x0.dim() - 1)))
    return (1 - s) * x0 + s * noise
