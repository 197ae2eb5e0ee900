"""The `sweep` flow on the tiny SFT recipe (CPU): four trials two at a time, one of them diverging; the
comparison table, overlaid curves and best trial read back through the Prefect API; a rerun that skips
the finished trials; early stop of a trailing trial, its checkpoint kept.

    pytest -x -q tests/integration/flows/test_sweep_flow.py
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest

from tests.conftest import write_tiny_sft_config
from tests.integration.prefect_server import flow_run_artifacts as _artifacts

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

GRID = "train.optm_lr=1e-3,1e-4,1e-5,1e30"  # 1e30: the weights blow up at step 1, so step 2's loss is not finite


def _val_losses(run: Path) -> list[float]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["loss"] for r in rows if r["kind"] == "val"]


def _child_runs(parent_id: object) -> dict[str, object]:
    """The sweep run's child flow runs (subflows of its trial tasks), by name."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId

    async def read() -> dict[str, object]:
        async with get_client() as c:
            runs = await c.read_flow_runs(
                flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id]))
            )
        return {r.name: r for r in runs}

    return asyncio.run(read())


def test_sweep_compares_trials_and_a_rerun_skips_the_finished(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    from flows.sweep import SweepParams, sweep

    cfg = write_tiny_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, tmp_path / "out", max_num_steps=2)
    params = SweepParams(
        config=str(cfg), overrides=["validation.enable=true"], grid=[GRID], parallel=2, train_retries=0, name="lr"
    )
    state = sweep(params, return_state=True)
    assert state.is_completed(), state  # a failed trial is a row, not the sweep's failure
    summary = state.result()
    folder = tmp_path / "out" / "sweeps" / "lr"
    assert summary["folder"] == str(folder.resolve())
    rows = {r["trial"]: r for r in summary["trials"]}
    assert list(rows) == ["lr=0.001", "lr=0.0001", "lr=1e-05", "lr=1e+30"]
    assert [r["state"] for r in rows.values()] == ["done", "done", "done", "failed"]
    assert "diverged" in rows["lr=1e+30"]["error"] and summary["failed"] == ["lr=1e+30"]

    # Two at a time: the record's start and end times overlap, never three at once.
    record = json.loads((folder / "sweep.json").read_text())["trials"]
    events = sorted([(r["started"], 1) for r in record.values()] + [(r["finished"], -1) for r in record.values()])
    running, most = 0, 0
    for _, step in events:
        running += step
        most = max(most, running)
    assert most == 2, record

    # Each trial is a child flow run of the sweep, named by its settings.
    children = _child_runs(state.state_details.flow_run_id)
    assert set(children) == set(rows)

    # The best by the default metric (val_loss, min), from the runs' own files.
    done = {n: Path(record[n]["run_dir"]) for n in rows if rows[n]["state"] == "done"}
    losses = {n: _val_losses(run)[-1] for n, run in done.items()}
    best = min(losses, key=losses.__getitem__)
    assert summary["best"]["name"] == best and summary["best"]["value"] == pytest.approx(losses[best])
    assert summary["best"]["export"] == str(done[best] / "safetensors" / "final")
    assert Path(summary["best"]["export"], "model.safetensors").is_file()

    arts = _artifacts(state.state_details.flow_run_id)
    table = json.loads(arts["sweep-table"].data)
    assert [r["trial"] for r in table] == list(rows) and [r["best"] for r in table].count("best") == 1
    assert next(r for r in table if r["best"])["trial"] == best
    assert all(set(r) == set(table[0]) for r in table) and table[0]["lr"] == 0.001
    assert table[3]["state"] == "failed" and "diverged" in table[3]["error"] and table[0]["error"] == ""
    assert table[0]["val_loss"] == pytest.approx(losses["lr=0.001"], rel=1e-3) and table[0]["steps"] == 2
    best_md = arts["sweep-best"].data
    assert f"**{best}**" in best_md and summary["best"]["export"] in best_md
    png = re.search(r"data:image/png;base64,([A-Za-z0-9+/=]+)", arts["sweep-curves"].data)
    assert png and base64.b64decode(png.group(1)) == (folder / "plots" / "overlay.png").read_bytes()

    # 2. The same sweep again: the finished trials skipped (their files untouched), the failed one run again.
    stamps = {n: (run / "metrics.jsonl").stat().st_mtime_ns for n, run in done.items()}
    state = sweep(params, return_state=True)
    assert state.is_completed(), state
    again = state.result()
    assert again["ran"] == {
        "lr=0.001": "skipped (finished earlier)",
        "lr=0.0001": "skipped (finished earlier)",
        "lr=1e-05": "skipped (finished earlier)",
        "lr=1e+30": "ran",
    }
    assert {n: (run / "metrics.jsonl").stat().st_mtime_ns for n, run in done.items()} == stamps
    assert again["best"]["name"] == best and set(_child_runs(state.state_details.flow_run_id)) == {"lr=1e+30"}
    assert (
        json.loads((folder / "sweep.json").read_text())["trials"]["lr=1e+30"]["run_dir"]
        == record["lr=1e+30"]["run_dir"]
    )  # the failed trial is retried in its own run folder


def test_early_stop_stops_a_trailing_trial_and_keeps_its_checkpoint(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    from flows.sweep import SweepParams, sweep

    steps = 40
    cfg = write_tiny_sft_config(
        tmp_path / "job.toml", tiny_model_dir, synthetic_dir, tmp_path / "out", max_num_steps=steps
    )
    params = SweepParams(
        config=str(cfg),
        overrides=["validation.enable=true", "validation.freq=2", "train.ckpt.save_freq=100"],
        grid=["train.optm_lr=1e-3,1e-7"],  # 1e-7: the validation loss barely moves
        parallel=2,
        train_retries=0,
        stop_margin=0.05,
        stop_after=0.2,
        poll_s=1.0,
    )
    state = sweep(params, return_state=True)
    assert state.is_completed(), state
    summary = state.result()
    rows = {r["trial"]: r for r in summary["trials"]}
    assert rows["lr=0.001"]["state"] == "done" and rows["lr=0.001"]["steps"] == steps
    slow = rows["lr=1e-07"]
    assert slow["state"] == "stopped" and "stopped early" in slow["error"] and slow["steps"] < steps, slow
    run = Path(slow["run folder"])
    ckpts = [p.parent.name for p in (run / "checkpoints").glob("step_*/COMPLETE")]
    assert ckpts and all(int(c.removeprefix("step_")) >= steps * 0.2 for c in ckpts), ckpts
    assert summary["best"]["name"] == "lr=0.001"
