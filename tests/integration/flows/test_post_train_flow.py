"""The `post-train` flow on the tiny recipes (CPU): prepare-data -> SFT -> evaluate -> GRPO -> evaluate,
a GRPO stage killed mid-run, and the rerun that skips what finished and continues GRPO from its
checkpoint in the same run folder.

    pytest -x -q tests/integration/flows/test_post_train_flow.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, _toml_value, kill_a_rank_after_step_2
from tests.integration.flows.test_grpo_flow import _jsonl
from tests.integration.prefect_server import flow_run_artifacts as _artifacts

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]


def write_pipeline(path: Path, model: Path, data: Path, out: Path, grpo_steps: int = 4, **extra: str) -> Path:
    """The tiny pipeline of configs/ made small: 2 SFT steps, `grpo_steps` GRPO steps (checkpoint every 2),
    6 benchmark questions per model."""
    sft = [
        f'train.train_policy.dataset.name="{data}"',
        "train.max_num_steps=2",
        "train.train_batch_per_replica=4",
        "train.train_policy.micro_batch=2",
        "train.ckpt.save_freq=2",
        'train.ckpt.save_mode="sync"',
    ]
    grpo = [
        f'train.train_policy.dataset.name="{data}"',
        f"train.max_num_steps={grpo_steps}",
        "rollout.n_generation=4",
        "rollout.max_response_length=4",
        "train.train_batch_per_replica=8",
        "train.train_policy.micro_batch=8",
        "train.ckpt.save_freq=2",
        'train.ckpt.save_mode="sync"',
        "validation.freq=2",
    ]
    evaluate = [f'data_dir="{data}"', "limit=6", "generation.max_retries=0", "evaluation.skip_saved=false"]
    lines = [
        'name = "tiny"',
        f"output_dir = {_toml_value(str(out))}",
        f"model = {_toml_value(str(model))}",
        *[f"{k} = {v}" for k, v in extra.items()],
        "[sft]",
        f"config = {_toml_value(str(ROOT / 'configs' / 'tiny-sft.toml'))}",
        f"overrides = {_toml_value(sft)}",
        "[evaluate]",
        f"config = {_toml_value(str(ROOT / 'configs' / 'eval-tiny.toml'))}",
        f"overrides = {_toml_value(evaluate)}",
        "[grpo]",
        f"config = {_toml_value(str(ROOT / 'configs' / 'tiny-grpo.toml'))}",
        f"overrides = {_toml_value(grpo)}",
        "train_retries = 0",
        'export = "final"',
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_pipeline_reruns_skip_finished_stages_and_resume_the_failed_one(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    from flows.post_train import PostTrainParams, post_train

    out = tmp_path / "pipelines"
    config = write_pipeline(tmp_path / "pipeline.toml", tiny_model_dir, synthetic_dir, out, grpo_steps=4)
    folder = out / "tiny"

    # 1. GRPO's rank killed after its step-2 checkpoint, no retries: the pipeline fails in the grpo stage.
    watcher, killed = kill_a_rank_after_step_2(folder / "grpo", "cosmos_train.train.grpo")
    state = post_train(PostTrainParams(config=str(config)), return_state=True)
    watcher.join(timeout=5)
    assert killed and state.is_failed(), state
    record = json.loads((folder / "pipeline.json").read_text())["stages"]
    assert {n: r["status"] for n, r in record.items()} == {
        "prepare-sft": "done",
        "prepare-grpo": "done",
        "evaluate-base": "done",
        "sft": "done",
        "evaluate-sft": "done",
        "grpo": "failed",
    }
    grpo_run = Path(record["grpo"]["run_dir"])
    assert grpo_run.parent == folder / "grpo" and (grpo_run / "checkpoints" / "step_2" / "COMPLETE").is_file()
    failure = _artifacts(state.state_details.flow_run_id)["post-train-failure"].data
    assert "Stage `grpo` failed" in failure and str(grpo_run) in failure
    sft_export = record["sft"]["result"]["export"]
    # The GRPO stage started from the SFT stage's export.
    assert f'model_name_or_path = "{sft_export}"' in (grpo_run / "config.toml").read_text()

    # 2. The same pipeline again: every finished stage skipped, GRPO continued in its run folder.
    state = post_train(PostTrainParams(config=str(config)), return_state=True)
    assert state.is_completed(), state
    summary = state.result()
    ran = {row["stage"]: row["ran"] for row in summary["stages"]}
    assert ran == {
        "prepare-sft": "skipped (done earlier)",
        "prepare-grpo": "skipped (done earlier)",
        "evaluate-base": "skipped (done earlier)",
        "sft": "skipped (done earlier)",
        "evaluate-sft": "skipped (done earlier)",
        "grpo": "ran",
        "evaluate-grpo": "ran",
    }
    result = json.loads((grpo_run / "result.json").read_text())
    assert result["step"] == 4 and Path(result["resumed_from"]).name in ("step_2", "step_4")
    train_steps = [r["step"] for r in _jsonl(grpo_run / "metrics.jsonl") if r["kind"] == "train"]
    assert train_steps == [1, 2, 3, 4], train_steps  # continued, not started over
    assert summary["exports"] == {"sft": sft_export, "grpo": result["final"]}
    assert set(summary["evaluations"]) == {"base", "sft", "grpo"}
    assert summary["runs"]["grpo"]["run_dir"] == str(grpo_run) and summary["runs"]["sft"]["status"] == "done"
    models = {row["model"]: row for row in summary["models"]}
    assert set(models) == {"base", "sft", "grpo"} and all(
        "accuracy" in m and "(n=6)" in m["accuracy"] for m in models.values()
    )
    arts = _artifacts(state.state_details.flow_run_id)
    table = json.loads(arts["post-train-summary"].data)
    assert [row["model"] for row in table] == ["base", "sft", "grpo"]
    assert table[2]["export"] == result["final"] and table[2]["run folder"] == str(grpo_run)
    assert table[2]["run / step"] == f"grpo@{grpo_run.name}-step4" and table[0]["chance"] == "25.0 %"
    assert all(row["flags"] for row in table)  # "ok" or what is wrong, never missing
    # the GRPO stage's run-health verdicts: its result.json's record, in the summary and its table
    assert summary["health"] == {"grpo": result["health"]} and "sft" not in summary["health"]
    names = ", ".join(v["name"] for v in result["health"]["verdicts"]) or "healthy"
    assert table[2]["run health"] == names and table[1]["run health"] == ""
    verdict = arts["verdict-grpo"].data  # the GRPO stage's own verdict (sft's was in the first run)
    assert f"# Evaluation of grpo@{grpo_run.name}-step4" in verdict and "chance level: 25.0%" in verdict
    assert "- verdict: " in verdict and "verdict-sft" in arts  # a skipped evaluation still reports

    # 3. A third run with a changed GRPO setting: only GRPO and its evaluation run again, in a new folder.
    state = post_train(PostTrainParams(config=str(config), overrides=["grpo.train.max_num_steps=2"]), return_state=True)
    assert state.is_completed(), state
    ran = {row["stage"]: row["ran"] for row in state.result()["stages"]}
    assert ran["sft"] == ran["evaluate-sft"] == "skipped (done earlier)"
    assert ran["grpo"] == ran["evaluate-grpo"] == "ran"
    record = json.loads((folder / "pipeline.json").read_text())["stages"]
    assert Path(record["grpo"]["run_dir"]) != grpo_run


def test_bad_stage_override_fails_before_any_stage(tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path) -> None:
    """A typo in the GRPO stage's overrides is found before SFT starts, naming the stage and the key."""
    from cosmos_train.errors import ConfigError
    from flows.post_train import PostTrainParams, post_train

    config = write_pipeline(tmp_path / "pipeline.toml", tiny_model_dir, synthetic_dir, tmp_path / "out")
    state = post_train(PostTrainParams(config=str(config), overrides=["grpo.train.max_num_stpes=3"]), return_state=True)
    assert state.is_failed()
    with pytest.raises(ConfigError, match=r"grpo \(config .*tiny-grpo.toml\): train.max_num_stpes: unknown key"):
        state.result()
    assert not (tmp_path / "out").exists()
