"""Graceful exit on SIGTERM / SIGUSR1 (schedulers' pre-emption notice): save a checkpoint, then stop.

    exit_request = install_exit_handlers(lambda signum: log.warning("signal %d: stopping", signum))
    for step in ...:
        train_step()
        if exit_request.agreed():      # every rank stops at the same step
            ckpt.save(step, ..., blocking=True)
            break

The handler only sets a flag (and calls the optional callback): saving from inside a signal handler would
run collectives at an arbitrary point of a step. torchrun forwards SIGTERM to every rank, but not at the
same instant, so `agreed()` all-reduces the flag: one rank seeing it is enough, and all ranks leave the
loop after the same step. The same signal again within REPEAT_S is the same request, not a second one: a pod
eviction or node drain signals every process of the job and torchrun forwards its own copy to each rank, so a
rank gets two at once (taking the second as "stop now" killed it unsaved). Later, a second signal of the same
kind restores the previous handler and re-raises it, so an impatient operator still stops the process.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist

from cosmos_train.distributed import cpu_group

EXIT_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGUSR1)
REPEAT_S = 5.0  # a copy of the signal this soon after the first is the same stop request (see above)


class ExitRequest:
    """Set by the installed handlers; `bool(request)` is this rank's view, `agreed()` every rank's."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.at = 0.0  # monotonic time of the first signal

    def __bool__(self) -> bool:
        return self.signum is not None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def agreed(self, group: Any = None) -> bool:
        """True on every rank when any rank received an exit signal (a collective: all ranks call it)."""
        if not (dist.is_available() and dist.is_initialized()):
            return self.requested
        # A CPU tensor needs a CPU-capable group; cosmos_train.distributed.cpu_group() is one.
        if group is None:
            group = cpu_group()
        flag = torch.tensor([1 if self.requested else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
        return bool(flag.item())


def install_exit_handlers(
    callback: Callable[[int], None] | None = None,
    signals: Iterable[signal.Signals] = EXIT_SIGNALS,
) -> ExitRequest:
    """Install handlers for `signals` that set the returned ExitRequest (and call `callback(signum)`).

    Must be called from the main thread (Python's rule for signal handlers).
    """
    request = ExitRequest()
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: Any) -> None:
        if request.signum == signum:
            if time.monotonic() - request.at < REPEAT_S:
                return  # the same request delivered twice (the scheduler's and torchrun's copy)
            # A second request: give the signal its previous meaning (default: terminate) and deliver it again.
            signal.signal(signum, previous[signum])
            os.kill(os.getpid(), signum)
            return
        request.signum, request.at = signum, time.monotonic()
        if callback is not None:
            callback(signum)

    for sig in signals:
        # None means a handler installed outside Python: fall back to the default action.
        previous[int(sig)] = signal.signal(sig, handler) or signal.SIG_DFL
    return request
