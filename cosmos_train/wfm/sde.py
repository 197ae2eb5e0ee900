"""The flow-matching sampler as an SDE, so every denoising step has a Gaussian log-prob (Flow-GRPO).

    from cosmos_train.wfm.sde import sigma_schedule, sde_step
    sigmas = sigma_schedule(10, shift=3.0)              # 1.0 ... 0.0, 11 values
    step = sde_step(x, v, sigmas[k], sigmas[k + 1], noise_level=0.7, noise=torch.randn_like(x))
    step.x_next, step.log_prob, step.mean, step.std     # log_prob: [B], mean over a sample's elements

Conventions (rectified flow, as Cosmos-Predict2.5 and SD3): x_sigma = (1 - sigma) x0 + sigma * eps, sigma
from 1 (noise) to 0 (data); the model predicts the velocity v = eps - x0, and the ODE step is
x + (sigma_next - sigma) v. The SDE with the same marginals (Flow-GRPO, arXiv 2505.05470, eq. 9) adds noise
std_t = a * sqrt(sigma / (1 - sigma)) (a = noise_level) and a drift correction:

    mean = x + [v + std_t^2 / (2 sigma) * (x + (1 - sigma) v)] * dt,   dt = sigma_next - sigma < 0
    x_next = mean + std_t * sqrt(-dt) * z,  z ~ N(0, I)

so x_next | x ~ N(mean, (std_t sqrt(-dt))^2 I), whose log density is what the policy gradient differentiates
(through mean, which holds v_theta). At sigma = 1 the std is infinite; like Flow-GRPO, the first step uses the
second sigma of the schedule in its place.

A step's log-prob is the MEAN of the per-element Gaussian log densities (Flow-GRPO's choice): a video latent
has ~1e5..1e7 elements, and the sum would make every ratio exp(huge) and the clip meaningless; with the mean,
ratios stay near 1 and the clip range is ~1e-4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def sigma_schedule(num_steps: int, shift: float = 1.0) -> torch.Tensor:
    """num_steps + 1 noise levels from 1 to 0: uniform, then shifted toward noise, sigma' = s*sigma / (1 + (s-1) sigma)
    (SD3 / Cosmos-Predict's flow shift; s = 1 leaves the uniform grid)."""
    if num_steps < 1:
        raise ValueError("num_steps must be >= 1")
    sigmas = torch.linspace(1.0, 0.0, num_steps + 1, dtype=torch.float64)
    sigmas = shift * sigmas / (1 + (shift - 1) * sigmas)
    return sigmas.float()


@dataclass
class SdeStep:
    x_next: torch.Tensor  # [B, ...]
    mean: torch.Tensor  # [B, ...] the Gaussian's mean (carries v's gradient)
    std: torch.Tensor  # [] or [B]: the Gaussian's std, std_t * sqrt(-dt)
    log_prob: torch.Tensor  # [B] mean over elements of log N(x_next; mean, std^2)


def step_std(
    sigma: float | torch.Tensor, sigma_next: float | torch.Tensor, noise_level: float, sigma_cap: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(std_t, std_t * sqrt(-dt)) of one step; sigma is capped at `sigma_cap` (< 1) inside the square root."""
    sigma = torch.as_tensor(sigma, dtype=torch.float32)
    sigma_next = torch.as_tensor(sigma_next, dtype=torch.float32)
    capped = torch.clamp(sigma, max=sigma_cap)
    std_t = noise_level * torch.sqrt(capped / (1 - capped))
    return std_t, std_t * torch.sqrt(sigma - sigma_next)


def step_mean(
    x: torch.Tensor, v: torch.Tensor, sigma: float | torch.Tensor, sigma_next: float | torch.Tensor, std_t: torch.Tensor
) -> torch.Tensor:
    """The SDE step's mean (see the module docstring); std_t = 0 gives the ODE (Euler) step."""
    sigma = torch.as_tensor(sigma, dtype=x.dtype, device=x.device)
    dt = torch.as_tensor(sigma_next, dtype=x.dtype, device=x.device) - sigma
    std_t = std_t.to(x.dtype).to(x.device)
    correction = std_t**2 / (2 * sigma)
    return x + (v + correction * (x + (1 - sigma) * v)) * dt


def sample_mean(per_element: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
    """[B]: each sample's mean over its elements, or over the elements where `weight` (broadcast to per_element,
    e.g. video2world's generated-frame indicator [B, 1, T, 1, 1]) is 1."""
    if weight is None:
        return per_element.flatten(1).mean(dim=1)
    w = weight.to(per_element.dtype).expand_as(per_element)
    return (per_element * w).flatten(1).sum(dim=1) / w.flatten(1).sum(dim=1).clamp(min=1.0)


def gaussian_log_prob(
    x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor, weight: torch.Tensor | None = None
) -> torch.Tensor:
    """[B]: the mean over each sample's elements (those with weight 1, if given) of log N(x; mean, std^2) (std a
    scalar or [B])."""
    std = std.to(x.dtype).to(x.device).reshape(-1, *([1] * (x.dim() - 1))) if std.dim() else std.to(x)
    per_element = -((x.detach() - mean) ** 2) / (2 * std**2) - torch.log(std) - LOG_SQRT_2PI
    return sample_mean(per_element, weight)


def sde_step(
    x: torch.Tensor,
    v: torch.Tensor,
    sigma: float | torch.Tensor,
    sigma_next: float | torch.Tensor,
    noise_level: float,
    noise: torch.Tensor | None = None,
    x_next: torch.Tensor | None = None,
    sigma_cap: float | None = None,
    weight: torch.Tensor | None = None,
) -> SdeStep:
    """One SDE step from x with velocity v. Sampling: give `noise` (standard normal, like x). Training: give
    the recorded `x_next` to get its log-prob under the current v. `sigma_cap` (default: sigma itself when < 1,
    else 0.99...) is the schedule's second sigma for the first step, as Flow-GRPO. `weight`: the log-prob is the
    mean over the elements where it is 1 (video2world: the generated frames; None: all)."""
    cap = float(sigma_cap) if sigma_cap is not None else min(float(sigma), 1 - 1e-3)
    std_t, std = step_std(sigma, sigma_next, noise_level, cap)
    mean = step_mean(x, v, sigma, sigma_next, std_t)
    if x_next is None:
        if noise is None:
            raise ValueError("sde_step needs `noise` to sample or `x_next` to score")
        x_next = mean.detach() + std.to(x) * noise
    return SdeStep(x_next=x_next, mean=mean, std=std, log_prob=gaussian_log_prob(x_next, mean, std, weight))


def gaussian_kl(
    mean: torch.Tensor, ref_mean: torch.Tensor, std: torch.Tensor, weight: torch.Tensor | None = None
) -> torch.Tensor:
    """[B]: KL(N(mean, std^2) || N(ref_mean, std^2)) per element, averaged over each sample's elements (those with
    weight 1, if given): the KL between the policy's and the reference's step distributions, which differ only
    through the predicted velocity: (mean - ref_mean)^2 / (2 std^2)."""
    std = std.to(mean.dtype).to(mean.device).reshape(-1, *([1] * (mean.dim() - 1))) if std.dim() else std.to(mean)
    return sample_mean(((mean - ref_mean.detach()) ** 2) / (2 * std**2), weight)
