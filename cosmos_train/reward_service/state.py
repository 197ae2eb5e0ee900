"""Queued requests and results on disk (`state_dir`), so a restarted service scores what was queued,
answers pulls of what was scored, and maps a retried request id to its first uuid: nothing is lost
and nothing is scored twice across a restart.

    state_dir/pending/<uuid>.json + <uuid>.body   a request accepted and not yet scored
    state_dir/done/<uuid>.json                    its result (written before the pending files go)
Every file is written to a temporary name and renamed, so a crash leaves whole files only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cosmos_train.atomic import write_atomic


class DiskState:
    def __init__(self, root: str | Path):
        self.pending = Path(root) / "pending"
        self.done = Path(root) / "done"
        self.pending.mkdir(parents=True, exist_ok=True)
        self.done.mkdir(parents=True, exist_ok=True)

    def write_pending(self, uuid: str, record: dict[str, Any], body: bytes) -> None:
        write_atomic(self.pending / f"{uuid}.body", body)
        write_atomic(self.pending / f"{uuid}.json", json.dumps(record).encode())  # last: marks it complete

    def write_done(self, uuid: str, record: dict[str, Any]) -> None:
        write_atomic(self.done / f"{uuid}.json", json.dumps(record).encode())
        self.remove_pending(uuid)

    def remove_pending(self, uuid: str) -> None:
        for suffix in (".json", ".body"):
            (self.pending / f"{uuid}{suffix}").unlink(missing_ok=True)

    def remove_done(self, uuid: str) -> None:
        (self.done / f"{uuid}.json").unlink(missing_ok=True)

    def load_pending(self) -> list[tuple[dict[str, Any], bytes]]:
        """(record, body) of every request still to score, oldest first; one already done is dropped."""
        out = []
        for meta in self.pending.glob("*.json"):
            uuid = meta.stem
            if (self.done / f"{uuid}.json").exists():
                self.remove_pending(uuid)
                continue
            try:
                out.append((json.loads(meta.read_text()), (self.pending / f"{uuid}.body").read_bytes()))
            except (OSError, ValueError):
                self.remove_pending(uuid)  # half-written by a crash before the record landed
        return sorted(out, key=lambda rb: rb[0]["created"])

    def load_done(self) -> list[dict[str, Any]]:
        out = []
        for path in self.done.glob("*.json"):
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                path.unlink(missing_ok=True)
        return out
