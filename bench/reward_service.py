"""Load on the reward service: C concurrent clients x N requests each, through the real CLI server on
loopback and our client (enqueue + pull, request ids, retries). Checks every request is scored exactly
once and none is lost (the service's own counters and each score checked against its input), and
prints end-to-end latency (enqueue sent -> scores in hand) p50 / p99 and throughput.

    .venv/bin/python bench/reward_service.py [--clients 8] [--requests 125] [--workers 2]

Each request is one [1, 3, 4, 16, 16] uint8 video whose pixels all equal a value chosen per request;
its brightness must come back as value / 255.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from cosmos_train.net import free_port
from cosmos_train.rewards.remote import ClientSettings, RemoteRewardClient

TOKEN = "bench-token"


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _start(port: int, workers: int, queue_size: int) -> subprocess.Popen:
    cfg = Path(tempfile.mkdtemp()) / "rewards.toml"
    cfg.write_text(f"workers = {workers}\nqueue_size = {queue_size}\n")
    env = {**os.environ, "REWARD_SERVICE_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cosmos_train.cli", "reward-service", "--port", str(port), "--config", str(cfg)], env=env
    )
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=125, help="Requests per client.")
    ap.add_argument("--workers", type=int, default=2, help="The service's scoring threads.")
    args = ap.parse_args()
    print(json.dumps(run(args.clients, args.requests, args.workers), indent=2))


if __name__ == "__main__":
    main()
