"""The nodes of a multi-node job (launch.nnodes > 1) run from a deployment: which flow run is node 0 and starts the
others, what it adds to its own job, how it starts and awaits the other nodes' runs.

A job started as ONE run of a process-pool deployment (`prefect deployment run 'sft/sft-nodes'`): that run is node 0.
It gives the job what its nodes must share and the config leaves unset (launch.rdzv_id: its own flow run id;
launch.rdzv_endpoint: its own host name, port 29500), starts nnodes - 1 more runs of the same deployment with the
same parameters plus `node_rank` (subflows of its own, not waited for), trains as node 0, then waits up to
`nodes_wait_s` for them and fails naming the node run that did not complete:

    overrides = job_overrides(params, own_deployment_id(), flow_run.id, socket.gethostname())  # before check_job
    with other_nodes(params, job):                  # node 0 of a deployment run: the other nodes' flow runs
        result = run_trainer(job, "sft", ...)

No other run starts runs:
- a run started without a deployment (the `cosmos-train` CLI, a subflow of `post-train`): each node is then its own
  command with launch.node_rank set;
- a node run (`node_rank` set);
- a node its infrastructure placed: the environment already names its rank (COSMOS_TRAIN__LAUNCH__NODE_RANK, as a
  Slurm task of deployments/slurm and a pod of the Kubernetes Indexed Job get it, with rdzv_id and the endpoint):
  the infrastructure started every node, so the run adds nothing and starts nothing (`placed_node`). The Indexed
  Job's pods make one flow run per node themselves (flows/indexed_node.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from prefect import get_run_logger
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import FlowRun
from prefect.context import FlowRunContext
from prefect.deployments import run_deployment
from prefect.states import Cancelled, Cancelling

from cosmos_train.config import Config, ConfigError, LaunchConfig, env_overrides, parse_config, read_toml
from tasks.run_folder import ResolvedJob

RDZV_PORT = 29500  # torchrun's default rendezvous port, on node 0's host when the config names no endpoint
NODE_POLL_S = 2.0  # how often node 0 reads its node runs' states while it waits for them
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")


class NodeParams(Protocol):
    """What this module reads of a training flow's parameters (tasks/training_run.py TrainJobParams)."""

    @property
    def config(self) -> str: ...

    @property
    def overrides(self) -> list[str]: ...

    @property
    def node_rank(self) -> int | None: ...

    @property
    def nodes_wait_s(self) -> float: ...

    def model_dump(self, *, mode: str = ...) -> dict[str, Any]: ...


def own_deployment_id() -> UUID | None:
    """The deployment this very flow run was created from; None for a run of the CLI or a subflow.

    Not prefect.runtime.deployment.id: a subflow inherits its parent's there (an `sft` stage of a `post-train`
    deployment run would take post-train's deployment for its own)."""
    ctx = FlowRunContext.get()
    return ctx.flow_run.deployment_id if ctx is not None and ctx.flow_run is not None else None


def placed_node(env: Mapping[str, str]) -> bool:
    """The environment names this machine's node of the job (launch.node_rank from a COSMOS_TRAIN__ variable, read
    as the config reads it): its infrastructure started every node and gave each its rank and meeting point."""
    return any(path == ["launch", "node_rank"] for path, _ in env_overrides(env))


def is_node0(params: NodeParams, deployment_id: UUID | None, nnodes: int, placed: bool = False) -> bool:
    """This flow run is node 0 of a multi-node job and starts the other nodes' runs: it was started from a
    deployment, not as one node of a job (`node_rank` unset), on a machine whose environment names no node
    (`placed`: see placed_node)."""
    return nnodes > 1 and deployment_id is not None and params.node_rank is None and not placed


def node0_overrides(launch: LaunchConfig, flow_run_id: UUID, host: str) -> list[str]:
    """What node 0 adds to the job: launch.node_rank = 0, and what every node must share that the config leaves
    unset: rdzv_id (this flow run's id: a UI retry of the run keeps it, so it continues in the same run folder)
    and rdzv_endpoint (this host, where torchrun's c10d store then runs; host names, not addresses, so the agent
    whose host name it is serves the store)."""
    extra = ["launch.node_rank=0"]
    if not launch.rdzv_id:
        extra.append(f"launch.rdzv_id={json.dumps(str(flow_run_id))}")
    if not launch.rdzv_endpoint:
        extra.append(f"launch.rdzv_endpoint={json.dumps(f'{host}:{RDZV_PORT}')}")
    return extra


def job_overrides(
    params: NodeParams,
    deployment_id: UUID | None,
    flow_run_id: UUID,
    host: str,
    env: Mapping[str, str] = os.environ,
) -> list[str]:
    """params.overrides, plus this run's node: launch.node_rank of a node run, or node 0's additions
    (`node0_overrides`) when it is node 0 (added before the config check, which wants rdzv_id when nnodes > 1).
    `env`: this machine's variables, as the config check reads them."""
    if params.node_rank is not None:
        return [*params.overrides, f"launch.node_rank={params.node_rank}"]
    if deployment_id is None or placed_node(env):  # the CLI, a subflow, or a node its infrastructure placed
        return list(params.overrides)
    # The one read of the job TOML before check_job's, in a deployment run only: whether it is node 0 depends on
    # launch.nnodes, and what node 0 adds must be there before the check. Both reads are a moment apart; the
    # run is still resolved once, by check_job, and whatever nnodes it finds is what trains.
    try:  # the launch table as check_job will see it (file, COSMOS_TRAIN__* variables, overrides), unchecked
        raw, source = read_toml(params.config)
        launch = parse_config(raw, params.overrides, env, source).launch
    except (ConfigError, OSError):
        return list(params.overrides)  # check_job says what is wrong, in its own words
    if not is_node0(params, deployment_id, launch.nnodes):
        return list(params.overrides)
    return [*params.overrides, *node0_overrides(launch, flow_run_id, host)]


def node_parameters(params: NodeParams, launch: LaunchConfig) -> list[dict[str, Any]]:
    """The flow parameters of nodes 1 .. nnodes - 1: node 0's own, its job's shape and meeting point as overrides
    (the same on every node whatever each worker's COSMOS_TRAIN__* variables say: overrides beat them), and
    `node_rank`."""
    shared = [
        f"launch.nnodes={launch.nnodes}",
        f"launch.rdzv_id={json.dumps(launch.rdzv_id)}",
        f"launch.rdzv_endpoint={json.dumps(launch.rdzv_endpoint)}",
    ]
    base = params.model_dump(mode="json")
    return [{**base, "overrides": [*params.overrides, *shared], "node_rank": i} for i in range(1, launch.nnodes)]


def limit_problem(limit: int | None, nnodes: int) -> str | None:
    """Why a deployment cannot run a job's nodes at once (its concurrency limit would hold them back), or None."""
    if limit is None or limit >= nnodes:
        return None
    return (
        f"concurrency_limit {limit} < launch.nnodes ({nnodes}): the other nodes' runs would wait for this one, which "
        "waits for them; run multi-node jobs with the `sft-nodes` / `grpo-nodes` deployment (prefect.yaml)"
    )


@dataclass(frozen=True)
class NodeRun:
    """One node's flow run, as node 0 last read it."""

    rank: int
    id: UUID
    name: str
    state: str  # the state type: SCHEDULED, RUNNING, COMPLETED, FAILED ...
    message: str = ""

    def said(self) -> str:
        said = f"node {self.rank}'s flow run {self.name} ({self.id}): {self.state}"
        if self.state == "SCHEDULED":
            said += " (no worker of the pool took it: the pool needs a free worker per node, one per machine)"
        return said + (f": {self.message}" if self.message else "")


def nodes_failure(runs: list[NodeRun], waited_s: float | None = None) -> str | None:
    """One paragraph naming the node runs that did not complete (None: all did); `waited_s`: node 0 gave up
    waiting after that long."""
    bad = [r for r in runs if r.state != "COMPLETED"]
    if not bad:
        return None
    head = "the job's other nodes did not all complete"
    if waited_s is not None and any(r.state not in FINAL for r in bad):
        head += (
            f" (node 0 waited {waited_s:.0f} s after its own training: nodes_wait_s; those still running are cancelled)"
        )
    return head + ":\n" + "\n".join(f"  - {r.said()}" for r in bad)


class NodeRunFailed(RuntimeError):
    """Node 0 trained, but another node's flow run of the job failed or did not end in time."""


def read_node_runs(ids: list[tuple[int, UUID]]) -> list[NodeRun]:
    with get_client(sync_client=True) as client:
        runs = [(rank, client.read_flow_run(i)) for rank, i in ids]
    return [
        NodeRun(
            rank, r.id, r.name, r.state.type.value if r.state else "UNKNOWN", (r.state.message or "") if r.state else ""
        )
        for rank, r in runs
    ]


def cancel_unfinished(runs: list[NodeRun]) -> None:
    """Cancel the runs not yet ended: one no worker took yet at once, a started one through its worker (which
    stops its process group; the trainer checkpoints on SIGTERM)."""
    with get_client(sync_client=True) as client:
        for r in runs:
            if r.state == "SCHEDULED":
                client.set_flow_run_state(r.id, Cancelled(message="node 0 of the job ended first"), force=True)
            elif r.state not in FINAL:
                client.set_flow_run_state(r.id, Cancelling(message="node 0 of the job ended"), force=True)


def await_nodes(
    ids: list[tuple[int, UUID]],
    wait_s: float,
    read: Callable[[list[tuple[int, UUID]]], list[NodeRun]] = read_node_runs,
    cancel: Callable[[list[NodeRun]], None] = cancel_unfinished,
    poll_s: float = NODE_POLL_S,
) -> list[NodeRun]:
    """The node runs once all ended, read every `poll_s`; after `wait_s` those still going are cancelled. Raises
    NodeRunFailed naming every node run that did not complete."""
    deadline = time.monotonic() + wait_s
    runs = read(ids)
    while any(r.state not in FINAL for r in runs) and time.monotonic() < deadline:
        time.sleep(poll_s)
        runs = read(ids)
    if any(r.state not in FINAL for r in runs):
        cancel(runs)
    if message := nodes_failure(runs, wait_s):
        raise NodeRunFailed(message)
    return runs


def start_node_runs(
    deployment_id: UUID, nodes: list[dict[str, Any]], name: str, start: Callable[..., Any] = run_deployment
) -> list[tuple[int, UUID]]:
    """One run of the deployment per further node (timeout=0: not waited for here; subflows of this run in the UI)."""
    started = []
    for p in nodes:
        run = start(
            deployment_id,
            parameters={"params": p},
            flow_run_name=f"{name}-node{p['node_rank']}",
            timeout=0,
            as_subflow=True,
        )
        assert isinstance(run, FlowRun)  # async_dispatch types the sync call's result as value | coroutine
        started.append((int(p["node_rank"]), run.id))
    return started


@contextlib.contextmanager
def other_nodes(params: NodeParams, job: ResolvedJob[Config], env: Mapping[str, str] = os.environ) -> Iterator[None]:
    """Node 0 of a multi-node deployment run: the other nodes' flow runs started on entry, waited for on exit.

    Anything else (one node, the CLI, a node run itself, a node its infrastructure placed: `env` names its rank):
    nothing. Node 0's own training failing cancels the node runs not yet ended (they cannot go on without it) and
    raises its own error; after its success, it waits up to params.nodes_wait_s for them and raises NodeRunFailed
    naming any that did not complete."""
    deployment_id = own_deployment_id()
    launch = job.cfg.launch
    if deployment_id is None or not is_node0(params, deployment_id, launch.nnodes, placed=placed_node(env)):
        yield
        return
    logger = get_run_logger()
    with get_client(sync_client=True) as client:
        deployment = client.read_deployment(deployment_id)
    gcl = deployment.global_concurrency_limit
    if problem := limit_problem(gcl.limit if gcl is not None else None, launch.nnodes):
        raise ConfigError(problem, f"deployment {deployment.name}", what="deployment")
    ctx = FlowRunContext.get()
    assert ctx is not None and ctx.flow_run is not None
    ids = start_node_runs(deployment_id, node_parameters(params, launch), ctx.flow_run.name)
    logger.info("started the flow runs of nodes 1-%d: %s", launch.nnodes - 1, ", ".join(str(i) for _, i in ids))
    try:
        yield
    except BaseException:
        try:
            runs = read_node_runs(ids)
            logger.error("node 0 failed; the other nodes' flow runs:\n%s", "\n".join(r.said() for r in runs))
            cancel_unfinished(runs)
        except Exception as e:  # noqa: BLE001 (node 0's own error is the one to raise)
            logger.warning("could not read or cancel the other nodes' flow runs: %s", e)
        raise
    runs = await_nodes(ids, params.nodes_wait_s)
    logger.info("every node's flow run completed: %s", ", ".join(r.name for r in runs))
