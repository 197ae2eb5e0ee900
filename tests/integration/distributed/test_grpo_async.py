"""Asynchronous GRPO rollout (on_policy = false): a worker process per rank samples ahead of training.
Equal to the synchronous trainer with nothing ahead, the staleness bound under a slow reward, and a
killed worker that fails the run instead of hanging it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from cosmos_train.process_tree import descendants
from tests.conftest import processes_with, write_tiny_grpo_config
from tests.integration.distributed.test_grpo_dist import assert_same_weights, rows
from tests.torchrun import finish, grpo, grpo_args, grpo_runs, running

pytestmark = pytest.mark.slow

SLOW_REWARD = """
import time
from toy_rewards import REWARD_FUNCTIONS as _BASE, get_dataset, get_val_dataset  # noqa: F401


def slow_leading_space(completion, reference, sample):
    time.sleep(0.01)  # a reward slower than the trainer's step: batches queue up ahead
    return _BASE["leading_space"](completion, reference, sample)


REWARD_FUNCTIONS = {"leading_space": slow_leading_space}
"""


def test_nothing_ahead_equals_the_synchronous_trainer(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    """max_inflight_steps = 0: each batch is sampled in the worker after the previous step's weights
    arrived (exported to safetensors, loaded there): the same rollouts and weights as on_policy = true. The two
    runs one after another in one launch, the synchronous one first."""
    keys = {"train.max_num_steps": 3, "rollout.sampling_config.top_k": 4, "train.ckpt.save_freq": 100}
    sync = tmp_path / "sync"
    asynchronous = tmp_path / "async"
    out = grpo_runs(
        [
            write_tiny_grpo_config(sync / "config.toml", tiny_model_dir, synthetic_dir, tmp_path / "o1", **keys),
            write_tiny_grpo_config(
                asynchronous / "config.toml",
                tiny_model_dir,
                synthetic_dir,
                tmp_path / "o2",
                **{**keys, "train.train_policy.on_policy": False, "train.train_policy.max_inflight_steps": 0},
            ),
        ]
    )
    assert "worker (asynchronous)" in out
    assert_same_weights(sync / "safetensors" / "final", asynchronous / "safetensors" / "final")
    runs = [[m for m in rows(r) if m["kind"] == "train"] for r in (sync, asynchronous)]
    assert [m["reward_mean"] for m in runs[0]] == [m["reward_mean"] for m in runs[1]]
    assert [m["staleness"] for m in runs[1]] == [0.0, 0.0, 0.0]


def test_staleness_bound_holds_under_a_slow_reward(tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    """2 batches sampled ahead, at most 1 version old allowed: older batches are dropped and sampled again,
    so no step trains on a batch older than the bound; validation goes through the worker too."""
    run = tmp_path / "run"
    cfg = write_tiny_grpo_config(
        run / "config.toml",
        tiny_model_dir,
        synthetic_dir,
        tmp_path / "out",
        **{
            "train.max_num_steps": 6,
            "train.train_policy.on_policy": False,
            "train.train_policy.max_inflight_steps": 2,
            "train.train_policy.allowed_outdated_steps": 1,
            "rollout.sampling_config.top_k": 4,
            "validation.enable": True,
            "validation.freq": 3,
            "train.ckpt.save_freq": 100,
        },
    )
    (run / "slow_rewards.py").write_text(SLOW_REWARD)
    grpo(cfg, script=run / "slow_rewards.py", env={"PYTHONPATH": str(run)})
    train = [m for m in rows(run) if m["kind"] == "train"]
    assert [m["step"] for m in train] == list(range(1, 7))
    assert max(m["staleness"] for m in train) <= 1
    assert train[-1]["stale_dropped"] > 0  # 2 ahead with a bound of 1: some batches had to be sampled again
    for key in ("staleness_p50", "staleness_p99", "trainer_idle_time", "rollout_idle_time"):
        assert key in train[-1]
    assert [m["step"] for m in rows(run) if m["kind"] == "val"] == [0, 3, 6]
    assert not list((run / "rollout_weights").glob("v*"))[3:]  # the 3 newest kept


def test_killed_rollout_worker_fails_the_run(tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    cfg = write_tiny_grpo_config(
        run / "config.toml",
        tiny_model_dir,
        synthetic_dir,
        tmp_path / "out",
        **{"train.max_num_steps": 200, "train.train_policy.on_policy": False, "train.ckpt.save_freq": 1000},
    )
    with running(2, *grpo_args(cfg)) as p:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if (run / "metrics.jsonl").exists() and '"train"' in (run / "metrics.jsonl").read_text():
                break
            time.sleep(0.1)
        # this run's own workers: another test's (a parallel session's) are not ours to kill
        workers = [w for w in processes_with("multiprocessing.spawn", "spawn_main") if w in descendants(p.pid)]
        assert workers, "no rollout worker found"
        os.kill(workers[0], signal.SIGKILL)
        out = finish(p, timeout=180)
    assert p.returncode != 0
    assert "rollout worker" in out and "exited with code -9" in out, out[-3000:]
    time.sleep(2)
    assert not [w for w in processes_with("multiprocessing.spawn", "spawn_main") if w in workers]
