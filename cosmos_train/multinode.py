"""The network side of a multi-node launch (`cosmos_train.launch` with `--rdzv_endpoint`): which address this node
hosts, binds and announces, and the paragraph a node ends with when it cannot meet the others.

What torch does alone, and what breaks on a real cluster (docs/MULTINODE.md):
- The c10d rendezvous store is hosted by the node that recognises the endpoint as itself, and torch compares only
  its host name (and what that resolves to). An endpoint given as an address of a second NIC (the training
  network) is then nobody's: every node waits as a client, times out after 60 s and prints a C++ stack. Here a node
  hosts it when the endpoint resolves to an address of its own (binding a socket there works).
- Every store server listens on every interface. One named by an address listens on that address only here.
- The address a node announces for the ranks' own store is its host name's, whatever network the ranks are told to
  use. Here it is the address of `launch.socket_ifname` (GLOO_SOCKET_IFNAME) when one is named (torchrun's
  --local_addr).
- A missing or loopback interface, an endpoint no node answers on and a rendezvous whose nodes never all arrive
  (a mismatched rdzv_id or nnodes) end the node with one paragraph, bounded by `launch.rdzv_timeout_s`.
- When the node hosting the rendezvous store vanishes mid-run, torch's agent on the others hangs for good: its
  keep-alive thread waits in a store read with no timeout while holding the lock its monitor loop needs, so it never
  sees its ranks fail. `watch_stuck_agent` ends such a launch once a rank stayed uncollected past torchrun's stop
  wait (--shutdown_timeout, 30 s) + 15 s.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import ipaddress
import os
import signal
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any

from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend
from torch.distributed.elastic.rendezvous.api import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousError,
    RendezvousTimeoutError,
)
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

from cosmos_train.logs import write_console
from cosmos_train.process_tree import descendants, unreaped_children

DEFAULT_RDZV_PORT = 29400  # torchrun's, for an endpoint given without a port
_SIOCGIFADDR = 0x8915  # linux/sockios.h: an interface's IPv4 address
_SIOCGIFFLAGS = 0x8913
_IFF_LOOPBACK = 0x8


# torch's agent collects an exited rank within its monitor interval (0.1 s), or within its stop's wait for the others
# (torchrun's --shutdown_timeout); a rank left uncollected this much longer than that wait means the agent is stuck
STUCK_AGENT_MARGIN_S = 15.0


class NodeUnreachable(RuntimeError):
    """This node cannot take part as configured (a missing or loopback interface): said before anything waits."""


def is_local_address(host: str) -> bool:
    """Whether `host` (a name or an address) resolves to an address of this machine: a socket can bind there."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        return False
    for family, _, _, _, sockaddr in infos:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((sockaddr[0], 0))
            except OSError:
                continue
            return True
    return False


def is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _is_loopback(host: str) -> bool:
    try:
        return all(
            ipaddress.ip_address(info[4][0]).is_loopback
            for info in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        )
    except (socket.gaierror, UnicodeError, ValueError):
        return False


def listen_on_named_address(host_name: str) -> str | None:
    """Where a store server named `host_name` listens: that address only when it is one (the nodes reach it
    there), every interface when it is a host name (it may resolve differently here than on the other nodes)."""
    return host_name if is_address(host_name) else None


# Whether this process's rendezvous store connected (or was hosted) once: a connection error after that means the
# endpoint's node went away (e.g. it gave up waiting), not that it was never there
store_reached: list[bool] = []


def host_store_by_address() -> None:
    """Make torch's c10d rendezvous host the store on the node the endpoint names by one of its addresses, not only
    by its host name (torch's `_matches_machine_hostname`); torch still falls back to a client when the port is
    already taken (another agent on the same machine hosts it). Records in `store_reached` that the store was
    reached."""
    original = c10d_rendezvous_backend._matches_machine_hostname
    if getattr(original, "_cosmos_by_address", False):
        return
    create = c10d_rendezvous_backend._create_tcp_store

    def matches(host: str) -> bool:
        return bool(original(host)) or is_local_address(host)

    def create_and_note(params: Any) -> Any:
        store = create(params)
        store_reached.append(True)
        return store

    matches._cosmos_by_address = True  # type: ignore[attr-defined]
    # patches of torch's module functions: create_backend and _create_tcp_store look the names up when they run
    c10d_rendezvous_backend._matches_machine_hostname = matches
    c10d_rendezvous_backend._create_tcp_store = create_and_note


def watch_stuck_agent(endpoint: str, shutdown_s: float, poll_s: float = 1.0) -> threading.Thread:
    """A daemon thread of the launcher: once one of its ranks has exited and stayed uncollected for torchrun's
    `shutdown_s` (--shutdown_timeout) + STUCK_AGENT_MARGIN_S (the agent is stuck on a store whose host is gone), say
    so, stop the other ranks and end the launch with exit 1 (a crash: the flow's retry relaunches, and waits
    `launch.rdzv_timeout_s` for the node at the endpoint)."""
    grace_s = shutdown_s + STUCK_AGENT_MARGIN_S

    def watch() -> None:
        exited: dict[int, float] = {}
        while True:
            now = time.monotonic()
            zombies = set(unreaped_children(os.getpid()))
            exited = {pid: exited.get(pid, now) for pid in zombies}
            if any(now - since >= grace_s for since in exited.values()):
                write_console(
                    "stderr",
                    f"[launch] a rank exited {grace_s:.0f} s ago and torchrun's agent has not noticed: the rendezvous "
                    f"store at {endpoint} stopped answering (the node hosting it is gone); ending this launch as a "
                    "crash (a retry waits launch.rdzv_timeout_s for that node to come back)\n",
                )
                for child in descendants(os.getpid()):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(child, signal.SIGKILL)  # the agent cannot stop them: it is the one stuck
                os._exit(1)
            time.sleep(poll_s)

    thread = threading.Thread(target=watch, name="stuck-agent-watch", daemon=True)
    thread.start()
    return thread


def _ioctl(name: str, request: int) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        return fcntl.ioctl(s.fileno(), request, struct.pack("256s", name.encode()[:15]))


def interfaces() -> dict[str, str]:
    """This host's interfaces and their IPv4 addresses ('' for one without)."""
    out = {}
    for _, name in socket.if_nameindex():
        try:
            out[name] = socket.inet_ntoa(_ioctl(name, _SIOCGIFADDR)[20:24])
        except OSError:
            out[name] = ""
    return out


def _rdzv_conf(args: argparse.Namespace) -> dict[str, str]:
    pairs = [kv.split("=", 1) for kv in (args.rdzv_conf or "").split(",") if "=" in kv]
    return {k.strip(): v.strip() for k, v in pairs}


@dataclass
class NodeNetwork:
    """One node's view of the job's network: the endpoint, the interface named for the ranks and its address."""

    endpoint: str
    host: str  # the endpoint's host part
    port: int
    hostname: str  # this node's
    ifname: str | None  # GLOO_SOCKET_IFNAME (from launch.socket_ifname), its first name when it lists several
    address: str | None = None  # the interface's IPv4 address, once `prepare` checked it

    @classmethod
    def of(cls, args: argparse.Namespace) -> NodeNetwork:
        host, port = parse_rendezvous_endpoint(args.rdzv_endpoint, default_port=DEFAULT_RDZV_PORT)
        names = os.environ.get("GLOO_SOCKET_IFNAME") or os.environ.get("NCCL_SOCKET_IFNAME") or ""
        ifname = names.split(",")[0].strip() or None
        return cls(
            endpoint=args.rdzv_endpoint,
            host=host,
            port=port,
            hostname=socket.gethostname(),
            ifname=ifname,
        )

    def where(self) -> str:
        """This node, for a paragraph: its host name and the interface it uses."""
        via = f", interface {self.ifname} {self.address}" if self.ifname and self.address else ""
        return f"{self.hostname}{via}"

    def prepare(self, args: argparse.Namespace) -> None:
        """Check the named interface and make it the address this node announces (torchrun's --local_addr)."""
        if self.ifname is None:
            return
        found = interfaces()
        listed = ", ".join(f"{n} {a or '(no IPv4 address)'}" for n, a in found.items())
        if self.ifname not in found:
            raise NodeUnreachable(
                f"launch.socket_ifname: host {self.hostname} has no network interface {self.ifname!r} (the ranks' "
                f"GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME); its interfaces: {listed}. Name the interface of the "
                "network the nodes share, the same name on every node (e.g. the one holding the address of "
                f"launch.rdzv_endpoint {self.endpoint} on node 0), or unset it to let gloo / NCCL choose"
            )
        self.address = found[self.ifname]
        if not self.address:
            raise NodeUnreachable(
                f"launch.socket_ifname: the interface {self.ifname!r} of host {self.hostname} has no IPv4 address, "
                f"so the other nodes could not reach the ranks on it; its interfaces: {listed}"
            )
        loopback = bool(struct.unpack("H", _ioctl(self.ifname, _SIOCGIFFLAGS)[16:18])[0] & _IFF_LOOPBACK)
        if loopback and not _is_loopback(self.host):  # a loopback endpoint: every node is on this machine
            raise NodeUnreachable(
                f"launch.socket_ifname: {self.ifname!r} is host {self.hostname}'s loopback interface "
                f"({self.address}): the other nodes cannot reach the ranks there. Name the interface of the "
                f"network the nodes share; its interfaces: {listed}"
            )
        if not args.local_addr:
            args.local_addr = self.address

    def reach(self) -> str:
        """What this node makes of the endpoint now, for a paragraph: whether it is this host, and whether
        something answers there."""
        if is_local_address(self.host):
            return "the endpoint is an address of this host, so this node hosts the rendezvous"
        try:
            with socket.create_connection((self.host, self.port), timeout=3):
                return f"something answers at {self.endpoint} now"
        except OSError as e:
            why = "refused" if e.errno == errno.ECONNREFUSED else str(e.strerror or e)
            return f"a connection to {self.endpoint} now: {why}"


def rendezvous_failure(error: RendezvousError, args: argparse.Namespace, node: NodeNetwork | None) -> str:
    """The paragraph a node ends with when the rendezvous failed: what it tried, for how long, what to check."""
    conf = _rdzv_conf(args)
    wait_s = conf.get("join_timeout") or conf.get("read_timeout") or "600"
    where = node.where() if node else socket.gethostname()
    nodes = f"launch.nnodes = {args.nnodes}"
    rdzv = f"rendezvous {args.rdzv_id!r} (launch.rdzv_id)"
    if isinstance(error, RendezvousConnectionError) and store_reached:
        return (
            f"node {where} reached the rendezvous endpoint {args.rdzv_endpoint} (launch.rdzv_endpoint), then lost "
            f"it while the {rdzv} gathered {nodes}: the node hosting it stopped (its log says why; when it waited "
            f"launch.rdzv_timeout_s in vain, the nodes' rdzv_id or nnodes differ). Start every node again with the "
            "same rdzv_id, nnodes and endpoint"
        )
    if isinstance(error, RendezvousConnectionError):
        now = f" ({node.reach()})" if node else ""
        return (
            f"node {where} could not reach the rendezvous endpoint {args.rdzv_endpoint} (launch.rdzv_endpoint) "
            f"within {conf.get('read_timeout', wait_s)} s (launch.rdzv_timeout_s){now}. The node holding that "
            "address hosts it once it starts: check that it runs, that the endpoint is its address or host name on "
            "the network the nodes share, and that the port is open between the nodes; then start this node again"
        )
    if isinstance(error, RendezvousTimeoutError):
        return (
            f"node {where} reached {args.rdzv_endpoint} (launch.rdzv_endpoint), but the {rdzv} did not gather "
            f"{nodes} within {wait_s} s (launch.rdzv_timeout_s). Every node must run with the same rdzv_id, nnodes "
            "and endpoint, and start within that bound of the first (a node started later needs a longer "
            "launch.rdzv_timeout_s); start the missing nodes, or this one again"
        )
    if isinstance(error, RendezvousClosedError):
        return (
            f"node {where}: the {rdzv} at {args.rdzv_endpoint} was closed by another node (it stopped or failed); "
            "its log says why. Start every node of the job again (each resumes from the newest checkpoint)"
        )
    return f"node {where}: the {rdzv} at {args.rdzv_endpoint} failed: {type(error).__name__}: {error}"
