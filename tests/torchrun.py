"""The tests' one way to launch a job on several local processes: `python -m torch.distributed.run` (or our wrapper,
`cosmos_train.launch`) with `--standalone --nproc_per_node=N`, started in a session of its own.

    out = torchrun(2, "-m", "cosmos_train.train.sft", "--config", str(cfg)).stdout   # to the end, exit 0 asserted
    with running(2, "-m", "cosmos_train.train.grpo", ...) as proc:                   # a job a test acts on mid-run
        ...
        out = finish(proc, timeout=180)

What every launch shares:
- one torch thread per process (OMP_NUM_THREADS=1): two ranks on two cores, as the CI machine has;
- the repository as the working directory, so the ranks' `-m cosmos_train...` / `-m tests...` import from it;
- a session of its own, so a kill of its process group ends the launcher and every rank and nothing else;
- a bound on its time: a run past it (a collective mismatch shows as a hang) has its whole group killed and fails
  the test with the end of its output, and a job left running when the test ends is killed the same way: no rank
  outlives its test;
- stderr merged into stdout, in the order it was written (a failure's tail reads as a terminal showed it).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]  # tests/conftest.py's (which imports this module's kill_leftovers)
TORCHRUN = "torch.distributed.run"
LAUNCH = "cosmos_train.launch"  # our torchrun wrapper: loopback only, a failed rank's own exit code and paragraph
TIMEOUT_S = 600
TAIL = 4000  # the characters of output a failure shows
_started: list[subprocess.Popen[str]] = []  # every launch since the last kill_leftovers()


def torchrun_env(env: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (the test's environment by default) with one torch thread per process, then `env` on top."""
    return {**(os.environ if base is None else base), "OMP_NUM_THREADS": "1", **(env or {})}


def start_torchrun(
    nproc: int,
    *args: str,
    launcher: str = TORCHRUN,
    env: Mapping[str, str] | None = None,
    base_env: Mapping[str, str] | None = None,
) -> subprocess.Popen[str]:
    """`python -m LAUNCHER --standalone --nproc_per_node=NPROC ARGS` started in its own session, its output (stdout
    and stderr together) on the Popen's stdout; the caller ends it with `finish` (or uses `running`)."""
    cmd = [sys.executable, "-m", launcher, "--standalone", f"--nproc_per_node={nproc}", *args]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=torchrun_env(env, base_env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    _started.append(proc)
    return proc


def kill_group(proc: subprocess.Popen[str], grace_s: float = 0.0) -> None:
    """Nothing left of the session `proc` leads (a launch and its ranks, a server and its workers): SIGKILL to the
    whole group, or with `grace_s` > 0 SIGTERM first and SIGKILL to whatever is left after that grace. The group is
    signalled even when the leader has already exited: its children may still be running."""
    if grace_s > 0:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    proc.wait(timeout=10.0)


def finish(proc: subprocess.Popen[str], timeout: float = TIMEOUT_S) -> str:
    """The launch's whole output once it has exited; past `timeout` s its group is killed and the test fails."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, _ = proc.communicate()
        pytest.fail(f"torchrun still running after {timeout} s (killed):\n{out[-TAIL:]}")
    return out


def kill_leftovers() -> None:
    """Every launch started since the last call that still runs: its group killed. tests/conftest.py calls it after
    each test, so a launch a test (or a fixture it asked for) started must have ended by then."""
    while _started:
        proc = _started.pop()
        kill_group(proc)
        proc.wait()


@contextmanager
def running(
    nproc: int,
    *args: str,
    launcher: str = TORCHRUN,
    env: Mapping[str, str] | None = None,
    base_env: Mapping[str, str] | None = None,
) -> Iterator[subprocess.Popen[str]]:
    """`start_torchrun`, its group killed on the way out of the block if it still runs (pass or fail)."""
    proc = start_torchrun(nproc, *args, launcher=launcher, env=env, base_env=base_env)
    try:
        yield proc
    finally:
        kill_group(proc)
        if proc.stdout is not None:
            proc.stdout.close()
        proc.wait()


def torchrun(
    nproc: int,
    *args: str,
    launcher: str = TORCHRUN,
    env: Mapping[str, str] | None = None,
    base_env: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT_S,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """The launch run to its end: its exit code and output (`.stdout`, stderr merged in). With `check` (the default)
    an exit code other than 0 fails the test with the end of the output."""
    with running(nproc, *args, launcher=launcher, env=env, base_env=base_env) as proc:
        out = finish(proc, timeout)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, "")
    if check:
        assert done.returncode == 0, f"exit {done.returncode}:\n{out[-TAIL:]}"
    return done


# ----------------------------------------------------------------------------- the trainers, as the flows launch them
def sft_args(config: Path, *extra: str) -> list[str]:
    """The SFT trainer's arguments after the launcher's."""
    return ["-m", "cosmos_train.train.sft", "--config", str(config), *extra]


def grpo_args(config: Path, *extra: str, script: Path | None = None) -> list[str]:
    """The GRPO trainer's arguments after the launcher's; its task (`--dataset-script`) is `script`, by default the
    toy_rewards.py tests/conftest.py's write_tiny_grpo_config writes next to the config."""
    task = script if script is not None else config.parent / "toy_rewards.py"
    return ["-m", "cosmos_train.train.grpo", "--config", str(config), "--dataset-script", str(task), *extra]


def sft(config: Path, nproc: int = 2, *extra: str, timeout: float = TIMEOUT_S) -> str:
    """The SFT trainer under torchrun to its end (exit 0 asserted); its output."""
    return torchrun(nproc, *sft_args(config, *extra), timeout=timeout).stdout


def grpo(
    config: Path,
    nproc: int = 2,
    *,
    script: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = TIMEOUT_S,
) -> str:
    """The GRPO trainer under torchrun to its end (exit 0 asserted); its output."""
    return torchrun(nproc, *grpo_args(config, script=script), env=env, timeout=timeout).stdout


def runs_in_one_launch(
    runs: list[list[str]], nproc: int = 2, timeout: float = TIMEOUT_S, launcher: str = TORCHRUN
) -> str:
    """Independent runs of the trainers, each [MODULE, *ARGV] (`cosmos_train.train.sft`, ...): `python -m MODULE
    ARGV`'s `main(ARGV)`, one after another in one launch by `launcher` (tests/integration/distributed/runs_worker.py:
    the launch's start, most of a tiny run's CPU, paid once); exit 0 asserted; the output of all."""
    args = [arg for run in runs for arg in ("--", *run)][1:]
    worker = "tests.integration.distributed.runs_worker"
    return torchrun(nproc, "-m", worker, *args, launcher=launcher, timeout=timeout).stdout


def sft_runs(configs: list[Path], nproc: int = 2, timeout: float = TIMEOUT_S) -> str:
    """The SFT trainer on each config in turn, in one launch (`runs_in_one_launch`); its output."""
    return runs_in_one_launch([sft_args(c)[1:] for c in configs], nproc, timeout)


def grpo_runs(configs: list[Path], nproc: int = 2, timeout: float = TIMEOUT_S) -> str:
    """The GRPO trainer on each config in turn (its task the toy_rewards.py beside each), in one launch; its output."""
    return runs_in_one_launch([grpo_args(c)[1:] for c in configs], nproc, timeout)


def wfm_runs(configs: list[Path], nproc: int = 2, timeout: float = TIMEOUT_S) -> str:
    """The world-model trainer on each config in turn, in one launch by our launcher (as its own launches are); its
    output."""
    runs = [["cosmos_train.wfm.trainer", "--config", str(c)] for c in configs]
    return runs_in_one_launch(runs, nproc, timeout, launcher=LAUNCH)
