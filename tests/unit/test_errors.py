"""The one error path: typed user errors, RUN/error.json across processes, which failures are retried,
train.resume resolution, and a retried run's metrics."""

from __future__ import annotations

import errno
import json
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest

from cosmos_train.errors import (
    ConfigError,
    DiskFullError,
    MediaError,
    RepeatedFailure,
    TrainingDiverged,
    UserError,
    error_from_record,
    from_os_error,
    read_error_file,
    report_rank_failure,
    write_error_file,
)


def test_every_kind_is_a_value_error_and_pickles() -> None:
    for err in (
        ConfigError(["a.b: bad"], "job.toml"),
        MediaError("/x.mp4", "no video stream"),
        TrainingDiverged("step 3: nan"),
    ):
        assert isinstance(err, UserError) and isinstance(err, ValueError)
        back = pickle.loads(pickle.dumps(err))  # Prefect persists task results and exceptions
        assert type(back) is type(err) and str(back) == str(err)
    assert ConfigError(["a.b: bad"], "job.toml").problems == ["a.b: bad"]


def test_disk_full_names_the_path() -> None:
    err = from_os_error(OSError(errno.ENOSPC, "No space left on device", "/runs/x/step_4.tmp"))
    assert isinstance(err, DiskFullError) and "no space left on /runs/x/step_4.tmp" in str(err)
    assert from_os_error(OSError(errno.EACCES, "denied", "/x")) is None


def test_error_file_round_trip_keeps_the_kind_and_the_first_rank(tmp_path: Path) -> None:
    assert write_error_file(tmp_path, MediaError("/v.mp4", "truncated"), step=7, rank=1)
    assert not write_error_file(tmp_path, RuntimeError("later, elsewhere"), step=7, rank=0)
    record = read_error_file(tmp_path)
    assert record["rank"] == 1 and record["step"] == 7 and record["kind"] == "media"
    rebuilt = error_from_record(record)
    assert isinstance(rebuilt, MediaError) and "/v.mp4: truncated" in str(rebuilt)
    assert list(tmp_path.iterdir()) == [tmp_path / "error.json"]  # no temporary files left


def test_rank_failure_user_error_exits_2_crash_reraises(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert report_rank_failure(ConfigError(["train.x: bad"]), tmp_path, step=None, rank=0) == 2
    assert "error: invalid config" in capsys.readouterr().err
    (tmp_path / "error.json").unlink()
    assert report_rank_failure(KeyError("bug"), tmp_path, step=3) is None
    record = read_error_file(tmp_path)
    assert record["kind"] is None and "KeyError" in record["traceback"]
    assert error_from_record(record) is None
    (tmp_path / "error.json").unlink()
    # a full disk under a rank is the user's to fix, not a crash to retry
    assert report_rank_failure(OSError(errno.ENOSPC, "full", "/ckpt"), tmp_path) == 2
    assert read_error_file(tmp_path)["kind"] == "disk"


def _state(exc: BaseException) -> SimpleNamespace:
    return SimpleNamespace(result=lambda raise_on_failure=False: exc)


def test_only_crashes_are_retried(tmp_path: Path) -> None:
    from tasks.errors import retry_only_crashes
    from tasks.torchrun import TorchrunFailed, failure_from_run

    assert not retry_only_crashes(None, None, _state(ConfigError(["x: bad"])))
    assert not retry_only_crashes(None, None, _state(RepeatedFailure("again")))
    assert retry_only_crashes(None, None, _state(TorchrunFailed("signal 9")))

    # A rank's user error comes back as its own type.
    write_error_file(tmp_path, TrainingDiverged("step 2: nan"), step=2)
    err = failure_from_run(tmp_path, 2, ["tail"])
    assert isinstance(err, TrainingDiverged) and "step 2" in str(err)
    (tmp_path / "error.json").unlink()

    # The same crash at the same step twice is not retried a third time; a different one is.
    write_error_file(tmp_path, RuntimeError("collective timeout"), step=5)
    first = failure_from_run(tmp_path, 1, [])
    assert isinstance(first, TorchrunFailed) and "step 5" in str(first)
    again = failure_from_run(tmp_path, 1, [])
    assert isinstance(again, RepeatedFailure)
    (tmp_path / "error.json").unlink()
    write_error_file(tmp_path, RuntimeError("collective timeout"), step=9)
    assert isinstance(failure_from_run(tmp_path, 1, []), TorchrunFailed)
    # A killed launch writes no error.json: a crash, retried.
    (tmp_path / "error.json").unlink()
    assert isinstance(failure_from_run(tmp_path, -9, []), TorchrunFailed)


def _fake_checkpoint(root: Path, step: int, complete: bool = True) -> Path:
    ckpt = root / "checkpoints" / f"step_{step}"
    ckpt.mkdir(parents=True)
    if complete:
        (ckpt / "COMPLETE").write_text(json.dumps({"step": step, "time": float(step)}))
    return ckpt


def test_resume_resolution(tmp_path: Path) -> None:
    from cosmos_train.checkpoint_paths import resolve_resume
    from cosmos_train.errors import CheckpointError

    out = tmp_path / "out"
    assert resolve_resume(False, out) is None
    assert resolve_resume(True, out) is None  # nothing yet: start fresh (the trainer says so)
    run = out / "20260101000000"
    good = _fake_checkpoint(run, 2)
    half = _fake_checkpoint(run, 4, complete=False)
    assert resolve_resume(True, out) == good
    assert resolve_resume(str(good), out) == good
    assert resolve_resume(str(run), out) == good  # a run folder: its newest complete checkpoint
    with pytest.raises(CheckpointError) as e:
        resolve_resume(str(half), out)
    assert "not a complete checkpoint" in str(e.value) and str(good.resolve()) in str(e.value)
    with pytest.raises(CheckpointError) as e:
        resolve_resume(str(tmp_path / "nope" / "step_3"), out)
    assert "does not exist" in str(e.value) and str(good.resolve()) in str(e.value)


def test_retried_run_does_not_repeat_metrics(tmp_path: Path) -> None:
    from cosmos_train.config import Config
    from cosmos_train.metrics import MetricsLogger, read_metrics

    log = MetricsLogger(tmp_path, Config())
    for step in range(1, 6):
        log.log(step, {"loss": float(step)})
    log.drop_after(3)  # resumed from step 3's checkpoint
    for step in range(4, 7):
        log.log(step, {"loss": float(step)})
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3, 4, 5, 6]


def test_a_full_disk_is_found_behind_library_errors(tmp_path: Path) -> None:
    from cosmos_train.errors import disk_full_in
    from tasks.torchrun import failure_from_run

    class SafetensorError(Exception):  # safetensors' Rust error type carries only the message
        pass

    wrapped = SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
    assert isinstance(disk_full_in(wrapped, "/runs/x"), DiskFullError)
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/runs/x/step_2.tmp/a.distcp")
        except OSError as e:
            raise RuntimeError("async checkpoint failed") from e
    except RuntimeError as e:
        chained = e
    assert "step_2.tmp" in str(disk_full_in(chained))
    assert disk_full_in(RuntimeError("collective timeout")) is None
    # the disk was too full for error.json: the launch's last lines still tell
    err = failure_from_run(tmp_path, 1, ["[rank0]: OSError: [Errno 28] No space left on device"])
    assert isinstance(err, DiskFullError) and str(tmp_path) in str(err)


def test_out_of_space_reads_the_filesystem(small_disk, fill_disk) -> None:
    """A writer that reports a short write in its own words (torch's zip writer) is still recognised
    as a full disk by the free space left where it wrote."""
    from cosmos_train.errors import out_of_space

    assert not out_of_space(small_disk / "ckpt" / "not-yet-created")
    fill_disk(small_disk, 2048)
    assert out_of_space(small_disk / "ckpt" / "not-yet-created")
