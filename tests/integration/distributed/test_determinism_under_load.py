"""The same seed gives the same GRPO trajectory on a quiet and on a busy machine: the demo's recipe
(configs/tiny-grpo.toml: 2 processes, FSDP2, the HF engine in each trainer process, on_policy, async checkpoint
saves, validation) run twice, once alone and once beside two busy-looping processes that take every core.

    .venv/bin/python -m pytest tests/integration/distributed/test_determinism_under_load.py -x -q

Its learning columns (reward, loss, entropy, grad norm, clip fractions, validation) match row for row, and its
final and best exports bit for bit. Only the timing columns may differ. The trainer runs under torchrun, as the
demo's `grpo` flow runs it, without the Prefect server around it, which decides nothing inside a step.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cosmos_train.config import load_config
from tests.conftest import LEADING_SPACE_SCRIPT, ROOT
from tests.run_outputs import same_weights
from tests.torchrun import grpo

pytestmark = pytest.mark.slow

# Columns that measure time or memory, which a busy machine changes; every other column must match.
TIMED = {
    "time",
    "rollout_time",
    "train_time",
    "step_time",
    "tokens_per_s",
    "peak_mem_gb",
    "update_tflops_per_device",
    "update_mfu",
}
# Columns that show the run really learned, so equal rows mean something.
LEARNING = ("reward_mean", "reward_std", "loss", "entropy", "grad_norm", "clip_fraction", "ratio_mean")


@contextmanager
def busy_cores(n: int) -> Iterator[list[subprocess.Popen]]:
    """`n` processes spinning in a busy loop (a machine shared with other jobs), killed on the way out."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield hogs
    finally:
        for h in hogs:
            h.kill()
            h.wait()


def demo_job(folder: Path, model: Path, data: Path) -> Path:
    """configs/tiny-grpo.toml, shortened: 8 steps, validation and an async checkpoint every 4. From the random
    tiny model the demo's letter reward would be 0 everywhere (no gradient, nothing to compare), so the
    completions are rewarded for starting with a space (tests/conftest.py's toy task, about half of them at
    first); validation samples (temperature 1) for the same reason: its greedy answers would all score 0."""
    sets = {
        "train.output_dir": str(folder / "out"),
        "train.max_num_steps": 8,
        "train.ckpt.save_freq": 4,
        "validation.freq": 4,
        "validation.temperature": 1.0,
        "train.train_policy.reward_function": ["leading_space"],
        "validation.reward_function": ["leading_space"],
        "train.train_policy.dataset.name": str(data),
        "train.train_policy.dataset.media_path": str(data),
        "policy.model_name_or_path": str(model),
        "custom.data": str(data),
    }
    cfg = load_config(ROOT / "configs" / "tiny-grpo.toml", [f"{k}={json.dumps(v)}" for k, v in sets.items()], env={})
    folder.mkdir(parents=True)
    (folder / "toy_rewards.py").write_text(LEADING_SPACE_SCRIPT)
    return cfg.write(folder / "config.toml")


def run_grpo(config: Path) -> list[dict]:
    """The job under torchrun (2 processes, one torch thread each as on the 2-core demo machine); its metrics rows."""
    grpo(config)
    lines = (config.parent / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if k not in TIMED} for x in lines if x.strip()]


def test_same_seed_same_trajectory_quiet_and_busy(tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    quiet_job = demo_job(tmp_path / "quiet", tiny_model_dir, synthetic_dir)
    busy_job = demo_job(tmp_path / "busy", tiny_model_dir, synthetic_dir)
    quiet = run_grpo(quiet_job)
    with busy_cores(2) as hogs:
        busy = run_grpo(busy_job)
        assert all(h.poll() is None for h in hogs)  # they spun for the whole run

    train = [r for r in quiet if r["kind"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 9))
    assert [r["step"] for r in quiet if r["kind"] == "val"] == [0, 4, 8]
    assert all(k in train[-1] for k in LEARNING), sorted(train[-1])
    assert sum(r["updates"] for r in train) > 0 and len({r["reward_mean"] for r in train}) > 1  # it learned
    assert len(busy) == len(quiet)
    for q, b in zip(quiet, busy, strict=True):
        assert q == b, {k: (q.get(k), b.get(k)) for k in q.keys() | b.keys() if q.get(k) != b.get(k)}
    for export in ("final", "best"):
        assert same_weights(quiet_job.parent / "safetensors" / export, busy_job.parent / "safetensors" / export), export
