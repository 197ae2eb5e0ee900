"""GRPO with its reward scored by the service, and the service restarted mid-run: the client retries, the
run finishes every step, and every request is scored exactly once across the two service processes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest

from cosmos_train.net import free_port
from tasks.reward_service import _stop, reward_service
from tests.conftest import write_tiny_grpo_config
from tests.integration.distributed.test_grpo_dist import rows
from tests.torchrun import grpo_args, kill_group, start_torchrun

pytestmark = pytest.mark.slow

TOKEN = "restart-test-token"


def _scored(base: str) -> int:
    m = httpx.get(
        base.removesuffix("/api/reward") + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5
    ).json()
    return sum(h["scored"] for h in m["handlers"].values())


def test_service_restart_mid_run(tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    steps = 6
    run = tmp_path / "run"
    cfg = write_tiny_grpo_config(
        run / "config.toml",
        tiny_model_dir,
        synthetic_dir,
        tmp_path / "out",
        **{
            "train.max_num_steps": steps,
            "train.ckpt.save_freq": 100,
            "train.train_policy.reward_function": [],
            "train.train_policy.use_remote_reward": True,
            "train.train_policy.remote_reward.reward_fns": [{"name": "format"}],
            "train.train_policy.remote_reward.backoff_s": 0.2,
            "train.train_policy.remote_reward.max_retries": 30,
        },
    )
    (tmp_path / "rewards.toml").write_text(f'state_dir = "{tmp_path / "state"}"\n')
    port = free_port()
    service = reward_service(tmp_path / "s1.log", port=port, token=TOKEN, config=str(tmp_path / "rewards.toml"))
    proc, base, _ = service.__enter__()
    env = {
        "REMOTE_REWARD_ENQUEUE_URL": f"{base}/enqueue",
        "REMOTE_REWARD_FETCH_URL": f"{base}/pull",
        "REMOTE_REWARD_TOKEN": TOKEN,
    }
    trainer = start_torchrun(2, *grpo_args(cfg), env=env)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(trainer.communicate(timeout=600)[0]), daemon=True)
    reader.start()
    second = None
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (
            (run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().count('"train"') >= 2
        ):
            time.sleep(0.05)
        first_scored = _scored(base)
        _stop(proc)  # SIGTERM: the batches being scored finish and their results stay in state_dir
        time.sleep(1.0)  # the trainer's next requests fail and are retried meanwhile
        second = reward_service(tmp_path / "s2.log", port=port, token=TOKEN, config=str(tmp_path / "rewards.toml"))
        second.__enter__()
        reader.join(timeout=600)
        assert trainer.returncode == 0, out[-1][-4000:] if out else "no output"
        train = [m for m in rows(run) if m["kind"] == "train"]
        assert [m["step"] for m in train] == list(range(1, steps + 1))
        # One request a rank a step (8 completions, batch_size 8), each scored at most once by one of the two
        # services: the first's count was read just before its stop, so the (at most 2) requests it was still
        # scoring then were counted by neither and served from its state_dir, never scored again.
        both = first_scored + _scored(base)
        assert steps * 2 - 2 <= both <= steps * 2
    finally:
        kill_group(trainer)
        if second is not None:
            second.__exit__(None, None, None)
        _stop(proc)
