"""Queued requests and results on disk (`state_dir`), so a restarted service scores what was queued,
answers pulls of what was scored, and maps a retried request id to its first uuid: nothing is lost
and nothing is scored twice across a restart.

    state_dir/ids/<sha256 of the id>.json         a client request id claimed: its uuid, body hash, reward set
    state_dir/pending/<uuid>.json + <uuid>.body   a request accepted and not yet scored
    state_dir/done/<uuid>.json                    its result (written before the pending files go)
Every file is written to a temporary name and renamed (an id claim: hard-linked, which fails when the
name exists, so two processes sharing the folder cannot both claim one id), so a crash leaves whole
files only.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from cosmos_train.atomic import write_atomic


class DiskState:
    def __init__(self, root: str | Path):
        self.pending = Path(root) / "pending"
        self.done = Path(root) / "done"
        self.ids = Path(root) / "ids"
        for folder in (self.pending, self.done, self.ids):
            folder.mkdir(parents=True, exist_ok=True)

    def _id_path(self, request_id: str) -> Path:
        return self.ids / f"{hashlib.sha256(request_id.encode()).hexdigest()}.json"

    def claim_id(self, request_id: str, record: dict[str, Any]) -> dict[str, Any] | None:
        """Claim `request_id` with `record`, atomically: None when claimed, or the record of whoever
        claimed it first."""
        path = self._id_path(request_id)
        fd, tmp = tempfile.mkstemp(dir=self.ids, prefix=".claim-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(json.dumps({**record, "request_id": request_id}).encode())
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)  # fails if the name exists: the claim is exclusive
                return None
            except FileExistsError:
                pass
        finally:
            os.unlink(tmp)
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return {}  # claimed, its record unreadable: still not ours

    def update_id(self, request_id: str, record: dict[str, Any]) -> None:
        write_atomic(self._id_path(request_id), json.dumps({**record, "request_id": request_id}).encode())

    def release_id(self, request_id: str) -> None:
        self._id_path(request_id).unlink(missing_ok=True)

    def load_ids(self) -> list[dict[str, Any]]:
        return _load_records(self.ids)

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
        return _load_records(self.done)


def _load_records(folder: Path) -> list[dict[str, Any]]:
    """Every JSON record in `folder`; an unreadable one (a crash mid-write of an older version) is removed."""
    out = []
    for path in folder.glob("*.json"):
        try:
            out.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
    return out
