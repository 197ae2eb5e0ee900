"""`cosmos_train.cli.main(argv)` in the test's own process, for a command the CLI answers before Prefect starts
(an input error refused by its checks, `config check`, `reward-service`'s token check, `export`), or with
`flows=True` a command that runs its flow on the Prefect API the test runs under (tests/integration's
`prefect_harness`). Tests take it as the `run_cli` fixture (tests/conftest.py), which binds their monkeypatch:

    done = run_cli("config", "check", path, cwd=tmp_path)
    assert done.returncode == 2 and "error: " in done.stderr

A subprocess pays ~3-5 s of interpreter start and torch / transformers imports per command; in-process a call
takes a fraction of a second once the first has imported them. What a subprocess gave for free is done here:
- no reaper sidecar: `start_reaper` (a process watching its caller) is patched out, or every call would leave
  one on the pytest process;
- "Prefect was not started" is `cli.prefect_server.prepare_prefect` (called by every flow command just before
  its first flow) failing the test: stricter than the old unusable PREFECT_HOME, which in-process could not work
  anyway (Prefect's settings are fixed at its first import); unless `flows=True`;
- the environment variables main() sets (PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
  PREFECT_CLIENT_MAX_RETRIES, COSMOS_TRAIN_DEBUG with --debug, ...) are put back after the call; `env` and
  `cwd` are monkeypatched for the test;
- argparse's SystemExit is the exit code, as `python -m cosmos_train.cli` gives it.

A case that needs a fresh interpreter stays a subprocess, on purpose (the CLI's smoke tests):
- tests/faults/ (conftest.py's start_cli): the command as a terminal runs it, hit by real signals and faults;
- test_cli_errors.py's cases that fail inside a flow run, and test_cli_path_errors.py's `_through_prefect`: the
  paragraph after Prefect's own console lines, against a real server; test_cli_errors.py's temporary-server case:
  the one run on the server Prefect starts for a command without PREFECT_API_URL;
- test_reward_service_cli.py's serve-then-SIGTERM and test_reward_service_bounds.py's memory bound: a service
  process (its signals, its RSS);
- the two-host bed (test_two_hosts.py, test_multinode.py, test_deployment_nodes.py): a command on each host.
"""

from __future__ import annotations

import io
import os
import signal
import sys
from collections.abc import Mapping
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, Protocol, TextIO

import pytest

from cosmos_train import cli
from cosmos_train.cli import prefect_server


@dataclass
class CliResult:
    """What a finished command left: the names of subprocess.CompletedProcess, so the checks read the same."""

    returncode: int
    stdout: str
    stderr: str


class _Captured(io.TextIOBase):
    """sys.stdout / sys.stderr during one call: keeps the text. Afterwards it writes through to the stream it
    stood in for, so a logging handler a library's first import made during the call (bound to this object)
    goes on working in later tests instead of writing into a closed capture."""

    def __init__(self, replaced: TextIO):
        super().__init__()
        self.replaced = replaced
        self.parts: list[str] | None = []

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.replaced, "encoding", None) or "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if self.parts is None:
            return self.replaced.write(text)
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        if self.parts is None:
            self.replaced.flush()

    def release(self) -> str:
        """The text kept; from now on writes go to the replaced stream."""
        text = "".join(self.parts or [])
        self.parts = None
        return text


class RunCli(Protocol):
    """The `run_cli` fixture: `run_cli` below with the test's monkeypatch bound."""

    def __call__(
        self,
        *args: str | Path,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        flows: bool = False,
    ) -> CliResult: ...


def _prefect_started() -> NoReturn:
    # pytest.fail raises a BaseException: main() (which catches Exception) lets it through
    pytest.fail("Prefect was started: the command got past its checks to a flow run")


def run_cli(
    monkeypatch: pytest.MonkeyPatch,
    *args: str | Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    flows: bool = False,
) -> CliResult:
    """`cosmos-train ARGS` through `cli.main`, refused or done before Prefect starts (else the test fails), or
    with `flows` run to its end on the test's Prefect API."""
    monkeypatch.setattr(cli, "start_reaper", lambda *a, **k: None)
    if not flows:
        monkeypatch.setattr(prefect_server, "prepare_prefect", _prefect_started)
    if cwd is not None:
        monkeypatch.chdir(cwd)
    for key, value in (env or {}).items():
        monkeypatch.setenv(key, value)
    environ_before = dict(os.environ)
    sigint_before = signal.getsignal(signal.SIGINT)  # main() notes Ctrl-C itself for the commands that run flows
    out, err = _Captured(sys.stdout), _Captured(sys.stderr)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = cli.main([str(a) for a in args])
            except SystemExit as e:  # argparse's usage errors (and --help), as the interpreter ends with it
                code = e.code if isinstance(e.code, int) else 0 if e.code is None else 1
    finally:
        for key in set(os.environ) - set(environ_before):
            del os.environ[key]
        os.environ.update(environ_before)
        signal.signal(signal.SIGINT, sigint_before)
        printed = out.release(), err.release()
    return CliResult(code, *printed)
