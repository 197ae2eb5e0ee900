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
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from prefect.blocks.system import Secret

from cosmos_train.config import Config, GRPOPolicyConfig
from cosmos_train.net import free_port

START_TIMEOUT_S = 120.0  # the service imports torch and the handlers before it listens
STOP_GRACE_S = 15.0


class RewardServiceFailed(RuntimeError):
    """The run's local reward service did not come up (its log says why)."""


def wants_local_service(cfg: Config) -> bool:
    tp = cfg.train.train_policy
    return isinstance(tp, GRPOPolicyConfig) and tp.use_remote_reward and tp.remote_reward.local_service


def secret_value(block_name: str) -> str:
    """The value of the Prefect Secret block `block_name` (ValueError naming it when there is none)."""
    try:
        block = Secret.load(block_name)
    except ValueError as e:
        raise ValueError(
            f"no Prefect Secret block named {block_name!r}: create it in the UI (Blocks -> Secret) "
            f"or with `Secret(value=...).save({block_name!r})`"
        ) from e
    assert isinstance(
        block, Secret
    )  # prefect's async_dispatch types results as value | coroutine; sync callers get the value
    return str(block.get())


def remote_reward_env(cfg: Config) -> dict[str, str]:
    """What the ranks need from Prefect for a remote reward service: the token of `remote_reward.token_secret`
    (a Secret block) under `token_env`; empty when the config names no secret."""
    tp = cfg.train.train_policy
    if not isinstance(tp, GRPOPolicyConfig) or not tp.use_remote_reward or not tp.remote_reward.token_secret:
        return {}  # an SFT job's policy section has no remote_reward
    return {tp.remote_reward.token_env: secret_value(tp.remote_reward.token_secret)}


@contextlib.contextmanager
def reward_service(
    log_path: Path,
    host: str = "127.0.0.1",
    port: int | None = None,
    token: str | None = None,
    config: str | None = None,
) -> Iterator[tuple[subprocess.Popen, str, str]]:
    """`cosmos-train reward-service` as a child that dies with this process: yields (process, base URL
    of its API, token) once it answers ping, and stops it on the way out."""
    port = port or free_port()
    token = token or secrets.token_urlsafe(32)
    base = f"http://{host}:{port}/api/reward"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "cosmos_train.cli",
        "reward-service",
        "--host",
        host,
        "--port",
        str(port),
        "--exit-with-parent",
        *(["--config", config] if config else []),
    ]
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "REWARD_SERVICE_TOKEN": token},
        )
    try:
        _wait_until_up(proc, f"{base}/ping", token, log_path)
        yield proc, base, token
    finally:
        _stop(proc)


@contextlib.contextmanager
def local_reward_service(run_dir: Path, token_env: str = "REMOTE_REWARD_TOKEN") -> Iterator[dict[str, str]]:
    """A service for one run on loopback with a fresh token: yields the ranks' environment."""
    with reward_service(run_dir / "logs" / "reward_service.log") as (_, base, token):
        yield {
            "REMOTE_REWARD_ENQUEUE_URL": f"{base}/enqueue",
            "REMOTE_REWARD_FETCH_URL": f"{base}/pull",
            token_env: token,
        }


def _wait_until_up(proc: subprocess.Popen, ping: str, token: str, log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RewardServiceFailed(
                f"the run's reward service exited with code {proc.returncode} before it "
                f"answered (log {log_path}):\n{tail}"
            )
        try:
            if httpx.post(ping, headers={"Authorization": f"Bearer {token}"}, timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    _stop(proc)
    raise RewardServiceFailed(
        f"the run's reward service did not answer ping within {START_TIMEOUT_S:.0f} s (log {log_path})"
    )


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
