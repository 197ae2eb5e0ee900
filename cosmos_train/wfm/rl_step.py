"""The math of one world-model RL iteration, apart from the trainer's wiring (wfm/trainer.py): the SDE rollout that
records every step's log-prob, the denoising steps trained on, the clipped policy term (plus kl_beta x the KL to the
frozen reference) summed into the gradients, DDRL's data term, the iteration's reward metrics, and the held-out
flow-matching loss of an evaluation.

Each function takes the velocity as a callable (the trainer's `velocity`: policy or reference, at one sigma or one
per sample, video2world's with a `FrameCondition`) and runs its tensor operations in the order the trainer always
has, drawing from the generator it is given: a run's weights do not depend on where this code lives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import nn

from cosmos_train.distributed import all_reduce_sum
from cosmos_train.train.rl_losses import zero_std_groups
from cosmos_train.wfm.conditioning import FrameCondition, frame_condition
from cosmos_train.wfm.config_sections import RLConfig
from cosmos_train.wfm.losses import flow_matching_loss, noised, policy_step_loss
from cosmos_train.wfm.sde import gaussian_kl, sde_step, step_mean, step_std

EVAL_SIGMAS = (0.2, 0.5, 0.8)  # the held-out diffusion loss is averaged over these noise levels

# (model, x, sigma: one for all or [B], prompt embeddings, video2world's condition) -> float32 velocity
Velocity = Callable[[nn.Module, torch.Tensor, float | torch.Tensor, torch.Tensor, FrameCondition | None], torch.Tensor]


def drop_text(emb: torch.Tensor, rate: float, gen: torch.Generator) -> torch.Tensor:
    """Each sample's prompt embedding [B, L, D] zeroed with probability `rate` (cosmos-rl's text_attr conditioner
    dropout: classifier-free-guidance training); rate 0 returns emb untouched and draws nothing."""
    if rate <= 0:
        return emb
    keep = torch.rand(emb.shape[0], generator=gen, device=emb.device) >= rate
    return emb * keep.to(emb.dtype).view(-1, *([1] * (emb.dim() - 1)))


def trained_steps(rl: RLConfig, gen: torch.Generator, device: torch.device) -> list[int]:
    """The denoising steps trained this pass: model.rl.train_on's (each -1 a random step not listed), or a
    random timestep_fraction of them."""
    if rl.train_on is None:
        n_train = max(1, round(rl.timestep_fraction * rl.sample_steps))
        return torch.randperm(rl.sample_steps, generator=gen, device=device)[:n_train].tolist()
    fixed = [k for k in rl.train_on if k != -1]
    rest = [k for k in range(rl.sample_steps) if k not in fixed]
    pick = torch.randperm(len(rest), generator=gen, device=device)[: len(rl.train_on) - len(fixed)].tolist()
    return fixed + [rest[i] for i in pick]


@torch.no_grad()
def sde_rollout(
    velocity: Velocity,
    model: nn.Module,
    emb: torch.Tensor,
    generator: torch.Generator,
    sigmas: torch.Tensor,
    rl: RLConfig,
    latent_shape: tuple[int, ...],
    cond: FrameCondition | None = None,
) -> dict[str, torch.Tensor]:
    """Group-shared initial noise (use_same_seed; else one per sample), SDE sampling; returns the trajectory
    [B, K+1, ...] and log-probs [B, K]. With `cond` (video2world) the given frames are clean at every step and
    the log-probs cover the generated frames only."""
    g = rl.num_generations if rl.use_same_seed else 1
    noise = torch.randn((emb.shape[0] // g, *latent_shape), generator=generator, device=emb.device)
    x = noise.repeat_interleave(g, dim=0)
    x = x if cond is None else cond.apply(x)
    weight = None if cond is None else cond.generated
    xs, logps = [x], []
    cap = float(sigmas[1])
    for k in range(rl.sample_steps):
        s, s_next = float(sigmas[k]), float(sigmas[k + 1])
        v = velocity(model, x, s, emb, cond)
        z = torch.randn(x.shape, generator=generator, device=x.device)
        step = sde_step(x, v, s, s_next, rl.noise_level, noise=z, sigma_cap=cap, weight=weight)
        x = step.x_next if cond is None else cond.apply(step.x_next)
        xs.append(x)
        logps.append(step.log_prob)
    return {"xs": torch.stack(xs, dim=1), "log_probs": torch.stack(logps, dim=1)}


def policy_backward(
    velocity: Velocity,
    model: nn.Module,
    reference: nn.Module | None,
    traj: dict[str, torch.Tensor],
    sigmas: torch.Tensor,
    emb: torch.Tensor,
    adv: torch.Tensor,
    cond: FrameCondition | None,
    steps: list[int],
    rl: RLConfig,
    stats: dict[str, list[float]],
) -> None:
    """One pass's policy term, backward into the gradients: per micro-batch of train_micro_batch samples and per
    trained step, the clipped ratio of the step's log-prob now to the rollout's (plus kl_beta x the KL of the
    step's Gaussian to the reference's), each divided by steps x micro-batches; its numbers appended to `stats`."""
    cap = float(sigmas[1])
    micro = range(0, len(emb), rl.train_micro_batch)
    for start in micro:
        sl = slice(start, start + rl.train_micro_batch)
        for k in steps:
            s, s_next = float(sigmas[k]), float(sigmas[k + 1])
            x, x_next = traj["xs"][sl, k], traj["xs"][sl, k + 1]
            c = None if cond is None else cond.rows(sl)
            w = None if c is None else c.generated
            v = velocity(model, x, s, emb[sl], c)
            step = sde_step(x, v, s, s_next, rl.noise_level, x_next=x_next, sigma_cap=cap, weight=w)
            kl = None
            if reference is not None:
                with torch.no_grad():
                    v_ref = velocity(reference, x, s, emb[sl], c)
                std_t, _ = step_std(s, s_next, rl.noise_level, cap)
                kl = gaussian_kl(step.mean, step_mean(x, v_ref, s, s_next, std_t), step.std, w)
            loss, st = policy_step_loss(step.log_prob, traj["log_probs"][sl, k], adv[sl], rl.clip_range, kl, rl.kl_beta)
            (loss / (len(steps) * len(micro))).backward()
            stats["policy_loss"].append(float(loss.detach()))
            for key in ("clip_frac", "ratio", "kl"):
                if key in st:
                    stats[key].append(st[key])


def data_loss_backward(
    velocity: Velocity,
    model: nn.Module,
    x0: torch.Tensor,
    emb: torch.Tensor,
    gen: torch.Generator,
    k_cond: int,
    text_dropout_rate: float,
    data_beta: float,
) -> float:
    """DDRL's data term on dataset latents x0: data_beta x flow-matching loss, backward; text_dropout_rate of the
    samples get a zeroed prompt embedding (as cosmos-rl's conditioner). Video2world: the first k_cond latent frames
    of each clip are given, the loss covers the others. Returns the loss."""
    emb = drop_text(emb, text_dropout_rate, gen)
    noise = torch.randn(x0.shape, generator=gen, device=x0.device)
    sigma = torch.rand(x0.shape[0], generator=gen, device=x0.device)
    cond = frame_condition(x0, k_cond) if k_cond > 0 else None
    v = velocity(model, noised(x0, noise, sigma), sigma, emb, cond)
    loss = flow_matching_loss(v, x0, noise, None if cond is None else cond.generated)
    (data_beta * loss).backward()
    return float(loss.detach())


def reward_metrics(
    rewards: np.ndarray, parts: dict[str, np.ndarray], num_generations: int, device: torch.device
) -> dict[str, Any]:
    """The iteration's reward mean, std, zero_std_fraction and per-handler means over every rank (all-reduced)."""
    n = len(rewards)
    # groups whose samples all got the same reward: advantage 0, no signal (GRPO's zero_std_fraction; a CP
    # group's ranks hold the same groups, counted alike in both sums)
    flat = float(zero_std_groups(torch.as_tensor(rewards), num_generations).sum())
    sums = [float(rewards.sum()), float((rewards**2).sum()), n, flat, n / num_generations]
    total = all_reduce_sum(torch.tensor(sums, dtype=torch.float64), device)
    mean = float(total[0] / total[2])
    return {
        "reward_mean": mean,
        "reward_std": float((total[1] / total[2] - mean**2).clamp(min=0.0) ** 0.5),
        "zero_std_fraction": float(total[3] / total[4]),
        **{f"reward_{k}": float(all_reduce_sum(float(v.sum()), device) / total[2]) for k, v in parts.items()},
    }


@torch.no_grad()
def heldout_loss(
    velocity: Velocity,
    model: nn.Module,
    x0: torch.Tensor,
    emb: torch.Tensor,
    seed: int,
    k_eval: int,
    device: torch.device,
) -> float:
    """The flow-matching loss of held-out latents x0 at EVAL_SIGMAS, with noise fixed by `seed` (the same every
    evaluation), averaged; video2world: the first k_eval latent frames given."""
    hgen = torch.Generator(device=device).manual_seed(seed)
    eps = torch.randn(x0.shape, generator=hgen, device=device)
    hcond = frame_condition(x0, k_eval) if k_eval > 0 else None
    weight = None if hcond is None else hcond.generated
    losses = []
    for s in EVAL_SIGMAS:
        sigma = torch.full((x0.shape[0],), s, device=device)
        v = velocity(model, noised(x0, eps, sigma), sigma, emb, hcond)
        losses.append(float(flow_matching_loss(v, x0, eps, weight)))
    return float(np.mean(losses))
