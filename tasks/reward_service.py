"""A reward service the flow starts for one run and stops at its end (`[train.train_policy.remote_reward]
local_service = true`).

    with local_reward_service(run_dir) as env:      # env: REMOTE_REWARD_ENQUEUE_URL / _FETCH_URL / token
        run the trainer with env

`cosmos-train reward-service` on 127.0.0.1 and a free port, with a fresh random token; its log goes to
RUN/logs/reward_service.log. The trainer finds it through the environment the client reads (the config's
URLs stay unset, and the token never reaches the TOML). The service runs in a session of its own and
watches this process (`--exit-with-parent`), so it never outlives the flow, even one killed with SIGKILL;
at the end it gets SIGTERM (queued batches finish), then SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from cosmos_train.config import Config

START_TIMEOUT_S = 120.0  # the service imports torch and the handlers before it listens
STOP_GRACE_S = 15.0


class RewardServiceFailed(RuntimeError):
    """The run's local reward service did not come up (its log says why)."""


def wants_local_service(cfg: Config) -> bool:
    tp = cfg.train.train_policy
    return cfg.policy_type == "grpo" and tp.use_remote_reward and tp.remote_reward.local_service


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def local_reward_service(run_dir: Path, token_env: str = "REMOTE_REWARD_TOKEN") -> Iterator[dict[str, str]]:
    """Start the service, wait until it answers ping, yield the trainer's environment, stop it."""
    port, token = _free_port(), secrets.token_urlsafe(32)
    base = f"http://127.0.0.1:{port}/api/reward"
    log_path = run_dir / "logs" / "reward_service.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cosmos_train.cli", "reward-service", "--host", "127.0.0.1", "--port", str(port),
             "--exit-with-parent"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, "REWARD_SERVICE_TOKEN": token})
    try:
        _wait_until_up(proc, f"{base}/ping", token, log_path)
        yield {"REMOTE_REWARD_ENQUEUE_URL": f"{base}/enqueue", "REMOTE_REWARD_FETCH_URL": f"{base}/pull",
               token_env: token}
    finally:
        _stop(proc)


def _wait_until_up(proc: subprocess.Popen, ping: str, token: str, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RewardServiceFailed(f"the run's reward service exited with code {proc.returncode} before it "
                                      f"answered (log {log_path}):\n{tail}")
        try:
            if httpx.post(ping, headers={"Authorization": f"Bearer {token}"}, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    _stop(proc)
    raise RewardServiceFailed(f"the run's reward service did not answer ping within {START_TIMEOUT_S:.0f} s "
                              f"(log {log_path})")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)
