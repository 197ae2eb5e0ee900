"""torchrun, made safe for our runs: loopback-only rendezvous on one node, no orphans, no launcher traceback.

    python -m cosmos_train.launch --standalone --nproc_per_node=2 -m cosmos_train.train.sft --config RUN/config.toml

Takes torchrun's own arguments and runs `torch.distributed.run` in this process, with these changes:
- Single node (`--standalone`): torchrun's c10d stores listen on every interface, so anyone on the
  network could join or disturb the rendezvous. Here every store server is bound to 127.0.0.1
  (TCPStore's `master_listen_fd` takes a socket we bound), and gloo / NCCL bootstrap sockets use the
  loopback interface unless the user set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME.
- Several nodes (`--rdzv_endpoint`, cosmos_train.multinode): the node whose address the endpoint is hosts the
  rendezvous store (torch only recognises its host name), a store named by an address listens on that address
  only, the socket interface (launch.socket_ifname) gives the address this node announces, and a missing,
  loopback or unreachable interface, an endpoint nobody answers on or a rendezvous that never fills ends the node
  with one paragraph naming what it tried and the bound it waited, exit 2.
- The launcher watches its parent (`process_tree.watch_parent`): if the flow or CLI that started it
  is killed, it stops its ranks instead of leaving them hung. Its stop takes the first stop signal only
  (`stop_signals_once`): the watchdog and the dead CLI's reaper both send one, and a second would cut
  torchrun's wait for the ranks' stop checkpoint short.
- Its console is followed (`logs.follow_console`): once the process reading its output is gone, its lines
  go on in the run's RUN/logs/train.log instead of killing it with a broken pipe (the ranks do the same).
- A rank that failed has already said why (a user error's paragraph, or its traceback, and
  RUN/error.json); torchrun's own ChildFailedError traceback on top of that says nothing new, so it
  becomes one line and the rank's exit code.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing import api as elastic_processes
from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend
from torch.distributed.elastic.rendezvous.api import RendezvousError
from torch.distributed.run import get_args_parser, run

from cosmos_train.errors import EXIT_USER_ERROR
from cosmos_train.logs import follow_console, write_console
from cosmos_train.multinode import (
    NodeNetwork,
    NodeUnreachable,
    host_store_by_address,
    listen_on_named_address,
    rendezvous_failure,
    watch_stuck_agent,
)
from cosmos_train.process_tree import STOP_GRACE_S, TORCHRUN_STOP_S, watch_parent

LOOPBACK = "127.0.0.1"


def _bound_listener(address: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    sock.listen(512)
    return sock


def bind_stores(listen_address: Callable[[str], str | None]) -> None:
    """Make every TCPStore server this process creates listen on `listen_address(its host name)` only (None: on
    every interface, torch's own way).

    torch creates them in three places of the elastic agent (rendezvous backend, agent store, worker
    store), all through `torch.distributed.TCPStore`; a server given an already-listening socket uses
    it instead of binding all interfaces itself."""
    original = dist.TCPStore
    if getattr(original, "_cosmos_bound", False):
        return

    class BoundTCPStore(dist.TCPStore):  # `original`, not yet patched (checked above)
        _cosmos_bound = True

        def __init__(self, host_name: str, port: int = 0, *args: Any, **kwargs: Any) -> None:
            is_master = kwargs.get("is_master", args[1] if len(args) > 1 else False)
            address = listen_address(host_name) if is_master and kwargs.get("master_listen_fd") is None else None
            if address is not None:
                # The store owns the descriptor from here on (it closes it on shutdown).
                kwargs["master_listen_fd"] = _bound_listener(address, int(port)).detach()
                host_name = address
            super().__init__(host_name, port, *args, **kwargs)

    # a patch of torch's class: mypy refuses assigning to a class name, which is the point here
    dist.TCPStore = BoundTCPStore  # type: ignore[misc]
    # the c10d rendezvous backend imported the name itself (when first imported: multinode imports it early)
    c10d_rendezvous_backend.TCPStore = BoundTCPStore  # type: ignore[misc]


def bind_stores_to_loopback() -> None:
    """Make every TCPStore server this process creates listen on 127.0.0.1 only (one node)."""
    bind_stores(lambda host_name: LOOPBACK)


# Within this many seconds of a rank killed by a signal, a rank that exited with an error was reacting to it
# (its peer's sockets closed); torchrun's own stop is SIGTERM, and SIGKILL only after 30 s of it.
_REACTION_S = 5


def root_cause(failures: list[Any]) -> Any:
    """The failed rank that caused the others' failures (torchrun ProcessFailure: local_rank, exitcode,
    timestamp): a rank killed by a signal other than torchrun's SIGTERM (SIGKILL from outside or the OOM
    killer, SIGSEGV) when no rank had exited with an error well before it, else the first rank that exited
    with an error (exit code > 0), else the first."""
    stopped = {-signal.SIGTERM, -signal.SIGINT}
    killed = sorted((f for f in failures if f.exitcode < 0 and f.exitcode not in stopped), key=lambda f: f.timestamp)
    errored = sorted((f for f in failures if f.exitcode > 0), key=lambda f: f.timestamp)
    if killed and (not errored or killed[0].timestamp <= errored[0].timestamp + _REACTION_S):
        return killed[0]
    return (errored or sorted(failures, key=lambda f: f.timestamp))[0]


def stop_signals_once() -> None:
    """Make torchrun's agent act on the first stop signal only. It turns SIGTERM / SIGINT / SIGHUP / SIGQUIT into
    a SignalException, whose handling stops the ranks: SIGTERM to each, then up to --shutdown_timeout for their
    stop checkpoint before SIGKILL. A second signal would raise again in the middle of that wait and end the
    launcher with its ranks unwaited-for (orphans that then stop themselves unsaved); once the stop has begun,
    later signals are ignored (SIGKILL still ends the launcher)."""
    original = elastic_processes._terminate_process_handler
    if getattr(original, "_cosmos_once", False):
        return
    stopping: list[int] = []

    def handle_once(signum: int, frame: FrameType | None) -> None:
        if stopping:
            return
        stopping.append(signum)
        original(signum, frame)

    handle_once._cosmos_once = True  # type: ignore[attr-defined]
    # a patch of torch's module function: PContext.start() installs whatever the name holds when it runs
    elastic_processes._terminate_process_handler = handle_once


def run_log_of(training_args: list[str]) -> Path | None:
    """RUN/logs/train.log of the trainer's `--config RUN/config.toml`, None when the command names none."""
    for i, arg in enumerate(training_args):
        if arg == "--config" and i + 1 < len(training_args):
            return Path(training_args[i + 1]).resolve().parent / "logs" / "train.log"
        if arg.startswith("--config="):
            return Path(arg.partition("=")[2]).resolve().parent / "logs" / "train.log"
    return None


def main(argv: list[str] | None = None) -> int:
    args = get_args_parser().parse_args(argv)
    # torchrun gives its ranks --shutdown_timeout (30 s unless set) after SIGTERM before it kills them; the
    # launcher's own exit follows
    shutdown_s = float(args.shutdown_timeout or TORCHRUN_STOP_S)
    watch_parent(grace_s=STOP_GRACE_S + max(0.0, shutdown_s - TORCHRUN_STOP_S))
    stop_signals_once()
    follow_console(run_log_of(list(args.training_script_args)))
    node: NodeNetwork | None = None
    try:
        if args.standalone:
            bind_stores_to_loopback()
            # the address the ranks are told to find their store at (torch's default is this host's name, which on
            # most machines resolves to a network address, where the loopback-bound store is not)
            args.local_addr = args.local_addr or LOOPBACK
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
            os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
            os.environ.setdefault("MASTER_ADDR", LOOPBACK)
        elif args.rdzv_endpoint:
            node = NodeNetwork.of(args)
            node.prepare(args)
            watch_stuck_agent(args.rdzv_endpoint, shutdown_s)
            bind_stores(listen_on_named_address)
            host_store_by_address()
        run(args)
    except NodeUnreachable as e:  # said once per node, and not retried: the same launch meets the same wall
        write_console("stderr", f"error: {e}\n")
        return EXIT_USER_ERROR
    except RendezvousError as e:
        write_console("stderr", f"error: {rendezvous_failure(e, args, node)}\n")
        return EXIT_USER_ERROR
    except SignalException as e:  # a stop asked from outside (Ctrl-C's SIGTERM, a cancel): the ranks saved and said so
        write_console("stderr", f"[launch] stopped by signal {int(e.sigval)}; the ranks were stopped\n")
        return 128 + int(e.sigval)
    except ChildFailedError as e:
        cause = root_cause(list(e.failures.values()))
        said = f"[launch] rank {cause.local_rank} exited with code {cause.exitcode}; torchrun stopped the others"
        write_console("stderr", said + "\n")
        return cause.exitcode if 0 < cause.exitcode < 256 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
