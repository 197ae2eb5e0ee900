"""The `run-health` artifact of the grpo flow, on runs that are stuck for real and one that learns: the tiny model
on the synthetic RL rows with the leading-space reward (tests/conftest.py write_tiny_grpo_config). Sampled
greedily (rollout temperature 0) every completion of a prompt is the same, so every group has zero reward
variance and the gradient is 0: the state a confident SFT export puts GRPO in. At temperature 1 about half the
first tokens start with a space, so every group has signal.

    pytest -x -q tests/integration/test_run_health_flow.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cosmos_train.config import RunHealthConfig
from cosmos_train.train.run_health import assess_run
from tests.conftest import ROOT, write_tiny_grpo_config
from tests.integration.prefect_server import flow_run_artifacts

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

# small windows set by config, so a few steps decide
HEALTH = {"train.run_health.patience": 2, "train.run_health.flat_steps": 3}


def _run(tmp_path: Path, model: Path, data: Path, **keys: Any) -> Any:
    from flows.grpo import GRPOParams, grpo

    job = write_tiny_grpo_config(
        tmp_path / "job" / "grpo.toml",
        model,
        data,
        tmp_path / "out",
        **{"train.ckpt.save_freq": 100, **HEALTH, **keys},
    )
    params = GRPOParams(config=str(job), dataset_script=str(job.parent / "toy_rewards.py"), train_retries=1)
    return grpo(params, return_state=True)


def _run_dir(tmp_path: Path) -> Path:
    (run,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir()]
    return run


def _train_rows(run: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r for r in rows if r["kind"] == "train"]


def test_greedy_rollouts_are_named_stuck_and_the_run_still_completes(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    """Without stop_when_stuck the run trains to its end as before, and now says why it learnt nothing."""
    state = _run(
        tmp_path,
        tiny_model_dir,
        synthetic_dir,
        **{"train.max_num_steps": 3, "rollout.sampling_config.temperature": 0.0},
    )
    assert state.is_completed(), state
    run = _run_dir(tmp_path)
    train = _train_rows(run)
    # the state itself, as the trainer logged it: no group with variance, no gradient
    assert [r["zero_std_fraction"] for r in train] == [1.0, 1.0, 1.0]
    assert all(r["grad_norm"] == 0.0 for r in train)
    arts = flow_run_artifacts(state.state_details.flow_run_id)
    health = arts["run-health"].data
    assert "### `zero_variance_groups`" in health
    assert (
        "zero_std_fraction >= 80% on 3 consecutive steps (1-3)" in health and "gradient norm 0 on 3 of them" in health
    )
    assert "cosmos-train filter-rl-data" in health and "rollout.sampling_config.temperature" in health
    assert "`zero_variance_groups`" in arts["grpo-summary"].data and "- run health:" in arts["grpo-summary"].data


def test_stop_when_stuck_ends_the_run_early_saved_and_not_retried(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    state = _run(
        tmp_path,
        tiny_model_dir,
        synthetic_dir,
        **{
            "train.max_num_steps": 8,
            "rollout.sampling_config.temperature": 0.0,
            "train.stop_when_stuck": True,
            "validation.enable": True,  # the best export too
        },
    )
    assert state.is_failed(), state
    assert "train.stop_when_stuck: the run ended after step 2 of 8" in state.message
    run = _run_dir(tmp_path)
    # two steps made the verdict (patience 2); the retry the flow allows was not used: no resume, no step 3
    assert [r["step"] for r in _train_rows(run)] == [1, 2]
    result = json.loads((run / "result.json").read_text())
    assert result["step"] == 2 and result["resumed_from"] is None and "zero_variance_groups" in result["ended_early"]
    error = json.loads((run / "error.json").read_text())
    assert error["kind"] == "stuck" and error["traceback"] is None
    assert "exited with code 3" in (run / "logs" / "train.log").read_text()
    # saved as a normal end is: the last step's checkpoint, the final export, the best one
    assert (run / "checkpoints" / "step_2" / "COMPLETE").is_file()
    assert (Path(result["final"]) / "config.json").is_file() and result["best"]["path"]
    arts = flow_run_artifacts(state.state_details.flow_run_id)
    assert "### `zero_variance_groups`" in arts["run-health"].data
    assert "ended early by train.stop_when_stuck" in arts["grpo-summary"].data
    assert "stuck error" in arts["error"].data and f"- final: `{result['final']}`" in arts["grpo-export"].data


def test_a_run_that_learns_gets_no_verdict(tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    # 3 steps of a noisy reward say nothing about its trend: the flatness checks keep their default window (50)
    keys = {"train.max_num_steps": 3, "train.stop_when_stuck": True, "train.run_health.flat_steps": 50}
    state = _run(tmp_path, tiny_model_dir, synthetic_dir, **keys)
    assert state.is_completed(), state
    run = _run_dir(tmp_path)
    assert [r["step"] for r in _train_rows(run)] == [1, 2, 3]
    arts = flow_run_artifacts(state.state_details.flow_run_id)
    health = arts["run-health"].data
    assert "healthy: none of zero-variance groups" in health, health
    # every check looked at numbers, not at nothing
    assert "zero-variance groups: longest run" in health and "entropy: " in health
    assert "train reward: 3 step(s) logged, the flatness check needs 50" in health and "clip fraction: mean" in health
    assert "- run health: healthy over 3 step(s)" in arts["grpo-summary"].data


def test_world_model_rl_reports_its_run_health(tiny_wfm_dir: Path, tmp_path: Path) -> None:
    """wfm_rl on mock prompts: its rows have no groups (reward_std stands in) and a clip_frac of their own."""
    from flows.wfm_rl import WfmRLParams, wfm_rl

    overrides = [
        f"model.model_name_or_path='{tiny_wfm_dir}'",
        f"job.output_dir='{tmp_path / 'out'}'",
        "trainer.max_iter=2",
        "model.rl.sample_steps=4",
        "evaluation.num_prompts=2",
    ]
    state = wfm_rl(
        WfmRLParams(config=str(ROOT / "configs" / "tiny-wfm-flow-grpo.toml"), overrides=overrides), return_state=True
    )
    assert state.is_completed(), state
    run = Path(state.result()["run_dir"])
    arts = flow_run_artifacts(state.state_details.flow_run_id)
    health = arts["run-health"].data
    # the samples of a prompt differ (noise), so no step lacks variance; the world model's clip_frac is read
    assert "zero-variance groups: longest run of steps with a share >= 80%: 0" in health, health
    assert "over 2 step(s)" in health and "clip fraction: mean" in health
    line = assess_run(run, RunHealthConfig(), ratio_moves=False).line()
    assert arts["wfm-summary"].data.endswith(line + "\n")
