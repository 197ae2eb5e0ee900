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
from uuid import UUID

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.concurrency.sync import concurrency
from prefect.exceptions import ObjectNotFound

from cosmos_train.config import Config, ConfigError
from cosmos_train.errors import (
    ERROR_FILE,
    EXIT_USER_ERROR,
    NO_SPACE,
    DiskFullError,
    RepeatedFailure,
    UserError,
    disk_full_at,
    error_from_record,
    read_error_file,
)
from cosmos_train.metrics import read_metrics
from cosmos_train.wfm.config import WfmConfig
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
        cmd += ["--rdzv_backend=c10d", f"--rdzv_endpoint={launch.rdzv_endpoint}", f"--rdzv_id={launch.rdzv_id}"]
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
    crash becomes RepeatedFailure, so a deterministic bug is not retried until the retries run out."""
    record = read_error_file(run_dir)
    if record is not None:
        user_error = error_from_record(record)
        if user_error is not None:
            return user_error
    else:  # a rank could not write error.json (a full disk does that): its output still tells
        said = [line.removeprefix("error: ") for line in tail if line.startswith("error: ")]
        if returncode == EXIT_USER_ERROR and said:
            return (DiskFullError if "no space left on" in said[-1] else UserError)(said[-1])
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
        with log_file.open("a") as f:
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
    progress_id = create_progress_artifact(
        progress=0.0, key="training-progress", description=f"steps done in {run_dir}"
    )
    assert isinstance(
        progress_id, UUID
    )  # prefect's async_dispatch types results as value | coroutine; sync callers get the value
    deadline = time.monotonic() + timeout_s if timeout_s else None
    refreshed_at, next_refresh = None, 0.0
    try:
        while proc.poll() is None:
            time.sleep(2.0)
            rows = [r for r in read_metrics(run_dir) if r.get("kind") == "train"]
            total = total_steps or (rows[-1].get("total_steps") if rows else None)
            if progress_id and rows and total:
                update_progress_artifact(progress_id, progress=min(100.0, 100.0 * rows[-1]["step"] / total))
            if on_new_steps and rows and rows[-1]["step"] != refreshed_at and time.monotonic() >= next_refresh:
                # each refresh is a new artifact version holding a PNG: at the first step, 30 s later, then at doubling
                # intervals up to 10 min, so a day-long run stores ~150 versions, not thousands
                refreshed_at, next_refresh = rows[-1]["step"], time.monotonic() + refresh_s
                refresh_s = min(2 * refresh_s, REFRESH_MAX_S)
                try:
                    on_new_steps()
                except Exception as e:  # noqa: BLE001 (a plot that fails must not stop training)
                    logger.warning("live curves not refreshed: %s", e)
            if deadline and time.monotonic() > deadline:
                raise TimeoutError(f"torchrun exceeded {timeout_s:.0f} s; stopped (checkpoint on SIGTERM)")
        reader.join(timeout=10)
    finally:
        _kill_group(proc)
    if progress_id and proc.returncode == 0:
        update_progress_artifact(progress_id, progress=100.0)
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
    leaves the `training-failure` artifact: the run folder, the error and the log's last lines."""
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
            create_markdown_artifact(
                _failure_markdown(rd, e), key="training-failure", description=f"training failed in {rd.name}"
            )
            raise
    return run_dir
