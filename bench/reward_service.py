"""Load on the reward service: C concurrent clients x N requests each, through the real CLI server on
loopback and our client (enqueue + pull, request ids, retries). Checks every request is scored exactly
once and none is lost (the service's own counters and each score checked against its input), and
prints end-to-end latency (enqueue sent -> scores in hand) p50 / p99 and throughput.

    .venv/bin/python bench/reward_service.py [--clients 8] [--requests 125] [--workers 2]
    .venv/bin/python bench/reward_service.py --hostile [--stalled 300] [--races 20]

Each request is one [1, 3, 4, 16, 16] uint8 video whose pixels all equal a value chosen per request;
its brightness must come back as value / 255.

--hostile runs the attacks the service must stay bounded under, against a service with max_body_mb = 1 and
header / body timeouts of 2 s, and prints what they cost it:
- expansion payloads (a 1.6 kB torch.save of a stride-0 expand to [1, 3, 64, 1024, 1024], an .npy header
  declaring 1.6 GB, a deflated torch zip), 5 of each: the service's peak RSS before and after (VmHWM);
- `--stalled` connections sending half a request line, or headers and half a body, then nothing: how many
  the service still holds open 1 s past the timeout;
- `--races` request ids, each enqueued by 4 threads at once behind a barrier: uuids per id and scorings per id.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

import httpx
import numpy as np
import torch

from cosmos_train.net import free_port
from cosmos_train.rewards.remote import ClientSettings, RemoteRewardClient

log = logging.getLogger("bench.reward_service")
TOKEN = "bench-token-0c7e-4d2a"  # the service refuses tokens under 16 characters
HOSTILE_TIMEOUT_S = 2.0


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _start(port: int, workers: int, queue_size: int, extra: str = "", quiet: bool = False) -> subprocess.Popen:
    cfg = Path(tempfile.mkdtemp()) / "rewards.toml"
    cfg.write_text(f"workers = {workers}\nqueue_size = {queue_size}\n{extra}")
    env = {**os.environ, "REWARD_SERVICE_TOKEN": TOKEN}
    cmd = [sys.executable, "-m", "cosmos_train.cli", "reward-service", "--port", str(port), "--config", str(cfg)]
    # quiet: the hostile run makes the service log one line per refused request and closed connection
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL if quiet else None)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if (
                httpx.post(
                    f"http://127.0.0.1:{port}/api/reward/ping", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5
                ).status_code
                == 200
            ):
                return proc
        except httpx.TransportError:
            time.sleep(0.2)
    proc.kill()
    raise RuntimeError("reward service did not start")


def run(clients: int, requests: int, workers: int) -> dict:
    port = free_port()
    proc = _start(port, workers, queue_size=clients * 4)
    url = f"http://127.0.0.1:{port}"
    latencies: list[float] = []
    wrong: list[str] = []
    lock = threading.Lock()

    def client_loop(c: int) -> None:
        client = RemoteRewardClient(
            ClientSettings(
                enqueue_url=url + "/api/reward/enqueue",
                fetch_url=url + "/api/reward/pull",
                token=TOKEN,
                poll_interval_s=0.005,
                backoff_s=0.05,
                backoff_max_s=1.0,
            )
        )
        for i in range(requests):
            value = (c * requests + i) % 256
            video = np.full((1, 3, 4, 16, 16), value, dtype=np.uint8)
            t0 = time.perf_counter()
            docs = client.score(
                {"prompts": [f"{c}-{i}"], "reward_fn": {"brightness": 1.0}, "media_type": "video"},
                _npy(video),
                request_id=f"bench-{c}-{i}",
            )
            dt = time.perf_counter() - t0
            got = docs["brightness"]["scores"]["brightness"]
            with lock:
                latencies.append(dt)
                if got != [value / 255]:
                    wrong.append(f"{c}-{i}: {got} != {value / 255}")
        client.close()

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client_loop, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    metrics = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).json()
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    total = clients * requests
    lat = np.asarray(latencies)
    counters = metrics["counters"]
    out = {
        "requests": total,
        "answered": len(latencies),
        "lost": total - len(latencies),
        "wrong": len(wrong),
        "enqueued": counters.get("enqueued", 0),
        "scored": metrics["handlers"]["brightness"]["scored"],
        "deduplicated": counters.get("deduplicated", 0),
        "rejected_429": counters.get("rejected_429", 0),
        "errors": metrics["handlers"]["brightness"]["errors"],
        "latency_p50_ms": round(float(np.percentile(lat, 50)) * 1000, 1),
        "latency_p99_ms": round(float(np.percentile(lat, 99)) * 1000, 1),
        "latency_max_ms": round(float(lat.max()) * 1000, 1),
        "handler_p50_ms": round(metrics["handlers"]["brightness"]["latency_p50_s"] * 1000, 2),
        "handler_p99_ms": round(metrics["handlers"]["brightness"]["latency_p99_s"] * 1000, 2),
        "wall_s": round(wall, 1),
        "requests_per_s": round(total / wall, 1),
        "load_average": os.getloadavg(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    assert not wrong, wrong[:5]
    assert out["lost"] == 0 and out["enqueued"] == total and out["scored"] == total, out
    return out


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc")


def _body(meta: dict, tensor: bytes) -> bytes:
    return json.dumps(meta).encode() + b"\n" + tensor


def _expansion_payloads() -> dict[str, bytes]:
    meta = {"prompts": ["x"], "reward_fn": {"brightness": 1.0}, "media_type": "video"}
    buf = io.BytesIO()
    torch.save(torch.zeros(1, 3, 1, 1, 1, dtype=torch.uint8).expand(1, 3, 64, 1024, 1024), buf)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "|u1", "fortran_order": False, "shape": (8, 3, 64, 1024, 1024)}
    )
    stored = io.BytesIO()
    torch.save(torch.zeros(1, 3, 32, 256, 256, dtype=torch.uint8), stored)
    deflated = io.BytesIO()
    with zipfile.ZipFile(stored) as src, zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as dst:
        for entry in src.infolist():
            dst.writestr(entry.filename, src.read(entry.filename))
    return {
        "expand_stride0": _body(meta, buf.getvalue()),
        "npy_declared_1.6GB": _body(meta, header.getvalue() + bytes(1024)),
        "deflated_zip_6MB": _body(meta, deflated.getvalue()),
    }


def _stall(port: int, n: int) -> list[socket.socket]:
    """n connections, half of them stuck in the request line, half in the body."""
    half_body = (
        b"POST /api/reward/enqueue HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode() + b"\r\n"
        b"Content-Length: 100000\r\n\r\n" + b"{" * 100
    )
    socks = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"POST /api/reward/enq" if i % 2 else half_body)
        socks.append(s)
    return socks


def _still_open(socks: list[socket.socket]) -> int:
    """Connections the server has not closed (a closed one reads EOF or a reset; an open one has nothing)."""
    open_ = 0
    for s in socks:
        s.setblocking(False)
        try:
            while s.recv(65536):  # a 408 answer, then EOF
                pass
        except BlockingIOError:
            open_ += 1
        except OSError:
            pass
        s.close()
    return open_


def _race_one_id(url: str, headers: dict[str, str], payload: bytes, request_id: str, n: int) -> int:
    """n threads enqueue the same request with one X-Request-Id at once: the distinct uuids they got."""
    barrier = threading.Barrier(n)
    got: list[str] = []

    def one() -> None:
        barrier.wait(timeout=30)
        resp = httpx.post(url, content=payload, headers={**headers, "X-Request-Id": request_id}, timeout=30)
        got.append(resp.json()["uuid"])

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(set(got))


def hostile(stalled: int, races: int) -> dict:
    port = free_port()
    extra = f"max_body_mb = 1\nheader_timeout_s = {HOSTILE_TIMEOUT_S}\nbody_timeout_s = {HOSTILE_TIMEOUT_S}\n"
    extra += f"max_connections = {stalled + 64}\n"
    extra += f'state_dir = "{tempfile.mkdtemp()}"\n'  # the races: ids claimed on disk too (where 2+ uuids were seen)
    proc = _start(port, workers=2, queue_size=256, extra=extra, quiet=True)
    url = f"http://127.0.0.1:{port}"
    headers = {"Authorization": f"Bearer {TOKEN}"}
    out: dict = {"cpus": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__}
    try:
        meta = {"reward_fn": {"brightness": 1.0}, "media_type": "video"}
        warm = _body(meta, _npy(np.zeros((1, 3, 2, 8, 8), np.uint8)))
        httpx.post(url + "/api/reward/enqueue", content=warm, headers=headers, timeout=30)
        rss_before = _peak_rss_mb(proc.pid)
        statuses: dict[str, list[int]] = {}
        for name, payload in _expansion_payloads().items():
            statuses[name] = [
                httpx.post(url + "/api/reward/enqueue", content=payload, headers=headers, timeout=60).status_code
                for _ in range(5)
            ]
            out[f"bytes_{name}"] = len(payload)
        out["expansion_statuses"] = statuses
        out["peak_rss_mb_before"] = round(rss_before, 1)
        out["peak_rss_mb_after"] = round(_peak_rss_mb(proc.pid), 1)

        socks = _stall(port, stalled)
        time.sleep(HOSTILE_TIMEOUT_S + 1.0)
        out["stalled_connections"] = stalled
        out["open_after_timeout"] = _still_open(socks)
        out["ping_after_stall"] = httpx.post(url + "/api/reward/ping", headers=headers, timeout=10).status_code

        uuids_per_id: list[int] = []
        for r in range(races):
            video = np.full((1, 3, 2, 8, 8), r % 256, dtype=np.uint8)
            payload = _body({**meta, "prompts": [f"race-{r}"]}, _npy(video))
            uuids_per_id.append(_race_one_id(url + "/api/reward/enqueue", headers, payload, f"race-{r}", 4))
        time.sleep(1.0)
        metrics = httpx.get(url + "/metrics", headers=headers, timeout=10).json()
        out["race_ids"] = races
        out["uuids_per_id_max"] = max(uuids_per_id)
        # warm-up 1 + one per id: anything above is a request scored twice
        out["scorings_per_id"] = round((metrics["handlers"]["brightness"]["scored"] - 1) / races, 3)
        out["load_average"] = os.getloadavg()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=125, help="Requests per client.")
    ap.add_argument("--workers", type=int, default=2, help="The service's scoring threads.")
    ap.add_argument("--hostile", action="store_true", help="Run the hostile-client attacks instead of the load.")
    ap.add_argument("--stalled", type=int, default=300, help="Stalled connections of the hostile run.")
    ap.add_argument("--races", type=int, default=20, help="Request ids raced by 4 threads each (hostile run).")
    args = ap.parse_args()
    result = hostile(args.stalled, args.races) if args.hostile else run(args.clients, args.requests, args.workers)
    log.info("%s", json.dumps(result, indent=2))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    main()
