"""cosmos_train/storage/ (S3) against a real S3-compatible server on loopback (moto_server, IAM auth on):
multipart, unchanged files skipped, a killed upload resumed without re-sending its parts, the manifest
written last, refused credentials and a missing bucket as user errors, an unreachable store as retryable."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cosmos_train.errors import AuthError, UploadError, UploadUnavailable, UserError
from cosmos_train.net import free_port
from cosmos_train.storage.s3 import MANIFEST, s3_settings
from cosmos_train.storage.s3_download import read_manifest
from cosmos_train.storage.s3_upload import upload_folder_s3
from cosmos_train.storage.targets import MIB, Target
from tests.conftest import ROOT
from tests.s3_server import S3Server, s3_server


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto")) as server:
        yield server


def _folder(root: Path) -> Path:
    """An export-like folder: a small config and an 11 MiB weights file (3 parts of 5 MiB)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text('{"model_type": "tiny"}')
    (root / "model.safetensors").write_bytes(os.urandom(11 * MIB))
    return root


def _settings(s3: S3Server, **kw: object) -> object:
    return s3_settings(s3.env, part_size_mb=5, concurrency=1, **kw)


def test_folder_upload_multipart_manifest_last_and_unchanged_skipped(s3: S3Server, tmp_path: Path) -> None:
    local = _folder(tmp_path / "final")
    target = Target("s3", s3.bucket, "runs/r1/safetensors/final")
    report = upload_folder_s3(local, target, _settings(s3), meta={"run": "r1", "step": 4})
    assert (report.files_sent, report.files_unchanged, report.parts_sent) == (2, 0, 3)
    stored = s3.objects("runs/r1/")
    for name in ("config.json", "model.safetensors"):
        assert stored[f"runs/r1/safetensors/final/{name}"] == (local / name).read_bytes()
    head = s3.client().head_object(Bucket=s3.bucket, Key="runs/r1/safetensors/final/model.safetensors")
    assert head["Metadata"]["sha256"] == hashlib.sha256((local / "model.safetensors").read_bytes()).hexdigest()
    manifest = read_manifest(target, _settings(s3))
    assert manifest["run"] == "r1" and manifest["step"] == 4
    assert {f["path"]: f["size"] for f in manifest["files"]} == {
        "config.json": (local / "config.json").stat().st_size,
        "model.safetensors": (local / "model.safetensors").stat().st_size,
    }

    again = upload_folder_s3(local, target, _settings(s3))  # nothing changed: nothing sent
    assert (again.files_sent, again.files_unchanged, again.bytes_sent, again.parts_sent) == (0, 2, 0, 0)
    (local / "config.json").write_text('{"model_type": "tiny", "changed": true}')
    third = upload_folder_s3(local, target, _settings(s3))
    assert (third.files_sent, third.files_unchanged) == (1, 1)
    assert s3.objects("runs/r1/")["runs/r1/safetensors/final/config.json"] == (local / "config.json").read_bytes()


KILL_AFTER_TWO_PARTS = """
import os, signal, sys
from pathlib import Path
from cosmos_train.storage.s3 import s3_settings
from cosmos_train.storage.s3_upload import upload_folder_s3
from cosmos_train.storage.targets import Target
sent = []
def on_part(n):
    sent.append(n)
    if len(sent) == 2:
        os.kill(os.getpid(), signal.SIGKILL)  # as a lost machine would: no cleanup, no abort
upload_folder_s3(Path(sys.argv[1]), Target("s3", sys.argv[2], sys.argv[3]),
                 s3_settings(os.environ, part_size_mb=5, concurrency=1), on_part=on_part)
"""


def test_killed_upload_resumes_without_resending_parts_and_hides_until_complete(s3: S3Server, tmp_path: Path) -> None:
    local = _folder(tmp_path / "ckpt")
    prefix = "runs/r2/checkpoints/step_2"
    target = Target("s3", s3.bucket, prefix)
    upload_folder_s3(local, target, _settings(s3))  # a first complete upload, manifest and all
    (local / "model.safetensors").write_bytes(os.urandom(11 * MIB))  # the folder changes: a new upload

    proc = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_TWO_PARTS, str(local), s3.bucket, prefix],
        cwd=ROOT,
        env={**os.environ, **s3.env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr
    # Half-way: no manifest (the old one was removed before anything changed), two parts in the store.
    assert read_manifest(target, _settings(s3)) is None
    client = s3.client()
    [pending] = client.list_multipart_uploads(Bucket=s3.bucket, Prefix=f"{prefix}/model.safetensors")["Uploads"]
    assert len(client.list_parts(Bucket=s3.bucket, Key=pending["Key"], UploadId=pending["UploadId"])["Parts"]) == 2

    sent: list[int] = []
    report = upload_folder_s3(local, target, _settings(s3), on_part=sent.append)
    assert report.parts_reused == 2 and sent == [3] and report.parts_sent == 1
    assert s3.objects(prefix)[f"{prefix}/model.safetensors"] == (local / "model.safetensors").read_bytes()
    assert read_manifest(target, _settings(s3)) is not None
    assert not client.list_multipart_uploads(Bucket=s3.bucket, Prefix=prefix).get("Uploads")


@pytest.mark.parametrize(
    "creds, code",
    [
        ({"access_key_id": "AKIANOTKNOWN", "secret_access_key": "x"}, "InvalidAccessKeyId"),
        ("wrong-secret", "SignatureDoesNotMatch"),
    ],
)
def test_refused_credentials_are_a_user_error_naming_the_target(
    s3: S3Server, tmp_path: Path, creds: object, code: str
) -> None:
    if creds == "wrong-secret":
        creds = {"access_key_id": s3.access_key_id, "secret_access_key": "wrong"}
    local = _folder(tmp_path / "f")
    target = Target("s3", s3.bucket, "refused")
    with pytest.raises(AuthError) as e:
        upload_folder_s3(local, target, s3_settings(s3.env, part_size_mb=5, credentials=creds))
    assert isinstance(e.value, UserError) and code in str(e.value) and target.url in str(e.value)
    assert "AWS_ACCESS_KEY_ID" in str(e.value)  # what to set
    assert not s3.objects("refused")


def test_missing_bucket_and_unreachable_store(s3: S3Server, tmp_path: Path) -> None:
    local = _folder(tmp_path / "f")
    with pytest.raises(UploadError, match="the bucket 'no-such-bucket' does not exist"):
        upload_folder_s3(local, Target("s3", "no-such-bucket", "x"), _settings(s3))
    gone = s3_settings(
        {**s3.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"},
        part_size_mb=5,
        endpoint_url=f"http://127.0.0.1:{free_port()}",
    )
    with pytest.raises(UploadUnavailable, match="cannot reach the store"):
        upload_folder_s3(local, Target("s3", s3.bucket, "x"), gone)
    assert not isinstance(UploadUnavailable("x"), UserError)  # retried by the task, unlike the two above


def test_world_model_credentials_and_config_endpoint_win(s3: S3Server, tmp_path: Path) -> None:
    """PROD_S3_CHECKPOINT_* (the world-model recipes' names) are used when set; the config's endpoint wins."""
    env = {
        "PROD_S3_CHECKPOINT_ACCESS_KEY_ID": s3.access_key_id,
        "PROD_S3_CHECKPOINT_SECRET_ACCESS_KEY": s3.secret_access_key,
        "PROD_S3_CHECKPOINT_ENDPOINT_URL": s3.url,
        "PROD_S3_CHECKPOINT_REGION_NAME": "eu-west-1",
        "AWS_ACCESS_KEY_ID": "AKIAWRONG",
        "AWS_SECRET_ACCESS_KEY": "wrong",
    }
    settings = s3_settings(env, part_size_mb=5)
    assert (settings.access_key_id, settings.endpoint_url, settings.region) == (s3.access_key_id, s3.url, "eu-west-1")
    report = upload_folder_s3(_folder(tmp_path / "f"), Target("s3", s3.bucket, "prod"), settings)
    assert report.files_sent == 2
    assert s3_settings(env, endpoint_url="http://other:9000").endpoint_url == "http://other:9000"
    assert json.loads(s3.objects("prod/")[f"prod/{MANIFEST}"])["files"]


def test_resumed_upload_of_a_file_changed_since_carries_its_new_checksum(s3: S3Server, tmp_path: Path) -> None:
    """Killed after two parts; the file's tail (a part never sent) then changes; the resume reuses the two
    parts that still match, sends the third, and the object's sha256 is the file's as it is now, so the
    next upload rightly finds it unchanged."""
    local = _folder(tmp_path / "ckpt")
    prefix = "runs/r3/checkpoints/step_4"
    target = Target("s3", s3.bucket, prefix)
    proc = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_TWO_PARTS, str(local), s3.bucket, prefix],
        cwd=ROOT,
        env={**os.environ, **s3.env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == -9, proc.stderr
    weights = local / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-10:] = os.urandom(10)  # inside part 3
    weights.write_bytes(bytes(data))

    report = upload_folder_s3(local, target, _settings(s3))
    assert report.parts_reused == 2 and report.parts_sent == 1
    head = s3.client().head_object(Bucket=s3.bucket, Key=f"{prefix}/model.safetensors")
    assert head["Metadata"]["sha256"] == hashlib.sha256(bytes(data)).hexdigest()
    assert s3.objects(prefix)[f"{prefix}/model.safetensors"] == bytes(data)
    again = upload_folder_s3(local, target, _settings(s3))
    assert (again.files_sent, again.files_unchanged) == (0, 2)
