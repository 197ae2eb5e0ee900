"""Which rollout a GRPO run gets (`rollout.sources.asynchronous_rollout`): on_policy as set, or, unset, from the
device: the colocated engine on the CPU (a worker would share the trainer's cores), the worker on a GPU; and
the asynchronous trainer's share of the CPU cores (`rollout.worker.share_cores`)."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from cosmos_train.config import config_from_dict
from cosmos_train.train import grpo
from cosmos_train.train.rollout.sources import asynchronous_rollout
from cosmos_train.train.rollout.worker import share_cores

CPU, GPU = torch.device("cpu"), torch.device("cuda", 0)


@pytest.mark.parametrize(
    ("on_policy", "tp", "device", "worker"),
    [
        (None, 1, CPU, False),  # unset on the CPU: nothing to overlap with, the trainer's own engine
        (None, 1, GPU, True),  # unset on a GPU: a worker samples ahead
        (False, 1, CPU, True),  # explicit settings are obeyed wherever the run is
        (True, 1, GPU, False),
        (False, 2, GPU, False),  # a tensor-parallel engine spans ranks: colocated
        (None, 2, GPU, False),
    ],
)
def test_mode_follows_the_setting_then_the_device(
    on_policy: bool | None, tp: int, device: torch.device, worker: bool
) -> None:
    got, why = asynchronous_rollout(on_policy, tp, device)
    assert got is worker
    assert ("tp_size" in why) if tp > 1 else ("on_policy" in why)


def test_on_policy_is_unset_by_default_and_kept_when_set() -> None:
    def policy(**keys: Any) -> Any:
        return config_from_dict(
            {"train": {"train_policy": {"type": "grpo", **keys}}, "rollout": {"n_generation": 2}}
        ).train.train_policy

    assert policy().on_policy is None
    assert policy(on_policy=False).on_policy is False
    assert policy(on_policy=True).on_policy is True


@pytest.mark.parametrize(("device", "expected"), [(CPU, "colocated"), (GPU, "worker")])
def test_trainer_builds_the_resolved_source(
    monkeypatch: pytest.MonkeyPatch, device: torch.device, expected: str
) -> None:
    """The trainer's choice is the rule's: with on_policy unset, the CPU gets the colocated engine."""
    monkeypatch.setattr(grpo, "ColocatedRollout", lambda *a, **k: "colocated")
    monkeypatch.setattr(grpo, "WorkerRollout", lambda *a, **k: "worker")
    logged: list[str] = []
    trainer = SimpleNamespace(
        policy_cfg=SimpleNamespace(on_policy=None),
        cfg=SimpleNamespace(rollout=SimpleNamespace(parallelism=SimpleNamespace(tp_size=1))),
        dist=SimpleNamespace(device=device),
        run_dir=None,
        model_dir=None,
        rewards=None,
        rows=[],
        log=logged.append,
    )
    assert grpo.GRPOTrainer._rollout_source(trainer, None) == expected  # type: ignore[arg-type]
    assert logged and logged[0].startswith("rollout " + ("synchronous" if expected == "colocated" else "asynchronous"))


def test_asynchronous_trainer_takes_its_share_of_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Trainer and worker each take cores / processes threads (the worker's engine the same count), so that
    2 cores do not run 3 busy threads."""
    cfg = config_from_dict({"train": {"train_policy": {"type": "grpo"}}, "rollout": {"n_generation": 2}})
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    before = torch.get_num_threads()
    try:
        assert share_cores(cfg, processes_per_host=2) == 2
        assert torch.get_num_threads() == 2
        assert share_cores(cfg, processes_per_host=8) == 1  # never below one thread
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
