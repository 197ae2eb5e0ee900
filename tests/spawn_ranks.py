"""The tests' one way to run a function as the ranks of a process group: `spawn_ranks(fn, *args)` calls
`fn(rank, *args)` in `nprocs` spawned processes (torch.multiprocessing) and returns once every one has; a rank's
exception is raised here with that rank's traceback.

    spawn_ranks(_worker, free_port(), str(tmp_path))          # _worker(rank, port, out) at a test module's top level

Each rank runs on one torch thread (two ranks on two cores, as the CI machine has). A rank whose function returned
leaves through os._exit(0) once its output is flushed, not through the interpreter's finalization: a gloo process
group that is still referenced there (an FSDP module's device mesh, a diffusers model, a cached subgroup) is freed
while the interpreter finalizes, its worker thread can no longer take the GIL, and the process aborts after every
check passed ("terminate called without an active exception", SIGABRT; the CI of 444fbef lost a run to it). A rank
that raised leaves the ordinary way: torch writes its traceback for this process to raise, before any finalization.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.multiprocessing as mp


def spawn_ranks(fn: Callable[..., None], *args: Any, nprocs: int = 2) -> None:
    """`fn(rank, *args)` on `nprocs` spawned processes; `fn` and `args` must pickle (a module-level function)."""
    mp.start_processes(_rank_main, args=(fn, args), nprocs=nprocs, start_method="spawn", join=True)


def _rank_main(rank: int, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
    torch.set_num_threads(1)
    fn(rank, *args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
