"""`<sweep folder>/sweep.json`: each trial's key, state, run folder, result and error, as the sweep goes.

    record = SweepRecord(plan.folder)
    record.finished(trial)          # the earlier outcome of a trial with this key whose run folder exists, or None
    record.start(trial); record.finish(trial.name, "done", result)   # or "failed" / "stopped" with an error

Like the post-train pipeline's record (cosmos_train/pipeline.py), keyed by the trial's name and checked
against its key: a rerun of the same sweep skips each trial that finished (done, or stopped early with its
checkpoint kept) and reruns a failed one in its own run folder (training resumes from its newest
checkpoint). Trials run side by side in threads, so every change is made under a lock and the file is
written whole and atomically.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Literal

from cosmos_train.atomic import write_json_atomic
from cosmos_train.sweep.plan import Trial

RECORD_FILE = "sweep.json"
TrialState = Literal["running", "done", "stopped", "failed"]
FINISHED: tuple[TrialState, ...] = ("done", "stopped")


class SweepRecord:
    """{"trials": {name: {key, settings, state, run_dir, result, error, started, finished, seconds}}}."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / RECORD_FILE
        self.lock = threading.Lock()
        self.trials: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            try:
                self.trials = dict(json.loads(self.path.read_text()).get("trials", {}))
            except (json.JSONDecodeError, AttributeError, TypeError):
                self.trials = {}  # an unreadable record only costs a rerun of every trial

    def finished(self, trial: Trial) -> dict[str, Any] | None:
        """The record of this trial when it finished with the same key and its run folder still exists."""
        rec = self.trials.get(trial.name)
        if rec and rec.get("state") in FINISHED and rec.get("key") == trial.key and Path(rec["run_dir"]).is_dir():
            return rec
        return None

    def start(self, trial: Trial) -> None:
        with self.lock:
            self.trials[trial.name] = {
                "key": trial.key,
                "settings": trial.settings,
                "state": "running",
                "run_dir": str(trial.run_dir),
                "started": time.time(),
            }
            self._save()

    def finish(
        self, name: str, state: TrialState, result: dict[str, Any] | None = None, error: str | None = None
    ) -> None:
        with self.lock:
            rec = self.trials[name]
            rec.update(state=state, result=result or {}, finished=time.time())
            rec["seconds"] = round(rec["finished"] - rec["started"], 1)
            if error:
                rec["error"] = error[-2000:]
            else:
                rec.pop("error", None)
            self._save()

    def _save(self) -> None:
        write_json_atomic(self.path, {"trials": self.trials}, sort_keys=True)
