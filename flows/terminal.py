"""How a flow behaves when `cosmos-train` runs it in a terminal, with Prefect's temporary API server.

    prepare_prefect(debug=False)       # once the flows are imported, before the first flow runs
    stop_temporary_servers(keep=[...]) # before the CLI prints an error paragraph (its stop line would follow it)
    ending_of(exc, command, argv)      # (paragraph, exit code, API lost) of a failed command, None for a crash
    finished(run_dir, {"": result.get("health")})  # a command's last lines: its folder, the runs' verdicts

- Ctrl-C: the terminal sends SIGINT to its foreground process group. Prefect starts its temporary server as a
  child in that group, so Ctrl-C killed the server with the command and the run's last reports failed after a
  minute of retries. Started here first in a session of its own, it keeps serving while the run stops saved
  (tasks/torchrun.py turns the Ctrl-C into a stop of the ranks); Prefect reuses it (one instance per process)
  and stops it at exit, and the CLI's reaper stops it if the command is killed.
- The console: Prefect logs a failed task or flow with its traceback; for a user error the paragraph the CLI
  prints at the end says it all (the run's log on the server keeps the traceback).
- A dead API: the CLI needs to tell a lost Prefect server from other HTTP failures (the Hub, a reward service)
  to say so in one paragraph and leave at once instead of waiting on Prefect's workers.
- The end: a training command's last lines are its RL runs' run-health verdicts, each with what to change, or one
  line saying the run was healthy (`finished`); "GRPO done" alone told a user nothing of a run that learnt nothing.
  The temporary server this command started is stopped first, so that its stop line does not follow them.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import httpx
from prefect.logging.handlers import APILogWorker
from prefect.server.api import server as prefect_server
from prefect.settings import PREFECT_API_URL

from cosmos_train.errors import RunHalted, ServiceUnavailable, UserError, exception_chain, user_error_of
from cosmos_train.train.run_health import HealthReport

# the temporary API server `prepare_prefect` started for this command (None: one was running, or an API is set)
_STARTED: list[Any] = []


def prepare_prefect(debug: bool = False) -> None:
    """The temporary API server in a session of its own (when no PREFECT_API_URL is set) and, unless `debug`,
    Prefect's console without the tracebacks of user errors."""
    temporary_server_in_own_session()
    if not debug:
        quiet_user_error_tracebacks()


class _NewSessionSubprocess:
    """The `subprocess` module as Prefect's server module sees it, except that Popen starts a new session."""

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    @staticmethod
    def Popen(*args: Any, **kwargs: Any) -> subprocess.Popen:  # noqa: N802 (the name it stands in for)
        return subprocess.Popen(*args, **kwargs, start_new_session=True)


def temporary_server_in_own_session() -> None:
    """Start Prefect's temporary server now, in a new session (see the module's note); nothing with a
    PREFECT_API_URL or once it runs."""
    if PREFECT_API_URL.value():
        return
    instance = prefect_server.SubprocessASGIServer()
    if instance.running:
        return
    module_subprocess = prefect_server.subprocess
    # Popen is called inside Prefect's method with fixed arguments: its module's name for `subprocess` is the
    # one place to add start_new_session, for this one call
    prefect_server.subprocess = _NewSessionSubprocess()  # type: ignore[assignment]
    try:
        instance.start()
    finally:
        prefect_server.subprocess = module_subprocess
    _STARTED.append(instance)


def temporary_servers() -> list[Any]:
    """The temporary API servers Prefect has started in this process."""
    return list(getattr(prefect_server.SubprocessASGIServer, "_instances", {}).values())


def stop_temporary_servers(keep: list[Any]) -> None:
    """Stop the temporary API servers this command started, now (Prefect does it at exit); those in `keep`,
    running before the command began (a caller's own, when main() runs inside another program), stay."""
    started = [server for server in temporary_servers() if not any(server is k for k in keep)]
    if not started:
        return
    APILogWorker.drain_all(timeout=5)  # the run's last log lines first, or they fail after the stop
    for server in started:
        server.stop()


class _HideUserErrorTracebacks(logging.Filter):
    """On the console only: a record of an error the CLI's closing paragraph says (a user error, a run stopped
    saved, a lost Prefect API: `ending_of`) goes to the handler without its traceback. The record is shared with
    the API log handler (the run's log on the server keeps the traceback), so the console gets a copy without it
    instead."""

    def __init__(self, handler: logging.Handler):
        super().__init__()
        self.handler = handler

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None and said_by_the_cli(record.exc_info[1]):
            bare = logging.makeLogRecord({**record.__dict__, "exc_info": None, "exc_text": None})
            self.handler.handle(bare)
            return False
        return True


def said_by_the_cli(exc: BaseException) -> bool:
    """Whether the CLI's closing paragraph tells `exc` (so its traceback on the console says nothing more)."""
    if user_error_of(exc) is not None or prefect_api_error(exc) is not None:
        return True
    return any(isinstance(e, RunHalted) for e in exception_chain(exc))


def quiet_user_error_tracebacks() -> None:
    """Every console handler Prefect has set up gets the filter above."""
    seen = set()
    for name in ["", *logging.root.manager.loggerDict]:
        logger = logging.getLogger(name)
        for handler in getattr(logger, "handlers", []):
            if id(handler) not in seen and isinstance(handler, logging.StreamHandler):
                seen.add(id(handler))
                handler.addFilter(_HideUserErrorTracebacks(handler))


def api_address() -> str | None:
    """host:port of the Prefect API this process uses: PREFECT_API_URL, else the temporary server's."""
    url = PREFECT_API_URL.value() or next((s.api_url for s in temporary_servers() if s.port), None)
    if not url:
        return None
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def prefect_api_error(exc: BaseException) -> BaseException | None:
    """The connection error behind `exc` of a call to this process's Prefect API (the server died or is
    unreachable), if there is one; errors of other HTTP clients (the Hub, a reward service) are not it."""
    api = api_address()
    for e in exception_chain(exc):
        if isinstance(e, httpx.TransportError):
            try:
                url = e.request.url
            except RuntimeError:  # no request attached
                continue
            if api and f"{url.host}:{url.port}" == api:
                return e
    return None


def leave_now(code: int) -> None:
    """Exit at once, after the output is flushed: with the API dead, Prefect's log and event workers would go
    on retrying it for minutes at exit; what they hold is in the run folder's own log."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def ending_of(exc: BaseException, command: str, argv: list[str]) -> tuple[str, int, bool] | None:
    """How a failed command ends: (the paragraph, the exit code, whether the Prefect API was lost), None for a
    crash (its traceback). A run that stopped saved (`RunHalted`) is found also behind a later error, such as a
    dead API failing the flow's report of it, and gets the command that continues it."""
    api_error = prefect_api_error(exc)
    halted = next((e for e in exception_chain(exc) if isinstance(e, RunHalted)), None)
    error = halted or user_error_of(exc)
    if error is None and api_error is not None:
        error = ServiceUnavailable(
            f"the Prefect API at {api_address()} stopped answering ({type(api_error).__name__}: {api_error}), so "
            "the command stopped (a training job under way goes on without the API and says so at its end); run "
            f"the same command again once the server is back: {shlex.join(['cosmos-train', *argv])}"
        )
        return error.paragraph, error.exit_code, True
    if error is None:
        return None
    return error.paragraph + how_to_continue(error, command, argv), error.exit_code, api_error is not None


# the commands that continue a run folder given --run-dir (the others continue by running them again)
RUN_DIR_COMMANDS = ("sft", "grpo", "wfm-rl", "prepare-data")


def how_to_continue(error: UserError, command: str, argv: list[str]) -> str:
    """For a run that stopped saved (`RunHalted`): the exact command that continues it, this command's own
    arguments with --run-dir naming the run folder (sft, grpo, wfm-rl), or the same command (post-train skips the
    stages that finished, a sweep the trials)."""
    if not isinstance(error, RunHalted):
        return ""
    if command in RUN_DIR_COMMANDS and error.run_dir:
        kept: list[str] = []
        skip = False
        for a in argv:  # this command's arguments less its own --run-dir, which the run folder replaces
            if skip or a.startswith("--run-dir="):
                skip = False
                continue
            if a == "--run-dir":
                skip = True
                continue
            kept.append(a)
        argv = [*kept, "--run-dir", error.run_dir]
    return f". To continue from there: {shlex.join(['cosmos-train', *argv])}"


def finished(folder: str, health: Mapping[str, Mapping[str, Any] | None]) -> int:
    """A command that ran its flow to the end: the temporary server it started stopped (its stop line would
    follow what is said here), `folder` (the run or pipeline folder) on stdout, what a script reads, then on stderr
    the run-health lines of each RL run in `health` (label -> its result.json "health"; "" for the command's own
    run, a stage's name in a pipeline; None or absent for a run that has none, SFT's): one line for a healthy
    run, else each verdict with what to change (`HealthReport.closing_lines`). Returns the exit code, 0."""
    started = [s for s in _STARTED if s in temporary_servers()]
    if started:
        stop_temporary_servers(keep=[s for s in temporary_servers() if not any(s is t for t in started)])
    _STARTED.clear()
    print(folder, flush=True)
    for label, record in health.items():
        if record:
            print(*HealthReport.from_dict(record).closing_lines(label), sep="\n", file=sys.stderr, flush=True)
    return 0
