"""The reward service's wire protocol against the real server on loopback, including a client written
exactly as the reference service's example clients (nvidia-cosmos/cosmos-rl reward_service/example)."""

from __future__ import annotations

import io
import json
import threading
import time

import numpy as np
import requests
import torch

from cosmos_train.reward_service.config import ServiceConfig
from cosmos_train.reward_service.handlers import Batch, Handler, register_handler
from tests.reward_server import TOKEN, auth, body, npy_bytes, running_service

GATE = threading.Event()


@register_handler("test_gated")
class Gated(Handler):
    """Scores 0.5 per item once GATE is set: lets a test see a request before it is ready."""

    def score(self, batch: Batch) -> list[float]:
        assert GATE.wait(timeout=20)
        return [0.5] * batch.size


def test_ping_enqueue_pull_not_ready_then_ready() -> None:
    GATE.clear()
    with running_service() as (url, _):
        r = requests.post(url + "/api/reward/ping", data={"info_data": "{}"}, headers=auth(), timeout=10)
        assert r.status_code == 200 and r.json() == {"message": "Ping request received"}
        video = np.zeros((2, 3, 4, 8, 8), dtype=np.uint8)
        meta = {
            "prompts": ["a", "b"],
            "reward_fn": {"test_gated": 1.0},
            "video_infos": [{"fps": 16}] * 2,
            "media_type": "video",
        }
        r = requests.post(url + "/api/reward/enqueue", data=body(meta, npy_bytes(video)), headers=auth(), timeout=10)
        assert r.status_code == 200, r.text
        uuid = r.json()["uuid"]
        r = requests.post(
            url + "/api/reward/pull", data={"uuid": uuid, "type": "test_gated"}, headers=auth(), timeout=10
        )
        assert r.status_code == 400 and "not ready" in r.json()["detail"]
        GATE.set()
        doc = _pull_until_ready(url, uuid, "test_gated")
        assert doc["scores"] == {"test_gated": [0.5, 0.5]}
        assert doc["type"] == "test_gated"
        assert doc["input_info"]["shape"] == [2, 3, 4, 8, 8] and doc["input_info"]["dtype"] == "torch.uint8"
        assert doc["input_info"]["video_infos"] == [{"fps": 16}] * 2
        assert float(doc["duration"]) >= 0


def _pull_until_ready(url: str, uuid: str, kind: str, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = requests.post(url + "/api/reward/pull", data={"uuid": uuid, "type": kind}, headers=auth(), timeout=10)
        if r.status_code == 200:
            return r.json()
        assert r.status_code == 400, r.text
        time.sleep(0.05)
    raise AssertionError(f"{uuid} not ready after {timeout} s")


def test_reference_style_client_unchanged() -> None:
    """The reference's video_client.py flow: a bf16 latent-shaped tensor sent with torch.save, ping with a
    form field, enqueue as octet-stream, pull each reward_fn key with form fields until 200 (bounded here)."""
    with running_service() as (host, _):
        token = TOKEN
        api_ping, api_enqueue, api_reward = "/api/reward/ping", "/api/reward/enqueue", "/api/reward/pull"

        def make_headers(replica_id=None, extra=None):
            headers = {}
            if token:
                headers["Authorization"] = f"Bearer {token}"
            if replica_id:
                headers["X-Lepton-Replica-Target"] = replica_id
            if extra:
                headers.update(extra)
            return headers

        # pixel-range video as the reference's "video" media type, sent the way its client sends latents
        tensor = torch.full((1, 3, 4, 6, 6), 127.5).to(torch.bfloat16)
        data = {
            "media_type": "video",
            "prompts": ["a prompt"],
            "reward_fn": {"brightness": 1.0, "motion": 1.0},
            "video_infos": [{"video_fps": 16.0}],
        }
        response = requests.post(
            host + api_ping, data={"info_data": json.dumps(data)}, headers=make_headers(), timeout=10
        )
        assert response.status_code == 200 and response.json()["message"] == "Ping request received"
        buffer = io.BytesIO()
        torch.save(tensor, buffer)
        buffer.seek(0)
        payload = json.dumps(data).encode("utf-8") + b"\n" + buffer.getvalue()
        response = requests.post(
            host + api_enqueue,
            data=payload,
            headers=make_headers(extra={"Content-Type": "application/octet-stream"}),
            timeout=10,
        )
        assert response.status_code == 200, response.text
        response_json = response.json()
        pending = [(response_json["uuid"], response_json.get("replica_id"), list(data["reward_fn"].keys()))]
        results = {}
        for uuid, replica_id, reward_types in pending:
            for reward_type in reward_types:
                for _ in range(200):
                    response = requests.post(
                        host + api_reward,
                        data={"uuid": uuid, "type": reward_type},
                        headers=make_headers(replica_id=replica_id),
                        timeout=10,
                    )
                    response.json()  # the reference client prints .json() of every answer: always JSON
                    if response.status_code == 200:
                        results[reward_type] = response.json()
                        break
                    time.sleep(0.05)
        assert results["brightness"]["scores"]["brightness"] == [0.5]
        assert results["motion"]["scores"]["motion"] == [0.0]
        assert results["brightness"]["input_info"]["dtype"] == "torch.bfloat16"
        assert results["brightness"]["input_info"]["video_infos"] == [{"video_fps": 16.0}]


def test_image_client_npy_payload() -> None:
    """The reference's image_client.py: an np.save'd uint8 [B, H, W, 3] array, media_type image."""
    with running_service() as (url, _):
        arr = np.full((2, 5, 5, 3), 255, dtype=np.uint8)
        arr[1] = 0
        meta = {"media_type": "image", "prompts": ["x", "y"], "reward_fn": {"brightness": 1.0}}
        r = requests.post(
            url + "/api/reward/enqueue",
            data=json.dumps(meta).encode() + b"\n" + npy_bytes(arr),
            headers={**auth(), "Content-Type": "application/octet-stream"},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        doc = _pull_until_ready(url, r.json()["uuid"], "brightness")
        assert doc["scores"]["brightness"] == [1.0, 0.0]


def test_pull_takes_a_json_body_too_and_metrics_report() -> None:
    with running_service(ServiceConfig(workers=1)) as (url, _):
        meta = {
            "media_type": "text",
            "reward_fn": {"format": 1.0},
            "completions": ["<think>x</think>\n\n<answer>A</answer>", "A"],
        }
        uuid = requests.post(url + "/api/reward/enqueue", data=body(meta), headers=auth(), timeout=10).json()["uuid"]
        deadline = time.monotonic() + 20
        while True:
            r = requests.post(
                url + "/api/reward/pull", json={"uuid": uuid, "type": "format"}, headers=auth(), timeout=10
            )
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert r.json()["scores"]["format"] == [1.0, 0.0]
        m = requests.get(url + "/metrics", headers=auth(), timeout=10).json()
        assert m["queue_depth"] == 0 and m["counters"]["enqueued"] == 1
        assert m["handlers"]["format"]["scored"] == 1 and m["handlers"]["format"]["errors"] == 0
        assert m["handlers"]["format"]["latency_p50_s"] >= 0 and m["handlers"]["format"]["latency_p99_s"] >= 0
