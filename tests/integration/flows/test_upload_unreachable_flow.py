"""What the `upload` command checks before Prefect starts (`storage.s3_upload.check_s3_target`, against a real
S3-compatible server on loopback: refused credentials, a missing bucket, a store that answers), and the `upload` flow
against a store it cannot reach (a real closed port; a deployment run has no CLI check): Prefect's retries run, and
the last attempt ends as one paragraph (an UploadError: a user error, so no traceback and no further retry) naming
the target, the attempts and the command that resumes it."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cosmos_train.errors import AuthError, UploadError
from cosmos_train.storage.s3 import s3_settings
from cosmos_train.storage.s3_upload import check_s3_target
from cosmos_train.storage.targets import parse_target
from tests.s3_server import S3Server, s3_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto")) as server:
        yield server


def test_the_command_check_names_refused_credentials_and_a_missing_bucket(s3: S3Server) -> None:
    check_s3_target(parse_target(f"s3://{s3.bucket}/x"), s3_settings(s3.env))  # answers: nothing to say
    wrong = s3_settings({**s3.env, "AWS_SECRET_ACCESS_KEY": "wrong"})
    with pytest.raises(AuthError, match="SignatureDoesNotMatch"):
        check_s3_target(parse_target(f"s3://{s3.bucket}/x"), wrong)
    with pytest.raises(UploadError, match="the bucket 'no-such-bucket' does not exist"):
        check_s3_target(parse_target("s3://no-such-bucket/x"), s3_settings(s3.env))
    assert not s3.objects("x")


@pytest.mark.usefixtures("prefect_harness")
def test_the_flow_ends_in_one_paragraph_after_its_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import flows.upload
    from tasks.upload import upload_task

    # the task's own retries and condition, without the 42 s of delays between them
    monkeypatch.setattr(flows.upload, "upload_task", upload_task.with_options(retry_delay_seconds=0))
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    with socket.socket() as closed:  # bound, never listening: every connection is refused
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-checked-by-a-closed-port")
        started = time.monotonic()
        state = flows.upload.upload(
            flows.upload.UploadParams(source=str(folder), to="s3://my-bucket/team", s3_endpoint_url=endpoint),
            return_state=True,
        )
        seconds = time.monotonic() - started
    assert state.is_failed()
    error = state.result(raise_on_failure=False)
    assert isinstance(error, UploadError), repr(error)
    text = error.paragraph
    assert "\n" not in text and text.startswith(
        "s3://my-bucket/team: the S3 store stayed unreachable through 4 attempts"
    )
    assert "EndpointConnectionError" in text and endpoint in text and "a retry resumes" not in text
    assert f"run `cosmos-train upload {folder} --to s3://my-bucket/team` (with the same endpoint settings)" in text
    assert "skips the files already stored whole" in text
    assert seconds < 120, seconds  # 4 attempts of 4 refused requests each, with botocore's short backoffs
