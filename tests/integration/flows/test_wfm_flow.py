"""The `wfm_rl` Prefect flow on the tiny world model: the run's own reward service (real HTTP, video payload),
torchrun, the summary / curves / samples artifacts; a killed rank is retried and resumes; `cosmos-train --config`
(cosmos-rl's form with --wfm-mode) runs a world-model recipe end to end.

    pytest -x -q tests/integration/flows/test_wfm_flow.py
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.cli_inprocess import RunCli
from tests.conftest import ROOT, kill_a_rank_after_step_2
from tests.integration.flows.test_grpo_flow import PNG_MAGIC
from tests.integration.prefect_server import flow_run_artifacts as _artifacts

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

RECIPE = ROOT / "configs" / "tiny-wfm-flow-grpo.toml"


def _overrides(model: Path, data: Path, out: Path, iters: int, *more: str) -> list[str]:
    return [
        f"model.model_name_or_path='{model}'",
        f"job.output_dir='{out}'",
        f"trainer.max_iter={iters}",
        "dataloader_train.type='local'",
        f"dataloader_train.video_dataloader.dataset_dir='{data}'",
        "dataloader_train.video_dataloader.batch_size=1",
        "model.rl.sample_steps=4",
        "evaluation.num_prompts=2",
        *more,
    ]


def test_wfm_flow_with_its_own_reward_service(tiny_wfm_dir: Path, wfm_data_dir: Path, tmp_path: Path) -> None:
    from flows.wfm_rl import WfmRLParams, wfm_rl

    overrides = _overrides(
        tiny_wfm_dir,
        wfm_data_dir,
        tmp_path / "out",
        3,
        "reward.backend='service'",
        "reward.local_service=true",
        "reward.fns={brightness=1.0, smoothness=0.5}",
    )
    state = wfm_rl(WfmRLParams(config=str(RECIPE), overrides=overrides), return_state=True)
    assert state.is_completed(), state
    result = state.result()
    run = Path(result["run_dir"])
    assert result["step"] == 3 and result["data"]["rows"] == 12
    # check-data's scan, recorded for the ranks to reuse instead of probing every video again
    assert len(json.loads((run / "data_scan.json").read_text())["rows"]) == 12
    assert (run / "logs" / "reward_service.log").is_file()  # the service ran for this run and is gone
    train = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"train"' in x]
    assert all(r["reward_mean"] == pytest.approx(r["reward_brightness"] + 0.5 * r["reward_smoothness"]) for r in train)
    arts = _artifacts(state.state_details.flow_run_id)
    assert {"wfm-summary", "training-curves", "training-metrics", "wfm-samples"} <= set(arts)
    summary = arts["wfm-summary"].data
    assert "| reward_mean |" in summary and "| heldout_diffusion_loss |" in summary and result["final"] in summary
    samples = run / "plots" / "samples.png"
    encoded = arts["wfm-samples"].data.split("data:image/png;base64,")[1].split(")")[0]
    assert samples.read_bytes().startswith(PNG_MAGIC) and base64.b64decode(encoded) == samples.read_bytes()
    assert [r["step"] for r in json.loads(arts["training-metrics"].data)] == [1, 2, 3]


def test_killed_rank_is_retried_and_resumes(tiny_wfm_dir: Path, wfm_data_dir: Path, tmp_path: Path) -> None:
    from flows.wfm_rl import WfmRLParams, wfm_rl

    out = tmp_path / "out"
    watcher, killed = kill_a_rank_after_step_2(out, "cosmos_train.wfm.trainer")
    state = wfm_rl(
        WfmRLParams(
            config=str(RECIPE),
            train_retries=1,
            overrides=_overrides(
                tiny_wfm_dir, wfm_data_dir, out, 5, "checkpoint.save_iter=2", "launch.nproc_per_node=2"
            ),
        ),
        return_state=True,
    )
    watcher.join(timeout=5)
    assert killed, "no rank was killed"
    assert state.is_completed(), state
    result = state.result()
    assert result["step"] == 5 and result["resumed_from"].endswith(("step_2", "step_4"))


def test_cosmos_rl_form_runs_a_world_model_recipe(
    tiny_wfm_dir: Path, wfm_data_dir: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    args = [
        a
        for o in _overrides(tiny_wfm_dir, wfm_data_dir, tmp_path / "out", 1, "checkpoint.export_diffusers=false")
        for a in ("--set", o)
    ]
    # in this process, its flow on the module's Prefect harness (the ranks are torchrun's processes)
    done = run_cli(
        "--config", RECIPE, "--wfm-mode", "wfm_rl.py", *args, cwd=ROOT, env={"OMP_NUM_THREADS": "1"}, flows=True
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run = Path(done.stdout.strip().splitlines()[-1])
    assert json.loads((run / "result.json").read_text())["step"] == 1
    assert "--wfm-mode wfm_rl.py: cosmos-rl's entry script is not needed here" in done.stderr
