"""Preemption: SIGTERM to the launcher and every rank of a running `cosmos-train sft` (what a pod eviction or a
node drain sends every process of the job). The ranks agree on a step and save a stop checkpoint, the flow's retry
relaunches from it, and the command ends 0 with the weights of a run that was never preempted; no process is
left."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.conftest import processes_with
from tests.faults.conftest import CliRun, start_fault_sft
from tests.run_outputs import same_weights


def test_preempted_ranks_save_and_the_retry_resumes(
    tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path, uninterrupted_sft: Path, cli_runs: list[CliRun]
) -> None:
    run = start_fault_sft(tmp_path, tiny_model_dir, synthetic_dir, cli_runs)
    run_dir = run.wait_steps(3)
    job = processes_with("cosmos_train.train.sft", str(run_dir / "config.toml"))  # the launcher and its 2 ranks
    assert len(job) == 3, job
    for pid in job:
        os.kill(pid, signal.SIGTERM)
    code, _ = run.wait(timeout=600)
    output = run.output()
    assert code == 0, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    assert output.count("launch: ") == 2, "not relaunched once"
    stop = output.split("stopped by signal 15 at step ")[1].split()[0]
    assert f"resumed from {run_dir / 'checkpoints' / f'step_{stop}'}" in output
    assert run.sessions_left() == []
    assert same_weights(run_dir / "safetensors" / "final", uninterrupted_sft)
