"""prefect.yaml's deployments against a real Prefect server, driven by the `prefect` CLI as users do.

One isolated server for the module (own PREFECT_HOME, free port): `prefect work-pool create`,
`prefect --no-prompt deploy --all` from the project root, `prefect deployment run`, then
`prefect worker start --run-once` from another folder runs the flow through the pull step.
About 60-100 s on a loaded 2-core machine, most of it process start-up.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, write_tiny_sft_config
from tests.integration.prefect_server import PrefectServer, start_server

pytestmark = pytest.mark.slow

DEPLOYMENT = "prepare-data/prepare-data"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    with start_server(tmp_path_factory.mktemp("prefect-server")) as srv:
        yield srv


@pytest.fixture(scope="module")
def job_config(server: PrefectServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prepare-data job on 8 synthetic clips; it asks for `server` so the server boots meanwhile."""
    from cosmos_train.data.synthetic import make_synthetic_dataset
    from cosmos_train.models.tiny import make_tiny_model

    root = tmp_path_factory.mktemp("deploy-job")
    model = make_tiny_model(root / "model")
    data = make_synthetic_dataset(root / "data", n_train=8, n_val=4, n_test=4)
    return write_tiny_sft_config(root / "job.toml", model, data, root / "out")


@pytest.fixture(scope="module")
def deployed(server: PrefectServer, job_config: Path) -> PrefectServer:
    server.wait_healthy(deadline_s=150)
    for pool in ("local", "nodes"):  # `nodes`: the multi-node deployments' pool (one worker per machine)
        server.cli(["work-pool", "create", pool, "--type", "process"], cwd=ROOT, timeout_s=120).check()
    # The pull step records {{ $PWD }}: a subprocess's cwd does not update PWD, so set it as a shell would.
    server.cli(["--no-prompt", "deploy", "--all"], cwd=ROOT, timeout_s=180, PWD=str(ROOT)).check()
    return server


def runs_of(server: PrefectServer, deployment_id: str) -> list[dict]:
    resp = server.post("/flow_runs/filter", {"flow_runs": {"deployment_id": {"any_": [deployment_id]}}})
    resp.raise_for_status()
    return resp.json()


def test_deploy_all_registers_prefect_yaml(deployed: PrefectServer) -> None:
    declared = {d["name"]: d for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]}
    found = {d["name"]: d for d in deployed.post("/deployments/filter", {}).json()}
    assert set(found) == set(declared)
    for name, want in declared.items():
        got = found[name]
        assert got["entrypoint"] == want["entrypoint"] and got["work_pool_name"] == want["work_pool"]["name"], name
        assert got["work_pool_name"] == ("nodes" if name.endswith("-nodes") else "local"), name
        # Every deployment, the scheduled one included, must refuse bad parameters up front.
        assert got["enforce_parameter_schema"] is True, name
        assert got["pull_steps"] == [{"prefect.deployments.steps.set_working_directory": {"directory": str(ROOT)}}], (
            name
        )
    for trainer in (
        "sft",
        "grpo",
        "post-train",
        "learning-benchmark",
    ):  # one training job at a time: they share the accelerators
        assert found[trainer]["global_concurrency_limit"]["limit"] == 1, trainer
    for trainer in ("sft", "grpo"):  # a multi-node job's node runs are runs of one deployment: no limit holds them
        assert found[f"{trainer}-nodes"]["entrypoint"] == found[trainer]["entrypoint"]
        assert found[f"{trainer}-nodes"]["global_concurrency_limit"] is None, trainer
    [nightly] = found["sft-nightly"]["schedules"]
    assert nightly["active"] is False and nightly["schedule"]["cron"] == "0 3 * * *"
    assert found["sft-nightly"]["parameters"] == {"params": {"config": "configs/tiny-sft.toml"}}
    [nightly_eval] = found["evaluate-nightly"]["schedules"]
    assert nightly_eval["active"] is False
    assert found["evaluate-nightly"]["parameters"]["params"]["newest_export_in"] == "outputs"


def test_bad_parameters_are_refused_before_a_run_exists(deployed: PrefectServer) -> None:
    dep = deployed.get(f"/deployments/name/{DEPLOYMENT}").json()
    before = len(runs_of(deployed, dep["id"]))

    cli = deployed.cli(
        ["deployment", "run", DEPLOYMENT, "--param", 'params={"overrides": "x"}'], cwd=ROOT, timeout_s=120
    )
    assert cli.returncode != 0 and "'config' is a required property" in cli.output, cli.output

    # The same refusals straight from the API, so it is the server that checks, not the CLI.
    for params, field in (({"params": {"config": 3}}, "params.config"), ({}, "'params' is a required property")):
        resp = deployed.post(f"/deployments/{dep['id']}/create_flow_run", {"parameters": params})
        assert resp.status_code == 409 and field in resp.text, resp.text

    assert len(runs_of(deployed, dep["id"])) == before


def test_prepare_data_deployment_runs_on_a_process_worker(
    deployed: PrefectServer, job_config: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    params = {"config": str(job_config), "run_dir": str(run_dir), "overrides": ["validation.enable=true"]}
    run_id = deployed.deployment_run(DEPLOYMENT, params, cwd=ROOT)

    # From an unrelated folder: the deployment's pull step must bring the run into the project.
    worker = deployed.cli(["worker", "start", "--pool", "local", "--run-once"], cwd=tmp_path, timeout_s=400)
    run = deployed.get(f"/flow_runs/{run_id}").json()
    assert worker.returncode == 0 and run["state_type"] == "COMPLETED", f"{run['state']}\n{worker.output[-6000:]}"
    assert run["parameters"] == {"params": params}

    manifest = run_dir / "manifest.jsonl"
    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert len(rows) == 8 and rows[0]["messages"][-1]["content"] in "ABCD"
    assert len((run_dir / "manifest_val.jsonl").read_text().splitlines()) == 4
    assert (run_dir / "config.toml").is_file() and json.loads((run_dir / "prep_report.json").read_text())

    # What a user sees in the UI: the flow's log naming the manifest it returned, and its report.
    logs = deployed.post("/logs/filter", {"logs": {"flow_run_id": {"any_": [run_id]}}}).json()
    assert any(f"manifest: {manifest}" in log["message"] for log in logs), [log["message"] for log in logs]
    arts = deployed.post("/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run_id]}}}).json()
    assert "prepare-data-report" in {a["key"] for a in arts}


def test_a_multinode_job_on_a_deployment_with_a_concurrency_limit_is_refused_before_its_nodes_start(
    deployed: PrefectServer, job_config: Path, tmp_path: Path
) -> None:
    """A two-node job run from `sft/sft` (concurrency_limit 1): node 0 would start node 1's run of the same
    deployment, which the limit holds back while node 0 waits for it. It refuses instead, naming the deployment
    to use; no node run is created. (tests/integration/flows/test_deployment_nodes.py runs `sft-nodes` on two hosts.)"""
    params = {
        "config": str(job_config),
        "overrides": ["launch.nnodes=2", "launch.nproc_per_node=1", f'train.output_dir="{tmp_path / "out"}"'],
    }
    run_id = deployed.deployment_run("sft/sft", params, cwd=ROOT)
    worker = deployed.cli(["worker", "start", "--pool", "local", "--run-once"], cwd=tmp_path, timeout_s=400)
    run = deployed.get(f"/flow_runs/{run_id}").json()
    assert run["state_type"] == "FAILED", f"{run['state']}\n{worker.output[-6000:]}"
    assert "concurrency_limit 1 < launch.nnodes (2)" in run["state"]["message"], run["state"]
    assert "sft-nodes" in run["state"]["message"]
    # node 0 named the job before its check (launch.rdzv_id: its flow run id), then started nothing
    assert [p.name for p in (tmp_path / "out").iterdir()] == [run_id]
    children = deployed.post("/flow_runs/filter", {"flow_runs": {"parent_flow_run_id": {"any_": [run_id]}}}).json()
    assert children == []


def test_post_train_deployment_runs_the_pipeline_on_a_process_worker(deployed: PrefectServer, tmp_path: Path) -> None:
    """`prefect deployment run 'post-train/post-train'` of the tiny pipeline (SFT 2 steps, GRPO 2 steps, 4
    benchmark questions per model, upload to a loopback S3), picked up by a worker: Completed, the stages as
    subflow runs, the summary artifact, the GRPO export's files and manifest in the bucket."""
    from cosmos_train.data.synthetic import make_synthetic_dataset
    from cosmos_train.models.tiny import make_tiny_model
    from cosmos_train.storage.s3 import MANIFEST
    from tests.integration.flows.test_post_train_flow import write_pipeline
    from tests.s3_server import s3_server

    model = make_tiny_model(tmp_path / "model")
    data = make_synthetic_dataset(tmp_path / "data", n_train=16, n_val=4, n_test=4)
    config = write_pipeline(tmp_path / "pipeline.toml", model, data, tmp_path / "out", grpo_steps=2)
    with s3_server(tmp_path / "s3") as s3:
        params = {
            "config": str(config),
            "overrides": [
                "evaluate.base=false",
                "evaluate.limit=4",
                f'upload.to=["s3://{s3.bucket}/tiny"]',
                f'upload.s3_endpoint_url="{s3.url}"',
            ],
        }
        run_id = deployed.deployment_run("post-train/post-train", params, cwd=ROOT)

        # The worker's environment carries the store's credentials, as a real worker's would.
        keys = {k: v for k, v in s3.env.items() if k != "AWS_ENDPOINT_URL"}
        worker = deployed.cli(["worker", "start", "--pool", "local", "--run-once"], cwd=tmp_path, timeout_s=900, **keys)
        run = deployed.get(f"/flow_runs/{run_id}").json()
        assert worker.returncode == 0 and run["state_type"] == "COMPLETED", f"{run['state']}\n{worker.output[-6000:]}"
        stored = s3.objects("tiny/")

    record = json.loads((tmp_path / "out" / "tiny" / "pipeline.json").read_text())["stages"]
    upload_stage = f"upload grpo -> s3://{s3.bucket}/tiny"
    assert {n: r["status"] for n, r in record.items()} == {
        "prepare-sft": "done",
        "prepare-grpo": "done",
        "sft": "done",
        "evaluate-sft": "done",
        "grpo": "done",
        "evaluate-grpo": "done",
        upload_stage: "done",
    }
    export = Path(record["grpo"]["result"]["export"])
    local = {p.relative_to(export).as_posix(): p.read_bytes() for p in export.rglob("*") if p.is_file()}
    manifest = json.loads(stored.pop(f"tiny/{MANIFEST}"))
    assert {k.removeprefix("tiny/"): v for k, v in stored.items()} == local and len(manifest["files"]) == len(local)
    arts = deployed.post("/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run_id]}}}).json()
    summary = next(a for a in arts if a["key"] == "post-train-summary")
    rows = json.loads(summary["data"])
    assert [r["model"] for r in rows] == ["sft", "grpo"] and all("(n=4)" in r["accuracy"] for r in rows)
    assert rows[1]["uploaded to"] == f"s3://{s3.bucket}/tiny"
    # The stages ran as subflows of the pipeline's run: their own runs, each with the pipeline as parent.
    children = deployed.post("/flow_runs/filter", {"flow_runs": {"parent_flow_run_id": {"any_": [run_id]}}}).json()
    flows = {deployed.get(f"/flows/{c['flow_id']}").json()["name"] for c in children}
    assert {"prepare-data", "sft", "grpo", "evaluate", "upload"} <= flows, flows


def test_sweep_deployment_runs_its_trials_as_runs_of_the_sft_deployment(
    deployed: PrefectServer, job_config: Path, tmp_path: Path
) -> None:
    """`prefect deployment run 'sweep/sweep'` with "deployment": "sft/sft": a polling worker picks up the sweep's
    run, then each trial's run of the sft deployment (run_deployment, linked as subflows of the sweep's run,
    named by their settings); the comparison table names the best trial."""
    import subprocess
    import time

    from tests.integration.prefect_server import PREFECT, STOP_GRACE_S
    from tests.torchrun import kill_group

    params = {
        "config": str(job_config),
        "overrides": ["train.max_num_steps=2", "validation.enable=true"],
        "grid": ["train.optm_lr=1e-3,1e-4"],
        "deployment": "sft/sft",
        "output_dir": str(tmp_path / "sweeps"),
        "name": "lr",
        "train_retries": 0,
    }
    run_id = deployed.deployment_run("sweep/sweep", params, cwd=ROOT)
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(  # a worker that keeps polling: the trials' runs are scheduled after the sweep's
        [PREFECT, "worker", "start", "--pool", "local"],
        cwd=tmp_path,
        env=deployed.env(PREFECT_WORKER_QUERY_SECONDS="2"),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            run = deployed.get(f"/flow_runs/{run_id}").json()
            if run["state_type"] in ("COMPLETED", "FAILED", "CRASHED", "CANCELLED"):
                break
            time.sleep(2)
    finally:
        kill_group(worker, STOP_GRACE_S)
        deployed.kill_unfinished_flow_runs()
    worker_log = (tmp_path / "worker.log").read_text(errors="replace")[-6000:]
    assert run["state_type"] == "COMPLETED", f"{run['state']}\n{worker_log}"
    children = deployed.post("/flow_runs/filter", {"flow_runs": {"parent_flow_run_id": {"any_": [run_id]}}}).json()
    sft_id = deployed.get("/deployments/name/sft/sft").json()["id"]
    assert {c["name"] for c in children} == {"lr=0.001", "lr=0.0001"}
    assert all(c["deployment_id"] == sft_id and c["state_type"] == "COMPLETED" for c in children), children
    arts = deployed.post("/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run_id]}}}).json()
    table = json.loads(next(a for a in arts if a["key"] == "sweep-table")["data"])
    assert [r["trial"] for r in table] == ["lr=0.001", "lr=0.0001"] and [r["state"] for r in table] == ["done"] * 2
    assert [r["best"] for r in table].count("best") == 1 and all(r["steps"] == 2 for r in table)
