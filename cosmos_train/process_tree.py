"""Process lifetimes: no process of a run outlives the process that started it.

torchrun starts each rank in a session of its own, so killing the launcher's process group misses the
ranks, and a SIGKILL (OOM killer, `kill -9`, a dropped SSH session's hangup) runs no cleanup at all. So
every process we start watches its parent: when the parent is gone (the process was re-parented), it
stops itself, first gently (SIGTERM: the trainer checkpoints at the step's end, torchrun stops its
ranks), then for good after a grace period (a rank blocked in a collective with a dead peer never
reaches the step's end).

    from cosmos_train.process_tree import watch_parent
    watch_parent(grace_s=10)   # at the top of a rank, the launcher, a service we start
    start_reaper()             # in the CLI: also children we cannot change (Prefect's temporary server)

How a killed CLI's run stops: its reaper sends SIGTERM to the top of each tree the CLI started (the
launcher, Prefect's server), never to the processes below them: the launcher forwards one SIGTERM to each
rank and gives them `TORCHRUN_STOP_S` to save their stop checkpoint before it kills them, and a rank that
got a second SIGTERM (from the reaper as well as from torchrun) would take it as "stop now, unsaved"
(`cosmos_train.signals`). Whatever is still there `STOP_GRACE_S` later is killed (SIGKILL), so nothing is
left after that, saved or not.
"""

from __future__ import annotations

import os
import signal
import threading
import time

# How often the watchdog looks at its parent: a killed run is noticed within this, and the check is a
# getppid() call, so it costs nothing measurable.
POLL_S = 0.5
# torchrun's --shutdown_timeout default: how long its agent waits for its ranks after SIGTERM before SIGKILL.
TORCHRUN_STOP_S = 30.0
# How long a stopping run may take before what is left of it is killed: torchrun's wait for its ranks' stop
# checkpoint, and the launcher's own exit after it.
STOP_GRACE_S = TORCHRUN_STOP_S + 15.0


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
def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, ppid, ...), None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def _start_time(pid: int) -> str | None:
    fields = _stat(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def _running(pid: int, started: str) -> int | None:
    """The parent of `pid` while it is the process that started at `started` and not a zombie (whose parent
    has not collected it yet: nothing left to stop), else None."""
    fields = _stat(pid)
    if fields is None or len(fields) <= 19 or fields[19] != started or fields[0] == "Z":
        return None
    return int(fields[1])


def descendants(pid: int) -> dict[int, str]:
    """Every process below `pid`, as {pid: start time} (the start time tells a reused pid apart)."""
    tree, found, todo = _children_map(), {}, [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found and (started := _start_time(child)) is not None:
                found[child] = started
                todo.append(child)
    return found


def start_reaper(grace_s: float = STOP_GRACE_S) -> None:
    """Make sure nothing this process starts, directly or not, outlives it, however it dies.

    Some children are not ours to change (Prefect's temporary API server, uvicorn): a sidecar process
    keeps a list of this process's descendants, and once this process is gone (its pipe reads EOF) it
    stops those still running (`_stop_tree`: SIGTERM to the top of each tree, SIGKILL after `grace_s`).
    Linux only (reads /proc)."""
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


def unreaped_children(pid: int) -> list[int]:
    """The children of `pid` that exited and that it has not collected yet (zombies)."""
    return [c for c in _children_map().get(pid, []) if (fields := _stat(c)) is not None and fields[0] == "Z"]


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _stop_tree(known: dict[int, str], grace_s: float, poll_s: float = 0.2) -> None:
    """Stop the processes `known` ({pid: start time}, what is left of a dead process's descendants): SIGTERM to
    each one whose parent is not one of them (the top of a tree: its parent died), which stops its own children
    (torchrun its ranks, after their stop checkpoint); a process left without its parent later (the parent
    stopped, the child did not) gets its SIGTERM then. SIGKILL to whatever is still there after `grace_s`."""
    termed: set[int] = set()
    deadline = time.monotonic() + grace_s
    while True:
        parents = {p: parent for p, t in known.items() if (parent := _running(p, t)) is not None}
        if not parents or time.monotonic() >= deadline:
            break
        for pid, parent in parents.items():
            if pid not in termed and parent not in parents:
                termed.add(pid)
                _signal(pid, signal.SIGTERM)
        time.sleep(poll_s)
    for pid in parents:
        if _running(pid, known[pid]) is not None:  # still the same process (a pid can be reused)
            _signal(pid, signal.SIGKILL)


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
    _stop_tree(known, grace_s)


if __name__ == "__main__":
    import sys

    _reap(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]))
