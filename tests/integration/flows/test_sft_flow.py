"""The `sft` Prefect flow: prepare -> torchrun (2 procs) -> export, artifacts, and a crash that a
task retry resumes from the newest checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import kill_a_rank_after_step_2, write_tiny_sft_config
from tests.integration.prefect_server import flow_run_artifacts

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]


def _artifact_keys(flow_run_id: object) -> set[str]:
    return set(flow_run_artifacts(flow_run_id))


def test_sft_flow_trains_exports_and_reports(tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    from flows.sft import SFTParams, sft

    cfg = write_tiny_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, tmp_path / "out", max_num_steps=2)
    # a cosmos-rl key with no effect here rides along: said in the result (the summary) and the run's config.toml
    state = sft(SFTParams(config=str(cfg), overrides=["launch.nproc_per_node=2", "redis='12800'"]), return_state=True)
    assert state.is_completed(), state
    result = state.result()
    run = Path(result["run_dir"])
    assert run.parent == tmp_path / "out"
    assert (run / "config.toml").exists() and (run / "manifest.jsonl").exists()
    assert [line.split(":")[0] for line in result["no_effect"]] == ["redis = '12800'"]
    assert "# redis = '12800': cosmos-rl's controller port" in (run / "config.toml").read_text()
    assert Path(result["final"]).joinpath("config.json").exists()
    assert "Exported safetensors to" in (run / "logs" / "train.log").read_text()
    keys = _artifact_keys(state.state_details.flow_run_id)
    assert {"sft-summary", "sft-export", "training-curves", "training-metrics"} <= keys


def test_crashed_rank_is_retried_and_resumes(tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    """A rank killed with SIGKILL mid-run (e.g. the OOM killer): the task fails, Prefect retries it,
    and the retry continues from the newest complete checkpoint instead of step 0."""
    from flows.sft import SFTParams, sft

    steps = 8
    cfg = write_tiny_sft_config(
        tmp_path / "job.toml", tiny_model_dir, synthetic_dir, tmp_path / "out", max_num_steps=steps
    )
    watcher, killed = kill_a_rank_after_step_2(tmp_path / "out", "cosmos_train.train.sft", timeout_s=300)
    state = sft(SFTParams(config=str(cfg), overrides=["launch.nproc_per_node=2"], train_retries=1), return_state=True)
    watcher.join(timeout=5)
    assert killed, "the watcher never found a rank to kill"
    assert state.is_completed(), state
    run = Path(state.result()["run_dir"])
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in rows if r["kind"] == "train"]
    log = (run / "logs" / "train.log").read_text()
    assert "resumed from" in log
    resumed_at = int(log.split("resumed from")[1].split("at step ")[1].split()[0])
    assert resumed_at >= 2
    # the retry did not start over: steps after the resume point appear, step 1 only once
    assert train_steps.count(1) == 1 and max(train_steps) == steps
    # the failed attempt's rows past the resume point were replaced, not repeated
    assert train_steps == sorted(set(train_steps)), train_steps
    assert json.loads((run / "result.json").read_text())["step"] == steps


def test_diverging_run_fails_once_naming_the_step_and_exports_nothing(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    """A huge learning rate: the run stops at the first non-finite step with TrainingDiverged, which is
    not retried (it would diverge again), exports nothing, and leaves an `error` artifact."""
    from cosmos_train.errors import TrainingDiverged
    from flows.sft import SFTParams, sft

    cfg = write_tiny_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, tmp_path / "out", max_num_steps=6)
    state = sft(
        SFTParams(
            config=str(cfg),
            train_retries=2,
            overrides=["launch.nproc_per_node=2", "train.optm_lr=1e6", "train.optm_grad_norm_clip=0.0"],
        ),
        return_state=True,
    )
    assert state.is_failed(), state
    assert "TrainingDiverged" in state.message and "train.optm_lr" in state.message
    with pytest.raises(TrainingDiverged, match=r"step \d+: the loss is"):
        state.result()
    run = next((tmp_path / "out").iterdir())
    log = (run / "logs" / "train.log").read_text()
    assert log.count("[sft] training ") == 1, "a user error was retried"
    assert not (run / "safetensors" / "final").exists() and not (run / "result.json").exists()
    assert json.loads((run / "error.json").read_text())["kind"] == "training"
    assert "error" in _artifact_keys(state.state_details.flow_run_id)
