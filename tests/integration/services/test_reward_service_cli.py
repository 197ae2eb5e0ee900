"""`cosmos-train reward-service`: refuses to start without a token (one paragraph, exit 2; checked in this process,
tests/cli_inprocess.py), starts with one (or --insecure-no-token on loopback) and stops on SIGTERM leaving no
process behind (a real process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import requests

from cosmos_train.net import free_port
from tests.cli_inprocess import CliResult, RunCli

CLI = [sys.executable, "-m", "cosmos_train.cli", "reward-service"]


def _env(token: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "REWARD_SERVICE_TOKEN"}
    if token:
        env["REWARD_SERVICE_TOKEN"] = token
    return env


def _refused(run_cli: RunCli, monkeypatch: pytest.MonkeyPatch, token: str | None, *extra: str) -> CliResult:
    """`cosmos-train reward-service` in this process: a refused token answers before anything starts."""
    monkeypatch.delenv("REWARD_SERVICE_TOKEN", raising=False)
    return run_cli("reward-service", *extra, env={"REWARD_SERVICE_TOKEN": token} if token else None)


@pytest.mark.parametrize(
    "extra, words", [([], "set REWARD_SERVICE_TOKEN"), (["--host", "0.0.0.0", "--insecure-no-token"], "loopback")]
)
def test_refuses_to_start_without_a_token(
    extra: list[str], words: str, run_cli: RunCli, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = _refused(run_cli, monkeypatch, None, *extra)
    assert done.returncode == 2
    assert words in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.startswith("error: reward service:")


def test_refuses_a_token_under_16_characters(run_cli: RunCli, monkeypatch: pytest.MonkeyPatch) -> None:
    done = _refused(run_cli, monkeypatch, "fifteen-chars-x")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "fifteen-chars-x" not in done.stderr
    assert "15 characters" in done.stderr and "at least 16" in done.stderr
    assert "secrets.token_urlsafe(32)" in done.stderr


def test_refuses_a_token_of_16_identical_characters(run_cli: RunCli, monkeypatch: pytest.MonkeyPatch) -> None:
    done = _refused(run_cli, monkeypatch, "z" * 16)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and "z" * 16 not in done.stderr
    assert done.stderr.startswith("error: reward service: REWARD_SERVICE_TOKEN is made of only 1 different character")
    assert "at least 8 different" in done.stderr and "secrets.token_urlsafe(32)" in done.stderr
    assert done.stderr.strip().count("\n") == 0  # one paragraph


@pytest.mark.parametrize("token, extra", [("cli-secret-4b1d-93a0", []), (None, ["--insecure-no-token"])])
def test_serves_then_stops_on_sigterm(token: str | None, extra: list[str], tmp_path) -> None:
    port = free_port()
    cfg = tmp_path / "rewards.toml"
    cfg.write_text("queue_size = 4\nworkers = 1\n")
    proc = subprocess.Popen(
        CLI + ["--port", str(port), "--config", str(cfg)] + extra,
        env=_env(token),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        deadline = time.monotonic() + 120
        while True:
            try:
                r = requests.post(f"http://127.0.0.1:{port}/api/reward/ping", headers=headers, timeout=5)
                break
            except requests.ConnectionError:
                assert proc.poll() is None, proc.stderr.read()
                assert time.monotonic() < deadline, "service did not come up"
                time.sleep(0.2)
        assert r.status_code == 200
        m = requests.get(f"http://127.0.0.1:{port}/metrics", headers=headers, timeout=5).json()
        assert m["queue_size"] == 4
        if token:
            assert requests.post(f"http://127.0.0.1:{port}/api/reward/ping", timeout=5).status_code == 401
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
    # uvicorn shuts down gracefully, then re-raises the signal it caught: dying of SIGTERM is the clean end
    err = proc.stderr.read()
    assert proc.returncode in (0, -signal.SIGTERM), err
    assert "Traceback" not in err
