"""Unit-test fixtures shared by the checkpoint and export tests."""

from __future__ import annotations

import pytest
import torch.distributed as dist


@pytest.fixture(params=["gloo", "nodist"])
def pg(request, tmp_path):
    """The trainer's situation (a 1-process gloo group) and the offline one (no process group)."""
    if request.param == "gloo":
        dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg-store", rank=0, world_size=1)
        yield "gloo"
        dist.destroy_process_group()
    else:
        yield "nodist"


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs at tmp_path/disk: a real filesystem that fills up (ENOSPC), unmounted afterwards."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1024k", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs to fill up (needs root / CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


@pytest.fixture
def fill_disk():
    """fill(disk, leave_bytes): take all but about `leave_bytes` of `disk`'s free space with one file."""
    import os

    def fill(disk, leave_bytes: int):
        st = os.statvfs(disk)
        filler = disk / "filler"
        filler.write_bytes(b"\0" * max(0, st.f_bavail * st.f_frsize - leave_bytes))
        return filler

    return fill
