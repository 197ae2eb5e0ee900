"""The `evaluate-wfm` flow and `cosmos-train eval-wfm` on the tiny world model: two models on held-out prompts,
rewards through the reward service (WFM_REWARD_*: the same numbers as the local handlers), the comparison table
and the sample grid read back from the Prefect API, and the CLI's table and input errors.

    pytest -x -q tests/integration/flows/test_evaluate_wfm_flow.py
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, wfm_eval_overrides
from tests.integration.flows.test_grpo_flow import PNG_MAGIC
from tests.integration.prefect_server import flow_run_artifacts
from tests.reward_server import TOKEN, running_service

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

RECIPE = ROOT / "configs" / "tiny-wfm-ddrl.toml"


def test_flow_scores_through_the_reward_service_and_publishes_table_and_grid(
    tiny_wfm_dir: Path, wfm_data_dir: Path, moved_wfm_export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cosmos_train.wfm.config import load_wfm_config
    from cosmos_train.wfm.evaluate import eval_plan, evaluate_wfm_model
    from flows.evaluate_wfm import EvaluateWfmParams, evaluate_wfm

    out = tmp_path / "out"
    service = wfm_eval_overrides(tiny_wfm_dir, wfm_data_dir, "reward.backend='service'")
    params = EvaluateWfmParams(
        config=str(RECIPE),
        models=[str(tiny_wfm_dir), str(moved_wfm_export)],
        overrides=service,
        prompts=3,
        seed=0,
        out=str(out),
    )
    with running_service() as (url, _):  # the service a cluster runs, reached through WFM_REWARD_*
        monkeypatch.setenv("WFM_REWARD_ENQUEUE_URL", f"{url}/api/reward/enqueue")
        monkeypatch.setenv("WFM_REWARD_FETCH_URL", f"{url}/api/reward/pull")
        monkeypatch.setenv("WFM_REWARD_TOKEN", TOKEN)
        state = evaluate_wfm(params, return_state=True)
    assert state.is_completed(), state
    result = state.result()
    base, rl = result["results"]
    assert [base["label"], rl["label"]] == ["model", "final"] and result["out"] == str(out)
    assert json.loads((out / "results.json").read_text())["table"] == result["table"]
    # the service scored the same pixels as the local handlers would
    local_cfg = load_wfm_config(RECIPE, wfm_eval_overrides(tiny_wfm_dir, wfm_data_dir))
    local = evaluate_wfm_model(eval_plan(local_cfg, 3, 0), str(moved_wfm_export), "local", tmp_path / "local")
    assert np.array_equal(np.load(local["samples"]), np.load(rl["samples"]))
    assert rl["per_prompt"]["total"] == pytest.approx(local["per_prompt"]["total"], abs=1e-6)
    assert rl["heldout_diffusion_loss"]["n"] == 4 and base["num_prompts"] == 3

    arts = flow_run_artifacts(state.state_details.flow_run_id)
    table = json.loads(arts["wfm-eval-comparison"].data)
    assert table == result["table"]
    by = {row["metric"]: row for row in table}
    assert by["reward (weighted total)"]["model"].startswith(f"{base['reward_total']['mean']:.4f} [")
    assert by["gain in total reward over model (paired)"]["final"].startswith(("+", "-"))
    assert by["flags"] == {"metric": "flags", "model": "ok", "final": "ok"}
    assert "Student t 95% CI" in arts["wfm-eval-comparison"].description
    grid = (out / "grid.png").read_bytes()
    encoded = arts["wfm-eval-samples"].data.split("data:image/png;base64,")[1].split(")")[0]
    assert grid.startswith(PNG_MAGIC) and base64.b64decode(encoded) == grid


def test_cli_prints_the_table_and_refuses_bad_input(
    tiny_wfm_dir: Path, wfm_data_dir: Path, moved_wfm_export: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cosmos_train import cli

    monkeypatch.setattr(cli, "start_reaper", lambda: None)  # the sidecar is for a real CLI process, not pytest's
    sets = [a for o in wfm_eval_overrides(tiny_wfm_dir, wfm_data_dir) for a in ("--set", o)]
    argv = ["eval-wfm", "--config", str(RECIPE), *sets, "--model", str(tiny_wfm_dir), "--model", str(moved_wfm_export)]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main([*argv, "--prompts", "2", "--out", str(tmp_path / "cli")])
    assert code == 0, err.getvalue()[-3000:]
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["metric", "model", "final"] and lines[-1] == str(tmp_path / "cli")
    assert any(line.startswith("gain in total reward over model (paired)") for line in lines)
    assert any(line.startswith("prompts / held-out clips") and "2 / 4" in line for line in lines)

    for bad, said in (
        (["--prompts", "0"], "--prompts 0: give between 1 and 4096 prompts"),
        (["--model", str(tmp_path / "nothing")], f"--model {tmp_path / 'nothing'}: no such folder"),
    ):
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = cli.main([*argv, *bad])
        assert code == 2 and said in err.getvalue() and "Traceback" not in err.getvalue(), err.getvalue()
