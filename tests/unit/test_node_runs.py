"""Node 0 of a multi-node job run from a deployment (tasks/node_runs.py), without a server or training: when a run
is node 0, what it adds to its own job, the parameters of the other nodes' runs and how they are started, the
deployments it refuses, and the paragraph naming a node run that did not complete; a node its infrastructure placed
(its environment names its rank) is never such a node 0; and the Indexed-Job pods' entry (flows/indexed_node.py):
which run each pod executes. The real things, both in tests/integration/flows/test_deployment_nodes.py: two workers
on two hosts; two Indexed-Job pods on two hosts.

    pytest -q tests/unit/test_node_runs.py
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from uuid import UUID, uuid4

import pytest
from prefect.client.schemas.objects import FlowRun

from cosmos_train.config import ConfigError, load_config
from flows import indexed_node
from flows.grpo import GRPOParams
from flows.sft import SFTParams
from tasks import node_runs
from tasks.node_runs import (
    RDZV_PORT,
    NodeRun,
    NodeRunFailed,
    await_nodes,
    is_node0,
    job_overrides,
    limit_problem,
    node_parameters,
    nodes_failure,
    other_nodes,
    placed_node,
    start_node_runs,
)
from tasks.run_folder import ResolvedJob
from tasks.training_run import TrainJobParams
from tests.conftest import write_tiny_sft_config
from tests.two_hosts import node_env

DEPLOYMENT = UUID("00000000-0000-4000-8000-0000000000d1")
NODE0_RUN = UUID("12345678-aaaa-4bbb-8ccc-1234567890ab")
TWO_NODES = ["launch.nnodes=2", "launch.nproc_per_node=1"]


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("NNODES", "NODE_RANK", "RDZV_ID", "RDZV_ENDPOINT"):  # a caller's own would change the job
        monkeypatch.delenv(f"COSMOS_TRAIN__LAUNCH__{name}", raising=False)
    return write_tiny_sft_config(tmp_path / "job.toml", tmp_path / "model", tmp_path / "data", tmp_path / "out")


def launch_of(params: TrainJobParams, overrides: list[str]) -> Any:
    """The launch table the flow's config check sees with these overrides (every semantic check included)."""
    return load_config(params.config, overrides, env={}, check_paths=False).launch


def test_only_a_deployment_run_without_a_node_rank_of_a_multinode_job_is_node0() -> None:
    p = TrainJobParams(config="job.toml")
    assert is_node0(p, DEPLOYMENT, 2) and is_node0(p, DEPLOYMENT, 8)
    assert not is_node0(p, None, 2)  # the CLI, or a subflow (post-train's sft stage): as before
    assert not is_node0(p, DEPLOYMENT, 1)  # one node: nothing to start
    assert not is_node0(TrainJobParams(config="job.toml", node_rank=1), DEPLOYMENT, 2)  # a node run itself
    assert not is_node0(TrainJobParams(config="job.toml", node_rank=0), DEPLOYMENT, 2)  # a node 0 started by hand


def test_node0_names_the_job_and_its_meeting_point_before_the_config_check(config: Path) -> None:
    p = SFTParams(config=str(config), overrides=TWO_NODES)
    with pytest.raises(ConfigError, match="launch.rdzv_id: required"):  # what node 0 adds is what the check wants
        launch_of(p, p.overrides)
    overrides = job_overrides(p, DEPLOYMENT, NODE0_RUN, "gpu-node-7")
    assert overrides[: len(TWO_NODES)] == TWO_NODES  # the user's own first, node 0's after them
    launch = launch_of(p, overrides)
    assert launch.node_rank == 0 and launch.nnodes == 2
    assert launch.rdzv_id == str(NODE0_RUN)  # its flow run's id: a UI retry of that run keeps its run folder
    assert launch.rdzv_endpoint == f"gpu-node-7:{RDZV_PORT}"


def test_node0_keeps_the_rendezvous_the_job_names(config: Path) -> None:
    named = [*TWO_NODES, 'launch.rdzv_id="job-7"', 'launch.rdzv_endpoint="10.78.0.1:29500"']
    p = SFTParams(config=str(config), overrides=named)
    assert job_overrides(p, DEPLOYMENT, NODE0_RUN, "gpu-node-7") == [*named, "launch.node_rank=0"]
    launch = launch_of(p, job_overrides(p, DEPLOYMENT, NODE0_RUN, "gpu-node-7"))
    assert (launch.rdzv_id, launch.rdzv_endpoint, launch.node_rank) == ("job-7", "10.78.0.1:29500", 0)


def test_node0_counts_the_nodes_its_workers_variables_give(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nnodes from COSMOS_TRAIN__LAUNCH__NNODES on node 0's machine makes it node 0 too, as the check would read it."""
    monkeypatch.setenv("COSMOS_TRAIN__LAUNCH__NNODES", "3")
    p = SFTParams(config=str(config), overrides=["launch.nproc_per_node=1"])
    assert "launch.node_rank=0" in job_overrides(p, DEPLOYMENT, NODE0_RUN, "h0")


def test_the_cli_a_subflow_and_one_node_jobs_are_run_as_given(config: Path) -> None:
    p = SFTParams(config=str(config), overrides=TWO_NODES)
    assert job_overrides(p, None, NODE0_RUN, "h0") == TWO_NODES  # no deployment: as before this change
    one = SFTParams(config=str(config), overrides=["launch.nproc_per_node=2"])
    assert job_overrides(one, DEPLOYMENT, NODE0_RUN, "h0") == ["launch.nproc_per_node=2"]
    # a config that does not load: untouched, so the flow's config check names the problem in its own words
    missing = SFTParams(config=str(config.with_name("nope.toml")), overrides=TWO_NODES)
    assert job_overrides(missing, DEPLOYMENT, NODE0_RUN, "h0") == TWO_NODES


def pod_env_of(rank: int, folder: Path) -> dict[str, str]:
    """What pod `rank` of the Indexed Job "tiny-job" runs with (deployments/kubernetes/indexed-job.json, and the
    rdzv_id flows/indexed_node.py gives it: the flow run's id), as a Slurm task gets the same names from
    deployments/slurm."""
    return node_env(
        rank,
        nnodes=2,
        endpoint="tiny-job-0.cosmos-train-rdzv:29500",
        rdzv_id=str(NODE0_RUN),
        socket_ifname="eth0",
        output_dir=folder / "runs",
    )


def test_the_environment_places_a_node_when_it_names_its_rank(tmp_path: Path) -> None:
    assert placed_node(pod_env_of(0, tmp_path)) and placed_node(pod_env_of(1, tmp_path))
    assert placed_node({"COSMOS_TRAIN__launch__node_rank": "1"})  # the config reads the name in any case
    assert not placed_node({})
    assert not placed_node({"COSMOS_TRAIN__LAUNCH__NNODES": "2", "COSMOS_TRAIN__LAUNCH__RDZV_ID": "job-7"})
    assert not is_node0(TrainJobParams(config="job.toml"), DEPLOYMENT, 2, placed=True)


def test_a_node_its_infrastructure_placed_adds_nothing_to_its_job(config: Path, tmp_path: Path) -> None:
    """A deployment run without node_rank on a pod of the Indexed Job (or any machine whose environment names its
    node): it trains the node its environment names, with the environment's rdzv_id and endpoint."""
    p = SFTParams(config=str(config), overrides=["launch.nproc_per_node=1"])
    for rank in (0, 1):
        env = pod_env_of(rank, tmp_path)
        overrides = job_overrides(p, DEPLOYMENT, NODE0_RUN, f"tiny-job-{rank}", env=env)
        assert overrides == p.overrides
        launch = load_config(p.config, overrides, env=env, check_paths=False).launch
        assert (launch.node_rank, launch.nnodes) == (rank, 2)
        assert (launch.rdzv_id, launch.rdzv_endpoint) == (str(NODE0_RUN), "tiny-job-0.cosmos-train-rdzv:29500")
    # pod i's own run (flows/indexed_node.py sets node_rank = i): the same node
    node1 = SFTParams(config=str(config), overrides=["launch.nproc_per_node=1"], node_rank=1)
    env = pod_env_of(1, tmp_path)
    overrides = job_overrides(node1, DEPLOYMENT, uuid4(), "tiny-job-1", env=env)
    assert load_config(node1.config, overrides, env=env, check_paths=False).launch.node_rank == 1
    # the same run where the environment names no node is node 0 of the process-pool kind
    unplaced = {k: v for k, v in pod_env_of(0, tmp_path).items() if k != "COSMOS_TRAIN__LAUNCH__NODE_RANK"}
    assert "launch.node_rank=0" in job_overrides(p, DEPLOYMENT, NODE0_RUN, "h0", env=unplaced)


def test_a_node_its_infrastructure_placed_starts_no_runs(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = SFTParams(config=str(config), overrides=["launch.nproc_per_node=1"])
    env = pod_env_of(0, tmp_path)
    job = ResolvedJob(cfg=load_config(p.config, p.overrides, env=env, check_paths=False), run=tmp_path / "run")
    assert job.cfg.launch.nnodes == 2
    asked: list[str] = []

    def server(*args: Any, **kwargs: Any) -> Any:
        asked.append("get_client")
        raise RuntimeError("node 0 read its deployment to start the others")

    monkeypatch.setattr(node_runs, "own_deployment_id", lambda: DEPLOYMENT)  # a run of the deployment, in the pod
    monkeypatch.setattr(node_runs, "get_client", server)
    monkeypatch.setattr(node_runs, "start_node_runs", server)
    monkeypatch.setattr(node_runs, "get_run_logger", lambda: logging.getLogger("test"))
    with other_nodes(p, job, env=env):
        pass
    assert asked == []
    # the same run on a machine whose environment names no node: node 0, it goes for its deployment
    with pytest.raises(RuntimeError, match="start the others"), other_nodes(p, job, env={}):
        pass
    assert asked == ["get_client"]


# --- the Indexed-Job pods' entry (flows/indexed_node.py) ----------------------------------------------------------

WORKER_COMMAND = ["prefect", "flow-run", "execute"]
FLOW = UUID("00000000-0000-4000-8000-00000000f10a")


class FakeClient:
    """The Prefect client calls a pod i > 0 makes, recorded: the first run as the worker made it."""

    def __init__(self, deployment_id: UUID | None = DEPLOYMENT) -> None:
        self.first = FlowRun(
            id=NODE0_RUN,
            name="brave-fox",
            flow_id=FLOW,
            deployment_id=deployment_id,
            parameters={"params": {"config": "job.toml", "overrides": ["launch.nproc_per_node=1"], "train_retries": 0}},
            tags=["nightly"],
            job_variables={"nnodes": 2},
        )
        self.task_runs: list[dict[str, Any]] = []
        self.created: list[tuple[UUID, dict[str, Any]]] = []

    def read_flow_run(self, flow_run_id: UUID) -> FlowRun:
        assert flow_run_id == self.first.id
        return self.first

    def read_deployment(self, deployment_id: UUID) -> Any:
        return SimpleNamespace(id=deployment_id, name="sft-nodes")

    def read_flow(self, flow_id: UUID) -> Any:
        return SimpleNamespace(id=flow_id, name="sft")

    def create_task_run(self, **kwargs: Any) -> Any:
        self.task_runs.append(kwargs)
        return SimpleNamespace(id=uuid4())

    def create_flow_run_from_deployment(self, deployment_id: UUID, **kwargs: Any) -> FlowRun:
        self.created.append((deployment_id, kwargs))
        return FlowRun(flow_id=FLOW, name=kwargs["name"], deployment_id=deployment_id, parameters=kwargs["parameters"])


def _with_client(monkeypatch: pytest.MonkeyPatch, client: FakeClient | None) -> None:
    @contextlib.contextmanager
    def get_client(sync_client: bool = False) -> Iterator[Any]:
        assert client is not None, "this pod asked the API"
        assert sync_client
        yield client

    monkeypatch.setattr(indexed_node, "get_client", get_client)


def test_pod0_executes_the_workers_flow_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _with_client(monkeypatch, None)
    env = {**pod_env_of(0, tmp_path), "PREFECT__FLOW_RUN_ID": str(NODE0_RUN), "PATH": "/usr/bin"}
    assert indexed_node.pod_command(WORKER_COMMAND, env) == (WORKER_COMMAND, env)
    assert indexed_node.pod_command([], env)[0] == WORKER_COMMAND  # bare: the worker's default command


def test_pod_i_executes_a_pending_run_of_its_own_for_node_i(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client = FakeClient()
    _with_client(monkeypatch, client)
    env = {**pod_env_of(1, tmp_path), "PREFECT__FLOW_RUN_ID": str(NODE0_RUN), "PATH": "/usr/bin"}
    command, got = indexed_node.pod_command(WORKER_COMMAND, env)
    [(deployment_id, created)] = client.created
    assert command == WORKER_COMMAND and deployment_id == DEPLOYMENT  # the same deployment, the worker's command
    assert got == {**env, "PREFECT__FLOW_RUN_ID": got["PREFECT__FLOW_RUN_ID"]}
    assert got["PREFECT__FLOW_RUN_ID"] != str(NODE0_RUN)  # ... for the new run
    assert created["name"] == "brave-fox-node1"
    assert created["state"].type.value == "PENDING"  # no worker of the pool takes it (they take Scheduled runs)
    params = created["parameters"]["params"]
    assert params == {**client.first.parameters["params"], "node_rank": 1}
    assert SFTParams.model_validate(params).node_rank == 1  # what the server checks against the flow's schema
    # a subflow of the first run, as run_deployment(as_subflow=True) links one
    [task_run] = client.task_runs
    assert task_run["flow_run_id"] == NODE0_RUN and task_run["task"].name == "sft/sft-nodes"
    assert created["parent_task_run_id"] is not None
    assert created["tags"] == ["nightly"] and created["job_variables"] == {"nnodes": 2}


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"COSMOS_TRAIN__LAUNCH__NODE_RANK": None}, "COSMOS_TRAIN__LAUNCH__NODE_RANK is 'not set'"),
        ({"COSMOS_TRAIN__LAUNCH__NODE_RANK": "-1"}, "COSMOS_TRAIN__LAUNCH__NODE_RANK is '-1'"),
        ({"PREFECT__FLOW_RUN_ID": None}, "PREFECT__FLOW_RUN_ID is 'not set'"),
        ({"PREFECT__FLOW_RUN_ID": "brave-fox"}, "PREFECT__FLOW_RUN_ID is 'brave-fox'"),
    ],
)
def test_a_pod_that_cannot_tell_its_node_or_run_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict[str, str | None], said: str
) -> None:
    _with_client(monkeypatch, None)
    env = {**pod_env_of(1, tmp_path), "PREFECT__FLOW_RUN_ID": str(NODE0_RUN)}
    for name, value in change.items():
        if value is None:
            del env[name]
        else:
            env[name] = value
    with pytest.raises(indexed_node.IndexedNodeError, match=re.escape(said)):
        indexed_node.pod_command(WORKER_COMMAND, env)
    monkeypatch.setattr(indexed_node.os, "environ", env)  # the pod's whole environment
    assert indexed_node.main(WORKER_COMMAND) == 2  # said, and nothing executed


def test_pod_i_refuses_a_run_it_cannot_make_a_node_run_of(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _with_client(monkeypatch, FakeClient(deployment_id=None))
    env = {**pod_env_of(1, tmp_path), "PREFECT__FLOW_RUN_ID": str(NODE0_RUN)}
    with pytest.raises(indexed_node.IndexedNodeError, match="has no deployment"):
        indexed_node.pod_command(WORKER_COMMAND, env)
    with pytest.raises(indexed_node.IndexedNodeError, match="no `params` table"):
        indexed_node.node_run_parameters({"cfg": {}}, 1)


def test_each_node_run_trains_its_rank_of_node0s_job(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parameters of nodes 1 .. nnodes-1: node 0's own with `node_rank`; on their machines (other variables,
    another host, another flow run id) they resolve to node 0's rendezvous with their own rank."""
    p = SFTParams(config=str(config), overrides=[*TWO_NODES, "launch.nnodes=3"], train_retries=2, nodes_wait_s=30)
    node0 = launch_of(p, job_overrides(p, DEPLOYMENT, NODE0_RUN, "host0"))
    nodes = node_parameters(p, node0)
    assert [n["node_rank"] for n in nodes] == [1, 2]
    # the same run everywhere else: the dicts are what the server validates and the flow on the node gets
    for n in nodes:
        assert {k: v for k, v in n.items() if k not in ("overrides", "node_rank")} == {
            k: v for k, v in p.model_dump(mode="json").items() if k not in ("overrides", "node_rank")
        }
        assert n["overrides"][: len(p.overrides)] == p.overrides
        json.dumps(n)  # sent as JSON
    monkeypatch.setenv("COSMOS_TRAIN__LAUNCH__RDZV_ID", "another-job")  # a worker's own variables lose to node 0's
    monkeypatch.setenv("COSMOS_TRAIN__LAUNCH__NNODES", "5")
    for n in nodes:
        child = SFTParams.model_validate(n)
        overrides = job_overrides(child, DEPLOYMENT, uuid4(), "host1")
        launch = load_config(child.config, overrides, check_paths=False).launch  # with the variables above
        assert launch.node_rank == n["node_rank"]
        assert (launch.nnodes, launch.rdzv_id, launch.rdzv_endpoint) == (3, str(NODE0_RUN), f"host0:{RDZV_PORT}")


def test_the_node_runs_are_started_unawaited_as_subflows_of_node0() -> None:
    calls: list[tuple[tuple, dict]] = []

    def start(*args: Any, **kwargs: Any) -> FlowRun:
        calls.append((args, kwargs))
        return FlowRun(flow_id=uuid4(), name=kwargs["flow_run_name"])

    nodes = [{"config": "job.toml", "node_rank": 1}, {"config": "job.toml", "node_rank": 2}]
    started = start_node_runs(DEPLOYMENT, nodes, "brave-fox", start=start)
    assert [rank for rank, _ in started] == [1, 2] and all(isinstance(i, UUID) for _, i in started)
    assert [args for args, _ in calls] == [(DEPLOYMENT,), (DEPLOYMENT,)]  # the same deployment as node 0's
    for (_, kwargs), node in zip(calls, nodes):
        assert kwargs["parameters"] == {"params": node}
        assert kwargs["timeout"] == 0 and kwargs["as_subflow"] is True  # not waited for; under node 0 in the UI
    assert [kw["flow_run_name"] for _, kw in calls] == ["brave-fox-node1", "brave-fox-node2"]


def test_a_deployment_whose_limit_would_hold_the_nodes_back_is_refused() -> None:
    said = limit_problem(1, 2)
    assert said and "concurrency_limit 1 < launch.nnodes (2)" in said and "sft-nodes" in said
    assert limit_problem(None, 4) is None and limit_problem(4, 4) is None


def test_a_node_run_that_did_not_complete_is_named() -> None:
    ok = NodeRun(1, uuid4(), "brave-fox-node1", "COMPLETED")
    failed = NodeRun(2, uuid4(), "brave-fox-node2", "FAILED", "Flow run encountered an exception: TorchrunFailed")
    running = NodeRun(3, uuid4(), "brave-fox-node3", "RUNNING")
    assert nodes_failure([ok]) is None
    said = nodes_failure([ok, failed], waited_s=600)
    assert said is not None and str(failed.id) in said and "node 2's flow run brave-fox-node2" in said
    assert "TorchrunFailed" in said and "brave-fox-node1" not in said and "waited" not in said
    late = nodes_failure([ok, running], waited_s=600)
    assert late is not None and "waited 600 s" in late and "nodes_wait_s" in late and "RUNNING" in late


def test_node0_waits_for_the_node_runs_to_end_and_fails_naming_one_that_did_not_complete() -> None:
    ids = [(1, uuid4()), (2, uuid4())]
    states = iter([["RUNNING", "PENDING"], ["RUNNING", "RUNNING"], ["COMPLETED", "FAILED"]])
    cancelled: list[list[NodeRun]] = []

    def read(asked: list[tuple[int, UUID]]) -> list[NodeRun]:
        return [NodeRun(rank, i, f"fox-node{rank}", state) for (rank, i), state in zip(asked, next(states))]

    with pytest.raises(NodeRunFailed, match=f"node 2's flow run fox-node2 \\({ids[1][1]}\\): FAILED") as e:
        await_nodes(ids, wait_s=60, read=read, cancel=cancelled.append, poll_s=0)
    assert "fox-node1" not in str(e.value) and not cancelled  # every run ended: nothing to cancel

    states = iter([["RUNNING", "COMPLETED"], ["COMPLETED", "COMPLETED"]])
    assert [r.state for r in await_nodes(ids, wait_s=60, read=read, cancel=cancelled.append, poll_s=0)] == [
        "COMPLETED",
        "COMPLETED",
    ]


def test_node0_stops_waiting_at_its_bound_and_cancels_the_runs_still_going() -> None:
    ids = [(1, uuid4()), (2, uuid4())]
    reads: list[int] = []
    cancelled: list[list[NodeRun]] = []

    def read(asked: list[tuple[int, UUID]]) -> list[NodeRun]:
        reads.append(1)
        return [NodeRun(1, asked[0][1], "fox-node1", "COMPLETED"), NodeRun(2, asked[1][1], "fox-node2", "SCHEDULED")]

    start = time.monotonic()
    with pytest.raises(NodeRunFailed) as e:
        await_nodes(ids, wait_s=0.3, read=read, cancel=cancelled.append, poll_s=0.05)
    assert 0.3 <= time.monotonic() - start < 5 and len(reads) > 2
    said = str(e.value)
    assert "waited 0 s" in said and "nodes_wait_s" in said and "fox-node2" in said and "no worker of the pool" in said
    assert [[r.name for r in runs] for runs in cancelled] == [
        ["fox-node1", "fox-node2"]
    ]  # all handed over: cancel_unfinished skips the ended


def test_node_params_are_described_and_bounded() -> None:
    for cls in (SFTParams, GRPOParams):
        for name in ("node_rank", "nodes_wait_s"):
            field = cls.model_fields[name]
            assert (field.description or "").strip(), name
            bounds = {type(m).__name__ for m in field.metadata}
            assert {"Ge", "Le"} <= bounds, (name, bounds)
    with pytest.raises(ValueError):
        SFTParams(config="job.toml", node_rank=-1)
    with pytest.raises(ValueError):
        SFTParams(config="job.toml", nodes_wait_s=-1)
