"""Process lifetimes: no process of a run outlives the process that started it.

torchrun starts each rank in a session of its own, so killing the launcher's process group misses the
ranks, and a SIGKILL (OOM killer, `kill -9`, a crashed worker) runs no cleanup at all. So every
process we start watches its parent: when the parent is gone (the process was re-parented), it
stops itself, first gently (SIGTERM: the trainer checkpoints at the step's end, torchrun stops its
ranks), then for good after a grace period (a rank blocked in a collective with a dead peer never
reaches the step's end).

    from cosmos_train.process_tree import watch_parent
    watch_parent(grace_s=10)   # at the top of a rank, the launcher, a service we start
    start_reaper()             # in the CLI: also children we cannot change (Prefect's temporary server)
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


# ----------------------------------------------------------------------------- the reaper sidecar
def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    return children


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> dict[int, str]:
    """Every process below `pid`, as {pid: start time} (the start time tells a reused pid apart)."""
    tree, found, todo = _children_map(), {}, [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found and (started := _start_time(child)) is not None:
                found[child] = started
                todo.append(child)
    return found


def start_reaper(grace_s: float = 10.0) -> None:
    """Make sure nothing this process starts, directly or not, outlives it, however it dies.

    Some children are not ours to change (Prefect's temporary API server, uvicorn): a sidecar process
    keeps a list of this process's descendants, and once this process is gone (its pipe reads EOF) it
    sends SIGTERM to those still running, then SIGKILL after `grace_s`. Linux only (reads /proc)."""
    import subprocess
    import sys

    if not os.path.isdir("/proc"):
        return
    read_end, write_end = os.pipe()
    subprocess.Popen(
        [sys.executable, "-m", "cosmos_train.process_tree", str(os.getpid()), str(read_end), str(grace_s)],
        pass_fds=(read_end,),
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(read_end)
    os.set_inheritable(write_end, False)  # only this process holds it: EOF means this process is gone
    _REAPER_PIPE.append(write_end)


_REAPER_PIPE: list[int] = []


def _reap(parent: int, read_fd: int, grace_s: float) -> None:
    import select

    known: dict[int, str] = {}
    while True:
        ready, _, _ = select.select([read_fd], [], [], POLL_S)
        if ready and not os.read(read_fd, 1):  # EOF: the parent is gone
            break
        known.update(descendants(parent))
        known.pop(os.getpid(), None)  # the reaper is a child of the parent too
        known = {p: t for p, t in known.items() if _start_time(p) == t}
    alive = {p: t for p, t in known.items() if _start_time(p) == t}
    for pid in alive:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_start_time(p) == t for p, t in alive.items()):
        time.sleep(0.2)
    for pid, started in alive.items():
        if _start_time(pid) == started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


if __name__ == "__main__":
    import sys

    _reap(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))
