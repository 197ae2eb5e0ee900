"""Ctrl-C in a terminal: SIGINT to the foreground process group of `cosmos-train sft`, with Prefect's temporary
server and with a server of the user's own (PREFECT_API_URL). The ranks save a stop checkpoint, nothing is
retried, the command prints one paragraph (the step, the checkpoint, the exact command that continues) within
30 s and exits 130; no process of the run is left. Then the stopped run's newest checkpoint is damaged (a shard
cut short: one paragraph naming it, exit 2; without its COMPLETE marker: the one before is taken) and the printed
command finishes the run with the weights of a run that was never interrupted."""

from __future__ import annotations

import os
import shlex
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from cosmos_train.checkpoint_paths import complete_checkpoints
from tests.faults.conftest import (
    FAULT_SFT_STEPS,
    CliRun,
    fault_env,
    resume_to_the_end,
    sft_args,
    start_cli,
    write_fault_sft_config,
)
from tests.integration.prefect_server import start_server
from tests.run_outputs import same_weights

STOP_WITHIN_S = 30


def _ctrl_c(run: CliRun) -> tuple[Path, str, float]:
    """Ctrl-C once 3 steps are logged: (the run folder, the closing paragraph, seconds from the signal to exit)."""
    run_dir = run.wait_steps(3)
    os.killpg(run.proc.pid, signal.SIGINT)  # what the terminal does: the whole foreground process group
    code, seconds = run.wait(timeout=120)
    output = run.output()
    assert code == 130, output[-4000:]
    assert seconds < STOP_WITHIN_S, f"took {seconds:.1f} s to stop"
    assert "Traceback" not in output, output[-4000:]
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, errors
    assert run.sessions_left() == [], "a process of the run outlived it"
    assert output.count("launch: ") == 1, "the stopped training was retried"
    return run_dir, errors[0], seconds


@dataclass
class Stopped:
    tmp: Path
    out: Path
    run_dir: Path
    paragraph: str


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, synthetic_dir: Path) -> Iterator[Stopped]:
    """The suite's SFT job stopped by Ctrl-C with Prefect's temporary server."""
    tmp = tmp_path_factory.mktemp("ctrl-c")
    out = tmp / "out"
    cfg = write_fault_sft_config(tmp / "job.toml", tiny_model_dir, synthetic_dir, out)
    run = start_cli(sft_args(cfg), tmp, out)
    try:
        run_dir, paragraph, _ = _ctrl_c(run)
        yield Stopped(tmp, out, run_dir, paragraph)
    finally:
        run.kill_everything()


def test_ctrl_c_stops_saved_and_names_the_checkpoint(stopped: Stopped) -> None:
    step = int(stopped.paragraph.split("stopped by Ctrl-C at step ")[1].split()[0])
    checkpoint = stopped.run_dir / "checkpoints" / f"step_{step}"
    assert 0 < step < FAULT_SFT_STEPS and f"saved the checkpoint {checkpoint}" in stopped.paragraph, stopped.paragraph
    assert (checkpoint / "COMPLETE").is_file(), stopped.paragraph
    assert not list((stopped.run_dir / "checkpoints").glob("*.tmp*")), "a partial checkpoint was left"


def test_the_printed_command_continues_past_a_damaged_newest_checkpoint(
    stopped: Stopped, uninterrupted_sft: Path, cli_runs: list[CliRun]
) -> None:
    """The printed command, run as it is: the newest checkpoint's shard cut short is named in one paragraph (exit
    2); that checkpoint without its COMPLETE marker is passed over for the one before, and the run ends with the
    weights of a run that was never interrupted."""
    command = shlex.split(stopped.paragraph.split("To continue from there: ")[1])
    assert command[0] == "cosmos-train" and command[-2:] == ["--run-dir", str(stopped.run_dir)], command
    newest = complete_checkpoints(stopped.run_dir / "checkpoints")[-1]
    shard = sorted(newest.glob("*.distcp"))[0]
    size = shard.stat().st_size
    os.truncate(shard, size // 3)
    cli_runs.append(damaged := start_cli(command[1:], stopped.tmp, stopped.out))
    code, _ = damaged.wait(timeout=300)
    output = damaged.output()
    assert code == 2 and "Traceback" not in output, output[-4000:]
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and str(shard) in errors[0] and f"truncated: {size // 3} bytes" in errors[0], errors
    assert output.count("launch: ") == 1, "a damaged checkpoint was retried"

    (newest / "COMPLETE").unlink()  # as a save cut off before its marker leaves it
    previous = complete_checkpoints(stopped.run_dir / "checkpoints")[-1]
    assert previous != newest
    assert f"resumed from {previous}" in resume_to_the_end(command[1:], stopped.tmp, stopped.out, cli_runs)
    assert same_weights(stopped.run_dir / "safetensors" / "final", uninterrupted_sft)


def test_ctrl_c_with_an_own_prefect_server(
    tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path, cli_runs: list[CliRun]
) -> None:
    """The server is the user's (it must survive and keep the run's record): the flow run ends Failed with the
    paragraph as its state message."""
    out = tmp_path / "out"
    cfg = write_fault_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, out)
    with start_server(tmp_path / "server-home") as server:
        server.wait_healthy(180)
        env = fault_env(tmp_path, PREFECT_API_URL=server.url)
        cli_runs.append(run := start_cli(sft_args(cfg), tmp_path, out, env=env))
        _, paragraph, _ = _ctrl_c(run)
        assert server.proc.poll() is None, "the user's Prefect server was stopped"
        flow_runs = httpx.post(f"{server.url}/flow_runs/filter", json={}, timeout=30).json()
        assert [r["state"]["type"] for r in flow_runs] == ["FAILED"]
        assert "stopped by Ctrl-C at step" in flow_runs[0]["state"]["message"]
    assert "To continue from there: cosmos-train sft" in paragraph


def test_ctrl_c_before_the_training_starts(
    tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path, cli_runs: list[CliRun]
) -> None:
    """Ctrl-C while the command still starts Prefect's server: a library may wrap the KeyboardInterrupt in an error
    of its own (pydantic does while Prefect reads its settings); it is still Ctrl-C's paragraph."""
    out = tmp_path / "out"
    cfg = write_fault_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, out)
    cli_runs.append(run := start_cli(sft_args(cfg), tmp_path, out))
    deadline = time.monotonic() + 120
    while "Starting temporary server" not in run.output() and time.monotonic() < deadline:
        time.sleep(0.05)  # Ctrl-C while Prefect's server starts, well before the first step
    os.killpg(run.proc.pid, signal.SIGINT)
    code, seconds = run.wait(timeout=120)
    output = run.output()
    assert code == 130 and seconds < STOP_WITHIN_S, output[-4000:]
    assert "Traceback" not in output and "launch: " not in output, output[-4000:]
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert errors == [
        f"error: stopped by Ctrl-C while no training job was running, so it had nothing to save; run it "
        f"again: cosmos-train sft --config {cfg} --set launch.nproc_per_node=2"
    ], errors
    assert run.sessions_left() == []
