"""cosmos_train/atomic.py: the old content or the new one, never a part, with the usual file mode."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from cosmos_train.atomic import write_atomic, write_json_atomic


def test_write_replaces_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "a.json"
    write_json_atomic(path, {"é": 1}, fsync=True)
    write_atomic(path, b"second")
    assert path.read_bytes() == b"second" and os.listdir(path.parent) == ["a.json"]
    write_json_atomic(path, {"b": 2, "a": 1}, sort_keys=True)
    assert json.loads(path.read_text()) == {"a": 1, "b": 2} and path.read_text().index('"a"') < path.read_text().index(
        '"b"'
    )


def test_mode_follows_the_umask_not_mkstemp(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        path = write_atomic(tmp_path / "f.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    path = write_atomic(tmp_path / "f.json", "old")

    class Unserialisable:
        def __str__(self) -> str:
            raise RuntimeError("cannot")

    with pytest.raises(RuntimeError):
        write_json_atomic(path, {"x": Unserialisable()})
    with pytest.raises(TypeError):
        write_atomic(path, 3)  # type: ignore[arg-type]
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["f.json"]
