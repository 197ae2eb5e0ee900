"""Run a torchrun job as a child process group, streaming its output into the Prefect log.

`log_prints` cannot capture a child process, so every line is read and handed to the run logger.
The child gets its own session: on cancel, failure or timeout the whole group (torchrun and its
ranks) is sent SIGTERM, then SIGKILL after a grace period, so nothing is left orphaned. A progress
artifact follows RUN/metrics.jsonl while the job runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from prefect import get_run_logger, task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE

from cosmos_train.config import Config
from cosmos_train.metrics import read_metrics


def resolve_nproc(cfg: Config) -> int:
    """Processes per node: launch.nproc_per_node, or every GPU, or the parallelism product on CPU."""
    n = cfg.launch.nproc_per_node
    if n != "auto":
        return int(n)
    import torch

    if torch.cuda.is_available():
        return torch.cuda.device_count()
    return cfg.policy.parallelism.smallest_world_size()


def torchrun_command(cfg: Config, module: str, args: list[str]) -> list[str]:
    launch = cfg.launch
    cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={resolve_nproc(cfg)}",
           f"--nnodes={launch.nnodes}", f"--max_restarts={launch.max_restarts}"]
    if launch.nnodes > 1:
        if not launch.rdzv_endpoint:
            raise ValueError("launch.rdzv_endpoint: required when launch.nnodes > 1 (host:port of node 0)")
        cmd += ["--rdzv_backend=c10d", f"--rdzv_endpoint={launch.rdzv_endpoint}", f"--node_rank={launch.node_rank}"]
    else:
        cmd += ["--standalone"]
    return cmd + ["-m", module, *args]


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
    pass


def stream_process(cmd: list[str], run_dir: Path, total_steps: int | None, timeout_s: float | None,
                   env: dict[str, str] | None = None) -> int:
    logger = get_run_logger()
    logger.info("launch: %s", " ".join(cmd))
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    log_file = run_dir / "logs" / "train.log"
    tail: deque[str] = deque(maxlen=40)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            start_new_session=True, env={**os.environ, **(env or {})})

    def pump() -> None:
        assert proc.stdout is not None
        with log_file.open("a") as f:
            for line in proc.stdout:
                f.write(line)
                tail.append(line.rstrip())
                logger.info(line.rstrip())

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    progress_id = create_progress_artifact(progress=0.0, key="training-progress",
                                           description=f"steps done in {run_dir}")
    deadline = time.monotonic() + timeout_s if timeout_s else None
    try:
        while proc.poll() is None:
            time.sleep(2.0)
            rows = [r for r in read_metrics(run_dir) if r.get("kind") == "train"]
            total = total_steps or (rows[-1].get("total_steps") if rows else None)
            if progress_id and rows and total:
                update_progress_artifact(progress_id, progress=min(100.0, 100.0 * rows[-1]["step"] / total))
            if deadline and time.monotonic() > deadline:
                raise TimeoutError(f"torchrun exceeded {timeout_s:.0f} s; stopped (checkpoint on SIGTERM)")
        reader.join(timeout=10)
    finally:
        _kill_group(proc)
    if progress_id and proc.returncode == 0:
        update_progress_artifact(progress_id, progress=100.0)
    if proc.returncode != 0:
        raise TorchrunFailed(f"torchrun exited with {proc.returncode}; last lines:\n" + "\n".join(tail))
    return proc.returncode


@task(name="torchrun", cache_policy=NO_CACHE)
def run_torchrun(cfg: Config, module: str, run_dir: str, args: list[str], total_steps: int | None = None,
                 timeout_s: float | None = None) -> str:
    """Launch `module` under torchrun for the run folder; a retry resumes from its newest checkpoint."""
    rd = Path(run_dir)
    stream_process(torchrun_command(cfg, module, args), rd, total_steps, timeout_s)
    return run_dir
