"""Uploads from the training flow and the `upload` command, against a real S3-compatible server on loopback:
upload_s3 = "all" sends every checkpoint and export (manifest last), a wrong bucket leaves the training
result intact with the summary saying what was not uploaded, and `cosmos-train upload` sends a run's
final export (bad input: one paragraph, exit 2)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from cosmos_train.checkpoint_paths import complete_checkpoints
from cosmos_train.config import load_config
from cosmos_train.storage.s3 import MANIFEST
from tests.cli_inprocess import RunCli
from tests.conftest import ROOT, write_tiny_sft_config
from tests.integration.prefect_server import flow_run_artifacts as _artifacts
from tests.s3_server import S3Server, s3_server

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto")) as server:
        yield server


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _run_sft(config: Path, overrides: list[str]) -> tuple[dict, object]:
    from flows.sft import SFTParams, sft

    state = sft(SFTParams(config=str(config), overrides=overrides), return_state=True)
    assert state.is_completed(), state
    return state.result(), state


def test_upload_all_sends_every_checkpoint_and_export(
    s3: S3Server, tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in s3.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # the config key names the store
    config = write_tiny_sft_config(
        tmp_path / "job.toml", tiny_model_dir, synthetic_dir, tmp_path / "out", max_num_steps=4
    )
    result, state = _run_sft(
        config,
        [
            'train.ckpt.upload_s3="all"',
            f'train.ckpt.s3_bucket="{s3.bucket}"',
            'train.ckpt.s3_prefix="team/runs"',
            f'train.ckpt.s3_endpoint_url="{s3.url}"',
            "train.ckpt.upload_part_size_mb=5",
        ],
    )
    run = Path(result["run_dir"])
    prefix = f"team/runs/{run.name}"
    stored = s3.objects(prefix + "/")
    folders = [*complete_checkpoints(run / "checkpoints"), *[p for p in (run / "safetensors").iterdir() if p.is_dir()]]
    assert {p.name for p in folders} >= {"step_2", "step_4", "final"}
    for folder in folders:
        what = folder.relative_to(run).as_posix()
        local = _files(folder)
        remote = {
            k.removeprefix(f"{prefix}/{what}/"): v for k, v in stored.items() if k.startswith(f"{prefix}/{what}/")
        }
        manifest = json.loads(remote.pop(MANIFEST))
        assert remote == local, what  # every file, byte for byte
        assert sorted(f["path"] for f in manifest["files"]) == sorted(local) and manifest["run"] == run.name
        assert manifest["step"] == (int(folder.name[5:]) if folder.name.startswith("step_") else result["step"])
    records = result["uploads"]
    assert all(r["ok"] for r in records) and {r["what"] for r in records} == {
        f.relative_to(run).as_posix() for f in folders
    }
    summary = _artifacts(state.state_details.flow_run_id)["sft-summary"].data
    assert f"- uploaded `safetensors/final` -> s3://{s3.bucket}/{prefix}/safetensors/final" in summary
    assert "- uploaded `checkpoints/step_2`" in summary and "NOT uploaded" not in summary


def test_wrong_bucket_keeps_the_training_result_and_says_so(
    s3: S3Server, tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for k, v in s3.env.items():
        monkeypatch.setenv(k, v)
    config = write_tiny_sft_config(
        tmp_path / "job.toml", tiny_model_dir, synthetic_dir, tmp_path / "out", max_num_steps=2
    )
    result, state = _run_sft(config, ['train.ckpt.upload_s3="final"', 'train.ckpt.s3_bucket="no-such-bucket"'])
    assert result["step"] == 2 and Path(result["final"], "config.json").is_file()  # trained and exported
    [record] = result["uploads"]
    assert not record["ok"] and "'no-such-bucket' does not exist" in record["error"]
    summary = _artifacts(state.state_details.flow_run_id)["sft-summary"].data
    assert "- NOT uploaded `safetensors/final` -> s3://no-such-bucket/" in summary
    assert "cosmos-train upload RUN/safetensors/final --to" in summary


def test_checkpoint_removed_before_its_upload_is_noted(s3: S3Server, tmp_path: Path) -> None:
    """max_keep rotation can delete a checkpoint the background thread has not sent yet: noted, not an error."""
    from tasks.upload import RunUploads

    run = tmp_path / "run"
    ckpt = run / "checkpoints" / "step_2"
    ckpt.mkdir(parents=True)
    cfg = load_config(
        None, ['train.ckpt.upload_s3="all"', f'train.ckpt.s3_bucket="{s3.bucket}"'], env={}, check_paths=False
    )
    uploads = RunUploads(cfg, run)
    uploads._send("checkpoints/step_2", run / "checkpoints" / "gone", uploads.targets[0], "k")
    [record] = uploads.records
    assert not record["ok"] and "max_keep" in record["error"]


def test_upload_command(s3: S3Server, tiny_model_dir: Path, tmp_path: Path, run_cli: RunCli) -> None:
    run = tmp_path / "run"
    export = run / "safetensors" / "final"
    export.parent.mkdir(parents=True)
    shutil.copytree(tiny_model_dir, export)
    # in this process, its flow on the module's Prefect harness
    done = run_cli("upload", run, "--to", f"s3://{s3.bucket}/cli/tiny", cwd=ROOT, env=s3.env, flows=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "files sent" in done.stdout
    stored = {k.removeprefix("cli/tiny/"): v for k, v in s3.objects("cli/tiny/").items()}
    assert json.loads(stored.pop(MANIFEST))["files"] and stored == _files(export)

    for args, message in (  # refused before Prefect starts: in this process (run_cli fails a case that reaches it)
        (["--to", "ftp://x"], "not an upload target"),
        (["--to", f"s3://{s3.bucket}/x"], "no such folder"),
    ):
        source = str(run) if "ftp" in args[1] else str(tmp_path / "missing")
        bad = run_cli("upload", source, *args, cwd=ROOT, env=s3.env)
        assert bad.returncode == 2 and message in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def test_credentials_from_a_prefect_secret_block(s3: S3Server, tmp_path: Path) -> None:
    """train.ckpt.s3_credentials_secret names a Secret block holding the keys (nothing in the environment)."""
    from prefect.blocks.system import Secret

    from cosmos_train.config import CheckpointConfig
    from cosmos_train.errors import AuthError
    from tasks.upload import upload_folder

    Secret(
        value=json.dumps(
            {"access_key_id": s3.access_key_id, "secret_access_key": s3.secret_access_key, "endpoint_url": s3.url}
        )
    ).save("s3-creds-test", overwrite=True)
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    env_keys = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL")
    assert not any(k in os.environ for k in env_keys)
    report = upload_folder(
        folder, f"s3://{s3.bucket}/secret", {"run": "r"}, CheckpointConfig(s3_credentials_secret="s3-creds-test")
    )
    assert report["files_sent"] == 1 and "secret/config.json" in s3.objects("secret/")
    with pytest.raises(AuthError, match="Prefect Secret block 'no-such-block' not found"):
        upload_folder(folder, f"s3://{s3.bucket}/secret", {}, CheckpointConfig(s3_credentials_secret="no-such-block"))
    Secret(value="not json").save("s3-creds-bad", overwrite=True)
    with pytest.raises(AuthError, match="expected JSON"):
        upload_folder(folder, f"s3://{s3.bucket}/secret", {}, CheckpointConfig(s3_credentials_secret="s3-creds-bad"))


def test_upload_task_retries_only_what_a_retry_can_help(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A lost connection (UploadUnavailable) is retried, and the retry resumes; refused credentials
    (AuthError) and a missing bucket (UploadError) fail at once."""
    from prefect import flow

    import tasks.upload as upload_mod
    from cosmos_train.errors import AuthError, UploadError, UploadUnavailable

    calls: list[str] = []

    def flaky(local, url, meta, ckpt=None):  # noqa: ANN001, ANN202
        calls.append(url)
        if url.endswith("/auth"):
            raise AuthError(f"{url}: refused")
        if url.endswith("/bucket"):
            raise UploadError(f"{url}: no such bucket")
        if len(calls) < 3:
            raise UploadUnavailable(f"{url}: connection reset")
        return {"files_sent": 1, "files_unchanged": 0, "bytes_sent": 1}

    monkeypatch.setattr(upload_mod, "upload_folder", flaky)
    task = upload_mod.upload_task.with_options(retry_delay_seconds=0)

    @flow(name="upload-retries")
    def run(url: str) -> dict:
        return task(str(tmp_path), url, {})

    assert run("s3://b/flaky")["files_sent"] == 1 and calls == ["s3://b/flaky"] * 3
    for url, error in (("s3://b/auth", AuthError), ("s3://b/bucket", UploadError)):
        calls.clear()
        with pytest.raises(error):
            run(url)
        assert calls == [url]  # not retried


def test_upload_source_of_a_world_model_run(tmp_path: Path) -> None:
    """A world-model run folder sends its diffusers/final (what `cosmos-train upload RUN` uploads)."""
    from flows.upload import upload_source

    run = tmp_path / "run"
    (run / "diffusers" / "final" / "transformer").mkdir(parents=True)
    (run / "diffusers" / "final" / "model_index.json").write_text("{}")
    (run / "config.toml").write_text("")
    assert upload_source(run) == (run.resolve() / "diffusers" / "final", "run/diffusers/final")
    assert upload_source(run / "diffusers" / "final")[1] == "run/diffusers/final"
