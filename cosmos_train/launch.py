"""torchrun, made safe for our runs: loopback-only rendezvous on one node, no orphans, no launcher traceback.

    python -m cosmos_train.launch --standalone --nproc_per_node=2 -m cosmos_train.train.sft --config RUN/config.toml

Takes torchrun's own arguments and runs `torch.distributed.run` in this process, with three changes:
- Single node (`--standalone`): torchrun's c10d stores listen on every interface, so anyone on the
  network could join or disturb the rendezvous. Here every store server is bound to 127.0.0.1
  (TCPStore's `master_listen_fd` takes a socket we bound), and gloo / NCCL bootstrap sockets use the
  loopback interface unless the user set GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME. A multi-node run
  (`--rdzv_endpoint`) is left as the config names it.
- The launcher watches its parent (`process_tree.watch_parent`): if the flow or CLI that started it
  is killed, it stops its ranks instead of leaving them hung.
- A rank that failed has already said why (a user error's paragraph, or its traceback, and
  RUN/error.json); torchrun's own ChildFailedError traceback on top of that says nothing new, so it
  becomes one line and the rank's exit code.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from typing import Any

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
from torch.distributed.run import get_args_parser, run

from cosmos_train.process_tree import watch_parent

LOOPBACK = "127.0.0.1"


def _bound_listener(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, port))
    sock.listen(512)
    return sock


def bind_stores_to_loopback() -> None:
    """Make every TCPStore server this process creates listen on 127.0.0.1 only.

    torch creates them in three places of the elastic agent (rendezvous backend, agent store, worker
    store), all through `torch.distributed.TCPStore`; a server given an already-listening socket uses
    it instead of binding all interfaces itself."""
    original = dist.TCPStore
    if getattr(original, "_cosmos_loopback", False):
        return

    class LoopbackTCPStore(dist.TCPStore):  # `original`, not yet patched (checked above)
        _cosmos_loopback = True

        def __init__(self, host_name: str, port: int = 0, *args: Any, **kwargs: Any) -> None:
            is_master = kwargs.get("is_master", args[1] if len(args) > 1 else False)
            if is_master and kwargs.get("master_listen_fd") is None:
                # The store owns the descriptor from here on (it closes it on shutdown).
                kwargs["master_listen_fd"] = _bound_listener(int(port)).detach()
                host_name = LOOPBACK
            super().__init__(host_name, port, *args, **kwargs)

    # a patch of torch's class: mypy refuses assigning to a class name, which is the point here
    dist.TCPStore = LoopbackTCPStore  # type: ignore[misc]


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


def main(argv: list[str] | None = None) -> int:
    watch_parent(grace_s=45.0)  # torchrun gives its ranks 30 s after SIGTERM before it kills them
    args = get_args_parser().parse_args(argv)
    if args.standalone:
        bind_stores_to_loopback()
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
        os.environ.setdefault("MASTER_ADDR", LOOPBACK)
    try:
        run(args)
    except ChildFailedError as e:
        cause = root_cause(list(e.failures.values()))
        print(
            f"[launch] rank {cause.local_rank} exited with code {cause.exitcode}; torchrun stopped the others",
            file=sys.stderr,
        )
        return cause.exitcode if 0 < cause.exitcode < 256 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
