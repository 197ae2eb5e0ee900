"""Multi-node training on two real hosts (scripts/two_hosts.sh: network namespaces host0 and host1, each with a
management network its host name resolves to and a training network `train0`; no loopback between them). One
`cosmos-train` command per host, as a Slurm task or an Indexed-Job pod runs it, with the variables
tests/two_hosts.py `node_env` gives (the ones deployments/ sets), the rendezvous endpoint on host0's train0 ADDRESS
(a second NIC: torch alone hosts the store nowhere then) and `launch.socket_ifname = "train0"`:

- GRPO on two hosts (a core each) exports the weights of one host with two processes (and both cores), bit for bit,
  and the training traffic goes over train0 (its byte counters), not the management network (SFT the same way, one
  command per host: tests/faults/test_host_lost.py, which also cuts a host; tests/integration/
  test_deployment_nodes.py, from one deployment run);
- every socket a host listens on is on its train0 address: the rendezvous store, the ranks' store, gloo;
- a missing or loopback interface, an endpoint nobody answers on and mismatched rdzv_ids end each node with one
  paragraph naming what it tried and the bound it waited (launch.rdzv_timeout_s), exit 2, not retried;
- a node that loses the host of the rendezvous store mid-run ends its launch instead of hanging (torch's agent
  would; tests/faults/test_host_lost.py loses the other host and resumes).

    pytest -x -q tests/integration/distributed/test_two_hosts.py     # root: it makes network namespaces
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cosmos_train.config import load_config
from cosmos_train.multinode import STUCK_AGENT_MARGIN_S
from tasks.torchrun import torchrun_command
from tests.conftest import ROOT, write_tiny_grpo_config, write_tiny_sft_config
from tests.integration.prefect_server import isolated_env
from tests.run_outputs import same_weights
from tests.two_hosts import TwoHosts, node_env, why_no_hosts

WHY_NOT = why_no_hosts()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(WHY_NOT is not None, reason=f"two hosts: {WHY_NOT}")]
SHUTDOWN_S = 5  # torchrun's wait for stopped ranks in the stuck-agent case (its default is 30 s)
RDZV_TIMEOUT_S = 15  # the failure cases' bound: long enough for the other node's CLI to start on 2 busy cores


@pytest.fixture(scope="module")
def hosts() -> Iterator[TwoHosts]:
    bed = TwoHosts.up(f"ct{os.getpid() % 100000}i")
    try:
        yield bed
    finally:
        bed.down()


def base_env(home: Path, **extra: str) -> dict[str, str]:
    """This test's environment without its Prefect settings (each node's CLI starts its own temporary server) and
    without COSMOS_TRAIN__* overrides (node_env gives a node's)."""
    env = isolated_env(
        home,
        OMP_NUM_THREADS="1",  # two ranks on two cores; also what makes the sums equal the one-host run's
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        WANDB_MODE="offline",
    )
    # the caller's own overrides (`extra`) are kept: only the ones this process inherited are dropped
    return {k: v for k, v in env.items() if not k.startswith("COSMOS_TRAIN__")} | extra


def run_on_host0(hosts: TwoHosts, args: list[str], tmp_path: Path) -> Path:
    """The one-host reference: `args` with two processes on host0, given every core of this machine (the two hosts
    have half each); its run folder (under tmp_path/one). host0's name resolves to its management address, not
    127.0.0.1: the launch must still tell its ranks the loopback it binds their store to."""
    env = base_env(
        tmp_path / "prefect-one", TWO_HOSTS_CORES="all", COSMOS_TRAIN__TRAIN__OUTPUT_DIR=str(tmp_path / "one")
    )
    one = subprocess.run(
        hosts.command(0, [*args, "--set", "launch.nproc_per_node=2"]),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert one.returncode == 0, one.stdout[-4000:] + one.stderr[-4000:]
    (run,) = [p for p in (tmp_path / "one").iterdir() if (p / "result.json").is_file()]
    return run


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cosmos_train.cli", *args]


def run_on_both(
    hosts: TwoHosts, args: list[str], tmp_path: Path, out: Path, rdzv_id: str | tuple[str, str], **extra: str
) -> list[tuple[int, str, float]]:
    """`args` on host0 and host1 at once, each as node `i` of a two-node job: (exit code, output, seconds) each."""
    ids = (rdzv_id, rdzv_id) if isinstance(rdzv_id, str) else rdzv_id
    tmp_path.mkdir(parents=True, exist_ok=True)
    procs, logs = [], []
    t0 = time.monotonic()
    for i in (0, 1):
        env = base_env(tmp_path / f"prefect-{i}", **extra)
        env.update(
            node_env(i, nnodes=2, endpoint=hosts.endpoint(), rdzv_id=ids[i], socket_ifname="train0", output_dir=out)
        )
        env["COSMOS_TRAIN__LAUNCH__NPROC_PER_NODE"] = "1"
        logs.append(tmp_path / f"node{i}.log")
        procs.append(hosts.popen(i, args, env, logs[-1]))
    ended: list[tuple[int, str, float]] = []
    try:
        for p, log in zip(procs, logs):
            code = p.wait(timeout=600)
            ended.append((code, log.read_text(errors="replace"), time.monotonic() - t0))
    finally:
        for i in (0, 1):
            hosts.kill(i)  # whatever a failed case left on either host
    return ended


def test_grpo_on_two_hosts_equals_one_host(
    hosts: TwoHosts, tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    config = write_tiny_grpo_config(
        tmp_path / "job" / "config.toml", tiny_model_dir, synthetic_dir, tmp_path / "x", **{"train.max_num_steps": 2}
    )
    script = str(config.parent / "toy_rewards.py")
    one_run = run_on_host0(hosts, cli("grpo", "--config", str(config), "--dataset-script", script), tmp_path)

    args = cli("grpo", "--config", str(config), "--dataset-script", script)
    sent = {net: hosts.bytes_sent(1, net) for net in ("train0", "mgmt0")}
    ended = run_on_both(hosts, args, tmp_path, tmp_path / "shared", "grpo-7")
    sent = {net: hosts.bytes_sent(1, net) - sent[net] for net in sent}
    for code, output, _ in ended:
        assert code == 0, output[-5000:]
    run = tmp_path / "shared" / "grpo-7"
    assert all(str(run) in output.splitlines() for _, output, _ in ended)  # both flows printed the one run folder
    assert "on 2 process(es)" in (run / "logs" / "train.log").read_text()
    assert same_weights(run / "safetensors" / "final", one_run / "safetensors" / "final")
    # host1's rank sent its gradients and parameter shards (MBs) over train0; the management network, which host1's
    # name resolves to and torch would have used without socket_ifname, carried none of it
    assert sent["train0"] > 1_000_000 and sent["mgmt0"] < sent["train0"] / 100, sent


def paragraph(output: str) -> str:
    """The CLI's closing `error:` paragraph (asserted to be the only one printed at its end)."""
    said = [line for line in output.splitlines() if line.startswith("error: ")]
    assert said, output[-4000:]
    return said[-1]


def node_launch(config: Path, node: int, endpoint: str, rdzv_id: str) -> list[str]:
    """The launch command the training task builds for node `node` of the job (tasks/torchrun.py)."""
    env = node_env(node, nnodes=2, endpoint=endpoint, rdzv_id=rdzv_id, socket_ifname="train0", output_dir=Path("/x"))
    env.update(COSMOS_TRAIN__LAUNCH__NPROC_PER_NODE="1", COSMOS_TRAIN__LAUNCH__RDZV_TIMEOUT_S=str(RDZV_TIMEOUT_S))
    cfg = load_config(config, [], env=env, check_paths=False)
    return torchrun_command(cfg, "cosmos_train.train.sft", ["--config", str(config)])


def test_bad_network_settings_end_each_node_with_one_paragraph(
    hosts: TwoHosts, tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    """Each case on both hosts at once, and the cases at once: the launches as the training task starts them, and
    the mismatched rdzv_ids through the whole `cosmos-train` command (exit 2, not retried, no traceback)."""
    config = write_tiny_sft_config(
        tmp_path / "job.toml", tiny_model_dir, synthetic_dir, tmp_path / "x", max_num_steps=3
    )
    mismatched = tmp_path / "mismatched"
    started = time.monotonic()
    clis = threading.Thread(
        target=lambda: ended.update(
            mismatched=run_on_both(
                hosts,
                cli("sft", "--config", str(config)),
                mismatched,
                mismatched / "out",
                ("job-d", "job-e"),
                COSMOS_TRAIN__LAUNCH__RDZV_TIMEOUT_S=str(RDZV_TIMEOUT_S),
            )
        )
    )
    ended: dict[str, list[tuple[int, str, float]]] = {}
    clis.start()
    cases = {  # name: (GLOO_SOCKET_IFNAME, endpoint, what each node's paragraph says)
        # an interface this host does not have: said at once, before anything waits
        "missing": ("eth9", hosts.endpoint(), r"host host[01] has no network interface 'eth9'.*its interfaces: lo"),
        # the loopback: the other host could never reach the ranks there
        "loopback": ("lo", hosts.endpoint(), r"'lo' is host host[01]'s loopback interface \(127\.0\.0\.1\)"),
        # nobody at the endpoint: each node gives up after the bound, naming the address
        "unreachable": (
            "train0",
            "10.78.0.9:29500",
            rf"node host[01], interface train0 10\.78\.0\.[12] could not reach the rendezvous endpoint "
            rf"10\.78\.0\.9:29500 \(launch.rdzv_endpoint\) within {RDZV_TIMEOUT_S} s",
        ),
    }
    procs = {}
    for name, (ifname, endpoint, _) in cases.items():
        for i in (0, 1):
            env = base_env(tmp_path / name, GLOO_SOCKET_IFNAME=ifname)
            (tmp_path / name).mkdir(exist_ok=True)
            procs[name, i] = hosts.popen(i, node_launch(config, i, endpoint, name), env, tmp_path / name / f"{i}.log")
    try:
        for (name, i), proc in procs.items():
            code = proc.wait(timeout=120)
            output = (tmp_path / name / f"{i}.log").read_text()
            assert code == 2, (name, i, output[-3000:])
            last = output.strip().splitlines()[-1]
            assert last.startswith("error: ") and re.search(cases[name][2], last), (name, i, last)
            assert f"host{i}" in last and "Traceback" not in output, (name, i, output[-3000:])
        clis.join(timeout=300)
    finally:
        for i in (0, 1):
            hosts.kill(i)
    # bounded: the CLI's start plus the bound (and the unreachable endpoint's last connection try)
    assert time.monotonic() - started < 120 + RDZV_TIMEOUT_S
    (host0, host1) = ended["mismatched"]
    for i, (code, output, _) in enumerate((host0, host1)):
        last = paragraph(output)
        assert code == 2 and f"host{i}" in last, (i, output[-4000:])
        assert output.count("launch: ") == 1, (i, "retried")  # the same launch would meet the same wall
        assert "Traceback" not in output.split("launch: ")[1], (i, output[-4000:])
    said0 = paragraph(host0[1])
    assert (
        f"the rendezvous 'job-d' (launch.rdzv_id) did not gather launch.nnodes = 2 within {RDZV_TIMEOUT_S} s" in said0
    )
    assert "rendezvous 'job-e' (launch.rdzv_id)" in paragraph(host1[1])


# Each rank lists the listening TCP sockets of its launcher (its parent) and itself (tests/sockets.py): the table of
# the network namespace (host) it runs in.
LISTENERS_SCRIPT = r"""
import json, os, socket, sys
import torch.distributed as dist
from tests.sockets import listening

dist.init_process_group("gloo")
dist.barrier()
with open(f"{sys.argv[1]}-{dist.get_rank()}.json", "w") as f:
    found = listening([os.getppid(), os.getpid()])
    json.dump({"host": socket.gethostname(), "listening": [s["local"].split(":")[0] for s in found]}, f)
dist.barrier()
dist.destroy_process_group()
"""


def _hex(address: str) -> str:
    """An IPv4 address as /proc/net/tcp writes it (little-endian hex)."""
    return "".join(f"{int(b):02X}" for b in reversed(address.split(".")))


def test_each_host_listens_and_announces_on_train0_only(hosts: TwoHosts, tmp_path: Path) -> None:
    script = tmp_path / "rank.py"
    script.write_text(LISTENERS_SCRIPT)
    launch = [sys.executable, "-m", "cosmos_train.launch", "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d"]
    launch += [f"--rdzv_endpoint={hosts.endpoint()}", "--rdzv_id=listen", "--rdzv_conf=join_timeout=60,read_timeout=60"]
    procs = [
        hosts.popen(
            i,
            [*launch, str(script), str(tmp_path / "listening")],
            base_env(tmp_path, GLOO_SOCKET_IFNAME="train0", PYTHONPATH=str(ROOT)),
            tmp_path / f"launch{i}.log",
        )
        for i in (0, 1)
    ]
    try:
        codes = [p.wait(timeout=180) for p in procs]
    finally:
        for i in (0, 1):
            hosts.kill(i)
    assert codes == [0, 0], [(tmp_path / f"launch{i}.log").read_text()[-3000:] for i in (0, 1)]
    seen = {}
    for rank in (0, 1):
        said = json.loads((tmp_path / f"listening-{rank}.json").read_text())
        seen[said["host"]] = said["listening"]
    assert sorted(seen) == ["host0", "host1"], seen
    # host0: the rendezvous store, the ranks' store and its gloo listener; host1: its gloo listener; nothing on
    # every interface (0.0.0.0) or on the management network
    for host, listening in seen.items():
        assert listening and set(listening) == {_hex(hosts.addr(int(host[-1])))}, (host, listening)


# Ranks that all-reduce forever (a step a line), their group timing out after 10 s without a peer.
FOREVER_SCRIPT = r"""
import datetime, sys, time
import torch, torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
step = 0
while True:
    dist.all_reduce(torch.ones(4))
    step += 1
    print(f"step {step}", flush=True)
    time.sleep(0.2)
"""


def test_a_survivor_of_the_rendezvous_hosts_loss_ends_its_launch(hosts: TwoHosts, tmp_path: Path) -> None:
    """host0 (which hosts the rendezvous store) loses power mid-run: host1's rank fails its collective after its
    group's timeout, but torch's agent never notices (its keep-alive waits on the dead store with no timeout, holding
    the lock its monitor needs); the launcher's watch ends the launch as a crash once the rank stayed uncollected
    past torchrun's --shutdown_timeout (5 s here) + STUCK_AGENT_MARGIN_S, its ranks
    stopped, instead of hanging for good."""
    script = tmp_path / "rank.py"
    script.write_text(FOREVER_SCRIPT)
    launch = [sys.executable, "-m", "cosmos_train.launch", "--nnodes=2", "--nproc_per_node=1", "--rdzv_backend=c10d"]
    launch += [f"--rdzv_endpoint={hosts.endpoint()}", "--rdzv_id=lost0", "--rdzv_conf=join_timeout=60,read_timeout=60"]
    launch += [f"--shutdown_timeout={SHUTDOWN_S}"]
    env = base_env(tmp_path, GLOO_SOCKET_IFNAME="train0")
    procs = [hosts.popen(i, [*launch, str(script)], env, tmp_path / f"launch{i}.log") for i in (0, 1)]
    log1 = tmp_path / "launch1.log"
    try:
        deadline = time.monotonic() + 120
        while log1.read_text().count("step ") < 5:
            assert time.monotonic() < deadline and procs[1].poll() is None, log1.read_text()[-3000:]
            time.sleep(0.2)
        hosts.link(0, up=False)  # the power cut: no FIN or RST reaches host1
        hosts.kill(0)
        cut = time.monotonic()
        code = procs[1].wait(timeout=10 + SHUTDOWN_S + STUCK_AGENT_MARGIN_S + 60)
        took = time.monotonic() - cut
    finally:
        hosts.link(0, up=True)
        for i in (0, 1):
            hosts.kill(i)
    output = log1.read_text()
    assert code == 1, output[-3000:]
    assert "torchrun's agent has not noticed: the rendezvous store at 10.78.0.1:29500 stopped answering" in output
    # the group's timeout, the watch's grace, a margin for 2 busy cores
    assert took < 10 + SHUTDOWN_S + STUCK_AGENT_MARGIN_S + 30, took
    assert hosts.pids(1) == [], "a process of host1 outlived its launch"
