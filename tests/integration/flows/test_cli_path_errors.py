"""Paths and checkpoint files a user gets wrong, through the real CLI: a file where a folder is needed (output_dir,
results_dir, --run-dir, a command's OUT), a binary file as the config, a model path that is a file, and checkpoints
damaged after they were written (a truncated or empty shard, unreadable .metadata, a missing config.toml) for
`export` and for a resume, a world model whose weight file is cut short. Each exits 2 with one paragraph naming the
path, and no traceback. Most answer before Prefect starts (run in this process: tests/cli_inprocess.py, which fails
a case that reaches Prefect); the rest fail inside a flow run, as real processes against the session's Prefect server
(an OSError a task names with its key, a bare one, a read-only disk, a damaged checkpoint a trainer's ranks resume
from), and one in-process flow shows such an error is not retried."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli_inprocess import CliResult, RunCli
from tests.conftest import ROOT, mounted_tmpfs, write_tiny_grpo_config, write_tiny_sft_config
from tests.integration.prefect_server import PrefectServer

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run_with_checkpoint(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Path:
    """A run folder of the tiny model holding checkpoints/step_1 and step_2 (the tensors of a small stand-in model:
    every case here fails on the files before any tensor is matched to the architecture)."""
    import torch

    from cosmos_train.checkpoint import CheckpointManager
    from cosmos_train.config import CheckpointConfig, Config

    run = tmp_path_factory.mktemp("ckpt-run") / "run"
    cfg = Config()
    cfg.policy.model_name_or_path = str(tiny_model_dir)
    cfg.write(run / "config.toml")
    model = torch.nn.Linear(64, 64)
    mgr = CheckpointManager(run, CheckpointConfig(save_mode="sync"))
    for step in (1, 2):
        mgr.save(step, model, torch.optim.AdamW(model.parameters()), None, {})
    return run


@dataclass
class Env:
    dir: Path  # this test's folder, the commands' working folder
    job: Path  # a valid tiny SFT job writing under dir/out
    blocker: Path  # a regular file: dir/somefile.txt
    run: Path  # a copy of run_with_checkpoint, free to damage
    run_cli: RunCli  # the in-process CLI (this test's fixture)


@pytest.fixture
def env(
    tmp_path: Path,
    tiny_model_dir: Path,
    synthetic_dir: Path,
    run_with_checkpoint: Path,
    run_cli: RunCli,
) -> Env:
    job = write_tiny_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, tmp_path / "out")
    blocker = tmp_path / "somefile.txt"
    blocker.write_text("not a folder\n")
    shutil.copytree(run_with_checkpoint, tmp_path / "run")
    return Env(tmp_path, job, blocker, tmp_path / "run", run_cli)


def cli(env: Env, server: PrefectServer, *args: str | Path) -> subprocess.CompletedProcess:
    """The CLI as a user runs it, against the session's Prefect server (Prefect's temporary server, which a command
    without PREFECT_API_URL starts, would cost each case its start; test_cli_errors.py runs one on it)."""
    return subprocess.run(
        [sys.executable, "-m", "cosmos_train.cli", *map(str, args)],
        cwd=env.dir,
        env=server.env(OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_paragraph(proc: subprocess.CompletedProcess | CliResult, *names: str | Path) -> str:
    """Exit 2, no traceback, and the last paragraph (`error: ...`) naming each of `names`; returns it."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, f"exit {proc.returncode}\n{out[-4000:]}"
    assert "Traceback" not in out, f"traceback printed\n{out[-6000:]}"
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert errors, f"no error paragraph\n{proc.stderr[-3000:]}"
    paragraph = "\n".join(proc.stderr[proc.stderr.rindex("error: ") :].splitlines())
    for name in names:
        assert str(name) in paragraph, f"{name!s} not in:\n{paragraph}"
    return paragraph


def fast(env: Env, *args: str | Path) -> CliResult:
    """A command refused before Prefect starts, in this process (the test fails if it reaches Prefect)."""
    return env.run_cli(*args, cwd=env.dir)


def shard(ckpt: Path) -> Path:
    (found,) = ckpt.glob("*.distcp")
    return found


# ------------------------------------------------------------------ a file where a folder is needed
def test_config_check_output_dir_below_a_file(env: Env) -> None:
    proc = fast(env, "config", "check", env.job, "--set", f'train.output_dir="{env.blocker}/run"')
    said = assert_paragraph(proc, "train.output_dir", f"{env.blocker}/run", f"is below {env.blocker}")
    assert "move" in said


def test_sft_output_dir_below_a_file(env: Env) -> None:
    proc = fast(env, "sft", "--config", env.job, "--set", f'train.output_dir="{env.blocker}/run"')
    assert_paragraph(proc, "train.output_dir", f"is below {env.blocker}, which is a file")
    assert env.blocker.read_text() == "not a folder\n"


def test_grpo_output_dir_is_a_file(env: Env, tiny_model_dir: Path, synthetic_dir: Path) -> None:
    job = write_tiny_grpo_config(env.dir / "grpo.toml", tiny_model_dir, synthetic_dir, env.blocker)
    proc = fast(env, "grpo", "--config", job, env.dir / "toy_rewards.py")
    assert_paragraph(proc, "train.output_dir", f"{env.blocker}' is a file")


def test_wfm_rl_output_dir_below_a_file(env: Env) -> None:
    proc = fast(
        env,
        "wfm-rl",
        "--config",
        ROOT / "configs" / "tiny-wfm-flow-grpo.toml",
        "--set",
        f'model.model_name_or_path="{env.dir}"',  # checked to exist only: the run never starts
        "--set",
        f'job.output_dir="{env.blocker}/wfm"',
    )
    assert_paragraph(proc, "job.output_dir", f"is below {env.blocker}")


def test_eval_results_dir_below_a_file(env: Env, tiny_model_dir: Path, synthetic_dir: Path) -> None:
    eval_cfg = env.dir / "eval.toml"
    shutil.copy(ROOT / "configs" / "eval-tiny.toml", eval_cfg)
    proc = fast(
        env,
        "eval",
        "--config",
        eval_cfg,
        "--model",
        tiny_model_dir,
        "--set",
        f'data_dir="{synthetic_dir}"',
        "--set",
        f'results_dir="{env.blocker}/eval"',
    )
    assert_paragraph(proc, "results_dir", f"is below {env.blocker}")


def test_make_tiny_model_below_a_file(env: Env) -> None:
    """No check of its own: the OSError itself (NotADirectoryError) becomes the paragraph in the CLI."""
    proc = fast(env, "make-tiny-model", env.blocker / "model")
    assert_paragraph(proc, f"is below {env.blocker}, which is a file", "move")


def test_export_into_a_file_leaves_it_alone(env: Env) -> None:
    proc = fast(env, "export", env.run / "checkpoints" / "step_2", env.blocker)
    assert_paragraph(proc, f"the export folder {env.blocker} is a file")
    assert env.blocker.read_text() == "not a folder\n"
    assert sorted(p.name for p in env.dir.glob("somefile.txt*")) == ["somefile.txt"]


# ------------------------------------------------------------------ other files that are not what they must be
def test_config_that_is_a_binary_file(env: Env, tiny_model_dir: Path) -> None:
    weights = tiny_model_dir / "model.safetensors"
    assert_paragraph(fast(env, "config", "check", weights), str(weights), "not a text file")


def test_model_path_that_is_a_file(env: Env) -> None:
    proc = fast(env, "sft", "--config", env.job, "--set", f'policy.model_name_or_path="{env.blocker}"')
    assert_paragraph(proc, "policy.model_name_or_path", f"{env.blocker} is a file")


# ------------------------------------------------------------------ damaged checkpoints
def test_export_of_a_truncated_shard(env: Env) -> None:
    ckpt = env.run / "checkpoints" / "step_2"
    size = shard(ckpt).stat().st_size
    os.truncate(shard(ckpt), size // 3)
    proc = fast(env, "export", ckpt, env.dir / "exported")
    said = assert_paragraph(proc, shard(ckpt), f"truncated: {size // 3} bytes", str(size))
    assert "export an earlier complete checkpoint" in said and str(env.run / "checkpoints" / "step_1") in said
    assert not (env.dir / "exported").exists()


def test_export_with_empty_metadata(env: Env) -> None:
    ckpt = env.run / "checkpoints" / "step_2"
    (ckpt / ".metadata").write_bytes(b"")
    assert_paragraph(fast(env, "export", ckpt, env.dir / "exported"), ckpt / ".metadata", "cannot be read")


def test_export_without_the_runs_config(env: Env) -> None:
    (env.run / "config.toml").unlink()
    proc = fast(env, "export", env.run / "checkpoints" / "step_2", env.dir / "exported")
    assert_paragraph(proc, env.run / "config.toml", "is missing")


def test_resume_from_a_truncated_checkpoint(env: Env) -> None:
    ckpt = env.run / "checkpoints" / "step_2"
    os.truncate(shard(ckpt), 10)
    proc = fast(env, "sft", "--config", env.job, "--set", f'train.resume="{ckpt}"')
    said = assert_paragraph(proc, shard(ckpt), "truncated: 10 bytes")
    assert "resume from an earlier complete checkpoint" in said and str(env.run / "checkpoints" / "step_1") in said


def test_world_model_with_a_truncated_weight_file(env: Env, tiny_wfm_dir: Path) -> None:
    model = env.dir / "wfm"
    shutil.copytree(tiny_wfm_dir, model)
    weights = model / "transformer" / "diffusion_pytorch_model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    proc = fast(env, "make-synthetic-wfm-data", env.dir / "wfm-data", "--n", "2", "--text-embeddings-from", model)
    assert_paragraph(proc, weights, "truncated or damaged safetensors file")


# ------------------------------------------------------------------ inside a flow run (the session's Prefect server)
def _through_prefect(env: Env, server: PrefectServer, *args: str | Path, check: Callable[[str], None]) -> None:
    proc = cli(env, server, *args)
    check(assert_paragraph(proc))
    assert "Flow run" in proc.stdout + proc.stderr  # it did fail inside the flow run, not before it


def test_run_dir_that_is_a_file_fails_the_flow_run_with_the_paragraph(env: Env, prefect_server: PrefectServer) -> None:
    """resolve-config (a task) meets the file; the flow run fails with the user's error, not retried."""

    def check(said: str) -> None:
        assert said.startswith("error: --run-dir: ") and f"{env.blocker} is a file" in said

    _through_prefect(env, prefect_server, "sft", "--config", env.job, "--run-dir", env.blocker, check=check)


def test_a_tasks_bare_os_error_is_the_paragraph_too(env: Env, prefect_server: PrefectServer) -> None:
    """The demo's first task (make-tiny-model) raises NotADirectoryError itself: the console shows no traceback."""

    def check(said: str) -> None:
        assert f"is below {env.blocker}, which is a file" in said

    _through_prefect(env, prefect_server, "demo", "--output-dir", env.blocker / "demo", check=check)


@pytest.fixture
def read_only_disk(tmp_path: Path) -> Iterator[Path]:
    """A read-only tmpfs (mounting needs root: skipped elsewhere)."""
    with mounted_tmpfs(tmp_path / "read-only", "size=1m,ro") as mount:
        yield mount


def test_output_dir_on_a_read_only_disk(env: Env, read_only_disk: Path, prefect_server: PrefectServer) -> None:
    """EROFS when resolve-config makes the run folder: the paragraph names the key, the path and what to do."""

    def check(said: str) -> None:
        assert said.startswith(f"error: train.output_dir: {read_only_disk}/out")
        assert "Read-only file system" in said and "writable disk" in said

    out = read_only_disk / "out"
    _through_prefect(env, prefect_server, "sft", "--config", env.job, "--set", f'train.output_dir="{out}"', check=check)


@pytest.mark.usefixtures("prefect_harness")
def test_a_flow_fails_with_the_paragraph_and_its_task_is_not_retried(tmp_path: Path) -> None:
    """A bare OSError inside a flow body wrapped by user_errors_reported: the flow run fails with the PathError
    (its state message is the paragraph), and a task retried only after crashes runs once."""
    from prefect import flow, task

    from cosmos_train.errors import PathError
    from tasks.errors import retry_only_crashes, user_errors_reported

    blocker = tmp_path / "somefile.txt"
    blocker.write_text("x")
    attempts: list[int] = []

    @task(retries=2, retry_delay_seconds=0, retry_condition_fn=retry_only_crashes)
    def make(folder: str) -> None:
        attempts.append(1)
        Path(folder).mkdir(parents=True, exist_ok=True)

    @flow
    def job(folder: str) -> None:
        with user_errors_reported("test job"):
            make(folder)

    state = job(str(blocker / "run"), return_state=True)
    assert state.is_failed() and len(attempts) == 1
    assert f"is below {blocker}, which is a file" in (state.message or "")
    with pytest.raises(PathError, match=f"is below {blocker}"):
        state.result()


def test_continuing_a_run_whose_newest_checkpoint_is_truncated(
    env: Env, tiny_model_dir: Path, synthetic_dir: Path, prefect_server: PrefectServer
) -> None:
    """`--run-dir` of a run whose own newest checkpoint lost its shard's tail: the trainer's ranks resume from it
    (preflight leaves a continued run's checkpoints to them), and say which file, through RUN/error.json."""
    write_tiny_sft_config(env.run / "config.toml", tiny_model_dir, synthetic_dir, env.dir / "out")
    ckpt = env.run / "checkpoints" / "step_2"
    os.truncate(shard(ckpt), 100)

    def check(said: str) -> None:
        assert f"its shard {shard(ckpt)} is truncated: 100 bytes" in said
        assert str(env.run / "checkpoints" / "step_1") in said

    _through_prefect(env, prefect_server, "sft", "--config", env.job, "--run-dir", env.run, check=check)
    record = (env.run / "error.json").read_text()
    assert '"kind": "checkpoint"' in record and '"traceback": null' in record


@pytest.mark.usefixtures("prefect_harness")
def test_an_in_process_cli_error_leaves_the_callers_prefect_server_running(tmp_path: Path) -> None:
    """cli.main() stops the temporary Prefect servers its command started when it reports a user error; one
    its caller started before (this test session's harness) keeps serving."""
    from prefect import flow

    from cosmos_train import cli

    @flow
    def ping() -> int:
        return 1

    assert ping() == 1  # the harness's server is up (started before the CLI call)
    blocker = tmp_path / "somefile.txt"
    blocker.write_text("x")
    assert cli.main(["config", "check", str(blocker / "job.toml")]) == 2
    assert ping() == 1  # before the fix: httpx.ConnectError, the harness's server stopped by the CLI
