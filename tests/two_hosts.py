"""Two real hosts on this machine for multi-node tests: `scripts/two_hosts.sh` (network namespaces host0 and host1,
each with a management network `mgmt0` its host name resolves to and a training network `train0`, its own loopback
and its own host name; the filesystem shared, as a cluster's shared storage). Root only: where namespaces cannot
be made, `why_no_hosts()` says why and the tests skip with it.

    hosts = TwoHosts.up("ct1234")
    proc = hosts.popen(1, ["cosmos-train", "sft", ...], env=node_env(1, ...), log=tmp_path / "node1.log")
    hosts.link(1, up=False)     # host1's cables out
    hosts.down()

`node_env` is the one list of variables a node of a multi-node job gets: the test bed passes exactly these, and
deployments/ (the Slurm batch script, the Kubernetes Indexed-Job template) set exactly these.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

BED = ROOT / "scripts" / "two_hosts.sh"
RENDEZVOUS_PORT = 29500  # torchrun's default; each host has its own ports, so it is free on a fresh bed


def why_no_hosts() -> str | None:
    """Why two hosts cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    for tool in ("ip", "unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"no `{tool}` on PATH"
    probe = f"ctprobe{os.getpid() % 10000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _bed(*args: str, check: bool = True) -> str:
    done = subprocess.run([str(BED), *args], capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise RuntimeError(f"two_hosts.sh {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout.strip()


@dataclass
class TwoHosts:
    name: str

    @classmethod
    def up(cls, name: str) -> TwoHosts:
        _bed("down", name, check=False)  # a bed a killed test left behind
        _bed("up", name)
        return cls(name)

    def down(self) -> None:
        _bed("down", self.name, check=False)

    def addr(self, host: int, net: str = "train0") -> str:
        return _bed("addr", self.name, str(host), net)

    def endpoint(self, net: str = "train0") -> str:
        """host0's rendezvous endpoint on `net`."""
        return f"{self.addr(0, net)}:{RENDEZVOUS_PORT}"

    def command(self, host: int, args: list[str]) -> list[str]:
        """`args` run on `host`, with its host name."""
        return [str(BED), "exec", self.name, str(host), *args]

    def popen(self, host: int, args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        """Start `args` on `host` in a session of its own, its output into `log`."""
        with log.open("w") as out:
            return subprocess.Popen(
                self.command(host, args),
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill(self, host: int) -> None:
        """SIGKILL every process on `host`."""
        _bed("kill", self.name, str(host))

    def link(self, host: int, up: bool) -> None:
        """`host`'s cables (both networks) in or out."""
        _bed("link", self.name, str(host), "up" if up else "down")

    def bytes_sent(self, host: int, net: str) -> int:
        return int(_bed("bytes", self.name, str(host), net))

    def pids(self, host: int) -> list[int]:
        """The processes running on `host`."""
        out = subprocess.run(["ip", "netns", "pids", f"{self.name}-{host}"], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]


def node_env(
    node_rank: int, *, nnodes: int, endpoint: str, rdzv_id: str, socket_ifname: str, output_dir: Path
) -> dict[str, str]:
    """The variables one node of a multi-node job is started with (a Slurm task, an Indexed-Job pod, the test bed):
    the job's shape and meeting point, as `COSMOS_TRAIN__*` overrides the config reads (cosmos_train.config)."""
    return {
        "COSMOS_TRAIN__LAUNCH__NNODES": str(nnodes),
        "COSMOS_TRAIN__LAUNCH__NODE_RANK": str(node_rank),
        "COSMOS_TRAIN__LAUNCH__RDZV_ENDPOINT": endpoint,
        "COSMOS_TRAIN__LAUNCH__RDZV_ID": rdzv_id,
        "COSMOS_TRAIN__LAUNCH__SOCKET_IFNAME": socket_ifname,
        "COSMOS_TRAIN__TRAIN__OUTPUT_DIR": str(output_dir),
    }
