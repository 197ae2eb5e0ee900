"""Run a torchrun job as a child process group, streaming its output into the Prefect log.

`log_prints` cannot capture a child process, so every line is read and handed to the run logger.
The child is `cosmos_train.launch` (torchrun with a loopback-only rendezvous on one node) in its own
session: on cancel, failure or timeout it is sent SIGTERM (it stops its ranks, which checkpoint),
then SIGKILL after a grace period; if this process dies without cleanup, the launcher and each rank
notice through their parent watchdog. A progress artifact follows RUN/metrics.jsonl while it runs.

How a failed job ends: a rank that hit a user error wrote RUN/error.json, and the task raises that
same typed error (never retried: it would fail the same way). A crash raises TorchrunFailed, which
the flow's retries relaunch (resuming from the newest checkpoint), unless the same crash already
happened at the same step (RepeatedFailure).

Ctrl-C (SIGINT, in the main thread: `cosmos-train` in a terminal) stops the job as a cancel does, its ranks
save a stop checkpoint, and the task raises RunInterrupted (exit 130, never retried) naming the step and the
checkpoint; a second Ctrl-C stops waiting. The Prefect API is not on the training's critical path: a call that
fails (the server died) is said once in the log and the job goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectNotFound

from cosmos_train.checkpoint_paths import complete_checkpoints
from cosmos_train.config import Config, ConfigError
from cosmos_train.errors import (
    ERROR_FILE,
    EXIT_USER_ERROR,
    NO_SPACE,
    DiskFullError,
    RepeatedFailure,
    RunHalted,
    RunInterrupted,
    RunStuck,
    ServiceUnavailable,
    UserError,
    disk_full_at,
    error_from_record,
    read_error_file,
)
from cosmos_train.metrics import read_metrics
from cosmos_train.wfm.config_schema import WfmConfig
from tasks.curves import REFRESH_S, publish_curves
from tasks.errors import retry_only_crashes

# a VLM job or a world-model job: both say how to launch (launch, parallelism) and name their run kind
AnyJobConfig = Config | WfmConfig
FAILURES_FILE = "failures.jsonl"
FAILURE_LOG_LINES = 40
REFRESH_MAX_S = 600.0


def resolve_nproc(cfg: AnyJobConfig) -> int:
    """Processes per node: launch.nproc_per_node, or every GPU, or the parallelism product on CPU."""
    n = cfg.launch.nproc_per_node
    if n != "auto":
        return int(n)
    import torch  # why here: torch loads in seconds; importing a flow (prefect deploy, --help) must not wait

    if torch.cuda.is_available():
        return torch.cuda.device_count()
    return cfg.parallelism.smallest_world_size()


def torchrun_command(cfg: AnyJobConfig, module: str, args: list[str]) -> list[str]:
    launch = cfg.launch
    cmd = [
        sys.executable,
        "-m",
        "cosmos_train.launch",
        f"--nproc_per_node={resolve_nproc(cfg)}",
        f"--nnodes={launch.nnodes}",
        f"--max_restarts={launch.max_restarts}",
    ]
    if launch.nnodes > 1:
        if not launch.rdzv_endpoint or not launch.rdzv_id:  # the config check says so first; a hand-built Config
            raise ConfigError("launch.rdzv_endpoint / launch.rdzv_id: required when launch.nnodes > 1")
        # c10d: the agents meet at the endpoint (the one on that host serves the store) and agree on ranks
        # among themselves (torchrun ignores --node_rank there); launch.node_rank only says which node's
        # flow run uploads the shared run folder
        # bounded: a node waits rdzv_timeout_s for the endpoint to answer and for the others to join, then says so
        wait = f"join_timeout={launch.rdzv_timeout_s},read_timeout={launch.rdzv_timeout_s}"
        cmd += [
            "--rdzv_backend=c10d",
            f"--rdzv_endpoint={launch.rdzv_endpoint}",
            f"--rdzv_id={launch.rdzv_id}",
            f"--rdzv_conf={wait}",
        ]
    else:
        cmd += ["--standalone"]
    return cmd + ["-m", module, *args]


def launch_env(cfg: AnyJobConfig) -> dict[str, str]:
    """The ranks' socket interface from `launch.socket_ifname`, unless the environment already names one."""
    name = cfg.launch.socket_ifname
    if not name:
        return {}
    return {k: os.environ.get(k, name) for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")}


def _kill_group(proc: subprocess.Popen, grace: float = 20.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # the trainer checkpoints on SIGTERM, then exits
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


class TorchrunFailed(RuntimeError):
    """A crash of the training job (signal, OOM kill, collective timeout, a bug): a retry may help."""


def failure_from_run(run_dir: Path, returncode: int, tail: list[str]) -> Exception:
    """The exception a failed launch stands for, from RUN/error.json when a rank wrote one.

    Each crash is appended to RUN/failures.jsonl; the same exception at the same step as the previous
    crash becomes RepeatedFailure, so a deterministic bug is not retried until the retries run out.
    A full disk is never a crash: when error.json holds no user error (the disk was too full to write it, or
    a peer's crash was recorded first), the ranks' last lines still tell, and it is not retried."""
    record = read_error_file(run_dir)
    user_error = error_from_record(record) if record is not None else None
    if user_error is not None:
        return user_error
    said = [line.removeprefix("error: ") for line in tail if line.startswith("error: ")]
    if said and "no space left on" in said[-1]:
        return DiskFullError(said[-1])
    if record is None and returncode == EXIT_USER_ERROR and said:
        return UserError(said[-1])
    if any(NO_SPACE in line for line in tail):
        return disk_full_at(run_dir)
    # Nonces (temporary folder names, ids) differ between attempts of the same crash: left out.
    message = re.sub(r"[0-9a-f]{8,}", "#", (record or {}).get("message") or "")
    signature = {
        "type": (record or {}).get("type"),
        "message": message,
        "step": (record or {}).get("step"),
        "returncode": returncode,
    }
    failures = run_dir / FAILURES_FILE
    previous = (
        [json.loads(line) for line in failures.read_text().splitlines() if line.strip()] if failures.exists() else []
    )
    try:
        with failures.open("a") as f:
            f.write(json.dumps(signature) + "\n")
    except OSError:
        pass  # the record only spares a repeated retry; the failure itself is what must be raised
    what = (
        f"{record['type']} at step {record['step']} on rank {record['rank']}: {record['message']}"
        if record
        else f"exit code {returncode}"
    )
    detail = f"torchrun failed ({what}); last lines:\n" + "\n".join(tail)
    if record is not None and previous and previous[-1] == signature:
        return RepeatedFailure("the same crash happened twice at the same step, so it is not retried: " + detail)
    return TorchrunFailed(detail)


# After Ctrl-C the ranks finish their step and save; past this they are killed (the paragraph comes within 30 s)
CTRL_C_GRACE_S = 20.0


class CtrlC:
    """SIGINT while the job runs (in the main thread, where Python delivers signals; elsewhere nothing changes):
    the first stops the job's process group as a cancel does (SIGTERM: its ranks agree on a step and save a stop
    checkpoint); a second raises KeyboardInterrupt, and the caller's cleanup kills the group. Who keeps the
    terminal's Ctrl-C from the job: the launcher runs in a session of its own, so only this process hears it."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.at: float | None = None  # monotonic time of the first Ctrl-C
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.at is not None:
            raise KeyboardInterrupt
        self.at = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)

    def overdue(self) -> bool:
        return self.at is not None and time.monotonic() - self.at > CTRL_C_GRACE_S

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)


class ApiCalls:
    """The job's calls to the Prefect API (progress, curves), best effort: the API is not on the training's
    critical path, so a call that fails (the server died or restarts) is said once in the log and the job goes
    on. While it fails, calls are skipped but for one try every RETRY_S (each failed call waits out the client's
    retries), and the next call that works says so. `lost(...)` is the paragraph when it never came back."""

    RETRY_S = 30.0

    def __init__(self, logger: Any) -> None:
        self.logger = logger
        self.failing_since: float | None = None
        self.last_try = 0.0
        self.last_error: BaseException | None = None

    def __call__(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self.failing_since is not None and time.monotonic() - self.last_try < self.RETRY_S:
            return None
        self.last_try = time.monotonic()
        try:
            result = fn(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 (whatever the client raises, the training must not stop for it)
            self.last_error = e
            if self.failing_since is None:
                self.failing_since = time.monotonic()
                self.logger.warning(
                    "the Prefect API did not take the %s (%s: %s); the training goes on without it",
                    what,
                    type(e).__name__,
                    e,
                )
            return None
        if self.failing_since is not None:
            self.logger.info("the Prefect API answers again")
            self.failing_since = None
        return result

    def still_lost(self) -> bool:
        """After the job: whether the API failed during it and does not answer now either."""
        if self.failing_since is None:
            return False
        with get_client(sync_client=True) as client:
            error = client.api_healthcheck()
        if error is None:
            return False
        self.last_error = error
        return True

    def lost(self, run_dir: Path, returncode: int) -> ServiceUnavailable:
        """The run's end when the API was lost: what the training did, and that the flow could not record it."""
        minutes = (time.monotonic() - (self.failing_since or time.monotonic())) / 60
        if returncode == 0:
            final = run_dir / "safetensors" / "final"
            done = f"the training went on and finished{f' (final export {final})' if final.is_dir() else ''}"
        else:
            done = f"the training then stopped with exit code {returncode} (its log: {run_dir / 'logs' / 'train.log'})"
        return ServiceUnavailable(
            f"the Prefect API at {prefect_api_url()} stopped answering during the training and has not come back "
            f"in {minutes:.1f} min (last error: {type(self.last_error).__name__}: {self.last_error}); {done}, but the "
            f"flow could not record it (states, artifacts); run folder {run_dir}"
        )


def prefect_api_url() -> str:
    """Where this process's Prefect client sends its calls (the temporary server's address when none is set)."""
    try:
        with get_client(sync_client=True) as client:
            return str(client.api_url)
    except Exception:  # noqa: BLE001 (only for a message)
        return "(unknown)"


def interrupted(run_dir: Path, total_steps: int | None, seconds: float) -> RunInterrupted:
    """The paragraph of a job stopped by Ctrl-C: where it stopped and what holds it (the CLI adds the command)."""
    rows = [r for r in read_metrics(run_dir) if r.get("kind") == "train"]
    step = rows[-1]["step"] if rows else 0
    total = total_steps or (rows[-1].get("total_steps") if rows else None)
    at = f"step {step}" + (f" of {total}" if total else "")
    done = complete_checkpoints(run_dir / "checkpoints")
    if not done:
        saved = "no checkpoint was saved yet, so a rerun starts from step 0"
    elif int(done[-1].name.removeprefix("step_")) == step:
        saved = f"its ranks saved the checkpoint {done[-1]}"
    else:
        saved = f"the newest complete checkpoint is {done[-1]} (the steps after it are trained again)"
    return RunInterrupted(f"stopped by Ctrl-C at {at} ({seconds:.0f} s after it); {saved}; run folder {run_dir}")


def stream_process(
    cmd: list[str],
    run_dir: Path,
    total_steps: int | None,
    timeout_s: float | None,
    env: dict[str, str] | None = None,
    on_new_steps: Callable[[], None] | None = None,
    refresh_s: float = 30.0,
) -> int:
    """Run `cmd`, its output into the run's log and RUN/logs/train.log, the progress artifact following
    RUN/metrics.jsonl; `on_new_steps()` (the live curves) when steps were logged since its last call: at the
    first logged step, then `refresh_s` seconds later, then at doubling intervals up to REFRESH_MAX_S."""
    logger = get_run_logger()
    logger.info("launch: %s", " ".join(cmd))
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    log_file = run_dir / "logs" / "train.log"
    tail: deque[str] = deque(maxlen=40)
    (run_dir / ERROR_FILE).unlink(missing_ok=True)  # only this launch's error counts
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=True,
        env={**os.environ, **(env or {})},
    )

    def pump() -> None:
        assert proc.stdout is not None
        with log_file.open("a", buffering=1) as f:  # line by line: a killed CLI loses none of its lines
            for line in proc.stdout:
                if line.strip():  # the log file keeps blank lines; the UI's log view would show empty rows
                    tail.append(line.rstrip())
                    logger.info(line.rstrip())
                try:
                    f.write(line)
                except OSError:
                    pass  # a full disk: the line is in the run's log and `tail`; keep draining the pipe

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    api = ApiCalls(logger)
    progress_id = api(
        "progress artifact",
        create_progress_artifact,
        progress=0.0,
        key="training-progress",
        description=f"steps done in {run_dir}",
    )
    # prefect's async_dispatch types results as value | coroutine; sync callers get the value
    assert progress_id is None or isinstance(progress_id, UUID)
    deadline = time.monotonic() + timeout_s if timeout_s else None
    refreshed_at, next_refresh = None, 0.0
    with CtrlC(proc) as ctrl_c:
        try:
            while proc.poll() is None:
                time.sleep(0.5 if ctrl_c.at else 2.0)
                if ctrl_c.overdue():
                    break  # the ranks had their grace: the cleanup below kills them
                if ctrl_c.at:
                    continue  # stopping: no more progress or curves
                rows = [r for r in read_metrics(run_dir) if r.get("kind") == "train"]
                total = total_steps or (rows[-1].get("total_steps") if rows else None)
                if progress_id and rows and total:
                    progress = min(100.0, 100.0 * rows[-1]["step"] / total)
                    api("progress", update_progress_artifact, progress_id, progress=progress)
                if on_new_steps and rows and rows[-1]["step"] != refreshed_at and time.monotonic() >= next_refresh:
                    # each refresh is a new artifact version holding a PNG: at the first step, 30 s later, then at
                    # doubling intervals up to 10 min, so a day-long run stores ~150 versions, not thousands
                    refreshed_at, next_refresh = rows[-1]["step"], time.monotonic() + refresh_s
                    refresh_s = min(2 * refresh_s, REFRESH_MAX_S)
                    api("live curves", on_new_steps)
                if deadline and time.monotonic() > deadline:
                    raise TimeoutError(f"torchrun exceeded {timeout_s:.0f} s; stopped (checkpoint on SIGTERM)")
            reader.join(timeout=10)
        finally:
            _kill_group(proc, grace=5.0 if ctrl_c.overdue() else 20.0)
    if ctrl_c.at is not None and proc.returncode != 0:
        raise interrupted(run_dir, total_steps, time.monotonic() - ctrl_c.at)
    if api.still_lost():  # the flow cannot go on (record the end, retry, report): say where the run is instead
        raise api.lost(run_dir, proc.returncode)
    if progress_id and proc.returncode == 0:
        api("progress", update_progress_artifact, progress_id, progress=100.0)
    if proc.returncode != 0:
        raise failure_from_run(run_dir, proc.returncode, list(tail))
    return proc.returncode


def gpus_used(cfg: AnyJobConfig) -> int:
    """GPUs this node's run occupies: its processes when CUDA is present, else none."""
    import torch  # why here: as in resolve_nproc

    return resolve_nproc(cfg) if torch.cuda.is_available() else 0


@contextlib.contextmanager
def gpu_slots(cfg: AnyJobConfig) -> Iterator[int]:
    """Hold one slot per GPU of the global concurrency limit `launch.gpu_concurrency_limit` while training, so
    two runs on one pool never share GPUs. Off on a CPU-only machine and when the key is unset; a limit
    that does not exist is said in the log (Prefect would skip it silently) and not waited for."""
    name, n = cfg.launch.gpu_concurrency_limit, gpus_used(cfg)
    if not name or n == 0:
        yield 0
        return
    logger = get_run_logger()
    with get_client(sync_client=True) as client:
        try:
            limit = client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            logger.warning(
                "no global concurrency limit %r: this run does not wait for GPUs other runs hold "
                "(create it once per pool: prefect gcl create %s --limit <GPUs>)",
                name,
                name,
            )
            yield 0
            return
    if n > limit.limit:
        raise ConfigError(
            f"launch.gpu_concurrency_limit: this run needs {n} GPU slots but the limit {name!r} has "
            f"{limit.limit}; raise it (prefect gcl update {name} --limit {n}) or use fewer GPUs"
        )
    logger.info("waiting for %d of the %d slots of the global concurrency limit %r", n, limit.limit, name)
    with concurrency(name, occupy=n, strict=True):
        yield n


def _failure_markdown(run_dir: Path, error: BaseException) -> str:
    log = run_dir / "logs" / "train.log"
    lines = log.read_text(errors="replace").splitlines()[-FAILURE_LOG_LINES:] if log.is_file() else []
    return (
        f"# Training failed\n\n- run folder: `{run_dir}`\n- error: {type(error).__name__}: "
        f"{str(error).splitlines()[0][:1000] if str(error) else ''}\n- full log: `{log}`\n\n"
        f"Last {len(lines)} log lines:\n\n```\n" + "\n".join(lines) + "\n```\n"
    )


@task(name="torchrun", cache_policy=NO_CACHE, retry_condition_fn=retry_only_crashes)
def run_torchrun(
    cfg: AnyJobConfig,
    module: str,
    run_dir: str,
    args: list[str],
    total_steps: int | None = None,
    timeout_s: float | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Launch `module` under torchrun for the run folder; a retry resumes from its newest checkpoint.
    env: added to the ranks' environment (e.g. where the run's reward service listens). A failed attempt
    leaves the `training-failure` artifact: the run folder, the error and the log's last lines (not a run that
    stop_when_stuck ended, `RunStuck`: its flow's `run-health` artifact says why)."""
    rd = Path(run_dir)
    with gpu_slots(cfg):
        try:
            stream_process(
                torchrun_command(cfg, module, args),
                rd,
                total_steps,
                timeout_s,
                env={**launch_env(cfg), **(env or {})},
                on_new_steps=lambda: publish_curves(rd, cfg.policy_type),
                refresh_s=REFRESH_S,
            )
        except BaseException as e:
            if isinstance(e, RunHalted):  # stopped saved: the CLI adds the command that continues this run folder
                e.run_dir = str(rd)
            # a run stop_when_stuck ended is no failure to debug from its log: the flow publishes its verdicts
            with contextlib.suppress(Exception):  # a dead API must not hide the failure itself
                if not isinstance(e, RunStuck):
                    create_markdown_artifact(
                        _failure_markdown(rd, e), key="training-failure", description=f"training failed in {rd.name}"
                    )
            raise
    return run_dir
