"""What each pod of the Kubernetes Indexed Job runs (deployments/kubernetes/indexed-job.json): one flow run per node.

    python -m flows.indexed_node prefect flow-run execute

The kubernetes worker makes ONE Job for ONE flow run, and every pod of the Job gets the same command (the worker's,
`prefect flow-run execute`, the template's `command` variable) and the same PREFECT__FLOW_RUN_ID. Run bare, every
pod would execute that one run (Prefect lets only one of them run it). The template's container runs this entry,
with the worker's command as its arguments:

- pod 0 (completion index 0) execs the worker's command: it runs the flow run the worker made the Job for.
- pod i > 0 reads that flow run, creates a run of the same deployment for node i (its parameters with
  `node_rank` = i, named <run name>-node<i>, a subflow of the first run in the UI) in state Pending, and execs the
  worker's command for that new run. No worker takes a Pending run (workers poll for Scheduled runs only), so this
  pod is the only one to execute it.

Every pod's launch.rdzv_id is the worker's flow run id (PREFECT__FLOW_RUN_ID as the worker set it, before pod i
swaps in its own run): this entry sets COSMOS_TRAIN__LAUNCH__RDZV_ID before it execs. A retry of the flow run (the
UI's Retry, the flow's retries) is a NEW Job with a new generated name, but the same flow run id, so it trains on in
the same run folder <output_dir>/<rdzv_id> from the first attempt's checkpoints; a Job-name rdzv_id would start it
from scratch. Set here, not in the template as `$(PREFECT__FLOW_RUN_ID)`: Kubernetes expands a reference only to a
variable listed earlier in the container's env, and where the worker inserts PREFECT__FLOW_RUN_ID there is
prefect-kubernetes's choice; an unresolved reference stays as written, one literal rdzv_id (one run folder) for
every Job. The rendezvous endpoint still names pod 0 of THIS Job (<job name>-0.<headless service>:<port>, the
template's).

The pod's completion index is COSMOS_TRAIN__LAUNCH__NODE_RANK (the template sets it from the pod's
batch.kubernetes.io/job-completion-index annotation, beside the endpoint), so none of these runs acts as node 0 of a
process pool (tasks/node_runs.py `placed_node`): the Job started every node.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID, uuid4

from prefect import Task
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.client.schemas.objects import FlowRun
from prefect.states import Pending

from cosmos_train.config import ENV_PREFIX

logger = logging.getLogger("cosmos_train.indexed_node")

NODE_RANK_VAR = f"{ENV_PREFIX}LAUNCH__NODE_RANK"  # the template's: the pod's completion index
FLOW_RUN_VAR = "PREFECT__FLOW_RUN_ID"  # the worker's: the flow run it made the Job for
RDZV_ID_VAR = f"{ENV_PREFIX}LAUNCH__RDZV_ID"  # this entry's: the worker's flow run id, on every pod of every Job
# What the worker runs when the `command` job variable is unset (prefect.workers.base's _base_flow_run_command);
# the template passes the worker's command as arguments, so this applies only to a bare `python -m flows.indexed_node`
WORKER_COMMAND = "prefect flow-run execute"


class IndexedNodeError(RuntimeError):
    """A pod that cannot tell which node it is or which flow run to execute."""


def node_index(env: Mapping[str, str]) -> int:
    """This pod's completion index, as the template passes it."""
    raw = env.get(NODE_RANK_VAR, "").strip()
    if not raw.isdigit():
        raise IndexedNodeError(
            f"{NODE_RANK_VAR} is {raw or 'not set'!r}: this entry runs in a pod of the Indexed Job of "
            "deployments/kubernetes/indexed-job.json, which sets it to the pod's completion index"
        )
    return int(raw)


def flow_run_id(env: Mapping[str, str]) -> UUID:
    """The flow run the worker made this Job for."""
    raw = env.get(FLOW_RUN_VAR, "").strip()
    try:
        return UUID(raw)
    except ValueError:
        raise IndexedNodeError(
            f"{FLOW_RUN_VAR} is {raw or 'not set'!r}: the kubernetes worker sets it on the Job it makes for a flow run"
        ) from None


def node_run_parameters(parameters: Mapping[str, Any], rank: int) -> dict[str, Any]:
    """The first run's parameters with `node_rank` = rank in its `params` (TrainJobParams of `sft` and `grpo`)."""
    params = parameters.get("params")
    if not isinstance(params, dict):
        raise IndexedNodeError(
            f"the flow run's parameters have no `params` table ({sorted(parameters)}): the Indexed-Job template runs "
            "cosmos-train's `sft` and `grpo` deployments"
        )
    return {**parameters, "params": {**params, "node_rank": rank}}


def create_node_run(client: SyncPrefectClient, first_id: UUID, rank: int) -> FlowRun:
    """A Pending run of the first run's deployment for node `rank`, a subflow of the first run."""
    first = client.read_flow_run(first_id)
    if first.deployment_id is None:
        raise IndexedNodeError(f"flow run {first.name} ({first_id}) has no deployment: a worker's runs all have one")
    deployment = client.read_deployment(first.deployment_id)
    flow = client.read_flow(first.flow_id)
    # The placeholder task run a subflow hangs from in the first run, as run_deployment(as_subflow=True) makes it.
    parent = client.create_task_run(
        task=Task(name=f"{flow.name}/{deployment.name}", fn=lambda: None),
        flow_run_id=first.id,
        dynamic_key=str(uuid4()),
        state=Pending(),
    )
    return client.create_flow_run_from_deployment(
        first.deployment_id,
        parameters=node_run_parameters(first.parameters, rank),
        name=f"{first.name}-node{rank}",
        # Pending, not Scheduled: workers take Scheduled runs only, so none of the pool's starts a second Job for it
        state=Pending(message=f"node {rank} of the Indexed Job of flow run {first.name}: executed in its pod {rank}"),
        tags=first.tags,
        parent_task_run_id=parent.id,
        job_variables=first.job_variables,
    )


def pod_command(argv: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """The command this pod execs and its environment: the worker's command for the worker's run (pod 0), or for a
    new run of node i (pod i > 0; creates it)."""
    command = list(argv) or shlex.split(WORKER_COMMAND)
    rank, first = node_index(env), flow_run_id(env)
    if rank == 0:
        logger.info("node 0: flow run %s", first)
        return command, dict(env)
    with get_client(sync_client=True) as client:
        run = create_node_run(client, first, rank)
    logger.info("node %d: flow run %s (%s), made from %s", rank, run.name, run.id, first)
    return command, {**env, FLOW_RUN_VAR: str(run.id)}


def with_rdzv_id(env: Mapping[str, str]) -> dict[str, str]:
    """`env` with launch.rdzv_id = the worker's flow run id, the one id the Job's pods share that a retry keeps (the
    retry's Job has another name). It replaces any other: a rendezvous id given through the worker's `env` would put
    every run of the deployment in one run folder."""
    return {**env, RDZV_ID_VAR: str(flow_run_id(env))}


def pod_process(argv: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    """What this pod execs, with its whole environment: the job's rdzv_id taken from the worker's run first, then the
    run this pod executes (`pod_command`: pod i > 0 swaps in its own, the rdzv_id stays)."""
    return pod_command(argv, with_rdzv_id(env))


def main(argv: Sequence[str]) -> int:
    logging.basicConfig(format="%(asctime)s %(name)s: %(message)s")  # a no-op where Prefect set up the root's
    logger.setLevel(logging.INFO)  # the pod's log says which run it executes (Prefect's root logger shows warnings)
    try:
        command, env = pod_process(argv, os.environ)
    except IndexedNodeError as e:
        logger.error("%s", e)
        return 2
    logging.shutdown()
    os.execvpe(command[0], command, env)  # replaces this process: the pod's exit status is the command's


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
