"""The CLI killed alone (SIGKILL: a dropped SSH session, the OOM killer): no cleanup runs in it, its output pipe
closes, and its reaper sidecar stops what it started. The ranks save a stop checkpoint where they are and exit,
their log lines go on into RUN/logs/train.log, an async save in flight is finished and marked, nothing is left,
and `--run-dir RUN` resumes to the same final weights as a run that was never interrupted."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from cosmos_train.checkpoint_paths import complete_checkpoints, step_of
from cosmos_train.metrics import read_metrics
from tests.faults.conftest import CliRun, resume_to_the_end, sft_args, start_cli, write_fault_sft_config
from tests.run_outputs import same_weights

# The bound on "stopped and nothing left" after the kill: the reaper's grace (process_tree.STOP_GRACE_S: the
# ranks get torchrun's 30 s to save, then everything is killed) with room for a loaded CI machine. Measured: ~3 s.
STOP_BOUND_S = 60
ASYNC = ("--set", "train.ckpt.save_mode=async")  # so that an async save can be in flight at the kill


def test_sigkill_of_the_cli_stops_the_ranks_saved_and_resumes(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path, cli_runs: list[CliRun], uninterrupted_sft: Path
) -> None:
    out = tmp_path / "out"
    cfg = write_fault_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, out)
    run = start_cli(sft_args(cfg, *ASYNC), tmp_path, out)
    cli_runs.append(run)
    run_dir = run.wait_steps(5)
    os.kill(run.proc.pid, signal.SIGKILL)  # the CLI alone: its process group (none here but itself) is spared
    killed = time.monotonic()
    run.proc.wait()

    left = run.sessions_left(within=STOP_BOUND_S)
    seconds = time.monotonic() - killed
    assert left == [], f"processes left {STOP_BOUND_S} s after the CLI was killed: {left}"
    print(f"stopped, nothing left, {seconds:.1f} s after the kill")

    ckpts = run_dir / "checkpoints"
    assert not list(ckpts.glob("*.tmp-*")), f"an unmarked checkpoint folder was left: {list(ckpts.iterdir())}"
    done = complete_checkpoints(ckpts)
    last_step = max(r["step"] for r in read_metrics(run_dir) if r["kind"] == "train")
    assert done and step_of(done[-1]) == last_step > 0, (
        f"no stop checkpoint at the last step {last_step}: {[p.name for p in done]}"
    )
    log = (run_dir / "logs" / "train.log").read_text()
    # the CLI's lines from before the kill, rank 0's own after it (no CLI was left to copy them), none twice
    assert log.count("[sft] training ") == 1, log[-3000:]
    assert f"stopped by signal 15 at step {last_step}" in log, log[-3000:]
    assert all(log.count(f"[train] step {n} ") <= 1 for n in range(1, last_step + 1)), log[-3000:]
    assert "BrokenPipeError" not in log and "Traceback" not in log, log[-3000:]

    output = resume_to_the_end(sft_args(cfg, *ASYNC, "--run-dir", str(run_dir)), tmp_path, out, cli_runs)
    assert f"resumed from {done[-1]} at step {last_step}" in output
    assert same_weights(run_dir / "safetensors" / "final", uninterrupted_sft)
