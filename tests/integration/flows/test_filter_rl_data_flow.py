"""The `filter-rl-data` flow and command: the tiny model samples a hand-built RL dataset whose pass rates the test
fixes (tests/unit/test_rl_filter.py), the flow writes RUN/filtered.json and its report, and its artifacts (the
pass-rate histogram, the counts table) read back through the Prefect API; the CLI refuses bad input with one
paragraph and exit 2 before Prefect starts.

    .venv/bin/python -m pytest -q tests/integration/flows/test_filter_rl_data_flow.py
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.cli_inprocess import RunCli
from tests.integration.prefect_server import flow_run_artifacts

# accuracy_by_id: the fixture registering the reward REWARD, whose pass count per prompt is PASSES
from tests.unit.test_rl_filter import PASSES, PNG_MAGIC, REWARD, SAMPLES, accuracy_by_id, job, write_rows  # noqa: F401

pytestmark = pytest.mark.slow


@pytest.mark.usefixtures("prefect_harness", "accuracy_by_id")
def test_flow_writes_the_kept_rows_and_publishes_its_artifacts(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    from flows.filter_rl_data import FilterRLDataParams, filter_rl_data

    rows_file = write_rows(tmp_path / "data", synthetic_dir)
    path = job(tmp_path, tiny_model_dir, rows_file, REWARD)
    state = filter_rl_data(FilterRLDataParams(config=str(path), samples=SAMPLES), return_state=True)
    assert state.is_completed(), state
    result = state.result()
    run = Path(result["run_dir"])
    assert run.parent == tmp_path / "runs" and (run / "config.toml").is_file()
    assert result["dataset"] == str(run / "filtered.json") and result["report"] == str(run / "filtered_report.json")
    assert (result["kept"], result["dropped"]) == (3, 3)
    assert [r["id"] for r in json.loads((run / "filtered.json").read_text())] == ["r2", "r3", "r4"]
    report = json.loads((run / "filtered_report.json").read_text())
    assert {p["id"]: p["passes"] for p in report["prompts_scored"]} == PASSES

    arts = flow_run_artifacts(state.state_details.flow_run_id)
    assert {"rl-filter-pass-rates", "rl-filter-counts"} <= set(arts)
    counts = {r["prompts"]: r["count"] for r in json.loads(arts["rl-filter-counts"].data)}
    assert counts == {"kept": 3, "all fail": 2, "all pass": 1}
    markdown = arts["rl-filter-pass-rates"].data
    assert "3 of 6 prompts kept" in markdown
    encoded = markdown.split("data:image/png;base64,")[1].split(")")[0]
    png = run / "filtered_pass_rates.png"
    assert base64.b64decode(encoded) == png.read_bytes() and png.read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--samples", "0"], "--samples 0"),
        (["--min-pass", "0.7", "--max-pass", "0.3"], "--min-pass 0.7 >= --max-pass 0.3"),
        (["--max-pass", "2"], "--max-pass 2.0"),
        (["--out", "{dir}/kept.csv"], "kept.csv"),
        (["--model", "{dir}/no-model"], "no-model"),
        (["--set", 'train.train_policy.type="sft"'], "train.train_policy.type"),
        (["--set", "train.epochh=2"], "train.epochh"),
    ],
    ids=["samples", "empty band", "bound", "out", "model", "sft config", "typo"],
)
def test_cli_refuses_bad_input_before_prefect(
    args: list[str],
    names: str,
    tiny_model_dir: Path,
    synthetic_dir: Path,
    tmp_path: Path,
    run_cli: RunCli,
) -> None:
    """In this process: run_cli (tests/cli_inprocess.py) fails the case if the command reaches Prefect."""
    path = job(tmp_path, tiny_model_dir, write_rows(tmp_path / "data", synthetic_dir), "single_choice")
    argv = ["filter-rl-data", "--config", str(path), *[a.replace("{dir}", str(tmp_path)) for a in args]]
    done = run_cli(*argv)
    assert done.returncode == 2, done.stdout + done.stderr
    err = done.stderr
    assert "Traceback" not in err and err.startswith("error: ")
    assert names.replace("{dir}", str(tmp_path)) in err, err
