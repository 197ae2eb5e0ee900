"""cosmos_train/storage/hub.py at the HfApi boundary (the Hub cannot be reached here) and its target URLs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from huggingface_hub.errors import HfHubHTTPError

from cosmos_train.errors import AuthError, UploadError, UploadUnavailable
from cosmos_train.storage.hub import hf_token, upload_folder_hf
from cosmos_train.storage.targets import Target, parse_target


class RecordingHub:
    """The calls our code makes on HfApi, with their arguments; `fail` raises from upload_folder."""

    def __init__(self, fail: BaseException | None = None, large: bool = False):
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail = fail
        if large:
            self.upload_large_folder = lambda **kw: self.calls.append(("upload_large_folder", kw))

    def create_repo(self, **kw: Any) -> None:
        self.calls.append(("create_repo", kw))

    def upload_folder(self, **kw: Any) -> None:
        self.calls.append(("upload_folder", {**kw, "files": sorted(p.name for p in Path(kw["folder_path"]).iterdir())}))
        if self.fail:
            raise self.fail


def _export(tmp_path: Path) -> Path:
    out = tmp_path / "final"
    out.mkdir(parents=True)
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_bytes(b"\0" * 1000)
    return out


def test_repo_created_private_then_one_commit_naming_run_and_step(tmp_path: Path) -> None:
    hub = RecordingHub()
    report = upload_folder_hf(
        _export(tmp_path),
        parse_target("hf://my-org/tiny-sft"),
        token="hf_secret",
        commit_message="cosmos-train 20261124: safetensors/final at step 40",
        api=hub,
    )
    assert hub.calls[0] == (
        "create_repo",
        {"repo_id": "my-org/tiny-sft", "repo_type": "model", "private": True, "exist_ok": True, "token": "hf_secret"},
    )
    name, kw = hub.calls[1]
    assert name == "upload_folder" and kw["repo_id"] == "my-org/tiny-sft" and kw["token"] == "hf_secret"
    assert kw["commit_message"] == "cosmos-train 20261124: safetensors/final at step 40"
    assert kw["files"] == ["config.json", "model.safetensors"] and kw["path_in_repo"] is None
    assert len(hub.calls) == 2 and (report.files_sent, report.bytes_sent) == (2, 1002)


def test_public_repo_and_a_path_inside_it(tmp_path: Path) -> None:
    hub = RecordingHub()
    upload_folder_hf(
        _export(tmp_path),
        parse_target("hf://me/models/sft/step_40"),
        token="t",
        commit_message="m",
        private=False,
        api=hub,
    )
    assert hub.calls[0][1]["private"] is False and hub.calls[1][1]["path_in_repo"] == "sft/step_40"


def test_large_folder_goes_through_the_resumable_path_where_the_library_has_it(tmp_path: Path) -> None:
    hub = RecordingHub(large=True)
    report = upload_folder_hf(
        _export(tmp_path), parse_target("hf://me/big"), token="t", commit_message="m", api=hub, large_folder_bytes=100
    )
    assert [c[0] for c in hub.calls] == ["create_repo", "upload_large_folder"] and "several commits" in report.note
    plain = RecordingHub()  # huggingface_hub >= 2: upload_folder batches and resumes by itself
    upload_folder_hf(
        _export(tmp_path / "x"),
        parse_target("hf://me/big"),
        token="t",
        commit_message="m",
        api=plain,
        large_folder_bytes=100,
    )
    assert [c[0] for c in plain.calls] == ["create_repo", "upload_folder"]


@pytest.mark.parametrize(
    "status, error", [(401, AuthError), (403, AuthError), (404, UploadError), (502, UploadUnavailable)]
)
def test_hub_errors_name_the_repo(tmp_path: Path, status: int, error: type) -> None:
    response = httpx.Response(status, request=httpx.Request("POST", "https://huggingface.co/api/upload"))
    hub = RecordingHub(fail=HfHubHTTPError("refused", response=response))
    with pytest.raises(error, match="hf://my-org/x"):
        upload_folder_hf(_export(tmp_path), parse_target("hf://my-org/x"), token="t", commit_message="m", api=hub)


def test_no_network_is_retryable(tmp_path: Path) -> None:
    hub = RecordingHub(fail=httpx.ConnectError("no route to host"))
    with pytest.raises(UploadUnavailable, match="cannot reach the Hub"):
        upload_folder_hf(_export(tmp_path), parse_target("hf://my-org/x"), token="t", commit_message="m", api=hub)


def test_token_from_argument_or_environment() -> None:
    assert hf_token({"HF_TOKEN": "env"}, "passed") == "passed" and hf_token({"HF_TOKEN": "env"}) == "env"
    with pytest.raises(AuthError, match="HF_TOKEN"):
        hf_token({})


def test_targets() -> None:
    assert parse_target("s3://bucket/a/b/") == Target("s3", "bucket", "a/b")
    assert parse_target("s3://bucket").url == "s3://bucket"
    assert parse_target("hf://org/repo") == Target("hf", "org/repo", "")
    assert parse_target("s3://bucket/p").child("safetensors/final").url == "s3://bucket/p/safetensors/final"
    assert parse_target("hf://Cosmos-Reason1") == Target("hf", "Cosmos-Reason1", "")  # the seed's bare repo name
    for bad in ("bucket/x", "s3://", "hf://", "ftp://x/y", "hf://org//x", "s3:///"):
        with pytest.raises(UploadError, match="s3://bucket/prefix or hf://org/repo"):
            parse_target(bad)
