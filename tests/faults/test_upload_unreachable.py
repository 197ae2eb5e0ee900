"""`cosmos-train upload` to an S3 endpoint nothing answers on (a real closed port: bound, never listening): one
paragraph naming the target, the endpoint, the bounds of the check and the last error, and what to do; exit 2, no
traceback, before Prefect starts, in seconds (it used to retry for ~57 s and end in a traceback, exit 1), nothing
left running. (An upload that loses its store after it started: tests/integration/flows/test_upload_unreachable_flow.py;
a rerun that resumes: tests/integration/services/test_storage_s3.py.)"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.conftest import CliRun, fault_env, start_cli

# A refused connection fails both of the check's tries at once; the bound also covers a slow interpreter start on a
# loaded machine. The check's own worst case (an endpoint that drops packets) is 2 x (5 s + 10 s).
STOP_S = 30


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound (so nothing else takes it) but never listening."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def _folder(tmp_path: Path) -> Path:
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "tiny"}')
    (folder / "weights.bin").write_bytes(bytes(range(256)) * 64)
    return folder


def test_unreachable_endpoint_is_one_paragraph(tmp_path: Path, closed_port: int, cli_runs: list[CliRun]) -> None:
    folder = _folder(tmp_path)
    endpoint = f"http://127.0.0.1:{closed_port}"
    env = fault_env(tmp_path, AWS_ACCESS_KEY_ID="AKIAEXAMPLE", AWS_SECRET_ACCESS_KEY="not-checked-by-a-closed-port")
    target = "s3://my-bucket/team/export"
    run = start_cli(["upload", str(folder), "--to", target, "--s3-endpoint-url", endpoint], tmp_path, tmp_path, env)
    cli_runs.append(run)
    code, seconds = run.wait(timeout=120)
    text = run.output()
    assert code == 2, text[-3000:]
    assert seconds < STOP_S, seconds
    assert run.sessions_left() == []
    assert "Traceback" not in text and "temporary server" not in text  # said before Prefect started
    paragraph = text.strip()
    assert paragraph.count("\n") == 0 and paragraph.startswith(
        f"error: {target}: cannot reach the S3 endpoint {endpoint}: 2 tries, each allowed 5 s to connect and 10 s"
    ), paragraph
    assert "last error: EndpointConnectionError" in paragraph and "nothing was sent" in paragraph
    assert "--s3-endpoint-url" in paragraph and "AWS_ACCESS_KEY_ID" in paragraph
    assert "run the same command again: an upload skips the files already stored whole" in paragraph
