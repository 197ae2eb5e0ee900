"""A deployment across a pool on two hosts: ONE flow run of `sft/sft-nodes` trains a two-node SFT job, its nodes
run either by the Kubernetes Indexed Job's two pods or by two process workers, one per host.

Both tests share what a pool's user sets up once (the `pool` fixture, about 30 s, paid once): one two-host bed
(tests/two_hosts.py), one real `prefect server start` on host0's management address, the work pool `nodes`, the
`sft-nodes` deployment registered from prefect.yaml, and the reference: a one-node two-process run of the same tiny
3-step SFT job, started on host0 as soon as the server answers, which trains while the first test runs. Each test
starts and stops its own workers, trains into a run folder of its own and counts only the runs of the deployment it
made. The pods test goes first: a run it leaves unfinished is Pending or Running, which no worker of the second test
takes. Skipped, with the reason, where network namespaces cannot be made. About 2 minutes on a 2-core machine (as
two modules, each with its own bed, server, deployment and reference run, they took about 3).

    pytest -x -q tests/integration/flows/test_deployment_nodes.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import ROOT, write_tiny_sft_config
from tests.integration.prefect_server import PREFECT, STOP_GRACE_S, PrefectServer, isolated_env, start_server
from tests.run_outputs import same_weights
from tests.torchrun import kill_group
from tests.two_hosts import TwoHosts, why_no_hosts
from tests.unit.test_deployment_files import pod_argv, pod_env, render_job

NO_HOSTS = why_no_hosts()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(NO_HOSTS is not None, reason=str(NO_HOSTS))]

POOL = "nodes"
DEPLOYMENT = "sft/sft-nodes"
FINAL = ("COMPLETED", "FAILED", "CRASHED", "CANCELLED")
JOB_DEADLINE_S = 420  # the two nodes' runs end well within it; past it the test fails with the workers' logs
PODS_DEADLINE_S = 420  # the two pods end well within it; past it the test fails with their logs
REFERENCE_DEADLINE_S = 300  # the reference's wait after a test's own job: it started before the first test
JOB_NAME = "tiny-job"  # the Job's name: Kubernetes gives it to every pod, for the endpoint (replaced on the bed)
# tasks/training_run.py's line for a node of a job: its rank, host and launch.rdzv_id
NODE_SAID = re.compile(r"node (\d) of 2 on (host\d) \(rendezvous \S+, id (\S+)\)")


def tails(*logs: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in logs if p.exists())


def final_state(server: PrefectServer, run_id: str, deadline_s: float) -> dict:
    end = time.monotonic() + deadline_s
    while True:
        run = server.get(f"/flow_runs/{run_id}").json()
        if run["state_type"] in FINAL or time.monotonic() > end:
            return run
        time.sleep(3)


def run_logs(server: PrefectServer, run_id: str) -> list[str]:
    return [log["message"] for log in server.post("/logs/filter", {"logs": {"flow_run_id": {"any_": [run_id]}}}).json()]


def state_types(server: PrefectServer, run_id: str) -> list[str]:
    """The run's states in order, from its creation."""
    states = server.get(f"/flow_run_states/?flow_run_id={run_id}").json()
    return [s["type"] for s in sorted(states, key=lambda s: s["timestamp"])]


def completed_node_runs(runs: list[dict], run_id: str) -> dict[int, dict]:
    """The runs of a two-node job by node rank: exactly two runs of the deployment, node 0's the one started as
    `run_id`, both Completed."""
    assert len(runs) == 2, [(r["name"], r["parameters"]) for r in runs]
    by_rank = {r["parameters"]["params"].get("node_rank") or 0: r for r in runs}
    assert by_rank[0]["id"] == run_id and set(by_rank) == {0, 1}
    assert all(r["state_type"] == "COMPLETED" for r in runs), [(r["name"], r["state"]) for r in runs]
    return by_rank


@dataclass
class Pool:
    """The bed, the server with the pool and the deployment, and the reference run, shared by this module's tests."""

    hosts: TwoHosts
    server: PrefectServer
    config: Path  # the tiny 3-step SFT job every run here trains
    one_node: subprocess.Popen  # the reference: one node, two processes, the same job
    one_node_log: Path
    one_node_out: Path

    def deployment_runs(self, but: Collection[str] = ()) -> list[dict]:
        """Every flow run of the deployment, less the ids in `but` (the runs an earlier test made)."""
        dep_id = self.server.get(f"/deployments/name/{DEPLOYMENT}").json()["id"]
        runs = self.server.post("/flow_runs/filter", {"flow_runs": {"deployment_id": {"any_": [dep_id]}}}).json()
        return [r for r in runs if r["id"] not in but]

    def reference(self) -> Path:
        """The one-node run's folder, once it has ended with 0."""
        assert self.one_node.wait(timeout=REFERENCE_DEADLINE_S) == 0, tails(self.one_node_log)
        [one_run] = self.one_node_out.iterdir()
        assert str(one_run) in self.one_node_log.read_text()
        return one_run

    def cancel_scheduled(self) -> None:
        """A test's runs left Scheduled (it failed before a worker took them) cancelled: the next test's workers
        take Scheduled runs, and one of them busy with an earlier test's run would fail that test for the wrong
        reason."""
        try:
            for r in self.deployment_runs():
                if r["state_type"] == "SCHEDULED":
                    self.server.post(f"/flow_runs/{r['id']}/set_state", {"state": {"type": "CANCELLED"}, "force": True})
        except httpx.HTTPError:
            pass  # the server is gone: no worker takes anything from it


@pytest.fixture(scope="module")
def pool(tiny_model_dir: Path, synthetic_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pool]:
    root = tmp_path_factory.mktemp("pool")
    config = write_tiny_sft_config(root / "job.toml", tiny_model_dir, synthetic_dir, root / "out", max_num_steps=3)
    hosts = TwoHosts.up(f"ct{os.getpid() % 100000}p")
    try:
        with start_server(root / "prefect", host=hosts.addr(0, "mgmt0"), prefix=hosts.command(0, [])) as server:
            server.wait_healthy(deadline_s=150)
            # the reference meanwhile: one node, two processes, the same job (its own flow run, on host0)
            log, out = root / "one-node.log", root / "one"
            one_node = hosts.popen(
                0,
                [sys.executable, "-m", "cosmos_train.cli", "sft", "--config", str(config)]
                + ["--set", "launch.nproc_per_node=2", "--set", f'train.output_dir="{out}"'],
                env=server.env(OMP_NUM_THREADS="1"),
                log=log,
            )
            try:
                server.cli(["work-pool", "create", POOL, "--type", "process"], cwd=ROOT, timeout_s=120).check()
                # The pull step records {{ $PWD }}: a subprocess's cwd does not update PWD, so set it as a shell would.
                server.cli(
                    ["--no-prompt", "deploy", "--name", "sft-nodes"], cwd=ROOT, timeout_s=180, PWD=str(ROOT)
                ).check()
                yield Pool(hosts, server, config, one_node, log, out)
            finally:
                kill_group(one_node, STOP_GRACE_S)
    finally:
        hosts.down()


def test_the_indexed_jobs_pods_train_one_deployment_run_on_two_hosts(pool: Pool, tmp_path: Path) -> None:
    """The Kubernetes Indexed Job's two pods on two hosts: ONE flow run of `sft/sft-nodes`, each pod runs its node.

    The kubernetes worker makes one Job of nnodes pods for one flow run; every pod gets the same command and the same
    PREFECT__FLOW_RUN_ID. On the module's bed, server and deployment this test plays the worker and Kubernetes: one
    `prefect deployment run` of a two-node SFT job, the run set Pending (as the worker sets it before it makes the
    Job), then the two pods: the command and environment deployments/kubernetes/indexed-job.json renders for pod 0
    and pod 1 of a Job "tiny-job" (tests/unit/test_deployment_files.py: Prefect's templating, then the environment as
    Kubernetes resolves it, plus the worker's PREFECT_API_URL and PREFECT__FLOW_RUN_ID), started on host0 and host1.
    Pod 0 executes the worker's run, pod 1 makes node 1's run (flows/indexed_node.py) and executes it; the entry
    gives both launch.rdzv_id = the worker's flow run id (which a retry's new Job keeps), so they train together into
    one run folder named by that run, and the weights equal the one-node two-process run of the same job. A process
    worker polls the pool meanwhile and takes neither run: both are Pending, and workers take Scheduled runs only.
    (This test runs first: no other worker is up while it runs.)
    """
    hosts, server = pool.hosts, pool.server
    shared = tmp_path / "shared"  # the runs volume every pod mounts at output_dir: the filesystem both hosts share
    started: list[subprocess.Popen] = []
    logs = [tmp_path / "pod0.log", tmp_path / "pod1.log", tmp_path / "worker.log", pool.one_node_log]
    earlier = {r["id"] for r in pool.deployment_runs()}
    try:
        # the job's shape and meeting point come from the pods' environment, not from the run's parameters
        # (train_retries 0: a failure shows as itself, not after a second rendezvous wait)
        params = {"config": str(pool.config), "overrides": ["launch.nproc_per_node=1"], "train_retries": 0}
        run_id = server.deployment_run(DEPLOYMENT, params, cwd=ROOT)
        # The worker's part: it sets the run Pending before it makes the Job for it.
        pending = server.post(f"/flow_runs/{run_id}/set_state", {"state": {"type": "PENDING", "name": "Pending"}})
        assert pending.json()["status"] == "ACCEPT", pending.text
        # A process worker of the pool meanwhile: it must take neither Pending run (the worker's, node 1's);
        # one it took would be executed twice.
        worker = [PREFECT, "worker", "start", "--pool", POOL, "--name", "worker-host1"]
        started.append(hosts.popen(1, worker, env=server.env(PREFECT_WORKER_QUERY_SECONDS="1"), log=logs[2]))

        job = render_job(
            {"image": "cosmos-train:test", "nnodes": 2, "socket_ifname": "train0", "output_dir": str(shared)}
        )
        container = job["job_manifest"]["spec"]["template"]["spec"]["containers"][0]
        worker_env = {"PREFECT_API_URL": server.url, "PREFECT__FLOW_RUN_ID": run_id}
        pods = []
        for i in (0, 1):
            env = pod_env(container, i, JOB_NAME, worker_env)
            # The rendered endpoint, <job>-0.<headless service>:29500, is a cluster DNS name that does not resolve
            # on the bed (its hosts are host0 and host1): host0's training-network address stands in for it.
            env["COSMOS_TRAIN__LAUNCH__RDZV_ENDPOINT"] = hosts.endpoint()
            # the image's PATH (python and prefect of this project) and a PREFECT_HOME of the pod's own
            image = isolated_env(
                tmp_path / f"pod{i}", PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", OMP_NUM_THREADS="1"
            )
            pods.append(hosts.popen(i, pod_argv(container), env={**image, **env}, log=logs[i]))
        started.extend(pods)

        try:
            codes = [p.wait(timeout=PODS_DEADLINE_S) for p in pods]
        except subprocess.TimeoutExpired:
            pytest.fail(f"the pods still ran after {PODS_DEADLINE_S} s\n{tails(*logs)}")
        assert codes == [0, 0], f"pod exit codes {codes}\n{tails(*logs)}"
        runs = pool.deployment_runs(but=earlier)
        said = {r["id"]: run_logs(server, r["id"]) for r in runs}
        states = {r["id"]: state_types(server, r["id"]) for r in runs}
        one_run = pool.reference()
    finally:
        for proc in started:  # the worker too: the next test's runs are Scheduled, and it would take them
            kill_group(proc, STOP_GRACE_S)
        pool.cancel_scheduled()

    # Two runs of the deployment, both completed: the worker's (node 0) and node 1's, its subflow
    by_rank = completed_node_runs(runs, run_id)
    node0, node1 = by_rank[0], by_rank[1]
    assert node1["name"] == f"{node0['name']}-node1" and node1["parent_task_run_id"] is not None
    assert node1["parameters"]["params"] == {**node0["parameters"]["params"], "node_rank": 1}
    # node 1's run was made Pending and executed by its pod, never Scheduled for a worker; the worker took neither
    assert states[node1["id"]] == ["PENDING", "RUNNING", "COMPLETED"], states
    worker_log = logs[2].read_text()
    assert "worker-host1" in worker_log and "started" in worker_log, worker_log[-2000:]
    assert "submitting flow run" not in worker_log.lower(), worker_log[-3000:]
    # each pod trained its own node on its own host, both with the worker's flow run id as rdzv_id (pod 1's own run
    # did not change it), and neither acted as node 0 of a process pool
    for rank, r in by_rank.items():
        nodes = [m.groups() for m in map(NODE_SAID.match, said[r["id"]]) if m]
        assert nodes == [(str(rank), f"host{rank}", run_id)], said[r["id"]]
        assert not any(m.startswith("started the flow runs of nodes") for m in said[r["id"]]), said[r["id"]]

    # One run folder, named by the worker's flow run (launch.rdzv_id), not by the Job: a retry's new Job resumes there
    run = shared / run_id
    assert [p.name for p in shared.iterdir()] == [run_id] and (run / "result.json").is_file()
    train_log = (run / "logs" / "train.log").read_text()
    assert "on 2 process(es)" in train_log, train_log[-3000:]

    # The weights equal the one-node two-process run's
    assert same_weights(one_run / "safetensors" / "final", run / "safetensors" / "final")


def test_one_deployment_run_trains_a_two_node_job_on_two_hosts(pool: Pool, tmp_path: Path) -> None:
    """A deployment across a pool: ONE `prefect deployment run` of a two-node SFT job trains on two hosts.

    One run of `sft/sft-nodes` on the module's bed, server, pool `nodes` and deployment, and one process worker per
    host started with `--limit 1` (as prefect.yaml says a multi-node pool's workers are). The one run is node 0: it
    starts node 1's run of the same deployment (tasks/node_runs.py `other_nodes`), the other worker takes it, and the
    two torchrun agents meet at the rendezvous endpoint and train over train0. The run folder is on the shared
    filesystem, named by node 0's flow run id (the job names no launch.rdzv_id). The exports equal the one-node
    two-process run of the same job.
    """
    hosts, server = pool.hosts, pool.server
    shared = tmp_path / "shared"  # the run folder's parent, on the filesystem both hosts share
    workers: list[subprocess.Popen] = []
    logs = [tmp_path / "worker0.log", tmp_path / "worker1.log", pool.one_node_log]
    earlier = {r["id"] for r in pool.deployment_runs()}
    try:
        overrides = [
            "launch.nnodes=2",
            "launch.nproc_per_node=1",
            'launch.socket_ifname="train0"',
            # host0's address on the training network: its agent hosts the store whichever node's run it took
            f'launch.rdzv_endpoint="{hosts.endpoint()}"',
            f'train.output_dir="{shared}"',
        ]
        # train_retries 0: a failure shows as itself, not after a second rendezvous wait
        params = {"config": str(pool.config), "overrides": overrides, "train_retries": 0}
        # 1 thread per rank, as torchrun sets for a node of several: the float sums then equal the one-node run's
        env = server.env(PREFECT_WORKER_QUERY_SECONDS="1", OMP_NUM_THREADS="1")
        for i in (0, 1):
            argv = [PREFECT, "worker", "start", "--pool", POOL, "--limit", "1", "--name", f"worker-host{i}"]
            workers.append(hosts.popen(i, argv, env=env, log=logs[i]))
        run_id = server.deployment_run(DEPLOYMENT, params, cwd=ROOT)

        node0 = final_state(server, run_id, JOB_DEADLINE_S)
        assert node0["state_type"] == "COMPLETED", f"{node0['state']}\n{tails(*logs)}"
        runs = pool.deployment_runs(but=earlier)
        said = {r["id"]: run_logs(server, r["id"]) for r in runs}
        one_run = pool.reference()
    finally:
        for w in workers:
            kill_group(w, STOP_GRACE_S)
        pool.cancel_scheduled()

    # Two runs of the deployment: the one started by hand (node 0) and node 1's, its subflow; both completed
    by_rank = completed_node_runs(runs, run_id)
    node1 = by_rank[1]
    assert node1["name"] == f"{node0['name']}-node1" and node1["parent_task_run_id"] is not None
    assert node1["parameters"]["params"]["overrides"][: len(overrides)] == overrides
    # ... on two different hosts, each taken by that host's worker
    hosts_of = {}
    for rank, r in by_rank.items():
        lines = [m for m in said[r["id"]] if re.match(r"node \d of 2 on host\d", m)]
        assert len(lines) == 1, said[r["id"]]
        host = re.match(r"node (\d) of 2 on (host\d)", lines[0])
        assert host and int(host.group(1)) == rank, lines
        hosts_of[rank] = host.group(2)
        assert any(f"Worker 'worker-{hosts_of[rank]}' submitting flow run" in m for m in said[r["id"]])
    assert sorted(hosts_of.values()) == ["host0", "host1"], hosts_of

    # One run folder, named by node 0's flow run id (the job named no rdzv_id), trained on 2 processes
    run = shared / run_id
    assert [p.name for p in shared.iterdir()] == [run_id] and (run / "result.json").is_file()
    assert all(any(f"run folder: {run}" == m for m in said[r["id"]]) for r in runs)
    train_log = (run / "logs" / "train.log").read_text()
    assert "on 2 process(es)" in train_log, train_log[-3000:]

    # The weights equal the one-node two-process run's
    assert same_weights(one_run / "safetensors" / "final", run / "safetensors" / "final")
