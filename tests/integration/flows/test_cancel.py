"""Cancelling a flow run (SIGTERM to the flow process, as a Prefect process worker does) stops the
whole torchrun group: the trainer checkpoints, and no rank is left running. Killing the flow process
outright (SIGKILL: no cleanup runs, as a deployment's flow-run process can die) leaves nothing either: the
launcher watches its parent and stops its ranks, which save a stop checkpoint first. The same kill of
`cosmos-train` itself (whose reaper also stops Prefect's temporary server) is tests/faults/test_cli_killed.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cosmos_train.checkpoint_paths import complete_checkpoints, step_of
from cosmos_train.metrics import read_metrics
from tests.conftest import ROOT, processes_with, write_tiny_sft_config
from tests.integration.prefect_server import prepared_home

pytestmark = pytest.mark.slow

SCRIPT = """
import sys
from flows.sft import SFTParams, sft
sft(SFTParams(config=sys.argv[1], overrides=["launch.nproc_per_node=2"], train_retries=0))
"""


def _ranks_alive(marker: str) -> list[int]:
    """The launcher and the ranks of the run whose paths contain `marker` (both name the trainer module)."""
    return processes_with(marker, "cosmos_train.train.sft")


def _processes_with_env(entry: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if entry.encode() in (d / "environ").read_bytes().split(b"\0"):
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


def _start_training_flow(tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path):
    """The sft flow in its own process, returned once its trainer logged 3 steps."""
    out = tmp_path / "out"
    cfg = write_tiny_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, out, max_num_steps=400)
    env = {
        **os.environ,
        "PREFECT_HOME": str(prepared_home(tmp_path / "prefect")),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "OMP_NUM_THREADS": "1",
    }
    log = (tmp_path / "flow.log").open("w")  # a file, not a pipe nobody drains while it runs
    flow_proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(cfg)], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT
    )
    deadline = time.monotonic() + 240
    runs: list[Path] = []
    while time.monotonic() < deadline:
        runs = [r for r in out.glob("*") if (r / "metrics.jsonl").exists()]
        if runs and (runs[0] / "metrics.jsonl").read_text().count('"train"') >= 3:
            break
        assert flow_proc.poll() is None, (tmp_path / "flow.log").read_text()[-3000:]
        time.sleep(0.1)
    assert runs, (tmp_path / "flow.log").read_text()[-3000:]
    return flow_proc, log, out, runs[0]


def _cleanup(flow_proc: subprocess.Popen, log, out: Path, tmp_path: Path) -> None:
    if flow_proc.poll() is None:
        flow_proc.kill()
    for pid in _ranks_alive(str(out)):
        os.kill(pid, signal.SIGKILL)
    # the flow's temporary Prefect server outlives a killed flow process (Prefect's behaviour)
    for pid in _processes_with_env(f"PREFECT_HOME={tmp_path / 'prefect'}"):
        os.kill(pid, signal.SIGTERM)
    log.close()


def test_sigkill_of_the_flow_process_stops_the_run_saved(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    """The flow function in a plain process (as a deployment's flow-run process runs it), killed: the launcher
    notices, its ranks save where they are and exit, their lines go on in RUN/logs/train.log."""
    flow_proc, log, out, run = _start_training_flow(tiny_model_dir, synthetic_dir, tmp_path)
    try:
        alive = _ranks_alive(str(out))
        assert len(alive) == 3, f"expected the launcher and 2 ranks, found {alive}"
        flow_proc.kill()
        flow_proc.wait(timeout=10)
        deadline = time.monotonic() + 30
        while _ranks_alive(str(out)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _ranks_alive(str(out)), "launcher or ranks outlived the killed process by 30 s"
        last = max(r["step"] for r in read_metrics(run) if r["kind"] == "train")
        assert step_of(complete_checkpoints(run / "checkpoints")[-1]) == last, "no stop checkpoint at the last step"
        assert f"stopped by signal 15 at step {last}" in (run / "logs" / "train.log").read_text()
        assert not list((run / "checkpoints").glob("*.tmp-*"))
    finally:
        _cleanup(flow_proc, log, out, tmp_path)


def test_sigterm_to_the_flow_process_stops_every_rank(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    flow_proc, log, out, run = _start_training_flow(tiny_model_dir, synthetic_dir, tmp_path)
    try:
        assert _ranks_alive(str(out)), "no trainer rank found"
        flow_proc.send_signal(signal.SIGTERM)
        flow_proc.wait(timeout=120)
        assert "Finished in state Crashed" in (tmp_path / "flow.log").read_text()
        deadline = time.monotonic() + 60
        while _ranks_alive(str(out)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _ranks_alive(str(out)), "trainer ranks outlived the cancelled flow"
        # the trainer got SIGTERM from the task's cleanup and saved where it stopped
        steps = [int(p.name.split("_")[1]) for p in (run / "checkpoints").glob("step_*") if "." not in p.name]
        assert steps and max(steps) < 400
        assert "stopped by signal" in (run / "logs" / "train.log").read_text()
    finally:
        _cleanup(flow_proc, log, out, tmp_path)
