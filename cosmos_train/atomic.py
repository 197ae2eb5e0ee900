"""Write a file so that a reader sees the old content or the new one, never a part: one helper for all.

    from cosmos_train.atomic import write_atomic, write_json_atomic
    write_atomic(RUN / "config.toml", text)
    write_json_atomic(ckpt / "COMPLETE", {"step": 4}, fsync=True)

The bytes go to a uniquely named sibling (so two writers never share a temporary file), then
os.replace puts it in place; a failed write removes the sibling and re-raises. The temporary file
is created with the usual 0o666 & ~umask mode (mkstemp's 0o600 would hide checkpoints and reports
from other users of a shared run folder).
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any


def write_atomic(path: str | os.PathLike, data: str | bytes, *, fsync: bool = False) -> Path:
    """Write `data` (text as UTF-8) to `path` atomically, making its folder; `fsync` before the rename
    where the content must survive a power loss (checkpoint markers)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(
    path: str | os.PathLike, obj: Any, *, fsync: bool = False, indent: int | None = 2, sort_keys: bool = False
) -> Path:
    """`obj` as JSON (non-ASCII kept, a final newline) written with write_atomic."""
    text = json.dumps(obj, indent=indent, sort_keys=sort_keys, ensure_ascii=False, default=str) + "\n"
    return write_atomic(path, text, fsync=fsync)
