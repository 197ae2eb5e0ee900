"""A real, isolated Prefect server for tests, and the `prefect` CLI run against it as a user would.

Every process is started in its own session and its whole process group is killed in `finally`: a
`prefect server start` runs uvicorn and a worker runs each flow as a grandchild, and neither may
outlive a failed test.

A server on another host of the two-host bed (tests/two_hosts.py): `start_server(home, host=ADDR,
prefix=hosts.command(0, []))` runs it there, bound to ADDR; `cli`, `get` and `post` then run through the same
prefix, since the address exists only inside the bed's hosts.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from cosmos_train.net import free_port
from tests.torchrun import kill_group

PREFECT = str(Path(sys.executable).with_name("prefect"))
STOP_GRACE_S = 10.0  # a server or worker stopped with SIGTERM: this long to shut down before SIGKILL
# One HTTP request made where the server's address exists (through a prefix): argv method, url, JSON body;
# prints the status code on the first line, the body after it.
_REQUEST = (
    "import httpx, sys\n"
    "r = httpx.request(sys.argv[1], sys.argv[2], content=sys.argv[3] or None,\n"
    "                  headers={'content-type': 'application/json'}, timeout=30.0)\n"
    "sys.stdout.write(f'{r.status_code}\\n{r.text}')\n"
)


def isolated_env(home: Path, prepare: bool = True, **extra: str) -> dict[str, str]:
    """os.environ without any PREFECT_* setting of the caller (a test harness, a user profile), `extra` added, with
    PREFECT_HOME `home`: a `prepared_home` unless `prepare` is False (the template's own server, a server's home)."""
    if prepare:
        prepared_home(home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false", **extra)
    return env


@dataclass
class CliResult:
    args: list[str]
    returncode: int
    output: str

    def check(self) -> CliResult:
        if self.returncode != 0:
            raise AssertionError(f"{' '.join(self.args)} exited {self.returncode}:\n{self.output[-4000:]}")
        return self


@dataclass
class PrefectServer:
    home: Path
    url: str  # .../api
    proc: subprocess.Popen
    log: Path
    prefix: list[str] = field(default_factory=list)  # runs a command where `url` is reachable (empty: here)

    def env(self, **extra: str) -> dict[str, str]:
        return isolated_env(self.home, prepare=False, PREFECT_API_URL=self.url, **extra)

    def wait_healthy(self, deadline_s: float) -> None:
        """Poll /health until it answers; raise with the server log if it dies or the deadline passes."""
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prefect server exited {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if self.get("/health").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"prefect server not healthy after {deadline_s:.0f} s:\n{self.log_tail()}")

    def log_tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else "(no log)"

    def cli(self, args: Sequence[str], cwd: Path, timeout_s: float, **env: str) -> CliResult:
        """Run `prefect ARGS` against this server; the process group is killed if it overruns."""
        argv = [*self.prefix, PREFECT, *args]
        proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=self.env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc, STOP_GRACE_S)
            out = proc.communicate()[0]
            raise AssertionError(f"{' '.join(argv)} still running after {timeout_s:.0f} s:\n{out[-4000:]}") from None
        finally:
            kill_group(proc, grace_s=2.0)  # a worker's flow-run grandchild may still hold the group
        return CliResult(argv, proc.returncode, out)

    def deployment_run(self, deployment: str, params: dict, cwd: Path) -> str:
        """`prefect deployment run DEPLOYMENT --param params=...` against this server: the new flow run's id."""
        created = self.cli(
            ["deployment", "run", deployment, "--param", f"params={json.dumps(params)}"], cwd=cwd, timeout_s=120
        ).check()
        match = re.search(r"UUID: ([0-9a-f-]{36})", created.output)
        assert match, created.output
        return match.group(1)

    def kill_unfinished_flow_runs(self) -> None:
        """Kill the process group of every flow run the server does not see finished.

        A process worker starts each flow run in a session of its own, so killing a stuck worker's
        group leaves the flow behind; its pid is the run's `infrastructure_pid` ("[host:]pid").
        (A worker stopped with SIGTERM ends its flow runs itself; this is for one that had to be SIGKILLed.)
        Finished runs are skipped, and so is a pid that no longer leads a prefect process group: it may
        already belong to someone else.
        """
        runs = self.post("/flow_runs/filter", {}).json()
        for run in runs:
            pid = (run.get("infrastructure_pid") or "").rpartition(":")[2]
            if not pid.isdigit() or run["state_type"] in ("COMPLETED", "FAILED", "CANCELLED", "CRASHED"):
                continue
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                if os.getpgid(int(pid)) == int(pid) and b"prefect" in cmdline:
                    os.killpg(int(pid), signal.SIGKILL)
            except (OSError, ProcessLookupError):
                pass  # already gone

    def get(self, path: str) -> httpx.Response:
        if self.prefix:
            return self._request("GET", path, None)
        return httpx.get(f"{self.url}{path}", timeout=30.0)

    def post(self, path: str, body: dict) -> httpx.Response:
        if self.prefix:
            return self._request("POST", path, body)
        return httpx.post(f"{self.url}{path}", json=body, timeout=30.0)

    def _request(self, method: str, path: str, body: dict | None) -> httpx.Response:
        """The request made through `prefix`, as the response httpx would have returned here; a server that
        does not answer raises httpx.ConnectError, as a direct request would."""
        url = f"{self.url}{path}"
        done = subprocess.run(
            [*self.prefix, sys.executable, "-c", _REQUEST, method, url, json.dumps(body) if body is not None else ""],
            capture_output=True,
            text=True,
            timeout=60,
        )
        request = httpx.Request(method, url)
        if done.returncode != 0:
            raise httpx.ConnectError(
                f"{method} {url} (through {self.prefix[:1]}): {done.stderr[-2000:]}", request=request
            )
        status, _, text = done.stdout.partition("\n")
        return httpx.Response(int(status), text=text, request=request)


HOME_FILES = ("prefect.db", "memo_store.toml")  # the database, and the memo that its blocks are registered


def prepared_home(home: Path) -> Path:
    """`home` made a PREFECT_HOME whose database is migrated and its blocks registered (a copy of `_template_home`'s),
    unless it holds a database already (a command continuing a run keeps its home, as a user's does)."""
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "prefect.db").exists():
        template = _template_home()
        for name in HOME_FILES:
            shutil.copyfile(template / name, home / name)
    return home


def _template_home() -> Path:
    """A PREFECT_HOME that one real server started and stopped in, made once per Prefect version and machine (under
    COSMOS_TRAIN_CACHE, default ~/.cache/cosmos-train; built aside and renamed into place, under a lock, so a
    concurrent or killed build leaves no half of one)."""
    import prefect

    root = Path(os.environ.get("COSMOS_TRAIN_CACHE") or Path.home() / ".cache" / "cosmos-train")
    final = root / f"prefect-home-{prefect.__version__}"
    if all((final / name).exists() for name in HOME_FILES):
        return final
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".prefect-home.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not all((final / name).exists() for name in HOME_FILES):
            build = Path(tempfile.mkdtemp(prefix=".prefect-home-", dir=root))
            with start_server(build / "server", prepare=False) as server:
                server.wait_healthy(180)
            # stopped: its database, with whatever its write-ahead log still held, as one file
            with (
                closing(sqlite3.connect(build / "server" / "prefect.db")) as src,
                closing(sqlite3.connect(build / "prefect.db")) as dst,
            ):
                src.backup(dst)
            shutil.copyfile(build / "server" / "memo_store.toml", build / "memo_store.toml")
            shutil.rmtree(build / "server")
            shutil.rmtree(final, ignore_errors=True)
            build.rename(final)
    return final


@contextmanager
def start_server(
    home: Path, host: str = "127.0.0.1", prefix: Sequence[str] = (), prepare: bool = True
) -> Iterator[PrefectServer]:
    """Start `prefect server start` on a free port with its own PREFECT_HOME; yields before it is healthy.

    Call `wait_healthy` before using it: the caller can do other setup while the server boots.
    host: the address it listens on; prefix: a command prefix that runs it (and every later request and CLI
    call) where that address exists, e.g. `TwoHosts.command(0, [])` for host0 of the two-host bed.
    prepare: start on `prepared_home(home)` (False: a fresh database, migrated by the server itself).
    """
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()  # free here; on a bed host (its own network namespace) every port is
    log = home / "server.log"
    url = f"http://{host}:{port}/api"
    with log.open("w") as out:
        # PREFECT_UI_API_URL: without it the UI's page calls the API on port 4200, not this server's port
        proc = subprocess.Popen(
            [*prefix, PREFECT, "server", "start", "--host", host, "--port", str(port)],
            cwd=home,
            env=isolated_env(home, prepare=prepare, PREFECT_UI_API_URL=url),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = PrefectServer(home=home, url=url, proc=proc, log=log, prefix=list(prefix))
    try:
        yield server
    finally:
        try:
            server.kill_unfinished_flow_runs()
        except httpx.HTTPError:
            pass  # the server never came up: it started no flow runs
        kill_group(proc, STOP_GRACE_S)


def flow_run_artifact_versions(flow_run_id: object) -> list:
    """Every version of every artifact of one flow run, oldest first. Read by the run's id: the Prefect server a
    test worker shares across its files holds other runs' artifacts, past the API's default page (200)."""
    import asyncio

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async def read() -> list:
        async with get_client() as c:
            return await c.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
            )

    return sorted(asyncio.run(read()), key=lambda a: a.created)


def flow_run_artifacts(flow_run_id: object) -> dict:
    """The newest version of each of a flow run's artifacts, by key. Curves and metrics are published
    again while a trainer runs and once more at its end: the API returns every version, in no order a
    test may rely on, so the version is picked by its creation time."""
    return {a.key: a for a in flow_run_artifact_versions(flow_run_id) if a.key}
