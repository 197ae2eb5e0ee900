"""cosmos_train.multinode without a second host: which addresses count as this host's, where a store listens, the
checks of launch.socket_ifname and the paragraph of each rendezvous failure; the launch command's bounds.
(tests/integration/distributed/test_two_hosts.py runs them on two real hosts.)

    pytest -q tests/unit/test_multinode_network.py
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import subprocess
import sys

import pytest
from torch.distributed.elastic.rendezvous.api import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousTimeoutError,
)
from torch.distributed.run import get_args_parser

from cosmos_train import multinode
from cosmos_train.config import load_config
from cosmos_train.multinode import (
    NodeNetwork,
    NodeUnreachable,
    interfaces,
    is_local_address,
    listen_on_named_address,
    rendezvous_failure,
)
from tasks.torchrun import launch_env, torchrun_command
from tests.conftest import ROOT


def args_of(*argv: str) -> argparse.Namespace:
    return get_args_parser().parse_args([*argv, "train.py"])


MULTI = (
    "--nnodes=2",
    "--rdzv_backend=c10d",
    "--rdzv_endpoint=10.78.0.1:29500",
    "--rdzv_id=job-7",
    "--rdzv_conf=join_timeout=45,read_timeout=45",
)


def test_local_addresses_are_the_ones_a_socket_can_bind() -> None:
    assert is_local_address("127.0.0.1") and is_local_address("localhost")
    assert is_local_address(socket.gethostname())
    assert not is_local_address("203.0.113.7")  # TEST-NET-3: nobody's
    assert not is_local_address("no-such-host.invalid")


def test_a_store_named_by_an_address_listens_there_only() -> None:
    assert listen_on_named_address("10.78.0.1") == "10.78.0.1"
    assert listen_on_named_address("::1") == "::1"
    # a host name may resolve to another address here (127.0.1.1 in Debian's /etc/hosts) than on the other nodes
    assert listen_on_named_address("node0") is None


def test_the_named_interface_becomes_the_announced_address(monkeypatch: pytest.MonkeyPatch) -> None:
    name, address = next((n, a) for n, a in interfaces().items() if a and not a.startswith("127."))
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", f"{name},other")
    args = args_of(*MULTI)
    node = NodeNetwork.of(args)
    assert (node.host, node.port, node.ifname) == ("10.78.0.1", 29500, name)
    node.prepare(args)
    assert args.local_addr == address and node.address == address
    kept = args_of(*MULTI, "--local_addr=10.0.0.5")  # the user's own choice stays
    NodeNetwork.of(kept).prepare(kept)
    assert kept.local_addr == "10.0.0.5"


def test_a_missing_or_loopback_interface_is_said_before_anything_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth9x")
    args = args_of(*MULTI)
    with pytest.raises(NodeUnreachable, match=r"has no network interface 'eth9x'.*its interfaces: lo 127\.0\.0\.1"):
        NodeNetwork.of(args).prepare(args)
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    with pytest.raises(NodeUnreachable, match=r"'lo' is host .*'s loopback interface \(127\.0\.0\.1\)"):
        NodeNetwork.of(args).prepare(args)
    # every node on this machine (a loopback endpoint): the loopback is the right interface
    local = args_of("--nnodes=2", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:29500", "--rdzv_id=j")
    NodeNetwork.of(local).prepare(local)
    assert local.local_addr == "127.0.0.1"


def test_each_rendezvous_failure_names_the_endpoint_the_id_and_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    args = args_of(*MULTI)
    monkeypatch.setattr(multinode, "store_reached", [])
    never = rendezvous_failure(RendezvousConnectionError("x"), args, NodeNetwork.of(args))
    assert "could not reach the rendezvous endpoint 10.78.0.1:29500 (launch.rdzv_endpoint) within 45 s" in never
    # what it finds there when it gives up (this sandbox's egress may answer for any address)
    assert re.search(r"\((a connection to|something answers at) 10\.78\.0\.1:29500", never), never
    monkeypatch.setattr(multinode, "store_reached", [True])
    lost = rendezvous_failure(RendezvousConnectionError("x"), args, None)
    assert "reached the rendezvous endpoint 10.78.0.1:29500 (launch.rdzv_endpoint), then lost it" in lost
    waited = rendezvous_failure(RendezvousTimeoutError("x"), args, None)
    assert "the rendezvous 'job-7' (launch.rdzv_id) did not gather launch.nnodes = 2 within 45 s" in waited
    closed = rendezvous_failure(RendezvousClosedError("x"), args, None)
    assert "was closed by another node" in closed
    for said in (never, lost, waited, closed):
        assert "\n" not in said and said.startswith("node ")


def test_a_multi_node_launch_is_bounded_by_rdzv_timeout_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    monkeypatch.delenv("NCCL_SOCKET_IFNAME", raising=False)
    cfg = load_config(
        None,
        [
            "launch.nnodes=2",
            "launch.nproc_per_node=1",
            'launch.rdzv_endpoint="10.78.0.1:29500"',
            "launch.rdzv_timeout_s=42",
            'launch.socket_ifname="train0"',
        ],
        env={"COSMOS_TRAIN__LAUNCH__RDZV_ID": "12345"},  # a Slurm job id, read as a TOML number
        check_paths=False,
    )
    assert cfg.launch.rdzv_id == "12345"
    cmd = torchrun_command(cfg, "cosmos_train.train.sft", [])
    assert "--rdzv_conf=join_timeout=42,read_timeout=42" in cmd and "--rdzv_id=12345" in cmd
    assert launch_env(cfg) == {"GLOO_SOCKET_IFNAME": "train0", "NCCL_SOCKET_IFNAME": "train0"}


GROUP_TIMEOUTS = r"""
import json, sys
import torch, torch.distributed as dist
from cosmos_train.distributed import cpu_group
from cosmos_train.config import ParallelismConfig
from cosmos_train.distributed import init_distributed

info = init_distributed(ParallelismConfig(), 12)
cpu = torch.device("cpu")
groups = {"default": dist.group.WORLD, "distributed cpu_group": cpu_group()}
groups["mesh dp_shard"] = info.mesh["dp_shard"].get_group()
print(json.dumps({k: g._get_backend(cpu).options._timeout.total_seconds() for k, g in groups.items()}))
"""


def test_collective_timeout_bounds_every_group_not_only_the_default_one() -> None:
    """launch.collective_timeout_s reaches the groups made after the default one too (the mesh's, the checkpoint's
    gloo group, which also carries the per-step stop agreement): a host lost during a save is noticed within it,
    not after torch's 30 minutes."""
    done = subprocess.run(
        [sys.executable, "-c", GROUP_TIMEOUTS], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "default": 12.0,
        "distributed cpu_group": 12.0,
        "mesh dp_shard": 12.0,
    }
