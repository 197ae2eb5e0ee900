"""Two "nodes" on loopback, where network namespaces cannot be made (not root): two `cosmos-train sft` commands
(each its own flow run, as one flow run per node of a Slurm or Kubernetes work pool would be), each a torchrun
agent with one process, meeting through a c10d rendezvous; the run folder is <output_dir>/<rdzv_id>, shared. The
weights they export equal those of one node with two processes.

    pytest -x -q tests/integration/distributed/test_multinode.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from cosmos_train.net import free_port
from tests.conftest import ROOT, write_tiny_sft_config
from tests.integration.prefect_server import isolated_env
from tests.two_hosts import why_no_hosts

pytestmark = [
    pytest.mark.slow,
    pytest.mark.usefixtures("prefect_harness"),
    # where two real hosts can be made, tests/integration/distributed/test_two_hosts.py runs this over a real
    # network instead
    pytest.mark.skipif(why_no_hosts() is None, reason="test_two_hosts.py runs two nodes on two real hosts here"),
]


def _weights(export: Path) -> dict:
    out = {}
    for f in sorted(export.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def test_two_nodes_train_like_one_node_with_two_processes(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    from flows.sft import SFTParams, sft

    config = write_tiny_sft_config(
        tmp_path / "job.toml", tiny_model_dir, synthetic_dir, tmp_path / "out", max_num_steps=3
    )
    one = sft(
        SFTParams(config=str(config), overrides=["launch.nproc_per_node=2", f'train.output_dir="{tmp_path / "one"}"'])
    )

    endpoint = f"127.0.0.1:{free_port()}"
    node = [
        "launch.nnodes=2",
        "launch.nproc_per_node=1",
        f'launch.rdzv_endpoint="{endpoint}"',
        'launch.rdzv_id="job-7"',
        'launch.socket_ifname="lo"',
        f'train.output_dir="{tmp_path / "shared"}"',
    ]
    procs = []
    for rank in (0, 1):
        env = isolated_env(
            tmp_path / f"prefect-{rank}",
            COSMOS_TRAIN__LAUNCH__NODE_RANK=str(rank),  # as a Slurm script passes $SLURM_NODEID
            # torchrun sets 1 thread per rank only when a node runs several; these two "nodes" share
            # 2 cores, and 1 thread each is also what makes the float sums equal the one-node run's
            OMP_NUM_THREADS="1",
        )
        args = [sys.executable, "-m", "cosmos_train.cli", "sft", "--config", str(config)]
        for o in node:
            args += ["--set", o]
        procs.append(
            subprocess.Popen(
                args,
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=600)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-5000:]
    run = tmp_path / "shared" / "job-7"
    assert all(str(run) in out.splitlines() for out in outputs)  # both flows printed the one run folder
    assert (run / "result.json").is_file() and [p.name for p in (tmp_path / "shared").iterdir()] == ["job-7"]
    log = (run / "logs" / "train.log").read_text()
    assert "on 2 process(es)" in log, log[-3000:]

    a, b = _weights(Path(one["final"])), _weights(run / "safetensors" / "final")
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
