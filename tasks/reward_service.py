"""A reward service the flow starts for one run, keeps up while it trains, and stops at its end
(`[train.train_policy.remote_reward] local_service = true`).

    with local_reward_service(run_dir, logger=logger) as service:
        run the trainer with service.env             # REMOTE_REWARD_ENQUEUE_URL / _FETCH_URL / the token
        retry_condition_fn=service.up_before(retry_only_crashes)   # a relaunch waits for the service

`cosmos-train reward-service` on 127.0.0.1 and a free port, with a fresh random token; its log goes to
RUN/logs/reward_service.log. The trainer finds it through the environment the client reads (the config's
URLs stay unset, and the token never reaches the TOML): a GRPO job's REMOTE_REWARD_* (VLM_CLIENT), a world-model
job's WFM_REWARD_* (WFM_CLIENT, tasks/wfm_job.py). The service runs in a session of its own and
watches this process (`--exit-with-parent`), so it never outlives the flow, even one killed with SIGKILL;
at the end it gets SIGTERM (queued batches finish), then SIGKILL after a grace period.

Supervised: when it dies while the run trains, it is started again on the same port, with the same token and
the same state_dir (RUN/.reward_service/state: the request ids it claimed, the work queued and the results
scored, so the new one answers what its predecessor accepted and scores nothing twice), within a second or
two plus its start-up; the ranks' client retries meanwhile, so the run goes on. One log line per restart says
how the previous one ended. A service that keeps dying (MAX_QUICK_DEATHS within QUICK_DEATH_WINDOW_S) or does
not come back up is left down: the ranks then stop saved when their retries run out (ServiceUnavailable, exit
75), and the paragraph says why the service is gone. The state folder is the service's scratch, hidden from
the run's mirror to S3 by its dot, and removed at the end.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from prefect.blocks.system import Secret

from cosmos_train.config import Config, GRPOPolicyConfig
from cosmos_train.errors import ServiceUnavailable
from cosmos_train.net import free_port

START_TIMEOUT_S = 120.0  # the service imports torch and the handlers before it listens
STOP_GRACE_S = 15.0
WATCH_S = 0.2  # how often the supervisor looks at the service process
# A service that dies this many times within this window is dying at once each time (a bad handler, a port taken):
# restarting it again would only spin; the run stops saved instead.
MAX_QUICK_DEATHS = 3
QUICK_DEATH_WINDOW_S = 120.0
STATE_FOLDER = ".reward_service"  # under the run folder: a dot keeps the run's S3 mirror off the scratch


class RewardServiceFailed(RuntimeError):
    """The run's local reward service did not come up (its log says why)."""


@dataclass(frozen=True)
class ClientVariables:
    """Where a job's ranks find the service (the variables its client reads the URLs from; the token's is the
    job's own), and the config keys that set how long that client retries (named when it gave up mid-restart)."""

    enqueue_url: str
    fetch_url: str
    retry_keys: str


# the names rewards.remote's client reads (VLM_ENV, WFM_ENV), spelled out: importing that module loads torch, which
# the reward-service flow (this module's other user) does not need
VLM_CLIENT = ClientVariables(
    "REMOTE_REWARD_ENQUEUE_URL", "REMOTE_REWARD_FETCH_URL", "train.train_policy.remote_reward.max_retries or backoff_s"
)
WFM_CLIENT = ClientVariables("WFM_REWARD_ENQUEUE_URL", "WFM_REWARD_FETCH_URL", "reward.max_retries or reward.backoff_s")


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
    proc = _spawn(log_path, host, port, token, config)
    try:
        _wait_until_up(proc, f"{base}/ping", token, log_path)
        yield proc, base, token
    finally:
        _stop(proc)


class SupervisedService:
    """The run's own service, restarted on the same port with the same token and config when it dies (module
    docstring). `env` is what the ranks need; `note()` says what became of it, for a paragraph."""

    def __init__(
        self,
        log_path: Path,
        port: int,
        token: str,
        config: str,
        logger: Any,
        token_env: str,
        client: ClientVariables = VLM_CLIENT,
    ):
        self.log_path, self.port, self.token, self.config, self.logger = log_path, port, token, config, logger
        self.base = f"http://127.0.0.1:{port}/api/reward"
        self.client = client
        self.env = {client.enqueue_url: f"{self.base}/enqueue", client.fetch_url: f"{self.base}/pull"}
        self.env[token_env] = token
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.deaths: list[float] = []  # monotonic times of the deaths within QUICK_DEATH_WINDOW_S
        self.gave_up: str | None = None  # why it is left down
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="reward-service-supervisor", daemon=True)

    def start(self) -> SupervisedService:
        """The first start (RewardServiceFailed when it does not come up: the run does not begin), then the watch."""
        self.proc = self._launch()
        self._thread.start()
        return self

    def _launch(self) -> subprocess.Popen:
        proc = _spawn(self.log_path, "127.0.0.1", self.port, self.token, self.config)
        _wait_until_up(proc, f"{self.base}/ping", self.token, self.log_path, self._stopping)
        return proc

    def _watch(self) -> None:
        while not self._stopping.wait(WATCH_S):
            assert self.proc is not None
            if self.proc.poll() is not None and not self._stopping.is_set() and not self._restart(self.proc):
                return

    def _restart(self, dead: subprocess.Popen) -> bool:
        """Start it again after `dead` ended; False when it is left down (`gave_up`)."""
        how = exit_described(dead.returncode)
        now = time.monotonic()
        self.deaths = [t for t in self.deaths if now - t < QUICK_DEATH_WINDOW_S] + [now]
        if len(self.deaths) >= MAX_QUICK_DEATHS:
            return self._give_up(
                f"died {len(self.deaths)} times within {QUICK_DEATH_WINDOW_S:.0f} s (the last {how}), so it was "
                "not restarted again"
            )
        self.restarts += 1
        self.logger.warning(
            "the run's reward service (pid %d) %s; restarting it on port %d with the same token and state (restart %d)",
            dead.pid,
            how,
            self.port,
            self.restarts,
        )
        with contextlib.suppress(OSError), self.log_path.open("a") as log:
            log.write(f"--- the run restarts its reward service: the previous one (pid {dead.pid}) {how}\n")
        t0 = time.monotonic()
        try:
            self.proc = self._launch()
        except RewardServiceFailed as e:
            return self._give_up(f"{how} and did not come back up ({str(e).splitlines()[0]})")
        self.logger.info(
            "the run's reward service is back (pid %d, up %.1f s after the restart)",
            self.proc.pid,
            time.monotonic() - t0,
        )
        return True

    def _give_up(self, why: str) -> bool:
        if not self._stopping.is_set():
            self.gave_up = why
            self.logger.error(
                "the run's reward service %s; the ranks stop saved once their retries run out (log %s)",
                why,
                self.log_path,
            )
        return False

    def wait_serving(self, timeout: float = START_TIMEOUT_S + 10) -> bool:
        """Whether the service answers ping, after waiting up to `timeout` s for a restart under way (False at once
        when it was left down)."""
        deadline = time.monotonic() + timeout
        while self.gave_up is None and not self._stopping.is_set():
            if _answers(f"{self.base}/ping", self.token):
                return True
            if time.monotonic() > deadline:
                break
            time.sleep(WATCH_S)
        return False

    def up_before(self, retry_if: Callable[[Any, Any, Any], bool]) -> Callable[[Any, Any, Any], bool]:
        """A Prefect retry condition that first waits for the service (a relaunch never starts against a service
        being restarted), then answers as `retry_if`."""

        def condition(task: Any, task_run: Any, state: Any) -> bool:
            self.wait_serving()
            return retry_if(task, task_run, state)

        return condition

    def note(self) -> str:
        """A sentence (no final stop) on what became of the service, for the paragraph of a run it stopped ('' when
        nothing did)."""
        if self.gave_up is not None:
            return f"The run's own reward service (local_service) {self.gave_up}; its log: {self.log_path}"
        if self.restarts:
            return (
                f"The run's own reward service was restarted {self.restarts} time(s) and the ranks gave up first: "
                f"raise {self.client.retry_keys} so they wait out a restart "
                f"(its log: {self.log_path})"
            )
        return ""

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=START_TIMEOUT_S + 10)
        if self.proc is not None:
            _stop(self.proc)


@contextlib.contextmanager
def local_reward_service(
    run_dir: Path, token_env: str = "REMOTE_REWARD_TOKEN", logger: Any = None, client: ClientVariables = VLM_CLIENT
) -> Iterator[SupervisedService]:
    """A supervised service for one run on loopback with a fresh token and a state_dir in the run folder, its
    address in `client`'s variables (a VLM job's REMOTE_REWARD_*, a world-model job's WFM_REWARD_*). A
    ServiceUnavailable that ends the run on its way out gets the service's `note()` added."""
    scratch = run_dir / STATE_FOLDER
    shutil.rmtree(scratch, ignore_errors=True)  # a previous attempt's ids and results: never asked for again
    scratch.mkdir(parents=True)
    config = scratch / "rewards.toml"
    config.write_text(f"state_dir = {json.dumps(str(scratch / 'state'))}\n")  # a JSON string is a TOML string
    log_path = run_dir / "logs" / "reward_service.log"
    service = SupervisedService(
        log_path,
        free_port(),
        secrets.token_urlsafe(32),
        str(config),
        logger or logging.getLogger(__name__),
        token_env,
        client,
    )
    try:
        yield service.start()
    except ServiceUnavailable as e:
        if note := service.note():
            e.args = (f"{e}. {note}",)  # the same error object: what the task set on it (run_dir) stays
        raise
    finally:
        service.stop()
        shutil.rmtree(scratch, ignore_errors=True)


def exit_described(returncode: int | None) -> str:
    """'exited with code 1' / 'was killed by SIGKILL' for a process's return code."""
    if returncode is not None and returncode < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by {signal.Signals(-returncode).name}"
    return f"exited with code {returncode}"


def _spawn(log_path: Path, host: str, port: int, token: str, config: str | None) -> subprocess.Popen:
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
        return subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "REWARD_SERVICE_TOKEN": token},
        )


def _wait_until_up(
    proc: subprocess.Popen, ping: str, token: str, log_path: Path, cancel: threading.Event | None = None
) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and not (cancel is not None and cancel.is_set()):
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-2000:]
            raise RewardServiceFailed(
                f"the run's reward service exited with code {proc.returncode} before it "
                f"answered (log {log_path}):\n{tail}"
            )
        if _answers(ping, token):
            return
        time.sleep(0.2)
    _stop(proc)
    if cancel is not None and cancel.is_set():
        raise RewardServiceFailed("the run ended while its reward service was starting")
    raise RewardServiceFailed(
        f"the run's reward service did not answer ping within {START_TIMEOUT_S:.0f} s (log {log_path})"
    )


def _answers(ping: str, token: str) -> bool:
    try:
        return httpx.post(ping, headers={"Authorization": f"Bearer {token}"}, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


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
