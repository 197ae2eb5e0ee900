"""The typed user errors: one kind per thing a user can get wrong, one place that defines them.

A `UserError` is a mistake in the input (config, data, media, benchmark, checkpoint, model folder,
credentials, disk): it fails the same way every time, so it is never retried, and it is shown as one
short paragraph (the key / file / row, what is wrong, what to do) with exit code 2 and no traceback.
Any other exception is a bug or a crash and keeps its traceback, except an OSError on a path the user
must fix (a file where a folder is needed, no permission, a read-only or full disk): `path_error` gives
its paragraph, and `user_error_of` is the one test of "is this the user's to fix" that the CLI, the
flows (report, retry) and the ranks share (which OSErrors, and why not the others: see `path_error`).

Errors cross process boundaries as RUN/error.json (`write_error_file` in a torchrun rank,
`read_error_file` in the launching task), so the flow that started the ranks raises the same typed
error the rank raised.

    from cosmos_train.errors import CheckpointError
    raise CheckpointError(f"train.resume: {path} is not a checkpoint; complete ones: ...")
"""

from __future__ import annotations

import errno
import json
import os
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

EXIT_USER_ERROR = 2
EXIT_RUN_STUCK = 3  # train.stop_when_stuck ended a run that could not learn: a user-facing stop, not a crash
EXIT_SERVICE_DOWN = 75  # sysexits' EX_TEMPFAIL: a service the run needs stayed unreachable; stopped saved, rerun later
EXIT_INTERRUPTED = 130  # the shell's code for a command stopped by Ctrl-C (128 + SIGINT): stopped saved
ERROR_FILE = "error.json"


class UserError(ValueError):
    """Base of every error a user can fix. A ValueError, so callers that catch bad input keep working."""

    kind = "input"
    exit_code = EXIT_USER_ERROR  # what the CLI and a rank exit with

    @property
    def paragraph(self) -> str:
        """What the CLI prints and a failed flow run shows: the message, nothing else."""
        return str(self)


class ConfigError(UserError):
    """All problems found in one config, each as 'key.path: what is wrong (what to do)'."""

    kind = "config"

    def __init__(self, problems: list[str] | str, source: str | None = None, what: str = "config"):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.source = source
        head = f"invalid {what} {source}" if source else f"invalid {what}"
        super().__init__(head + ":\n" + "\n".join(f"  - {p}" for p in self.problems))

    def __reduce__(self) -> tuple[Any, ...]:  # picklable with its own arguments (Prefect stores results)
        return (_rebuild_config_error, (type(self), self.problems, self.source, str(self)))


def _rebuild_config_error(cls: type[ConfigError], problems: list[str], source: str | None, text: str) -> ConfigError:
    err = cls.__new__(cls)
    ValueError.__init__(err, text)
    err.problems, err.source = problems, source
    return err


class DataError(UserError):
    """A dataset that cannot be read or rows that do not validate (file and row named)."""

    kind = "data"


class MediaError(DataError):
    """A video or image that cannot be used; names the file and says why."""

    kind = "media"

    def __init__(self, path: Any, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.path, self.reason))


class BenchmarkError(UserError):
    """A benchmark that cannot be evaluated, with the file and row named."""

    kind = "benchmark"


class ModelError(UserError):
    """A model folder or hub id that cannot be loaded as asked (missing files, wrong architecture)."""

    kind = "model"


class CheckpointError(UserError):
    """A checkpoint that is missing, incomplete or does not match the run (path named)."""

    kind = "checkpoint"


class AuthError(UserError):
    """Missing or refused credentials (which variable or secret to set). Raised by the parts that talk to
    services (uploads, the reward service client); defined here so every kind has one place."""

    kind = "auth"


class UploadError(UserError):
    """An upload the target refused for a reason a retry cannot change (no such bucket or repo, no
    permission, a bad URL); names the target. Credentials themselves are an AuthError."""

    kind = "upload"


class UploadUnavailable(RuntimeError):
    """An upload that could not reach its target (lost connection, timeout, a 5xx answer): a retry may
    help, and resumes where this attempt stopped."""


class DiskFullError(UserError):
    """No space left where the run writes; names the path."""

    kind = "disk"


class PathError(UserError):
    """A file or folder the command must read or write that the operating system refuses: a file where a
    folder is needed, no permission, a read-only disk, a folder where a file is needed (`path_error`)."""

    kind = "path"


class TrainingDiverged(UserError):
    """A non-finite loss or gradient norm: names the step and what to change (lr, clip, data)."""

    kind = "training"


class RunStuck(UserError):
    """train.stop_when_stuck ended a run in a state where RL cannot learn (cosmos_train/train/run_health.py): the
    verdicts with their evidence and what to change. The run's checkpoint and exports were saved as at a normal
    end; a retry would land in the same state, so it is not retried."""

    kind = "stuck"
    exit_code = EXIT_RUN_STUCK


class RunHalted(UserError):
    """A run that stopped before its end with its state saved: neither a mistake in the input nor a crash, and a
    retry now would not help (the user asked to stop, or what the run needs is gone). The paragraph says why and
    where it stopped; `run_dir` (set by the task that launched the ranks) lets the CLI add the exact command that
    continues the run."""

    kind = "halted"
    run_dir: str | None = None


class RunInterrupted(RunHalted):
    """Ctrl-C (SIGINT): the ranks saved a stop checkpoint and the command ends without retrying."""

    kind = "interrupted"
    exit_code = EXIT_INTERRUPTED


class ServiceUnavailable(RunHalted):
    """A service the run depends on (an external reward service, the Prefect API) stayed unreachable past its
    retries: the run stopped saved, naming the URL and the last error; run the resume command once it is back."""

    kind = "service"
    exit_code = EXIT_SERVICE_DOWN


class RepeatedFailure(RuntimeError):
    """A crash that happened again at the same step with the same message: retrying cannot help."""


KINDS: dict[str, type[UserError]] = {
    cls.kind: cls
    for cls in (
        UserError,
        ConfigError,
        DataError,
        MediaError,
        BenchmarkError,
        ModelError,
        CheckpointError,
        AuthError,
        UploadError,
        DiskFullError,
        PathError,
        TrainingDiverged,
        RunStuck,
        RunHalted,
        RunInterrupted,
        ServiceUnavailable,
    )
}


NO_SPACE = "No space left on device"  # strerror(ENOSPC), also in errors of libraries that wrap it (safetensors)


def disk_full_at(where: str | os.PathLike | None, needed: int | None = None) -> DiskFullError:
    """The one disk-full paragraph, naming where the write failed, with how much the write needed (when the
    writer knows: `needed` bytes) and how much is free there now (read from the filesystem, so call it once the
    failed write's partial files are removed)."""
    free = free_bytes(where) if where else None
    sizes = [f"the write needs about {human_bytes(needed)}"] if needed else []
    if free is not None:
        sizes.append(f"{human_bytes(free)} {'is' if sizes else 'is left'} free there")
    return DiskFullError(
        f"no space left on {where or 'the output folder'}: free space there or point train.output_dir at a larger "
        f"disk" + (f" ({', '.join(sizes)})" if sizes else "")
    )


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'; the units `df -h` and tmpfs's size= use."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def free_bytes(path: str | os.PathLike) -> int | None:
    """Bytes this user may still write on the filesystem holding `path` (or its nearest existing parent)."""
    try:
        st = os.statvfs(_nearest_existing(Path(path)))
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def exception_chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and every exception behind it: its cause / context chain, and the per-rank failures that
    torch.distributed.checkpoint's CheckpointException carries as `failures` {rank: (exception, tb)}."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        failures = getattr(e, "failures", None)
        if isinstance(failures, dict):
            todo.extend(f[0] for f in failures.values() if isinstance(f, tuple) and isinstance(f[0], BaseException))
        todo.extend(x for x in (e.__cause__, e.__context__) if x is not None)


def disk_full_in(exc: BaseException, path: str | os.PathLike | None = None) -> DiskFullError | None:
    """A DiskFullError when `exc` or an exception behind it is a full disk, else None. Libraries wrap
    ENOSPC in their own types (safetensors' SafetensorError, DCP's CheckpointException), so the chain
    and the message are both looked at."""
    for e in exception_chain(exc):
        if isinstance(e, DiskFullError):
            return e
        if isinstance(e, OSError) and (found := from_os_error(e, path)) is not None:
            return found
        if NO_SPACE in str(e):
            return disk_full_at(path)
    return None


def out_of_space(path: str | os.PathLike) -> bool:
    """Whether the filesystem holding `path` (or its nearest existing parent) is full: under 1% of
    its size or 4 MiB free, whichever is less. For writers that report a short write in their own
    words (torch's zip writer: "unexpected pos 704 vs 598") instead of passing ENOSPC on."""
    try:
        st = os.statvfs(_nearest_existing(Path(path)))
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < min(4 << 20, st.f_blocks * st.f_frsize // 100)


def from_os_error(
    exc: OSError, path: str | os.PathLike | None = None, needed: int | None = None
) -> DiskFullError | None:
    """A disk-full OSError as a DiskFullError naming the path (and the `needed` bytes when known); None for any
    other OSError."""
    if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
        return None
    return disk_full_at(path or exc.filename, needed)


# ------------------------------------------------------------------------- a path the OS refuses
# Which OSErrors are the user's to fix: those the OS raised on a path it names (`filename` set), for a
# reason that no retry and no code change cures: the path's shape (a file where a folder is needed, or
# the reverse), its permissions, a read-only or full disk, a name too long, a symlink loop. The paths
# the commands touch are the user's (config keys, arguments, folders below them), and the same errors
# on a path a library picked (a cache under $HOME) are fixed by the user the same way.
#
# Left out, so they keep their traceback as a crash: an OSError without a filename (a socket, a pipe,
# a library's own failure: nothing to name, and often a bug); FileNotFoundError, since the inputs a
# user names are checked by name before they are read (config check_paths, preflight, the model and
# checkpoint checks), so a missing file that gets this far is one the program meant to have written
# (a bug or a race); and a FileExistsError whose path is a folder (a race between two writers).
_PATH_ERRNOS = (
    errno.ENOTDIR,
    errno.EEXIST,
    errno.EACCES,
    errno.EPERM,
    errno.EISDIR,
    errno.EROFS,
    errno.ENAMETOOLONG,
    errno.ELOOP,
)


def file_in_the_way(path: str | os.PathLike) -> Path | None:
    """The file (not a folder) at `path` or at one of its parents, which keeps `path` from being or
    holding a folder; None when there is none."""
    where = Path(path).expanduser()
    for p in (where, *where.parents):
        if p.is_symlink() and not p.exists():
            continue  # a dangling link: mkdir reports it itself
        if p.exists():
            return None if p.is_dir() else p
    return None


def not_a_folder(key: str, path: str | os.PathLike, subject: str | None = None) -> str | None:
    """The sentence "KEY = 'PATH' is below FILE, which is a file ..." (what to do included) when a file keeps
    `path` from being a folder; None when it can be one. For the checks that run before anything is written;
    `subject` replaces "KEY = 'PATH'" where the path is not a config key's (a command's argument)."""
    blocker = file_in_the_way(path)
    if blocker is None:
        return None
    where = "is a file" if blocker == Path(path).expanduser() else f"is below {blocker}, which is a file"
    return (
        f"{subject or f'{key} = {str(path)!r}'} {where}, not a folder, so no folder can be made there: point "
        f"{key} at a folder (or a path where one can be made), or move {blocker} out of the way"
    )


def path_error(exc: BaseException, what: str | None = None) -> UserError | None:
    """The user's paragraph for an OSError on a path (see the note above for which ones): the path, the
    OS's reason and what to do, after `what` (the key or role of the path) when given. A full disk is a
    DiskFullError, the others a PathError; None for any other exception, which stays a crash."""
    if not isinstance(exc, OSError) or exc.filename is None:
        return None
    if (full := from_os_error(exc)) is not None:
        return full
    if exc.errno not in _PATH_ERRNOS:
        return None
    path = Path(os.fsdecode(exc.filename))
    head = f"{what}: " if what else ""
    second = f" (and {os.fsdecode(exc.filename2)})" if exc.filename2 is not None else ""
    reason = exc.strerror or os.strerror(exc.errno)
    if exc.errno == errno.ENOTDIR or (exc.errno == errno.EEXIST and path.exists() and not path.is_dir()):
        blocker = path if exc.errno == errno.EEXIST else file_in_the_way(path)
        if blocker is None:  # the file that was in the way is gone again: say what the OS said
            return PathError(f"{head}{path}{second}: {reason}; a folder was expected there")
        where = "is a file" if blocker == path else f"is below {blocker}, which is a file"
        return PathError(
            f"{head}{path}{second} {where}, where a folder is needed: choose another path, or move {blocker} "
            "out of the way"
        )
    if exc.errno == errno.EEXIST:
        return None  # an existing folder: two writers raced (a crash, not the input)
    access = (
        "give this user access to it (check its owner and mode, and its parent folders': ls -ld), or choose a "
        "path this user can use"
    )
    todo = {
        errno.EACCES: access,
        errno.EPERM: access,
        errno.EISDIR: "a file is needed there: choose a file's path, or move the folder out of the way",
        errno.EROFS: "the disk it is on is mounted read-only: choose a path on a writable disk",
        errno.ENAMETOOLONG: "choose a shorter path",
        errno.ELOOP: "a symbolic link on the path points back into itself: fix or remove the link",
    }[exc.errno]
    return PathError(f"{head}{path}{second}: {reason}; {todo}")


def user_error_of(exc: BaseException) -> UserError | None:
    """`exc` as the user error it is: itself for a UserError, `path_error`'s paragraph for an OSError on a
    path the user can fix, a DiskFullError for a full disk behind a library's error; None for a crash.
    The CLI, the flows (what they report and what they retry) and the ranks all decide with this."""
    if isinstance(exc, UserError):
        return exc
    return path_error(exc) or disk_full_in(exc)


@contextmanager
def path_errors(what: str) -> Iterator[None]:
    """Inside the block, an OSError `path_error` knows is raised as that UserError, naming `what` (the
    config key or the role of the path), with the OSError as its cause; any other exception as it is."""
    try:
        yield
    except OSError as e:
        err = path_error(e, what)
        if err is None:
            raise
        raise err from e


# ------------------------------------------------------------------------- across processes
def write_error_file(run_dir: str | os.PathLike, exc: BaseException, step: int | None = None, rank: int = 0) -> bool:
    """Record why this rank stopped, for the launching task (written atomically; the first rank wins, except that
    a user error replaces a crash: ranks fail together, and a peer's crash is what a user error on one rank looks
    like from the others, e.g. "Connection closed by peer" once the rank that found the disk full left).
    Returns whether this rank's record is the one kept (when the file cannot be written, e.g. on a full disk:
    rank 0 for a full disk, which every rank raises alike, else every rank, so the error is still said)."""
    path = Path(run_dir) / ERROR_FILE
    record = {
        "kind": exc.kind if isinstance(exc, UserError) else None,
        "type": type(exc).__name__,
        "message": str(exc),
        "step": step,
        "rank": rank,
        "traceback": None if isinstance(exc, UserError) else "".join(traceback.format_exception(exc)),
    }
    tmp = path.with_name(f"{ERROR_FILE}.{rank}.tmp")
    try:
        tmp.write_text(json.dumps(record, indent=2))
        os.link(tmp, path)  # atomic and exclusive: fails when another rank was first
        return True
    except FileExistsError:
        kept = read_error_file(run_dir)
        if record["kind"] is None or (kept is not None and kept.get("kind") is not None):
            return False
        try:
            os.replace(tmp, path)  # this user error over the crash record another rank wrote first
        except OSError:
            return False
        return True
    except OSError:  # a full disk must not hide the original error: the caller still prints it
        return rank == 0 or not isinstance(exc, DiskFullError)
    finally:
        tmp.unlink(missing_ok=True)


def read_error_file(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    path = Path(run_dir) / ERROR_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def error_from_record(record: dict[str, Any]) -> UserError | None:
    """The UserError a rank recorded, rebuilt as its own kind; None for a crash (no kind)."""
    kind = record.get("kind")
    if kind is None:
        return None
    cls = KINDS.get(kind, UserError)
    err = cls.__new__(cls)
    ValueError.__init__(err, record["message"])
    if isinstance(err, ConfigError):
        err.problems, err.source = [record["message"]], None
    if isinstance(err, MediaError):
        err.path, err.reason = "", record["message"]
    return err


def report_rank_failure(
    exc: BaseException, run_dir: str | os.PathLike, step: int | None = None, rank: int = 0
) -> int | None:
    """At the top of a torchrun rank: record why it stops (RUN/error.json) and, for a user error, print its
    paragraph and return the exit code. None for a crash: the caller re-raises it with its traceback."""
    import sys

    exc = disk_full_in(exc, run_dir) or user_error_of(exc) or exc
    first = write_error_file(run_dir, exc, step=step, rank=rank)
    if not isinstance(exc, UserError):
        return None
    if first:  # ranks usually fail alike: say it once
        print(f"error: {exc.paragraph}", file=sys.stderr, flush=True)
    return exc.exit_code
