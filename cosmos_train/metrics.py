"""Training metrics to the console, `metrics.jsonl` in the run folder, and wandb.

wandb runs offline (files under the run folder, no account) unless WANDB_API_KEY is set or
WANDB_MODE says otherwise. Only rank 0 logs.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from cosmos_train.config import Config


class MetricsLogger:
    def __init__(self, run_dir: Path, cfg: Config, enabled: bool = True):
        self.enabled = enabled
        self.path = run_dir / "metrics.jsonl"
        self.interval = max(1, cfg.logging.log_interval)
        self._wandb = None
        if enabled and "wandb" in cfg.logging.logger:
            import wandb

            os.environ.setdefault("WANDB_MODE", "online" if os.environ.get("WANDB_API_KEY") else "offline")
            self._wandb = wandb.init(
                project=cfg.logging.project_name, name=cfg.logging.experiment_name or run_dir.name,
                dir=str(run_dir), config=cfg.model_dump(mode="json"), id=run_dir.name, resume="allow",
            )
        self.console = enabled and "console" in cfg.logging.logger

    def log(self, step: int, values: dict[str, Any], kind: str = "train") -> None:
        if not self.enabled:
            return
        row = {"step": step, "kind": kind, "time": round(time.time(), 3), **values}
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
        if self._wandb is not None:
            self._wandb.log({f"{kind}/{k}": v for k, v in values.items() if isinstance(v, int | float)}, step=step)
        if self.console and (step % self.interval == 0 or kind != "train"):
            shown = " ".join(f"{k}={_fmt(v)}" for k, v in values.items())
            print(f"[{kind}] step {step} {shown}", flush=True)

    def drop_after(self, step: int) -> None:
        """Remove rows past `step` (a resumed run's earlier attempt logged them; they are logged again)."""
        if not self.enabled or not self.path.exists():
            return
        kept = [r for r in read_metrics(self.path.parent) if int(r.get("step", 0)) <= step]
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
        tmp.replace(self.path)

    def close(self) -> None:
        if self._wandb is not None:
            self._wandb.finish()


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
