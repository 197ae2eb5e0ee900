"""A failed checkpoint write, agreed by every rank: each rank's outcome (went well, failed, an OSError, a full disk)
reduced to the worst, so every rank raises alike instead of one hanging in the next collective. A full disk is one
DiskFullError paragraph on every rank: the checkpoint, about how much it needs (what each rank writes, summed) and
how much is free. The checkpoint manager (checkpoint.py) removes the partial folder between the two steps."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch.distributed.tensor import DTensor

from cosmos_train.distributed import agree_max, agree_sum, broadcast_str, rank
from cosmos_train.errors import DiskFullError, disk_full_at, exception_chain, from_os_error, out_of_space

# How a save went on one rank; ranks agree on the worst (an all-reduce MAX), so all of them raise alike.
OK, FAILED, OS_ERROR, DISK_FULL = 0, 1, 2, 3


def bytes_written_here(state: dict[str, Any]) -> int:
    """About the bytes this rank writes of `state` into a checkpoint: its part of each sharded tensor (DTensor)
    and, on rank 0, every plain tensor (replicated on every rank; DCP writes one copy)."""
    total = 0
    todo: list[Any] = [state]
    while todo:
        value = todo.pop()
        if isinstance(value, DTensor):
            local = value.to_local()
            total += local.numel() * local.element_size()
        elif isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size() if rank() == 0 else 0
        elif isinstance(value, dict):
            todo.extend(value.values())
        elif isinstance(value, list | tuple):
            todo.extend(value)
    return total


def _os_error_in(exc: BaseException) -> OSError | None:
    """The OSError behind `exc` (its chain, or a rank's failure inside DCP's CheckpointException)."""
    return next((e for e in exception_chain(exc) if isinstance(e, OSError)), None)


def agree_outcome(error: BaseException | None, tmp: Path, group: Any) -> tuple[int, OSError | None]:
    """Collective: the worst outcome over the ranks (OK when `error` is None on every rank), and the OSError behind
    this rank's own `error` (None when there is none). `tmp`: the folder the write went into."""
    os_error = _os_error_in(error) if error is not None else None
    if error is not None and os_error is None and out_of_space(tmp):
        # torch's zip writer reports a write cut short by a full disk as "unexpected pos", not ENOSPC
        os_error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
    if error is None:
        code = OK
    elif os_error is None:
        code = FAILED
    else:
        code = DISK_FULL if from_os_error(os_error) is not None else OS_ERROR
    return agree_max(code, group), os_error


def raise_failed(
    step: int,
    tmp: Path,
    final: Path,
    error: BaseException | None,
    os_error: OSError | None,
    worst: int,
    bytes_here: int,
    group: Any,
) -> NoReturn:
    """Collective, once the ranks agreed the write of `step` into `tmp` failed (`worst`, not OK): a full disk raises
    the same DiskFullError on every rank (rank 0's paragraph, made after the partial folder is gone: what the
    checkpoint needs, `bytes_here` summed over the ranks, and what is free); a rank whose part went well raises a
    RuntimeError saying another rank failed; another OSError is re-raised as it is, any other failure a
    RuntimeError naming it."""
    if worst == DISK_FULL:
        needed = agree_sum(bytes_here, group)
        said = str(disk_full_at(final, needed)) if rank() == 0 else ""  # after the removal: what is free now
        raise DiskFullError(broadcast_str(said, group)) from error
    if error is None:  # this rank's part went well; another rank's did not
        raise RuntimeError(f"checkpoint of step {step} into {tmp} failed on another rank")
    if os_error is not None:
        if os_error is error:
            raise error
        raise os_error from error
    raise RuntimeError(f"checkpoint of step {step} into {tmp} failed: {error}") from error
