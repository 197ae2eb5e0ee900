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
"""

from __future__ import annotations

import logging
import os
import sys

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
            stream = getattr(sys, self.stream_name)
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's own rule: a failing handler reports, never raises
            self.handleError(record)


def env_rank() -> int:
    """This process's global rank as torchrun exports it (0 for a single process)."""
    return int(os.environ.get("RANK", "0"))


def setup_logging(tag: str, rank: int | None = None, all_ranks: bool | None = None) -> logging.Logger:
    """Install the console handlers on the `cosmos_train` logger (again: replaces them). `tag` names the
    process in every line (the trainer's name); rank None reads RANK; all_ranks None reads
    COSMOS_TRAIN_LOG_ALL_RANKS."""
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
    return log
