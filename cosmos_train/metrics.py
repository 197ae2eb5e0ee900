"""Training metrics to the console, `metrics.jsonl` in the run folder, and wandb.

Console lines go through `cosmos_train.logs.write_console`: a console whose reader died (the launching CLI was
killed) never stops the run, the lines go on in RUN/logs/train.log.

wandb runs offline (files under the run folder, no account) unless WANDB_API_KEY is set or
WANDB_MODE says otherwise. Only rank 0 logs.

metrics.jsonl is appended to while other processes read it (the launching task's progress
reader), and a kill or a full disk can cut its last line short. A reader therefore skips a torn
last line, and a logger that resumes a run cuts that torn tail off before appending (otherwise
its first row would be glued onto the fragment and lost too).
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Protocol

from cosmos_train.atomic import write_atomic
from cosmos_train.config import LoggingConfig
from cosmos_train.errors import from_os_error
from cosmos_train.logs import write_console

log = logging.getLogger(__name__)
METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "completions.jsonl"  # GRPO's sampled completions with their rewards
# (file, line number) of corrupt lines already reported: the progress reader polls every few seconds.
_REPORTED: set[tuple[str, int]] = set()

# A difference of two scores that is exactly a bar in decimal (0.97 - 0.87, 0.285 - 0.085) lands a float rounding
# below it: every comparison of a score difference with a bar (the pipeline's gate, run health's late drop, the
# learning benchmark's gain) allows this much, so "exactly the bar" counts the same everywhere.
SCORE_EPS = 1e-9


def reaches(value: float, bar: float) -> bool:
    """`value >= bar`, where a value a float rounding below the bar reaches it."""
    return value + SCORE_EPS >= bar


class LoggedJob(Protocol):
    """What MetricsLogger reads of a job config (the VLM job's Config, the world-model job's WfmConfig)."""

    @property
    def logging(self) -> LoggingConfig: ...

    def model_dump(self, *, mode: str) -> dict[str, Any]: ...


class MetricsLogger:
    def __init__(self, run_dir: Path, cfg: LoggedJob, enabled: bool = True):
        self.enabled = enabled
        self.path = run_dir / METRICS_FILE
        if enabled:
            drop_torn_tail(self.path)
        self.interval = max(1, cfg.logging.log_interval)
        self._wandb = None
        if enabled and "wandb" in cfg.logging.logger:
            import wandb  # why: wandb is heavy and only wanted when logging to it

            os.environ.setdefault("WANDB_MODE", "online" if os.environ.get("WANDB_API_KEY") else "offline")
            self._wandb = wandb.init(
                project=cfg.logging.project_name,
                name=cfg.logging.experiment_name or run_dir.name,
                dir=str(run_dir),
                config=cfg.model_dump(mode="json"),
                id=run_dir.name,
                resume="allow",
                group=cfg.logging.group_name,
            )
        self.console = enabled and "console" in cfg.logging.logger

    def log(self, step: int, values: dict[str, Any], kind: str = "train") -> None:
        if not self.enabled:
            return
        row = {"step": step, "kind": kind, "time": round(time.time(), 3), **values}
        try:
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")
                f.flush()
        except OSError as e:
            disk_full = from_os_error(e, self.path)
            if disk_full is None:
                raise
            raise disk_full from e
        if self._wandb is not None:
            self._wandb.log({f"{kind}/{k}": v for k, v in values.items() if isinstance(v, int | float)}, step=step)
        if self.console and (step % self.interval == 0 or kind != "train"):
            shown = " ".join(f"{k}={_fmt(v)}" for k, v in values.items())
            write_console("stdout", f"[{kind}] step {step} {shown}\n")

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        """Sampled completions with their rewards (GRPO): appended to SAMPLES_FILE, a wandb table, and the
        first one on the console."""
        if not self.enabled or not rows:
            return
        path = self.path.parent / SAMPLES_FILE
        with path.open("a") as f:
            f.writelines(json.dumps({"step": step, **r}) + "\n" for r in rows)
        if self._wandb is not None:
            import wandb  # why: wandb is heavy and only wanted when logging to it

            columns = sorted({k for r in rows for k in r if not isinstance(r[k], dict)})
            # [*columns]: a new list, which mypy types as wandb.Table's (invariant) list[str | int]
            self._wandb.log(
                {"samples": wandb.Table(columns=[*columns], data=[[r.get(c) for c in columns] for r in rows])},
                step=step,
            )
        if self.console:
            first = rows[0]
            reward = _fmt(first.get("reward"))
            write_console("stdout", f"[sample] step {step} reward={reward} {first.get('completion')!r}\n")

    def drop_after(self, step: int) -> None:
        """Remove rows past `step` (a resumed run's earlier attempt logged them; they are logged again)."""
        if not self.enabled:
            return
        for path in (self.path, self.path.parent / SAMPLES_FILE):
            if not path.exists():
                continue
            rows = (
                [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
                if path != self.path
                else read_metrics(self.path.parent)
            )
            kept = [r for r in rows if int(r.get("step", 0)) <= step]
            write_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))

    def close(self) -> None:
        if self._wandb is not None:
            self._wandb.finish()


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def drop_torn_tail(path: Path) -> None:
    """Cut a last line without its newline (a write cut short by a kill or a full disk) off `path`."""
    try:
        with path.open("rb+") as f:
            data = f.read()
            if not data or data.endswith(b"\n"):
                return
            keep = data.rfind(b"\n") + 1
            f.truncate(keep)
    except FileNotFoundError:
        return
    log.warning("%s: removed a torn last line (%d bytes) left by an interrupted write", path, len(data) - keep)


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of RUN/metrics.jsonl, in order.

    The last line may be torn (being written right now, or cut by a kill / full disk): it is
    skipped. A bad line before the last one is corruption; it is skipped with one warning naming
    file and line rather than raised, because every reader is a display (the training progress
    poller, the run summary): raising there would stop a healthy training run, or fail a finished
    one, over a metrics row. The training state itself never comes from this file.
    """
    path = Path(run_dir) / METRICS_FILE
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    # split("\n"), not splitlines(): json.dumps leaves U+2028 / U+0085 in strings, which splitlines breaks on.
    lines = text.split("\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if i == last:
                continue  # torn last line: complete on the next read, or cut off when the run resumes
            if (str(path), i + 1) not in _REPORTED:
                _REPORTED.add((str(path), i + 1))
                log.warning("%s:%d: corrupt metrics row skipped (%s)", path, i + 1, e)
    return rows
