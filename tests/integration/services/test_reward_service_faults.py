"""Security and faults against the real reward service: each bad request is refused with its status and
a message naming what is wrong, no work is done for it, and the service keeps serving."""

from __future__ import annotations

import io
import json
import os
import pickle
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import requests
import torch

from cosmos_train.reward_service.config import ServiceConfig
from cosmos_train.reward_service.handlers import Batch, Handler, register_handler
from tests.reward_server import TOKEN, auth, body, npy_bytes, running_service

CALLS: Counter[str] = Counter()
RELEASE = threading.Event()


@register_handler("test_count")
class Count(Handler):
    """Counts every prompt it scores (each test uses its own prompts)."""

    def score(self, batch: Batch) -> list[float]:
        CALLS.update(batch.prompts)
        return [1.0] * batch.size


@register_handler("test_hold")
class Hold(Handler):
    def score(self, batch: Batch) -> list[float]:
        assert RELEASE.wait(timeout=30)
        CALLS.update(batch.prompts)
        return [2.0] * batch.size


VIDEO = np.full((1, 3, 2, 4, 4), 10, dtype=np.uint8)


def _good(prompt: str = "ok", reward: str = "brightness") -> bytes:
    return body({"prompts": [prompt], "reward_fn": {reward: 1.0}, "media_type": "video"}, npy_bytes(VIDEO))


def _enqueue(url: str, data: bytes, headers: dict | None = None, params: dict | None = None) -> requests.Response:
    return requests.post(
        url + "/api/reward/enqueue",
        data=data,
        headers=auth() if headers is None else headers,
        params=params,
        timeout=30,
    )


def _still_serving(url: str) -> None:
    assert requests.post(url + "/api/reward/ping", headers=auth(), timeout=10).status_code == 200
    r = _enqueue(url, _good())
    assert r.status_code == 200, r.text
    deadline = time.monotonic() + 20
    while True:
        p = requests.post(
            url + "/api/reward/pull", data={"uuid": r.json()["uuid"], "type": "brightness"}, headers=auth(), timeout=10
        )
        if p.status_code == 200:
            assert p.json()["scores"]["brightness"] == [pytest.approx(10 / 255)]
            return
        assert p.status_code == 400 and time.monotonic() < deadline
        time.sleep(0.05)


class Evil:
    def __reduce__(self):
        return (os.system, (f"touch {MARKER}",))


MARKER = Path("/tmp/cosmos-train-reward-service-unpickled")


def _torch_bytes(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _bad_requests() -> list[tuple[str, bytes, int, str]]:
    meta = {"prompts": ["x"], "reward_fn": {"brightness": 1.0}, "media_type": "video"}
    full = npy_bytes(VIDEO)
    return [
        ("truncated npy", body(meta, full[: len(full) // 2]), 400, "tensor"),
        ("truncated torch.save", body(meta, _torch_bytes(torch.zeros(1, 3, 2, 4, 4))[:300]), 400, "tensor"),
        ("raw pickle", body(meta, pickle.dumps(Evil())), 400, "tensor"),
        ("pickled npy", body(meta, _object_npy()), 400, "pickle"),
        ("torch.save of an object", body(meta, _torch_bytes({"x": Evil()})), 400, "weights_only"),
        ("unknown reward", body({**meta, "reward_fn": {"nope": 1.0}}, full), 400, "reward_fn.nope"),
        ("negative weight", body({**meta, "reward_fn": {"brightness": -1.0}}, full), 400, "reward_fn.brightness"),
        (
            "NaN weight",
            json.dumps({**meta, "reward_fn": {"brightness": float("nan")}}).encode() + b"\n" + full,
            400,
            "reward_fn.brightness",
        ),
        ("malformed JSON", b'{"prompts": [\n' + full, 400, "body"),
        ("wrong shape", body(meta, npy_bytes(np.zeros((1, 4, 4), dtype=np.uint8))), 400, "tensor"),
        ("prompts vs batch", body({**meta, "prompts": ["a", "b"]}, full), 400, "prompts"),
        ("bad media_type", body({**meta, "media_type": "audio"}, full), 400, "media_type"),
        (
            "motion on an image",
            body(
                {**meta, "media_type": "image", "reward_fn": {"motion": 1.0}},
                npy_bytes(np.zeros((1, 4, 4, 3), dtype=np.uint8)),
            ),
            400,
            "reward_fn.motion",
        ),
    ]


def _object_npy() -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.array([Evil()], dtype=object), allow_pickle=True)
    return buf.getvalue()


def test_credentials_are_checked_before_any_work() -> None:
    with running_service() as (url, service):
        for name, headers, params in [
            ("no token", {}, None),
            ("wrong token", auth("wrong"), None),
            ("basic scheme", {"Authorization": f"Basic {TOKEN}"}, None),
            ("token in query", auth(), {"token": TOKEN}),
            ("query only", {}, {"access_token": TOKEN}),
        ]:
            r = _enqueue(url, _good(), headers, params)
            assert r.status_code == 401, name
            assert r.json()["detail"], name
            for route in ("/api/reward/pull", "/api/reward/ping"):
                assert requests.post(url + route, headers=headers, params=params, timeout=10).status_code == 401
            assert requests.get(url + "/metrics", headers=headers, params=params, timeout=10).status_code == 401
        assert "URL" in _enqueue(url, _good(), auth(), {"token": TOKEN}).json()["detail"]
        assert service.metrics()["counters"].get("enqueued", 0) == 0 and not service.pending
        _still_serving(url)


def test_bad_payloads_are_refused_naming_the_field() -> None:
    MARKER.unlink(missing_ok=True)
    with running_service() as (url, service):
        for name, data, status, words in _bad_requests():
            r = _enqueue(url, data)
            assert r.status_code == status, (name, r.text)
            assert words in r.json()["detail"], (name, r.json()["detail"])
            _still_serving(url)
        assert service.metrics()["counters"]["rejected_400"] == len(_bad_requests())
    assert not MARKER.exists(), "a payload was unpickled"


def test_oversize_body_413_announced_or_streamed() -> None:
    cfg = ServiceConfig(max_body_mb=0.01)  # 10 KiB
    big = body(
        {"prompts": ["x"], "reward_fn": {"brightness": 1.0}}, npy_bytes(np.zeros((1, 3, 8, 32, 32), dtype=np.uint8))
    )
    with running_service(cfg) as (url, service):
        r = _enqueue(url, big)
        assert r.status_code == 413 and "limit" in r.json()["detail"]
        r = _enqueue(url, (big[i : i + 4096] for i in range(0, len(big), 4096)))  # chunked: no Content-Length
        assert r.status_code == 413, r.text
        assert not service.pending
        _still_serving(url)


def test_retried_enqueue_with_the_same_request_id_is_scored_once() -> None:
    with running_service() as (url, _):
        data = body({"prompts": ["idem-1"], "reward_fn": {"test_count": 1.0}, "media_type": "video"}, npy_bytes(VIDEO))
        headers = {**auth(), "X-Request-Id": "req-idem-1"}
        uuids = {_enqueue(url, data, headers).json()["uuid"] for _ in range(5)}
        assert len(uuids) == 1
        uuid = uuids.pop()
        deadline = time.monotonic() + 20
        while (
            requests.post(
                url + "/api/reward/pull", data={"uuid": uuid, "type": "test_count"}, headers=auth(), timeout=10
            ).status_code
            != 200
        ):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert _enqueue(url, data, headers).json()["uuid"] == uuid  # after scoring too
        other = _enqueue(url, data, {**auth(), "X-Request-Id": "req-idem-2"}).json()["uuid"]
        assert other != uuid
    assert CALLS["idem-1"] == 2  # one per request id


def test_full_queue_answers_429_and_keeps_the_queued_work() -> None:
    RELEASE.clear()
    with running_service(ServiceConfig(queue_size=2, workers=1, retry_after_s=3)) as (url, service):
        meta = {"reward_fn": {"test_hold": 1.0}, "media_type": "video"}
        first = [_enqueue(url, body({**meta, "prompts": [f"q-{i}"]}, npy_bytes(VIDEO))) for i in range(2)]
        assert all(r.status_code == 200 for r in first)
        r = _enqueue(url, body({**meta, "prompts": ["q-2"]}, npy_bytes(VIDEO)))
        assert r.status_code == 429 and r.headers["Retry-After"] == "3" and "queue full" in r.json()["detail"]
        RELEASE.set()
        for i, q in enumerate(first):
            deadline = time.monotonic() + 20
            while True:
                p = requests.post(
                    url + "/api/reward/pull",
                    data={"uuid": q.json()["uuid"], "type": "test_hold"},
                    headers=auth(),
                    timeout=10,
                )
                if p.status_code == 200:
                    break
                assert p.status_code == 400 and time.monotonic() < deadline
                time.sleep(0.05)
            assert p.json()["scores"]["test_hold"] == [2.0]
            assert CALLS[f"q-{i}"] == 1
        assert CALLS["q-2"] == 0
        assert service.metrics()["counters"]["rejected_429"] == 1


def test_results_expire_after_the_ttl() -> None:
    with running_service(ServiceConfig(result_ttl_s=0.3, pulled_grace_s=0)) as (url, service):
        uuid = _enqueue(url, _good()).json()["uuid"]
        deadline = time.monotonic() + 20
        while uuid not in service.results:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.8)
        r = requests.post(
            url + "/api/reward/pull", data={"uuid": uuid, "type": "brightness"}, headers=auth(), timeout=10
        )
        assert r.status_code == 404 and "expired" in r.json()["detail"]
        assert uuid not in service.results and service.metrics()["counters"]["expired"] == 1
