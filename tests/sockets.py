"""The listening TCP sockets of some processes, read from /proc (no `ss` needed): what the launch tests' rank scripts
report. /proc/net/tcp* is the table of the network namespace (host) of the process reading it.

    from tests.sockets import listening     # in a rank script run with PYTHONPATH=<repo root>
    listening([os.getppid(), os.getpid()])  # [{"pid": ..., "local": "0100007F:9C40", "table": "/proc/net/tcp"}]
"""

from __future__ import annotations

import os


def listening(pids: list[int]) -> list[dict]:
    """Every socket in LISTEN state held by one of `pids`: its holder, local address (hex, as /proc writes it) and
    table."""
    inodes = {}
    for pid in pids:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes[target[8:-1]] = pid
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    found.append({"pid": inodes[fields[9]], "local": fields[1], "table": table})
    return found
