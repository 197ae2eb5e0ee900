"""The reward service bounded under hostile clients, against the real server on loopback: one uuid and one
scoring per request id however many retries race, 409 for an id reused with another request, the queue
bounded by decoded bytes as well as by count, and a tiny expansion payload never allocated (peak RSS of
a real `cosmos-train reward-service` process)."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import requests
import torch

from cosmos_train.net import free_port
from cosmos_train.reward_service.config import ServiceConfig
from cosmos_train.reward_service.handlers import Batch, Handler, register_handler
from cosmos_train.reward_service.state import DiskState
from tests.reward_server import TOKEN, auth, body, npy_bytes, running_service

SCORED: Counter[str] = Counter()
OPEN = threading.Event()


@register_handler("test_bounds_count")
class CountOnce(Handler):
    """Counts every prompt it scores; slow enough that racing retries overlap its work."""

    def score(self, batch: Batch) -> list[float]:
        time.sleep(0.05)
        SCORED.update(batch.prompts)
        return [1.0] * batch.size


@register_handler("test_bounds_hold")
class HoldUntilOpen(Handler):
    def score(self, batch: Batch) -> list[float]:
        assert OPEN.wait(timeout=30)
        return [0.0] * batch.size


def _video_body(prompt: str, reward: str = "test_bounds_count", frames: int = 2) -> bytes:
    video = np.full((1, 3, frames, 8, 8), 7, dtype=np.uint8)
    return body({"prompts": [prompt], "reward_fn": {reward: 1.0}, "media_type": "video"}, npy_bytes(video))


def _enqueue(url: str, data: bytes, request_id: str | None = None) -> requests.Response:
    headers = auth() | ({"X-Request-Id": request_id} if request_id else {})
    return requests.post(url + "/api/reward/enqueue", data=data, headers=headers, timeout=30)


def _race(url: str, data: bytes, request_id: str, n: int) -> list[requests.Response]:
    barrier = threading.Barrier(n)
    out: list[requests.Response] = []
    lock = threading.Lock()

    def one() -> None:
        barrier.wait(timeout=20)
        r = _enqueue(url, data, request_id)
        with lock:
            out.append(r)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return out


def _wait_scored(service, uuids: set[str], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while any(u in service.pending for u in uuids):
        assert time.monotonic() < deadline, "requests were not scored"
        time.sleep(0.05)


@pytest.mark.parametrize("with_state_dir", [False, True])
def test_racing_retries_of_one_request_id_get_one_uuid_and_one_scoring(with_state_dir: bool, tmp_path: Path) -> None:
    config = ServiceConfig(state_dir=str(tmp_path / "state") if with_state_dir else None, workers=2)
    tag = f"race-{with_state_dir}"
    with running_service(config) as (url, service):
        for i in range(5):
            responses = _race(url, _video_body(f"{tag}-{i}"), f"{tag}-id-{i}", n=6)
            assert [r.status_code for r in responses] == [200] * 6, [r.text for r in responses]
            uuids = {r.json()["uuid"] for r in responses}
            assert len(uuids) == 1, uuids
            _wait_scored(service, uuids)
        assert all(SCORED[f"{tag}-{i}"] == 1 for i in range(5)), dict(SCORED)
        assert service.metrics()["counters"]["deduplicated"] == 5 * 5
    if with_state_dir:
        assert len(list((tmp_path / "state" / "ids").glob("*.json"))) == 5


def test_a_reused_id_with_another_body_or_reward_set_is_409_naming_it() -> None:
    with running_service() as (url, service):
        first = _enqueue(url, _video_body("reuse-a"), "reused-id")
        assert first.status_code == 200
        other_payload = _enqueue(url, _video_body("reuse-b"), "reused-id")
        assert other_payload.status_code == 409
        assert "'reused-id'" in other_payload.json()["detail"] and "different body" in other_payload.json()["detail"]
        other_reward = _enqueue(url, _video_body("reuse-a", reward="brightness"), "reused-id")
        assert other_reward.status_code == 409 and "reward set (brightness" in other_reward.json()["detail"]
        assert _enqueue(url, b"garbage", "reused-id").status_code == 409
        assert _enqueue(url, _video_body("reuse-a"), "reused-id").json()["uuid"] == first.json()["uuid"]
        assert service.metrics()["counters"]["rejected_409"] == 3


def test_a_refused_first_request_frees_its_id_for_the_corrected_retry(tmp_path: Path) -> None:
    with running_service(ServiceConfig(state_dir=str(tmp_path / "state"))) as (url, _):
        bad = body({"prompts": ["fix-me"], "reward_fn": {"test_bounds_count": 1.0}, "media_type": "video"}, b"xx")
        assert _enqueue(url, bad, "fixable-id").status_code == 400
        assert not list((tmp_path / "state" / "ids").glob("*.json"))
        assert _enqueue(url, _video_body("fix-me"), "fixable-id").status_code == 200


def test_request_ids_survive_a_restart_with_state_dir(tmp_path: Path) -> None:
    config = ServiceConfig(state_dir=str(tmp_path / "state"))
    with running_service(config) as (url, service):
        uuid = _enqueue(url, _video_body("restart-id"), "restart-id").json()["uuid"]
        _wait_scored(service, {uuid})
    with running_service(config) as (url, _):
        assert _enqueue(url, _video_body("restart-id"), "restart-id").json()["uuid"] == uuid
        assert _enqueue(url, _video_body("restart-other"), "restart-id").status_code == 409
    assert SCORED["restart-id"] == 1


def test_the_queue_is_bounded_by_decoded_bytes_as_well_as_count() -> None:
    OPEN.clear()
    frames = 64  # 1 x 3 x 64 x 8 x 8 uint8 = 12 KiB per request
    config = ServiceConfig(max_queued_mb=30 / 1024, queue_size=100, workers=1)  # room for 2 such requests
    with running_service(config) as (url, service):
        try:
            codes = [_enqueue(url, _video_body(f"bytes-{i}", "test_bounds_hold", frames)).status_code for i in range(4)]
            assert codes == [200, 200, 429, 429], codes
            r = _enqueue(url, _video_body("bytes-x", "test_bounds_hold", frames))
            assert "queue full by size" in r.json()["detail"] and r.headers["Retry-After"] == "1"
            huge = _video_body("too-big", "test_bounds_hold", frames=256)  # 48 KiB: never fits 30 KiB
            r = _enqueue(url, huge)
            assert r.status_code == 413 and "max_queued_mb" in r.json()["detail"]
        finally:
            OPEN.set()
        deadline = time.monotonic() + 20
        while service.pending:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert service.held_bytes == 0
        assert _enqueue(url, _video_body("bytes-after", "test_bounds_hold", frames)).status_code == 200


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _expansion_payloads() -> list[bytes]:
    buf = io.BytesIO()
    torch.save(torch.zeros(1, 3, 1, 1, 1, dtype=torch.uint8).expand(1, 3, 64, 1024, 1024), buf)
    expand = body({"prompts": ["x"], "reward_fn": {"brightness": 1.0}, "media_type": "video"}, buf.getvalue())
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "|u1", "fortran_order": False, "shape": (8, 3, 64, 1024, 1024)}
    )
    declared = body({"reward_fn": {"brightness": 1.0}, "media_type": "video"}, header.getvalue() + b"\0" * 1024)
    return [expand, declared]


def test_expansion_payloads_keep_a_real_service_small(tmp_path: Path) -> None:
    """Five of each hostile body (each under 2 KiB, each claiming ~200 MB-1.6 GB decoded) against
    `cosmos-train reward-service` with max_body_mb = 1: all refused, the process's peak RSS grows < 64 MB."""
    port = free_port()
    config = tmp_path / "rewards.toml"
    config.write_text("max_body_mb = 1\nworkers = 1\n")
    env = {**os.environ, "REWARD_SERVICE_TOKEN": TOKEN, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "cosmos_train.cli", "reward-service", "--port", str(port), "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                requests.post(url + "/api/reward/ping", headers=auth(), timeout=5)
                break
            except requests.ConnectionError:
                assert proc.poll() is None and time.monotonic() < deadline, "service did not come up"
                time.sleep(0.2)
        ok = body(
            {"reward_fn": {"brightness": 1.0}, "media_type": "video"}, npy_bytes(np.zeros((1, 3, 2, 8, 8), np.uint8))
        )
        assert _enqueue(url, ok).status_code == 200  # warm: the request path's imports and buffers are in
        before = _peak_rss_mb(proc.pid)
        for payload in _expansion_payloads() * 5:
            assert len(payload) < 2048
            r = _enqueue(url, payload)
            assert r.status_code in (400, 413), r.text
        grown = _peak_rss_mb(proc.pid) - before
        assert grown < 64, f"peak RSS grew {grown:.0f} MB"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_crash_between_accepting_and_recording_the_uuid_keeps_the_id(tmp_path: Path) -> None:
    """The claim is on disk (uuid not yet in it) and the request is queued: after a restart a retry of the
    id gets the queued request's uuid, not a second scoring."""
    state = DiskState(tmp_path / "state")
    data = _video_body("crash-window")
    digest = hashlib.sha256(data).hexdigest()
    assert state.claim_id("crash-id", {"uuid": None, "digest": digest, "rewards": ["test_bounds_count"]}) is None
    state.write_pending("u-crash", {"uuid": "u-crash", "request_id": "crash-id", "created": time.time()}, data)
    with running_service(ServiceConfig(state_dir=str(tmp_path / "state"))) as (url, service):
        assert _enqueue(url, data, "crash-id").json()["uuid"] == "u-crash"
        _wait_scored(service, {"u-crash"})
    assert SCORED["crash-window"] == 1
