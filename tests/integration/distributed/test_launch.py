"""cosmos_train.launch: a single-node run listens on loopback only, and a failed rank ends the launch with
its own exit code and no torchrun traceback."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.torchrun import LAUNCH, torchrun

pytestmark = pytest.mark.slow

# Each rank reports its pid; rank 0 then lists every listening TCP socket held by the launcher (its
# parent) and the ranks (tests/sockets.py).
RANK_SCRIPT = r"""
import json, os, sys
import torch, torch.distributed as dist
from tests.sockets import listening

dist.init_process_group("gloo")
pids = [None] * dist.get_world_size()
dist.all_gather_object(pids, os.getpid())
if dist.get_rank() == 0:
    with open(sys.argv[1], "w") as f:
        json.dump(listening([os.getppid(), *pids]), f)
dist.barrier()
dist.destroy_process_group()
"""


def _launch(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`script` on 2 ranks under our launcher, to its end: its exit code and output (stderr merged in)."""
    path = tmp_path / "rank.py"
    path.write_text(script)
    base = {k: v for k, v in os.environ.items() if k != "GLOO_SOCKET_IFNAME"}
    env = {"PYTHONPATH": str(ROOT)}  # a script: its own folder is its sys.path[0]
    return torchrun(2, str(path), *args, launcher=LAUNCH, env=env, base_env=base, timeout=180, check=False)


def _is_loopback(hex_addr: str) -> bool:
    host = hex_addr.split(":")[0]
    if len(host) == 8:  # IPv4, little-endian hex
        return host.upper() == "0100007F"
    # IPv6 ::1, or an IPv4-mapped 127.0.0.1 (::ffff:127.0.0.1)
    return host.upper() in ("00000000000000000000000001000000", "0000000000000000FFFF00000100007F")


def test_single_node_run_listens_on_loopback_only(tmp_path: Path) -> None:
    out = tmp_path / "listening.json"
    proc = _launch(tmp_path, RANK_SCRIPT, str(out))
    assert proc.returncode == 0, proc.stdout[-3000:]
    sockets = json.loads(out.read_text())
    # torchrun's rendezvous store and the ranks' gloo listeners at least
    assert len(sockets) >= 3, sockets
    exposed = [s for s in sockets if not _is_loopback(s["local"])]
    assert not exposed, f"listening beyond loopback: {exposed}"


def test_failed_rank_gives_its_exit_code_without_a_launcher_traceback(tmp_path: Path) -> None:
    script = (
        "import os, sys, time\n"
        "if os.environ['RANK'] == '1':\n"
        "    print('error: rows/3: bad answer letter', file=sys.stderr); sys.exit(2)\n"
        "time.sleep(120)\n"
    )
    proc = _launch(tmp_path, script)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stdout
    assert "rank 1 exited with code 2" in proc.stdout.splitlines()[-1]


def test_root_cause_is_the_rank_the_others_reacted_to() -> None:
    """torchrun reports every failed rank; the launcher names the one that caused it."""
    from types import SimpleNamespace as F

    from cosmos_train.launch import root_cause

    # rank 0 SIGKILLed from outside; rank 1 then lost its peer and exited 1; torchrun SIGTERMed rank 2
    killed = [
        F(local_rank=0, exitcode=-9, timestamp=100),
        F(local_rank=1, exitcode=1, timestamp=100),
        F(local_rank=2, exitcode=-15, timestamp=101),
    ]
    assert root_cause(killed).local_rank == 0
    # rank 1 raised; torchrun stopped rank 0 (SIGTERM), which ignored it and was SIGKILLed 30 s later
    raised = [F(local_rank=0, exitcode=-9, timestamp=131), F(local_rank=1, exitcode=1, timestamp=100)]
    assert root_cause(raised).local_rank == 1
    # only stopped ranks: the first
    assert (
        root_cause([F(local_rank=1, exitcode=-15, timestamp=5), F(local_rank=0, exitcode=-15, timestamp=4)]).local_rank
        == 0
    )
