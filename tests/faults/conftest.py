"""The fault suite's tools: a real `cosmos-train` command in a session of its own, as a terminal runs it, and
what a test asserts after a real fault (a signal, a full disk, a dead server): its exit code, the seconds it
took to stop, the paragraph it printed, and that no process of any session it started is left.

    run = start_cli(["sft", "--config", str(cfg)], tmp_path)
    run_dir = run.wait_steps(3)                 # the run folder, once 3 train steps are logged
    os.killpg(run.proc.pid, signal.SIGINT)      # Ctrl-C: the terminal signals the foreground process group
    code, seconds = run.wait(timeout=60)
    assert run.sessions_left() == []

Every process the command starts is watched while it runs (its descendants and their session ids: the
launcher, the ranks, the reward service and Prefect's temporary server each start a session of their own),
so "nothing is left" covers every session the command made, not only its own.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cosmos_train.checkpoint_paths import complete_checkpoints
from cosmos_train.errors import EXIT_SERVICE_DOWN
from cosmos_train.process_tree import descendants
from tests.conftest import ROOT, made_once
from tests.integration.prefect_server import isolated_env

pytestmark = pytest.mark.slow


def session_of(pid: int) -> int | None:
    """The session id of a live (not zombie) process, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else int(fields[3])


def processes_in(sessions: set[int]) -> list[int]:
    """Live processes whose session is one of `sessions` (this test process excluded)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid() and session_of(int(d.name)) in sessions:
            found.append(int(d.name))
    return found


def fault_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The caller's environment without its Prefect settings (a test harness's API), a Prefect home of the
    test's own (isolated_env), one torch thread per process (two ranks on two cores)."""
    return isolated_env(
        tmp_path / "prefect-home",
        OMP_NUM_THREADS="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        WANDB_MODE="offline",
        **extra,
    )


@dataclass
class CliRun:
    """A `cosmos-train` command started by `start_cli`."""

    proc: subprocess.Popen
    log: Path
    out: Path  # the job's train.output_dir (its run folder appears below it)
    started: float
    sessions: set[int] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def run_dir(self) -> Path | None:
        runs = sorted(p for p in self.out.glob("*") if (p / "config.toml").exists())
        return runs[-1] if runs else None

    def wait_steps(self, n: int, timeout: float = 300) -> Path:
        """The run folder once its metrics hold `n` train steps (the command's output if it ended first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.run_dir()
            metrics = run / "metrics.jsonl" if run else None
            if metrics is not None and metrics.exists() and metrics.read_text().count('"train"') >= n:
                return run  # type: ignore[return-value]
            assert self.proc.poll() is None, f"the command ended ({self.proc.returncode}):\n{self.output()[-4000:]}"
            time.sleep(0.05)
        raise AssertionError(f"no {n} train steps within {timeout} s:\n{self.output()[-4000:]}")

    def wait(self, timeout: float = 300) -> tuple[int, float]:
        """(exit code, seconds from now until it exited)."""
        t0 = time.monotonic()
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {timeout} s:\n{self.output()[-4000:]}") from None
        return code, time.monotonic() - t0

    def sessions_left(self, within: float = 30.0) -> list[int]:
        """The processes still alive in any session the command made, after waiting up to `within` s for
        them to go."""
        self._stop.set()
        deadline = time.monotonic() + within
        while (left := processes_in(self.sessions)) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    def kill_everything(self) -> None:
        self._stop.set()
        for pid in processes_in(self.sessions):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _watch(run: CliRun) -> None:
    """Every 0.2 s: the sessions of the command and of each of its descendants."""
    while not run._stop.is_set():
        for pid in [run.proc.pid, *descendants(run.proc.pid)]:
            sid = session_of(pid)
            if sid is not None:
                run.sessions.add(sid)
        if run.proc.poll() is not None:
            return
        time.sleep(0.2)


def start_cli(args: list[str], tmp_path: Path, out: Path, env: dict[str, str] | None = None) -> CliRun:
    """`python -m cosmos_train.cli ARGS` in a new session (its own foreground process group, as a shell
    gives a command), its output in tmp_path/cli-N.log."""
    n = len(list(tmp_path.glob("cli-*.log")))
    log = tmp_path / f"cli-{n}.log"
    with log.open("w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cosmos_train.cli", *args],
            cwd=ROOT,
            env=env or fault_env(tmp_path),
            stdout=f,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    run = CliRun(proc=proc, log=log, out=out, started=time.monotonic())
    run.sessions.add(proc.pid)
    threading.Thread(target=_watch, args=(run,), daemon=True).start()
    return run


@pytest.fixture
def cli_runs() -> Iterator[list[CliRun]]:
    """Append each CliRun here: whatever is left of them is killed after the test, pass or fail."""
    runs: list[CliRun] = []
    yield runs
    for run in runs:
        if run.proc.poll() is None:
            os.killpg(run.proc.pid, signal.SIGKILL)
        run.kill_everything()


# ----------------------------------------------------------------------------- the suite's SFT job
# Long enough to be hit mid-run (a fault comes after step 2-5, and the Prefect server's loss must be seen while the
# training goes on), short enough to run many times: the uninterrupted run, then each case's run and its resume
FAULT_SFT_STEPS = 24


def write_fault_sft_config(path: Path, model: Path, data: Path, out: Path, **train: object) -> Path:
    """The suite's SFT job (tests/conftest.py's tiny one, FAULT_SFT_STEPS steps, a checkpoint every 2): every
    case that resumes compares its final weights with `uninterrupted_sft`'s, whatever its output_dir."""
    from tests.conftest import write_tiny_sft_config

    return write_tiny_sft_config(path, model, data, out, max_num_steps=FAULT_SFT_STEPS, **train)


def sft_args(config: Path, *more: str) -> list[str]:
    """`cosmos-train sft` on two ranks."""
    return ["sft", "--config", str(config), "--set", "launch.nproc_per_node=2", *more]


def start_fault_sft(tmp_path: Path, model: Path, data: Path, cli_runs: list[CliRun], *more: str) -> CliRun:
    """`cosmos-train sft` of the suite's job (output under tmp_path/out), started and registered for cleanup."""
    out = tmp_path / "out"
    cfg = write_fault_sft_config(tmp_path / "job.toml", model, data, out)
    run = start_cli(sft_args(cfg, *more), tmp_path, out)
    cli_runs.append(run)
    return run


@pytest.fixture(scope="session")
def uninterrupted_sft(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, synthetic_dir: Path) -> Path:
    """safetensors/final of the suite's SFT job run once from start to end, with no fault (once for the whole run:
    the two workers of `make pytest`'s serial part share it)."""

    def run_it(tmp: Path) -> Path:
        out = tmp / "out"
        cfg = write_fault_sft_config(tmp / "job.toml", tiny_model_dir, synthetic_dir, out)
        run = start_cli(sft_args(cfg), tmp, out)
        code, _ = run.wait(timeout=600)
        assert code == 0, run.output()[-4000:]
        final = run.run_dir() / "safetensors" / "final"  # type: ignore[operator]
        assert final.is_dir(), run.output()[-4000:]
        return final

    return made_once(tmp_path_factory, "uninterrupted-sft", run_it)


# ----------------------------------------------------------------------------- what the cases read back
def train_steps(run: Path) -> list[int]:
    """The train steps RUN/metrics.jsonl logged, in order."""
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [r["step"] for r in rows if r["kind"] == "train"]


def wait_train_steps(run: Path, n: int, proc: subprocess.Popen, timeout: float = 300) -> None:
    """Until RUN/metrics.jsonl holds `n` train steps of a trainer launched without the CLI (its output if it ends)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (run / "metrics.jsonl").exists() and len(train_steps(run)) >= n:
            return
        assert proc.poll() is None, proc.communicate()[0][-4000:]
        time.sleep(0.05)
    raise AssertionError(f"no {n} train steps within {timeout} s")


def resume_to_the_end(command: list[str], tmp_path: Path, out: Path, cli_runs: list[CliRun], **env: str) -> str:
    """`cosmos-train COMMAND` (a --run-dir continuation) run to its end: exit 0 and nothing left; its output."""
    resumed = start_cli(command, tmp_path, out, fault_env(tmp_path, **env) if env else None)
    cli_runs.append(resumed)
    code, _ = resumed.wait(timeout=600)
    assert code == 0, resumed.output()[-4000:]
    assert resumed.sessions_left() == []
    return resumed.output()


def assert_stopped_for_the_service(cli: CliRun, run: Path, url: str, total: int, bound_s: float) -> str:
    """A run an unreachable reward service stopped: exit 75 within `bound_s` of the service's death, every rank after
    the same step with that step saved (the only checkpoint), one paragraph naming the URL, the tries, the last error
    and the step, no traceback, one attempt (not retried), nothing left. Returns the paragraph."""
    code, seconds = cli.wait(timeout=300)
    output = cli.output()
    assert code == EXIT_SERVICE_DOWN, output[-4000:]
    assert seconds < bound_s, seconds
    record = json.loads((run / "error.json").read_text())
    assert record["kind"] == "service" and record["type"] == "ServiceUnavailable", record
    step = train_steps(run)[-1]
    assert 2 <= step < total
    assert [p.name for p in complete_checkpoints(run / "checkpoints")] == [f"step_{step}"]
    paragraphs = [line for line in output.splitlines() if line.startswith("error: ")]
    assert len(paragraphs) == 1, output[-4000:]
    said = paragraphs[0]
    assert f"{url}/" in said and "no answer after 5 tries" in said and "Connection refused" in said, said
    assert f"stopped after step {step} of {total}" in said and f"step_{step}" in said, said
    assert f"--run-dir {run}" in said, said
    assert "Traceback" not in output, output[-4000:]
    assert output.count("launch: ") == 1 and not (run / "failures.jsonl").exists(), output[-4000:]
    assert cli.sessions_left() == []
    return said
