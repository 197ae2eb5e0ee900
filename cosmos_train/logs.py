"""The log lines of a training process: one setup, called once by the trainers' shared entry point
(`train/loop.py`'s `run_main`), for every `cosmos_train.*` logger.

    setup_logging("sft")          # rank from RANK (torchrun sets it); 0 for a plain `python -m`
    logger.info("training ...")   # rank 0:  [sft] training ...
    logger.warning("slow disk")   # rank 1:  [sft rank 1] WARNING cosmos_train.checkpoint: slow disk

Why only rank 0 logs at INFO by default: every rank runs the same loop, so N ranks would print each progress
line N times. The other ranks still log warnings and errors, and those lines name their rank, so a problem on
one rank can be told apart. COSMOS_TRAIN_LOG_ALL_RANKS=1 (or `all_ranks=True`) gives every rank INFO, for
debugging a rank that hangs or diverges.

Why rank 0's lines carry no rank and keep the `[sft] ` tag: they are the run's log. The launching task streams
the ranks' output into RUN/logs/train.log and the Prefect log, and what reads that text (the flows' failure
tails, tests counting "[sft] training ", "resumed from ... at step N") keeps working with the lines the trainers
have always printed. INFO goes to stdout, as the trainers' prints did; warnings and errors to stderr, where
Python's default handler put them.

When the console's reader dies (the CLI or flow process that streams the ranks' output into RUN/logs/train.log
was killed), a write to it would raise BrokenPipeError and kill the rank in the middle of a step. So the console
is followed (`follow_console(RUN/logs/train.log)`): once its reader is gone, fds 1 and 2 are pointed at that file
(appending), and everything this process prints from then on (log lines, metrics lines, a traceback, torch's own
warnings) goes on there, where the reader would have put it. In the normal case only the reader writes that file,
so no line is doubled; after the reader's death every rank appends its own lines (one write each, O_APPEND), so
none is lost but those the dead reader had not yet read from the pipe.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import stat
import sys
import threading
from pathlib import Path

LIBRARY_LOGGER = "cosmos_train"
ALL_RANKS_ENV = "COSMOS_TRAIN_LOG_ALL_RANKS"


class RankFormatter(logging.Formatter):
    """`[tag] message` on rank 0, `[tag rank R] message` elsewhere; warnings and errors add level and logger."""

    def __init__(self, tag: str, rank: int):
        super().__init__()
        self.prefix = f"[{tag}]" if rank == 0 else f"[{tag} rank {rank}]"

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)  # the message, with a traceback when one is attached
        if record.levelno >= logging.WARNING:
            text = f"{record.levelname} {record.name}: {text}"
        return f"{self.prefix} {text}"


class ConsoleHandler(logging.Handler):
    """Writes to sys.stdout or sys.stderr as they are when a record comes (pytest's capture swaps them between
    tests; a handler holding the stream of its setup would write to a closed one)."""

    def __init__(self, stream_name: str, below: int | None = None):
        super().__init__()
        self.stream_name = stream_name
        self.below = below  # records at this level and above go to the other handler

    def emit(self, record: logging.LogRecord) -> None:
        if self.below is not None and record.levelno >= self.below:
            return
        try:
            write_console(self.stream_name, self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging's own rule: a failing handler reports, never raises
            self.handleError(record)


def env_rank() -> int:
    """This process's global rank as torchrun exports it (0 for a single process)."""
    return int(os.environ.get("RANK", "0"))


def setup_logging(
    tag: str, rank: int | None = None, all_ranks: bool | None = None, log_file: Path | None = None
) -> logging.Logger:
    """Install the console handlers on the `cosmos_train` logger (again: replaces them). `tag` names the
    process in every line (the trainer's name); rank None reads RANK; all_ranks None reads
    COSMOS_TRAIN_LOG_ALL_RANKS; `log_file`: where the console's lines go once its reader is gone
    (`follow_console`)."""
    rank = env_rank() if rank is None else rank
    if all_ranks is None:
        all_ranks = os.environ.get(ALL_RANKS_ENV, "") not in ("", "0", "false")
    log = logging.getLogger(LIBRARY_LOGGER)
    for old in [h for h in log.handlers if isinstance(h, ConsoleHandler)]:
        log.removeHandler(old)
    formatter = RankFormatter(tag, rank)
    for handler in (ConsoleHandler("stdout", below=logging.WARNING), ConsoleHandler("stderr")):
        if handler.stream_name == "stderr":
            handler.setLevel(logging.WARNING)
        handler.setFormatter(formatter)
        log.addHandler(handler)
    log.setLevel(logging.INFO if rank == 0 or all_ranks else logging.WARNING)
    if log_file is not None:
        follow_console(log_file)
    return log


# ----------------------------------------------------------------------------- a console whose reader is gone
class _Console:
    """This process's console fds: where they go once their reader is gone, and which already went there."""

    fds = (1, 2)

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fallback: Path | None = None
        self.redirected: set[int] = set()
        self.watcher: threading.Thread | None = None  # one per process, however often logging is set up


_console = _Console()


def write_console(stream_name: str, text: str) -> None:
    """`text` to sys.stdout / sys.stderr (as they are now: pytest swaps them), never raising for a console whose
    reader is gone: the console moves to the fallback file (`follow_console`) and the text is written there, or
    dropped when there is none."""
    stream = getattr(sys, stream_name)
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:  # before the watcher saw it; a failed flush keeps nothing, so nothing is doubled
        try:
            fd = stream.fileno()
        except (OSError, ValueError):
            return
        console_gone(fd)
        try:
            stream.write(text)
            stream.flush()
        except OSError:
            pass


def follow_console(fallback: Path | None) -> threading.Thread | None:
    """Watch this process's stdout and stderr: when one is a pipe, socket or terminal whose other end goes away
    (POLLERR / POLLHUP: the process reading it died, the terminal hung up), point it at `fallback` (appended to,
    or /dev/null when None) before anything is lost writing to it. Returns the watching daemon thread, None when
    there is nothing to watch (files). Called again: the fallback changes, the thread stays."""
    with _console.lock:
        _console.fallback = fallback
        if _console.watcher is not None and _console.watcher.is_alive():
            return _console.watcher
        watched = [fd for fd in _console.fds if fd not in _console.redirected and _can_lose_reader(fd)]
        if not watched:
            return None
        _console.watcher = threading.Thread(target=_watch_console, args=(watched,), name="console-watch", daemon=True)
        _console.watcher.start()
        return _console.watcher


def console_gone(fd: int) -> None:
    """Point `fd` (1 or 2) at the fallback file, or /dev/null: its reader is gone."""
    with _console.lock:
        if fd in _console.redirected:
            return
        first = not _console.redirected
        target = _open_fallback(_console.fallback)
        try:
            os.dup2(target, fd)
        finally:
            os.close(target)
        _console.redirected.add(fd)
    if first:  # stdout and stderr are usually the same pipe: said once
        logging.getLogger(LIBRARY_LOGGER).info(
            "the console's reader is gone: this process's output goes on in %s", _console.fallback or os.devnull
        )


def _open_fallback(path: Path | None) -> int:
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError:
            pass  # a full or read-only disk: dropped, as the console would have been
    return os.open(os.devnull, os.O_WRONLY)


def _can_lose_reader(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


def _watch_console(fds: list[int]) -> None:
    poller = select.poll()
    for fd in fds:
        poller.register(fd, 0)  # no event asked for: poll still reports POLLERR / POLLHUP, and only those
    while fds:
        try:
            events = poller.poll()
        except OSError as e:
            if e.errno == errno.EINTR:
                continue
            return
        for fd, _ in events:
            poller.unregister(fd)
            fds.remove(fd)
            console_gone(fd)
