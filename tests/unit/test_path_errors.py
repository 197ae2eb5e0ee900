"""An OSError on a path the user must fix (a file where a folder is needed, no permission, a read-only disk ...)
is a user error: one paragraph naming the path and what to do, never retried; any other OSError stays a crash."""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from cosmos_train.errors import (
    ConfigError,
    DiskFullError,
    PathError,
    error_from_record,
    not_a_folder,
    path_error,
    path_errors,
    read_error_file,
    report_rank_failure,
    user_error_of,
)


def _raised(fn) -> OSError:
    with pytest.raises(OSError) as e:
        fn()
    return e.value


def test_a_file_in_the_way_names_the_file(tmp_path: Path) -> None:
    blocker = tmp_path / "somefile.txt"
    blocker.write_text("x")
    below = _raised(lambda: (blocker / "run" / "2024").mkdir(parents=True))  # NotADirectoryError
    err = path_error(below, "train.output_dir")
    assert isinstance(err, PathError)
    assert str(err).startswith(f"train.output_dir: {blocker}/run")
    assert f"is below {blocker}, which is a file" in str(err) and "move" in str(err)
    # mkdir(exist_ok=True) of the file itself: FileExistsError on a file, the same paragraph
    on_it = _raised(lambda: blocker.mkdir(parents=True, exist_ok=True))
    assert isinstance(on_it, FileExistsError)
    assert f"{blocker} is a file, where a folder is needed" in str(path_error(on_it))
    # the check before anything is written says it with the key
    said = not_a_folder("train.output_dir", blocker / "run")
    assert said is not None and "train.output_dir = " in said and f"is below {blocker}" in said
    assert not_a_folder("train.output_dir", tmp_path / "new" / "run") is None


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.EACCES, "give this user access"),
        (errno.EPERM, "give this user access"),
        (errno.EROFS, "writable disk"),
        (errno.ENAMETOOLONG, "shorter path"),
        (errno.ELOOP, "symbolic link"),
        (errno.EISDIR, "a file is needed there"),
    ],
)
def test_each_reason_says_what_to_do(code: int, words: str) -> None:
    err = path_error(OSError(code, os.strerror(code), "/runs/x/metrics.jsonl"), "eval results")
    assert isinstance(err, PathError)
    assert str(err).startswith("eval results: /runs/x/metrics.jsonl: ") and words in str(err)


def test_what_stays_a_crash(tmp_path: Path) -> None:
    assert path_error(OSError(errno.EACCES, "denied")) is None  # no path: nothing to name, a library's own
    assert path_error(FileNotFoundError(errno.ENOENT, "gone", str(tmp_path / "result.json"))) is None
    assert path_error(FileExistsError(errno.EEXIST, "exists", str(tmp_path))) is None  # a folder: a race
    assert path_error(OSError(errno.EIO, "I/O error", "/x")) is None
    assert path_error(RuntimeError("boom")) is None
    assert user_error_of(RuntimeError("boom")) is None
    full = user_error_of(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/runs/x"))
    assert isinstance(full, DiskFullError) and "/runs/x" in str(full)
    cfg = ConfigError(["a: b"])
    assert user_error_of(cfg) is cfg


def test_path_errors_block_raises_the_paragraph_from_the_os_error(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(PathError, match=r"^--run-dir: .*f is a file") as e, path_errors("--run-dir"):
        (tmp_path / "f").mkdir(parents=True, exist_ok=True)
    assert isinstance(e.value.__cause__, FileExistsError)
    with pytest.raises(RuntimeError), path_errors("x"):
        raise RuntimeError("not an OSError")


def test_flow_tasks_do_not_retry_a_path_error() -> None:
    from tasks.errors import retry_only_crashes

    def state(error: BaseException) -> SimpleNamespace:
        return SimpleNamespace(result=lambda raise_on_failure=False: error)

    assert not retry_only_crashes(None, None, state(NotADirectoryError(errno.ENOTDIR, "Not a directory", "/f/x")))
    assert not retry_only_crashes(None, None, state(PermissionError(errno.EACCES, "Permission denied", "/x")))
    assert retry_only_crashes(None, None, state(ConnectionResetError(errno.ECONNRESET, "reset")))
    assert retry_only_crashes(None, None, state(FileNotFoundError(errno.ENOENT, "gone", "/run/result.json")))


def test_a_rank_reports_a_path_error_as_its_kind(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    exc = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "metrics.jsonl"))
    assert report_rank_failure(exc, tmp_path, step=3, rank=0) == 2
    assert f"error: {tmp_path / 'metrics.jsonl'}: Permission denied" in capsys.readouterr().err
    record = read_error_file(tmp_path)
    assert record is not None and record["kind"] == "path" and record["traceback"] is None
    assert isinstance(error_from_record(record), PathError)
    (tmp_path / "error.json").unlink()
    assert report_rank_failure(OSError(errno.EIO, "I/O error"), tmp_path) is None  # a crash: re-raised


def test_the_console_hides_a_path_errors_traceback() -> None:
    from flows.terminal import _HideUserErrorTracebacks

    shown: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = shown.append  # type: ignore[method-assign]
    hide = _HideUserErrorTracebacks(handler)

    def record(exc: BaseException) -> logging.LogRecord:
        return logging.LogRecord("prefect", logging.ERROR, __file__, 1, "failed", None, (type(exc), exc, None))

    assert not hide.filter(record(NotADirectoryError(errno.ENOTDIR, "Not a directory", "/f/x")))
    assert shown and shown[0].exc_info is None  # shown once, without its traceback
    assert hide.filter(record(RuntimeError("a bug")))  # a crash keeps its traceback
