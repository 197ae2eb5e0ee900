"""Under cosmos-rl's [train] optimizer keys, cosmos-rl's optimizer: ours beside cosmos-rl 0.4.7's own
`build_optimizers` (cosmos_rl/policy/trainer/optm), the same model, the same gradients, several steps.

optm_name (Adam: weight decay as torch's L2 term; AdamW: decoupled), optm_impl (fused / foreach / for-loop),
optm_betas, epsilon and optm_weight_decay (every trainable parameter, biases and norm gains too) must leave the
weights where cosmos-rl's optimizer leaves them. Our own key decay_matrices_only (off) spares biases and norms:
with it on the weights differ, which is also the mutation check (a change of ours is caught).
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch

from cosmos_train.config import config_from_dict
from cosmos_train.train.optim import build_optimizer
from tests.cosmos_rl_oracle import oracle_config, oracle_module

STEPS = 5


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    # matrices, biases and a norm gain: the parameters a decay rule may treat apart
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5), torch.nn.Linear(5, 3, bias=False))


def _train(model: torch.nn.Module, optimizer: Any, seed: int) -> list[torch.Tensor]:
    """STEPS steps on the same gradients whatever the optimizer (a fixed batch per step); the weights after."""
    gen = torch.Generator().manual_seed(seed + 100)
    for _ in range(STEPS):
        x, y = torch.randn(4, 6, generator=gen), torch.randn(4, 3, generator=gen)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def ours_vs_theirs(seed: int, **train: Any) -> float:
    """Largest weight difference after STEPS steps between our build_optimizer and cosmos-rl's build_optimizers
    with [train] keys `train` (cosmos-rl names; decay_matrices_only is ours and only reaches ours)."""
    ours_model, their_model = _model(seed), _model(seed)
    cfg = config_from_dict({"train": train})
    ours = _train(ours_model, build_optimizer(ours_model, cfg.train, torch.device("cpu")), seed)
    theirs_cfg = oracle_config()
    for key, value in train.items():
        if key != "decay_matrices_only":
            setattr(theirs_cfg.train, key, list(value) if isinstance(value, tuple) else value)
    container = oracle_module("cosmos_rl.policy.trainer.optm").build_optimizers([their_model], theirs_cfg)
    theirs = _train(their_model, container, seed)
    return max(float((a - b).abs().max()) for a, b in zip(ours, theirs))


SETTINGS = [
    {"optm_name": name, "optm_impl": impl, "optm_weight_decay": decay, "optm_lr": 0.05}
    for name, impl, decay in itertools.product(("AdamW", "Adam"), ("fused", "foreach", "for-loop"), (0.0, 0.1))
] + [
    {"optm_name": "AdamW", "optm_betas": (0.8, 0.95), "epsilon": 1e-3, "optm_weight_decay": 0.3, "optm_lr": 0.02},
    {"optm_name": "Adam", "optm_betas": (0.5, 0.9), "epsilon": 1e-6, "optm_weight_decay": 0.05, "optm_lr": 0.1},
]


@pytest.mark.parametrize("train", SETTINGS, ids=lambda s: "-".join(str(v) for v in s.values()))
def test_optimizer_equals_cosmos_rl(train: dict[str, Any]) -> None:
    assert ours_vs_theirs(0, **train) < 1e-6


def test_our_matrices_only_decay_differs_and_is_caught() -> None:
    """decay_matrices_only (ours) spares the biases and the norm gain: not cosmos-rl's weights, so a default that
    kept it would fail the parity tests above."""
    for name in ("AdamW", "Adam"):
        assert ours_vs_theirs(0, optm_name=name, optm_weight_decay=0.3, optm_lr=0.05, decay_matrices_only=True) > 1e-4
