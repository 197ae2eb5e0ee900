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
