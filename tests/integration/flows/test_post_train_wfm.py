"""The post-train pipeline's world-model form on the tiny model: wfm_rl (one Flow-GRPO iteration, one process) ->
evaluate_wfm (the base and the export on held-out mock prompts), the summary table, and a rerun that skips both.

    pytest -x -q tests/integration/flows/test_post_train_wfm.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, _toml_value
from tests.integration.prefect_server import flow_run_artifacts

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]


def test_world_model_pipeline_trains_then_evaluates_and_a_rerun_skips(tiny_wfm_dir: Path, tmp_path: Path) -> None:
    from flows.post_train import PostTrainParams, post_train

    wfm = [
        "trainer.max_iter=1",
        "model.rl.sample_steps=2",
        "model.rl.num_generations=2",
        "model.rl.train_micro_batch=2",
        "model.fsdp_shard_size=1",
        "launch.nproc_per_node=1",
        "dataloader_train.video_dataloader.batch_size=1",
        "dataloader_train.video_dataloader.mock_prompts=4",
        "evaluation.num_prompts=1",
    ]
    config = tmp_path / "pipeline.toml"
    config.write_text(
        "\n".join(
            [
                'name = "wfm"',
                f"output_dir = {_toml_value(str(tmp_path / 'out'))}",
                f"model = {_toml_value(str(tiny_wfm_dir))}",
                "[wfm_rl]",
                f"config = {_toml_value(str(ROOT / 'configs' / 'tiny-wfm-flow-grpo.toml'))}",
                f"overrides = {_toml_value(wfm)}",
                "train_retries = 0",
                "[evaluate_wfm]",
                "prompts = 2",
                "seed = 3",
            ]
        )
        + "\n"
    )
    state = post_train(PostTrainParams(config=str(config)), return_state=True)
    assert state.is_completed(), state
    summary = state.result()
    folder = tmp_path / "out" / "wfm"
    export = summary["exports"]["wfm_rl"]
    assert Path(export).parent.name == "diffusers" and Path(export).parent.parent.parent == folder / "wfm_rl"
    assert [row["ran"] for row in summary["stages"]] == ["ran", "ran"]
    results = summary["evaluations"]
    assert set(results) == {"base", "wfm_rl"} and results["wfm_rl"]["model"] == export
    assert results["base"]["model"] == str(tiny_wfm_dir) and results["base"]["num_prompts"] == 2
    assert results["base"]["seed"] == 3 and results["base"]["prompt_names"] == results["wfm_rl"]["prompt_names"]
    assert (folder / "eval-wfm" / "results.json").is_file() and (folder / "eval-wfm" / "grid.png").is_file()
    table = {
        row["model"]: row
        for row in json.loads(flow_run_artifacts(state.state_details.flow_run_id)["post-train-summary"].data)
    }
    assert table["wfm_rl"]["reward"].startswith(f"{results['wfm_rl']['reward_total']['mean']:.4f} [")
    assert table["wfm_rl"]["gain over base (paired)"].startswith(("+", "-")) and table["base"]["flags"] == "ok"
    assert table["wfm_rl"]["export"] == export and table["wfm_rl"]["run folder"] == str(Path(export).parents[1])
    health = json.loads((Path(export).parents[1] / "result.json").read_text())["health"]
    assert summary["health"] == {"wfm_rl": health}  # the training's run-health verdicts, for the CLI's last lines
    assert table["wfm_rl"]["run health"] == (", ".join(v["name"] for v in health["verdicts"]) or "healthy")
    record = json.loads((folder / "pipeline.json").read_text())
    assert {n: r["status"] for n, r in record["stages"].items()} == {"wfm_rl": "done", "evaluate_wfm": "done"}

    again = post_train(PostTrainParams(config=str(config)))
    assert [row["ran"] for row in again["stages"]] == ["skipped (done earlier)"] * 2
    assert again["exports"] == summary["exports"]
    assert json.loads((folder / "pipeline.json").read_text())["stages"] == record["stages"]
