"""AdamW from the [train] optm_* keys, and the warmup + decay learning-rate schedule (cosmos-rl's, checked
against its build_lr_schedulers by tests/unit/test_cosmos_rl_parity.py)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from cosmos_train.config import PolicyConfig, TrainConfig, pattern_list
from cosmos_train.errors import ConfigError


def apply_freeze_patterns(model: nn.Module, policy: PolicyConfig) -> tuple[int, int]:
    """Freeze by regex; returns (trainable, total) parameter counts. Raises if a pattern matches nothing."""
    freeze = [re.compile(p) for p in pattern_list(policy.freeze_pattern)]
    train_only = [re.compile(p) for p in pattern_list(policy.trainable_pattern)]
    used = set()
    for name, p in model.named_parameters():
        if train_only:
            hits = [r.pattern for r in train_only if r.search(name)]
            p.requires_grad_(bool(hits))
        else:
            hits = [r.pattern for r in freeze if r.search(name)]
            if hits:
                p.requires_grad_(False)
        used.update(hits)
    unused = [r.pattern for r in freeze + train_only if r.pattern not in used]
    if unused:
        key = "trainable_pattern" if train_only else "freeze_pattern"
        raise ConfigError(
            [f"policy.{key}: {unused} match no parameter name (e.g. {next(iter(dict(model.named_parameters())))})"]
        )
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if trainable == 0:
        raise ConfigError(["policy.freeze_pattern / trainable_pattern: they leave no trainable parameter"])
    return trainable, sum(p.numel() for p in model.parameters())


def build_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    """The [train] optimizer over the model's trainable parameters, as cosmos-rl's build_optimizers makes it: every
    parameter decays by optm_weight_decay (AdamW: decoupled; Adam: torch's L2 term). decay_matrices_only (ours)
    spares biases and norm gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups: list[dict] = [{"params": params, "weight_decay": cfg.optm_weight_decay}]
    if cfg.decay_matrices_only:
        groups = [
            {"params": [p for p in params if p.ndim >= 2], "weight_decay": cfg.optm_weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
        ]
    kwargs: dict = {"lr": cfg.optm_lr, "betas": tuple(cfg.optm_betas), "eps": cfg.epsilon}
    if cfg.optm_impl == "fused":  # one kernel over all parameters; CUDA and (torch >= 2.4) CPU
        kwargs["fused"] = True
    else:
        kwargs["foreach"] = cfg.optm_impl == "foreach"
    cls = torch.optim.AdamW if cfg.optm_name == "AdamW" else torch.optim.Adam
    return cls(groups, **kwargs)


@dataclass(frozen=True)
class Schedule:
    """A run's learning-rate phases in trainer steps: linear warmup, the peak, then decay (cosmos-rl's
    warmup-stable-decay, with its virtual last step so the final update's rate is not 0)."""

    warmup: int
    stable: int
    decay: int


def schedule_of(cfg: TrainConfig, total_steps: int) -> Schedule:
    """The phases for a run of `total_steps` steps. optm_warmup_steps: a float <= 1 is a fraction of the run
    (rounded down), else steps, at most the run; optm_decay_ratio: the decay's fraction of the run (rounded),
    at most what warmup leaves; unset: every step after warmup."""
    w = cfg.optm_warmup_steps
    warm = int(w * total_steps) if isinstance(w, float) and w <= 1.0 else int(w)
    warm = min(warm, total_steps)
    if cfg.optm_decay_ratio is not None:
        decay = min(round(total_steps * cfg.optm_decay_ratio), total_steps - warm)
    else:
        decay = total_steps - warm
    return Schedule(warm, total_steps + 1 - warm - decay, decay)


def lr_factor(step: int, sched: Schedule, decay_type: str, min_factor: float, start_factor: float = 0.0) -> float:
    """Multiplier of optm_lr at 0-based trainer `step`: warmup from start_factor to 1 over its steps (step s
    of w gets f + (1 - f) * s / (w - 1); a 1-step warmup is the peak), the peak, then decay to min_factor
    (progress (s + 1 - warmup - stable) / decay)."""
    if step < sched.warmup:
        if sched.warmup == 1:
            return 1.0
        return start_factor + (1.0 - start_factor) * step / (sched.warmup - 1)
    if step < sched.warmup + sched.stable:
        return 1.0
    if sched.decay == 0:  # past a run without decay (a tick beyond its last step): the peak
        return 1.0
    progress = min(1.0, (step + 1 - sched.warmup - sched.stable) / sched.decay)
    if decay_type == "none":
        f = 1.0
    elif decay_type == "linear":
        f = 1.0 - progress
    elif decay_type == "cosine":
        f = 0.5 * (1.0 + math.cos(math.pi * progress))
    elif decay_type == "sqrt":
        f = 1.0 - math.sqrt(progress)
    else:
        raise ValueError(f"train.optm_decay_type: unknown {decay_type!r}")
    return min_factor + (1.0 - min_factor) * f


def build_scheduler(opt: torch.optim.Optimizer, cfg: TrainConfig, total_steps: int) -> LambdaLR:
    """One tick per trainer step (SFT and GRPO alike, however many optimizer updates a step makes)."""
    sched = schedule_of(cfg, total_steps)
    return LambdaLR(
        opt, lambda s: lr_factor(s, sched, cfg.optm_decay_type, cfg.optm_min_lr_factor, cfg.optm_warmup_start_factor)
    )
