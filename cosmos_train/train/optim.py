"""AdamW from the [train] optm_* keys, and the warmup + decay learning-rate schedule."""

from __future__ import annotations

import math
import re

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from cosmos_train.config import PolicyConfig, TrainConfig, pattern_list


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
        raise ValueError(f"policy.{key}: {unused} match no parameter name (e.g. {next(iter(dict(model.named_parameters())))})")
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if trainable == 0:
        raise ValueError("policy.freeze_pattern/trainable_pattern leave no trainable parameter")
    return trainable, sum(p.numel() for p in model.parameters())


def build_optimizer(model: nn.Module, cfg: TrainConfig, device: torch.device) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    # No weight decay on biases and norms, as every LLM trainer does.
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.optm_weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kwargs: dict = {"lr": cfg.optm_lr, "betas": tuple(cfg.optm_betas), "eps": cfg.epsilon}
    if cfg.optm_impl == "fused":  # one kernel over all parameters; CUDA and (torch >= 2.4) CPU
        kwargs["fused"] = True
    else:
        kwargs["foreach"] = cfg.optm_impl == "foreach"
    cls = torch.optim.AdamW if cfg.optm_name == "AdamW" else torch.optim.Adam
    if cls is torch.optim.Adam:
        for g in groups:
            g["weight_decay"] = 0.0
    return cls(groups, **kwargs)


def warmup_steps(cfg: TrainConfig, total_steps: int) -> int:
    w = cfg.optm_warmup_steps
    return int(round(w * total_steps)) if 0 < w < 1 else int(w)


def lr_factor(step: int, total_steps: int, warmup: int, decay: str, min_factor: float,
              start_factor: float = 0.0, decay_steps: int | None = None) -> float:
    """Multiplier of optm_lr for the update at 0-based `step`: linear warmup from start_factor (step s of w
    gets f + (1 - f) * (s + 1) / w), the peak, then decay to min_factor over the last `decay_steps` (None:
    every step after warmup)."""
    if warmup > 0 and step < warmup:
        return start_factor + (1.0 - start_factor) * (step + 1) / warmup
    if decay == "none" or decay_steps == 0:  # optm_decay_ratio = 0: the peak to the end
        return 1.0
    span = max(1, total_steps - warmup) if decay_steps is None else max(1, decay_steps)
    start = total_steps - span if decay_steps is not None else warmup
    if step < start:
        return 1.0
    progress = min(1.0, (step - start) / span)
    if decay == "linear":
        f = 1.0 - progress
    elif decay == "cosine":
        f = 0.5 * (1.0 + math.cos(math.pi * progress))
    elif decay == "sqrt":
        f = 1.0 - math.sqrt(progress)
    else:
        raise ValueError(f"train.optm_decay_type: unknown {decay!r}")
    return min_factor + (1.0 - min_factor) * f


def decay_steps(cfg: TrainConfig, total_steps: int, warmup: int) -> int | None:
    """Steps the decay spans with optm_decay_ratio (at most the steps after warmup); None without it."""
    if cfg.optm_decay_ratio is None:
        return None
    return min(round(cfg.optm_decay_ratio * total_steps), max(0, total_steps - warmup))


def build_scheduler(opt: torch.optim.Optimizer, cfg: TrainConfig, total_steps: int) -> LambdaLR:
    warm = warmup_steps(cfg, total_steps)
    span = decay_steps(cfg, total_steps, warm)
    return LambdaLR(opt, lambda s: lr_factor(s, total_steps, warm, cfg.optm_decay_type, cfg.optm_min_lr_factor,
                                             cfg.optm_warmup_start_factor, span))
