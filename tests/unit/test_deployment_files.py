"""The multi-node deployment files set exactly the variables a node of a multi-node job gets (tests/two_hosts.py
`node_env`, the test bed's list), with the values node_env gives for the same job, and each is a config key the
launcher reads:

- deployments/slurm: node.sh and the whole batch script run here, with stand-ins for srun, scontrol and cosmos-train
  on PATH (the stand-in cosmos-train writes down the environment and arguments it was started with);
- deployments/kubernetes: the work-pool template rendered with Prefect's own templating, as a worker does, and each
  pod's environment resolved as Kubernetes would (downward API, `$(VAR)` references) for pod 0 and pod 1; each pod
  runs flows/indexed_node.py with the worker's command as its arguments, and that entry adds launch.rdzv_id (the
  worker's flow run id), so a pod's environment as the entry execs the command is what must hold node_env's names.
  (`render_job`, `pod_env` and `pod_argv` are what tests/integration/flows/test_deployment_nodes.py starts its two pods
  with.)

    .venv/bin/python -m pytest -q tests/unit/test_deployment_files.py
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
import shlex
import subprocess
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import yaml
from prefect.client.schemas.objects import FlowRun
from prefect.server.schemas.actions import validate_base_job_template
from prefect.utilities.schema_tools import ValidationError, validate
from prefect.utilities.templating import apply_values
from prefect.workers.base import BaseJobConfiguration

from cosmos_train.config.load import load_config
from cosmos_train.config.overrides import ENV_PREFIX, env_overrides
from cosmos_train.config.schema import Config
from cosmos_train.errors import ConfigError
from flows import indexed_node
from tests.conftest import ROOT, write_tiny_sft_config
from tests.two_hosts import node_env

SLURM = ROOT / "deployments" / "slurm"
KUBE = ROOT / "deployments" / "kubernetes"
# What node.sh reads besides Slurm's variables; it removes them before the command starts.
SETTINGS = ("COSMOS_SOCKET_IFNAME", "COSMOS_RUNS_DIR", "COSMOS_RDZV_PORT", "COSMOS_RDZV_HOST")
BASH_OWN = {"PWD", "OLDPWD", "SHLVL", "_"}  # what bash itself puts in its children's environment


# --- the launcher reads each name -------------------------------------------------------------------------------


def launcher_reads(env: dict[str, str], folder: Path) -> Config:
    """A tiny job config loaded as the CLI loads it, with `env`'s COSMOS_TRAIN__* variables applied; each one must
    land on the key it names with its value (an unknown key raises ConfigError, as the CLI refuses it)."""
    job = write_tiny_sft_config(folder / "job.toml", folder / "model", folder / "data", folder / "outputs")
    cfg = load_config(job, env=env, check_paths=False)
    for path, value in env_overrides(env):
        got: Any = cfg
        for part in path:
            got = getattr(got, part)
        assert got == value, f"{ENV_PREFIX}{'__'.join(path).upper()}={value!r} gave {'.'.join(path)} = {got!r}"
    return cfg


def test_the_launcher_reads_every_node_env_name(tmp_path: Path) -> None:
    env = node_env(1, nnodes=2, endpoint="n1:29500", rdzv_id="job-7", socket_ifname="ib0", output_dir=tmp_path / "r")
    cfg = launcher_reads(env, tmp_path)
    assert (cfg.launch.nnodes, cfg.launch.node_rank, cfg.launch.rdzv_endpoint) == (2, 1, "n1:29500")
    assert (cfg.launch.rdzv_id, cfg.launch.socket_ifname, cfg.train.output_dir) == ("job-7", "ib0", str(tmp_path / "r"))


@pytest.mark.parametrize("name", ["COSMOS_TRAIN__LAUNCH__NODE_RNK", "COSMOS_TRAIN__TRAIN__OUTPUTDIR"])
def test_the_check_refuses_a_misspelled_name(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match=name.split("__")[-1].lower()):
        launcher_reads({name: "1"}, tmp_path)


# --- Slurm --------------------------------------------------------------------------------------------------------


def _script(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)


def _stand_ins(tmp_path: Path, nodelist: str, hosts: list[str]) -> tuple[Path, Path]:
    """A folder of stand-ins (srun, scontrol, cosmos-train) to put first on PATH, and where they write down what they
    saw: srun's arguments, and each node's environment and arguments as cosmos-train got them."""
    bin_dir, seen = tmp_path / "bin", tmp_path / "seen"
    bin_dir.mkdir()
    seen.mkdir()
    _script(
        bin_dir / "cosmos-train",
        f'env -0 > {seen}/env.$SLURM_NODEID\nprintf "%s\\0" "$@" > {seen}/argv.$SLURM_NODEID\n',
    )
    _script(
        bin_dir / "scontrol",
        f'[[ "$*" == "show hostnames {nodelist}" ]] || {{ echo "scontrol stand-in: unexpected $*" >&2; exit 1; }}\n'
        f"printf '%s\\n' {' '.join(hosts)}\n",
    )
    # srun: the step's task on every node at once, as Slurm starts them (options are given as --name=value)
    _script(
        bin_dir / "srun",
        f'printf "%s\\n" "$@" > {seen}/srun-args\n'
        "while [[ $# -gt 0 && $1 == -* ]]; do shift; done\n"
        "pids=()\n"
        "for ((i = 0; i < SLURM_NNODES; i++)); do\n"
        '    SLURM_NODEID=$i SLURM_PROCID=$i SLURM_LOCALID=0 SLURM_NTASKS=$SLURM_NNODES "$@" &\n'
        "    pids+=($!)\n"
        "done\n"
        'rc=0; for p in "${pids[@]}"; do wait "$p" || rc=$?; done; exit $rc\n',
    )
    return bin_dir, seen


def _seen(seen: Path, node: int) -> tuple[dict[str, str], list[str]]:
    env = dict(item.split("=", 1) for item in (seen / f"env.{node}").read_text().split("\0") if item)
    return env, [a for a in (seen / f"argv.{node}").read_text().split("\0") if a]


def _slurm_env(bin_dir: Path, runs: Path, **slurm: str) -> dict[str, str]:
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "COSMOS_SOCKET_IFNAME": "ib0",
        "COSMOS_RUNS_DIR": str(runs),
        **slurm,
    }


@pytest.mark.parametrize("node", [0, 1])
def test_node_sh_gives_a_node_exactly_node_env(tmp_path: Path, node: int) -> None:
    bin_dir, seen = _stand_ins(tmp_path, "node[01-02]", ["node01", "node02"])
    runs = tmp_path / "runs"
    env = _slurm_env(
        bin_dir,
        runs,
        COSMOS_RDZV_PORT="29511",
        SLURM_JOB_ID="4242",
        SLURM_NNODES="2",
        SLURM_NTASKS="2",
        SLURM_NODEID=str(node),
        SLURM_PROCID=str(node),
        SLURM_JOB_NODELIST="node[01-02]",
    )
    args = ["cosmos-train", "sft", "--config", "job.toml", "--set", "train.epoch=2"]
    done = subprocess.run(["bash", str(SLURM / "node.sh"), *args], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got, argv = _seen(seen, node)
    added = {k: v for k, v in got.items() if env.get(k) != v and k not in BASH_OWN}
    assert added == node_env(
        node, nnodes=2, endpoint="node01:29511", rdzv_id="slurm-4242", socket_ifname="ib0", output_dir=runs
    )
    assert not set(SETTINGS) & set(got), "node.sh's own settings reached the command"
    assert argv == args[1:]
    launcher_reads(added, tmp_path)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"COSMOS_SOCKET_IFNAME": ""}, "COSMOS_SOCKET_IFNAME is not set"),
        ({"COSMOS_RUNS_DIR": ""}, "COSMOS_RUNS_DIR is not set"),
        ({"SLURM_NTASKS": "4"}, "4 tasks on 2 nodes: run one task per node"),
        ({"SLURM_NODEID": "2"}, "node rank '2' is not one of 0..1"),
    ],
)
def test_node_sh_refuses_what_would_hang_or_misplace_a_run(tmp_path: Path, change: dict[str, str], said: str) -> None:
    bin_dir, seen = _stand_ins(tmp_path, "n[1-2]", ["n1", "n2"])
    env = _slurm_env(
        bin_dir, tmp_path / "runs", SLURM_JOB_ID="5", SLURM_NNODES="2", SLURM_NODEID="0", SLURM_JOB_NODELIST="n[1-2]"
    )
    env.update(change)
    done = subprocess.run(["bash", str(SLURM / "node.sh"), "cosmos-train"], env=env, capture_output=True, text=True)
    assert done.returncode == 2
    assert said in done.stderr
    assert not list(seen.glob("env.*")), "the command ran anyway"


def _sbatch_options(text: str) -> dict[str, str]:
    """The #SBATCH options sbatch reads: those before the first command (sbatch stops reading there, silently)."""
    options: dict[str, str] = {}
    for line in text.splitlines()[1:]:
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
        if m := re.match(r"#SBATCH\s+--([a-z-]+)(?:=(\S+))?", stripped):
            options[m.group(1)] = m.group(2) or ""
    later = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert len(later) == len(options), "an #SBATCH line after the first command is ignored by sbatch"
    return options


def test_the_batch_script_parses_and_asks_for_one_task_per_node() -> None:
    for script in (SLURM / "cosmos-train.sbatch", SLURM / "node.sh"):
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert done.returncode == 0, f"{script.name}: {done.stderr}"
    options = _sbatch_options((SLURM / "cosmos-train.sbatch").read_text())
    assert options["nodes"] == "2"
    assert options["ntasks-per-node"] == "1"
    assert "job-name" in options and "output" in options


def test_the_sbatch_check_sees_a_late_option() -> None:
    with pytest.raises(AssertionError, match="ignored by sbatch"):
        _sbatch_options("#!/bin/bash\n#SBATCH --nodes=2\nset -e\n#SBATCH --ntasks-per-node=1\n")


def test_the_batch_script_starts_node_sh_on_every_node(tmp_path: Path) -> None:
    bin_dir, seen = _stand_ins(tmp_path, "gpu[7-8]", ["gpu7", "gpu8"])
    runs = tmp_path / "runs"
    job = tmp_path / "job.toml"
    job.write_text("")
    env = _slurm_env(
        bin_dir,
        runs,
        SLURM_JOB_ID="77",
        SLURM_NNODES="2",
        SLURM_JOB_NODELIST="gpu[7-8]",
        SLURM_CPUS_ON_NODE="16",
        SLURM_SUBMIT_DIR=str(ROOT),
    )
    batch = ["bash", str(SLURM / "cosmos-train.sbatch"), "grpo", str(job), "--set", "train.epoch=2"]
    done = subprocess.run(batch, cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    srun = (seen / "srun-args").read_text().split("\n")
    assert {"--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=16", "--kill-on-bad-exit=1"} <= set(srun)
    for node in (0, 1):
        got, argv = _seen(seen, node)
        ours = {k: v for k, v in got.items() if k.startswith(("COSMOS_", "PREFECT_"))}
        assert ours == node_env(
            node, nnodes=2, endpoint="gpu7:29500", rdzv_id="slurm-77", socket_ifname="ib0", output_dir=runs
        )
        assert argv == ["grpo", "--config", str(job), "--set", "train.epoch=2"]


@pytest.mark.parametrize(
    ("mode", "config", "said"),
    [("dpo", "job.toml", "'dpo' is not sft or grpo"), ("sft", "no.toml", "no job config 'no.toml'")],
)
def test_the_batch_script_refuses_a_wrong_command_line(tmp_path: Path, mode: str, config: str, said: str) -> None:
    (tmp_path / "job.toml").write_text("")
    bin_dir, seen = _stand_ins(tmp_path, "n1", ["n1"])
    env = _slurm_env(bin_dir, tmp_path / "runs", SLURM_JOB_ID="1", SLURM_NNODES="1", SLURM_JOB_NODELIST="n1")
    batch = ["bash", str(SLURM / "cosmos-train.sbatch"), mode, config]
    done = subprocess.run(batch, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 2
    assert said in done.stderr
    assert not (seen / "srun-args").exists()


# --- Kubernetes ---------------------------------------------------------------------------------------------------

TEMPLATE = KUBE / "indexed-job.json"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
JOB_NAME_VAR = "COSMOS_KUBE_JOB_NAME"  # the template's: the Job's name, for the endpoint only
RDZV_ID_VAR = f"{ENV_PREFIX}LAUNCH__RDZV_ID"
ENDPOINT_VAR = f"{ENV_PREFIX}LAUNCH__RDZV_ENDPOINT"
ENTRY = ["python", "-m", "flows.indexed_node"]  # the container's command; the worker's command is its arguments
# prefect-kubernetes's worker refuses a job manifest without these values (KubernetesWorkerJobConfiguration's
# validators; the pod-level parallelism and completions are its own, Kubernetes ignores them).
WORKER_REQUIRES = {
    ("apiVersion",): "batch/v1",
    ("kind",): "Job",
    ("spec", "template", "spec", "parallelism"): 1,
    ("spec", "template", "spec", "completions"): 1,
    ("spec", "template", "spec", "restartPolicy"): "Never",
    ("spec", "template", "spec", "containers", 0, "name"): "prefect-job",
}


def _template() -> dict[str, Any]:
    return json.loads(TEMPLATE.read_text())


def _cluster_objects() -> dict[str, dict[str, Any]]:
    """multinode.yaml's objects by kind."""
    docs = [d for d in yaml.safe_load_all((KUBE / "multinode.yaml").read_text()) if d]
    return {d["kind"]: d for d in docs}


def render_job(values: dict[str, Any]) -> dict[str, Any]:
    """The job configuration a worker builds for a flow run with these job variables: the variables' defaults (those
    not None, as BaseJobConfiguration.from_template_and_values takes them) updated with `values`, checked against the
    template's schema, applied with Prefect's templating."""
    template = _template()
    schema = template["variables"]
    variables = {k: p["default"] for k, p in schema["properties"].items() if p.get("default") is not None}
    variables.update(values)
    validate(variables, schema, raise_on_error=True, preprocess=True, allow_none_with_default=True)
    return apply_values(copy.deepcopy(template["job_configuration"]), variables)


def pod_env(container: dict[str, Any], index: int, job_name: str, worker_env: dict[str, str]) -> dict[str, str]:
    """The environment Kubernetes gives pod `index` of Job `job_name`: the worker's variables first (prefect-kubernetes
    puts them before a template's own list), the downward API's fields, `$(VAR)` replaced by an earlier variable's
    value (an unknown one is left as written, `$$` is a `$`)."""
    fields = {
        f"metadata.annotations['{INDEX_ANNOTATION}']": str(index),
        f"metadata.labels['{JOB_NAME_LABEL}']": job_name,
    }
    env: dict[str, str] = dict(worker_env)
    for item in container["env"]:
        if "valueFrom" in item:
            path = item["valueFrom"]["fieldRef"]["fieldPath"]
            assert path in fields, f"{item['name']}: a field this check does not know: {path}"
            env[item["name"]] = fields[path]
        else:
            env[item["name"]] = re.sub(
                r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)),
                item["value"],
            )
    return env


def pod_argv(container: dict[str, Any]) -> list[str]:
    """What a pod runs: the container's command followed by its args as prefect-kubernetes's worker completes them
    (KubernetesWorkerJobConfiguration._populate_command_if_not_present: no args, the worker's own command; a string,
    split as a shell would; a list, as it is), Kubernetes's `command` + `args`."""
    args = container.get("args")
    if args is None:
        args = shlex.split(BaseJobConfiguration._base_flow_run_command())
    elif isinstance(args, str):
        args = shlex.split(args)
    assert isinstance(args, list), args
    return [*container.get("command", []), *args]


@pytest.fixture
def node_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[UUID, int, UUID]]:
    """The run pod i > 0 creates (flows/indexed_node.py create_node_run) made here without a server, a new id each:
    (the worker's run, the rank, the new run) for each, in order."""
    made: list[tuple[UUID, int, UUID]] = []

    @contextlib.contextmanager
    def get_client(sync_client: bool = False) -> Iterator[None]:
        yield None

    def create_node_run(client: None, first_id: UUID, rank: int) -> FlowRun:
        run = FlowRun(flow_id=uuid.uuid4(), name=f"brave-fox-node{rank}")
        made.append((first_id, rank, run.id))
        return run

    monkeypatch.setattr(indexed_node, "get_client", get_client)
    monkeypatch.setattr(indexed_node, "create_node_run", create_node_run)
    return made


def exec_env(container: dict[str, Any], index: int, job_name: str, worker_env: dict[str, str]) -> dict[str, str]:
    """The environment pod `index` of Job `job_name` execs the worker's command with: Kubernetes's (`pod_env`), then
    what the pods' entry adds (flows/indexed_node.py pod_process, as its main runs it)."""
    argv = pod_argv(container)
    assert argv[: len(ENTRY)] == ENTRY, argv
    _, env = indexed_node.pod_process(argv[len(ENTRY) :], pod_env(container, index, job_name, worker_env))
    return env


def test_prefect_accepts_the_template() -> None:
    template = _template()
    assert set(template) == {"job_configuration", "variables"}
    validate_base_job_template(template)  # what `prefect work-pool create --base-job-template` has the server check
    rendered = render_job({"image": "registry/cosmos-train:1"})["job_manifest"]
    for path, value in WORKER_REQUIRES.items():
        node: Any = rendered
        for part in path:
            node = node[part]
        assert node == value, path
    assert "{{" not in json.dumps(rendered), "a placeholder is left after rendering"


def test_the_template_refuses_a_job_without_nodes() -> None:
    with pytest.raises(ValidationError):
        render_job({"nnodes": 0})


@pytest.mark.parametrize("nnodes", [2, 3])
def test_the_job_is_indexed_with_one_pod_per_node(nnodes: int) -> None:
    job = render_job({"nnodes": nnodes, "image": "registry/cosmos-train:1"})["job_manifest"]
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == nnodes
    container = job["spec"]["template"]["spec"]["containers"][0]
    names = [item["name"] for item in container["env"]]
    values = [item["value"] for item in container["env"] if "value" in item]
    assert all(isinstance(v, str) for v in values), f"Kubernetes takes only strings as env values: {values}"
    # node_env's names but launch.rdzv_id, which the pods' entry sets (test_each_pod_gets_node_env), and the Job's
    # name, which only the endpoint uses
    node_names = node_env(0, nnodes=1, endpoint="", rdzv_id="", socket_ifname="", output_dir=Path())
    assert sorted(names) == sorted({*node_names} - {RDZV_ID_VAR} | {JOB_NAME_VAR})
    assert not JOB_NAME_VAR.startswith(ENV_PREFIX)  # not a config key: the launcher does not read it
    fields = {
        item["name"]: item["valueFrom"]["fieldRef"]["fieldPath"] for item in container["env"] if "valueFrom" in item
    }
    assert fields == {
        "COSMOS_TRAIN__LAUNCH__NODE_RANK": f"metadata.annotations['{INDEX_ANNOTATION}']",
        JOB_NAME_VAR: f"metadata.labels['{JOB_NAME_LABEL}']",
    }


def test_pod_zero_is_named_under_the_headless_service_and_the_runs_volume_is_shared() -> None:
    objects = _cluster_objects()
    service, claim = objects["Service"], objects["PersistentVolumeClaim"]
    pod = render_job({"image": "registry/cosmos-train:1"})["job_manifest"]["spec"]["template"]
    assert service["spec"]["clusterIP"] == "None"
    assert pod["spec"]["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    container = pod["spec"]["containers"][0]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    output_dir = next(i["value"] for i in container["env"] if i["name"] == "COSMOS_TRAIN__TRAIN__OUTPUT_DIR")
    assert volumes[mounts[output_dir]]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]


@pytest.mark.parametrize(
    "values",
    [{}, {"nnodes": 4, "socket_ifname": "net1", "output_dir": "/lustre/runs", "rdzv_port": 29600}],
    ids=["defaults", "given"],
)
def test_each_pod_gets_node_env(
    tmp_path: Path, values: dict[str, Any], node_runs: list[tuple[UUID, int, UUID]]
) -> None:
    """Each pod's environment as it execs the worker's command (the template's, then the entry's launch.rdzv_id)
    holds exactly node_env's names, with node_env's values: rdzv_id the worker's flow run id, the endpoint pod 0 of
    this Job."""
    config = render_job({"image": "registry/cosmos-train:1", **values})
    defaults = {k: p.get("default") for k, p in _template()["variables"]["properties"].items()}
    job_vars = {**defaults, **values}
    container = config["job_manifest"]["spec"]["template"]["spec"]["containers"][0]
    service = _cluster_objects()["Service"]["metadata"]["name"]
    run_id = str(uuid.uuid4())
    worker_env = {"PREFECT_API_URL": "http://prefect:4200/api", "PREFECT__FLOW_RUN_ID": run_id}
    job_name = "sft-x7k2p"
    for index in range(job_vars["nnodes"]):
        env = exec_env(container, index, job_name, worker_env)
        ours = {k: v for k, v in env.items() if k.startswith(ENV_PREFIX)}
        expected = node_env(
            index,
            nnodes=job_vars["nnodes"],
            endpoint=f"{job_name}-0.{service}:{job_vars['rdzv_port']}",
            rdzv_id=run_id,
            socket_ifname=job_vars["socket_ifname"],
            output_dir=Path(job_vars["output_dir"]),
        )
        assert ours.keys() == expected.keys()
        # what the launcher reads: nnodes is written +N there (see the template's nnodes description)
        assert env_overrides(ours) == env_overrides(expected)
        launcher_reads(ours, tmp_path)
    assert [(first, rank) for first, rank, _ in node_runs] == [(UUID(run_id), i) for i in range(1, job_vars["nnodes"])]


def test_a_retrys_new_job_keeps_the_rdzv_id_and_meets_at_its_own_pod0(
    tmp_path: Path, node_runs: list[tuple[UUID, int, UUID]]
) -> None:
    """A retry of the flow run (the UI's Retry, the flow's retries) is a NEW Job, with a new generated name, for the
    same flow run: every pod of both Jobs gets that run's id as launch.rdzv_id (one run folder, where the retry
    resumes from the first attempt's checkpoints), each Job's pods meet at that Job's own pod 0, and pod 1's new
    run of its own does not change the rdzv_id."""
    container = render_job({"image": "registry/cosmos-train:1", "nnodes": 2})["job_manifest"]["spec"]["template"][
        "spec"
    ]["containers"][0]
    run_id = str(uuid.uuid4())
    worker_env = {"PREFECT_API_URL": "http://prefect:4200/api", "PREFECT__FLOW_RUN_ID": run_id}
    jobs = ("sft-x7k2p", "sft-q9m4r")  # the first attempt's Job, the retry's
    envs = {(job, i): exec_env(container, i, job, worker_env) for job in jobs for i in (0, 1)}
    assert {env[RDZV_ID_VAR] for env in envs.values()} == {run_id}
    for (job, _), env in envs.items():
        assert env[ENDPOINT_VAR] == f"{job}-0.cosmos-train-rdzv:29500"
        ours = {k: v for k, v in env.items() if k.startswith(ENV_PREFIX)}
        assert launcher_reads(ours, tmp_path).launch.rdzv_id == run_id
    # pod 0 executes the worker's run; pod 1 of each Job a new run of its own, made from the worker's
    assert [envs[job, 0]["PREFECT__FLOW_RUN_ID"] for job in jobs] == [run_id, run_id]
    assert [(first, rank) for first, rank, _ in node_runs] == [(UUID(run_id), 1), (UUID(run_id), 1)]
    assert [envs[job, 1]["PREFECT__FLOW_RUN_ID"] for job in jobs] == [str(new) for _, _, new in node_runs]
    assert run_id not in [str(new) for _, _, new in node_runs]
    # an rdzv_id from the worker's variables (the pool's or deployment's `env`) would join every run's folders
    given = {**worker_env, RDZV_ID_VAR: "from-the-pool"}
    assert exec_env(container, 0, jobs[0], given)[RDZV_ID_VAR] == run_id


@pytest.mark.parametrize(
    ("values", "worker_command"),
    [({}, ["prefect", "flow-run", "execute"]), ({"command": "/opt/venv/bin/prefect flow-run execute"}, None)],
    ids=["worker-default", "command-variable"],
)
def test_each_pod_runs_the_entry_with_the_workers_command(values: dict[str, Any], worker_command: Any) -> None:
    """The pods run flows/indexed_node.py (pod 0: the worker's flow run; pod i: a run of its own) with the worker's
    command, whatever it is, as its arguments: the command variable keeps its meaning."""
    container = render_job({"image": "registry/cosmos-train:1", **values})["job_manifest"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    expected = worker_command or shlex.split(values["command"])
    assert pod_argv(container) == ["python", "-m", "flows.indexed_node", *expected]
    # the entry falls back to what the worker runs by default, and its docstring gives the pods' command line
    assert shlex.split(indexed_node.WORKER_COMMAND) == shlex.split(BaseJobConfiguration._base_flow_run_command())
    assert "python -m flows.indexed_node prefect flow-run execute" in (indexed_node.__doc__ or "")
    # the same list on every pod: the entry tells them apart by the index the template gives each pod
    ranks = [indexed_node.node_index(pod_env(container, i, "sft-x7k2p", {})) for i in range(2)]
    assert ranks == [0, 1]


def test_the_entry_is_importable_where_the_project_is_installed() -> None:
    """`python -m flows.indexed_node` in the image: flows is one of the packages the project installs."""
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    assert any(indexed_node.__name__.split(".")[0] + "*" == pattern for pattern in include), include
