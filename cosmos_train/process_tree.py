"""Process lifetimes: no process of a run outlives the process that started it.

torchrun starts each rank in a session of its own, so killing the launcher's process group misses the
ranks, and a SIGKILL (OOM killer, `kill -9`, a crashed worker) runs no cleanup at all. So every
process we start watches its parent: when the parent is gone (the process was re-parented), it
stops itself, first gently (SIGTERM: the trainer checkpoints at the step's end, torchrun stops its
ranks), then for good after a grace period (a rank blocked in a collective with a dead peer never
reaches the step's end).

    from cosmos_train.process_tree import watch_parent
    watch_parent(grace_s=10)   # at the top of a rank, the launcher, a service we start
"""

from __future__ import annotations

import os
import signal
import threading
import time

# How often the watchdog looks at its parent: a killed run is noticed within this, and the check is a
# getppid() call, so it costs nothing measurable.
POLL_S = 0.5


def watch_parent(grace_s: float = 10.0, poll_s: float = POLL_S) -> threading.Thread | None:
    """Start a daemon thread that stops this process once its parent dies. Returns the thread
    (None when there is nothing to watch: the parent is already init)."""
    parent = os.getppid()
    if parent == 1:
        return None

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(128 + signal.SIGKILL)  # still here after the grace: blocked; leave without cleanup

    thread = threading.Thread(target=watch, name="parent-watchdog", daemon=True)
    thread.start()
    return thread
