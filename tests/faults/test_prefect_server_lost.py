"""The Prefect server dies mid-run (the temporary one `cosmos-train` started, SIGKILLed). The API is not on the
training's critical path: the trainer goes on to its end (its final weights equal a run that never lost its
server), and the command then exits 75 with one paragraph (the API's address, the last error, what the training
did) within a minute of the training's end, instead of retrying into the same wall or hanging."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from cosmos_train.process_tree import descendants
from tests.faults.conftest import CliRun, start_fault_sft
from tests.run_outputs import same_weights

EXIT_WITHIN_S = 60  # after the training's end


def test_a_dead_prefect_server_never_stops_the_training(
    tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path, uninterrupted_sft: Path, cli_runs: list[CliRun]
) -> None:
    run = start_fault_sft(tmp_path, tiny_model_dir, synthetic_dir, cli_runs)
    run_dir = run.wait_steps(3)
    servers = [p for p in descendants(run.proc.pid) if b"uvicorn" in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert len(servers) == 1, "no temporary Prefect server found"
    os.kill(servers[0], signal.SIGKILL)

    final = run_dir / "safetensors" / "final"
    deadline = time.monotonic() + 300
    while not (final / "model.safetensors").exists() and run.proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert final.is_dir(), f"the training did not finish:\n{run.output()[-4000:]}"
    trained = time.monotonic()
    code, _ = run.wait(timeout=300)
    seconds = time.monotonic() - trained
    output = run.output()
    assert code == 75, output[-4000:]
    assert seconds < EXIT_WITHIN_S, f"exited {seconds:.0f} s after the training's end"
    assert "Traceback" not in output, output[-4000:]
    errors = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "the Prefect API at http://127.0.0.1:" in errors[0], errors
    assert "stopped answering during the training" in errors[0] and f"final export {final}" in errors[0]
    assert "the training goes on without it" in output  # said when it was noticed, not only at the end
    assert output.count("launch: ") == 1, "the training was retried"
    assert run.sessions_left() == [], "a process of the run outlived it"
    assert same_weights(final, uninterrupted_sft)
