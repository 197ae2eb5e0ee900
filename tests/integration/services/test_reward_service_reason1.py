"""cosmos_reason1 (the reference's Cosmos-Reason video judge) on the tiny model, and the reference rewards refused
by name: scores equal a hand computation with the same model on the same frames, through the real service."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
import torch
from PIL import Image

from cosmos_train.data.chat import encode_chat
from cosmos_train.models.load import load_model, load_processor
from cosmos_train.reward_service.config import ServiceConfig
from cosmos_train.reward_service.handlers import Batch
from cosmos_train.reward_service.handlers.cosmos_reason1 import (
    SYSTEM_PROMPT,
    USER_PROMPT,
    CosmosReason1,
    sample_frames,
)
from cosmos_train.reward_service.latents import LatentDecoder
from cosmos_train.vision.settings import smart_resize
from tests.reward_server import auth, body, npy_bytes, running_service
from tests.wan_vae import make_tiny_wan_vae


def _config(model: Path | None = None, **top: Any) -> ServiceConfig:
    handlers = {"cosmos_reason1": {"model_path": str(model)}} if model else {}
    return ServiceConfig.model_validate({"handlers": handlers, **top})


def _enqueue(url: str, meta: dict[str, Any], tensor: bytes) -> requests.Response:
    return requests.post(url + "/api/reward/enqueue", data=body(meta, tensor), headers=auth(), timeout=30)


def _pull(url: str, uuid: str, name: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while True:
        p = requests.post(url + "/api/reward/pull", data={"uuid": uuid, "type": name}, headers=auth(), timeout=30)
        if p.status_code == 200:
            return p.json()
        assert p.status_code == 400 and time.monotonic() < deadline, p.text
        time.sleep(0.05)


class _Reader:
    """encode_chat's frame reader over one in-memory clip (the hand computation's own)."""

    def __init__(self, frames: torch.Tensor, fps: float):
        self.clip = (frames, fps)

    def read_video(self, path: Any, settings: Any = None) -> tuple[torch.Tensor, float]:
        return self.clip

    def load_image(self, source: Any, settings: Any = None) -> torch.Tensor:
        raise AssertionError("no images")


def hand_scores(model_dir: Path, video: np.ndarray, fps: float, text: str) -> dict[str, Any]:
    """One video [3, T, H, W] uint8 scored by hand as the reference does (Qwen2.5-VL: patch 14, merge 2,
    temporal patch 2): frames 0..T-1 cut to an even count, smart_resize(factor 28, min 16 * 28^2 * 2,
    max 9216 * 28^2 * 2 // frames), PIL bicubic, system prompt + [video, text], last-position logits."""
    frames = video[:, : video.shape[1] // 2 * 2]  # T <= 160: no downsampling, fps kept
    n, h, w = frames.shape[1], frames.shape[2], frames.shape[3]
    new_h, new_w = smart_resize(h, w, factor=28, min_pixels=16 * 28 * 28 * 2, max_pixels=9216 * 28 * 28 * 2 // n)
    pil = [
        Image.fromarray(np.moveaxis(frames[:, t], 0, -1)).resize((new_w, new_h), Image.Resampling.BICUBIC)
        for t in range(n)
    ]
    sized = torch.from_numpy(np.stack([np.asarray(p) for p in pil])).permute(0, 3, 1, 2)
    processor = load_processor(model_dir)
    model = load_model(model_dir).eval()
    chat: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": [{"type": "video", "video": "clip"}, {"type": "text", "text": text}]},
    ]
    enc = encode_chat(processor, chat, add_generation_prompt=True, clip_cache=_Reader(sized, fps))
    assert enc.second_per_grid_ts is not None and float(enc.second_per_grid_ts[0]) == pytest.approx(2 / fps)
    with torch.no_grad():
        logits = model(**enc.model_inputs()).logits[0, -1]
    yes = float(logits[processor.tokenizer.encode("Yes", add_special_tokens=False)[0]])
    no = float(logits[processor.tokenizer.encode("No", add_special_tokens=False)[0]])
    p_no = float(np.exp(no) / (np.exp(yes) + np.exp(no)))
    return {"prediction": "Good" if no >= yes else "Bad", "no_score": p_no, "yes_logit": yes, "no_logit": no}


def test_scores_equal_the_hand_computation(tiny_model_dir: Path) -> None:
    rng = np.random.default_rng(0)
    video = rng.integers(0, 256, (2, 3, 9, 32, 48), dtype=np.uint8)
    prompts = ["a red ball rolls off a table", "a dog runs on a beach"]
    handler = CosmosReason1("cosmos_reason1", _config(tiny_model_dir))
    handler.set_up()
    batch = Batch(media_type="video", size=2, media=video, prompts=prompts, video_infos=[{"video_fps": 8.0}] * 2)
    got = handler.score(batch)
    assert set(got) == {"prediction", "no_score", "yes_logit", "no_logit"}
    for i in range(2):
        want = hand_scores(tiny_model_dir, video[i], 8.0, prompts[i])
        assert got["prediction"][i] == want["prediction"]
        for key in ("no_score", "yes_logit", "no_logit"):
            assert got[key][i] == pytest.approx(want[key], rel=1e-5, abs=1e-6), key
    # prompt_source = "fixed", or a request without prompts: the trained question
    fixed = handler.score(Batch(media_type="video", size=1, media=video[:1], video_infos=[{"video_fps": 8.0}]))
    assert fixed["yes_logit"][0] == pytest.approx(hand_scores(tiny_model_dir, video[0], 8.0, USER_PROMPT)["yes_logit"])
    config = _config(tiny_model_dir)
    config.handlers.cosmos_reason1.prompt_source = "fixed"
    always = CosmosReason1("cosmos_reason1", config)
    always.set_up()
    infos: list[dict[str, Any]] = [{"video_fps": 8.0}]
    asked = always.score(Batch(media_type="video", size=1, media=video[:1], prompts=prompts[:1], video_infos=infos))
    assert asked["yes_logit"][0] == pytest.approx(fixed["yes_logit"][0])  # the request's prompt is not used
    assert asked["yes_logit"][0] != pytest.approx(got["yes_logit"][0])  # which "request" would have used


def test_frame_sampling_follows_the_reference() -> None:
    # 325 frames: every 3rd ((325 - 1) // 160 + 1), 109 of them, cut to 108, at fps / 3
    video = np.arange(325, dtype=np.float32).reshape(1, 325, 1, 1).repeat(3, 0).repeat(2, 2).repeat(2, 3)
    frames, fps = sample_frames(video, 24.0, 2)
    assert frames.shape == (108, 2, 2, 3) and frames.dtype == np.uint8
    assert fps == pytest.approx(8.0)
    assert frames[:4, 0, 0, 0].tolist() == [0, 3, 6, 9]
    assert sample_frames(video[:, :160], 16.0, 2)[0].shape[0] == 160  # 160 frames: all kept
    with pytest.raises(ValueError, match="at least 2 frames"):
        sample_frames(video[:, :1], 16.0, 2)


def test_served_from_latents_and_refusals(tiny_model_dir: Path, tmp_path: Path) -> None:
    """Through the real service: latents sent without media_type are decoded, then judged; the scores are the
    handler's on the same decoded pixels. Off without model_path, and dance_grpo refused by name."""
    vae = make_tiny_wan_vae(tmp_path / "wan21", z_dim=16)
    config = _config(tiny_model_dir, latent_decoder={"wan21_vae": str(vae)})
    latents = np.random.default_rng(3).standard_normal((2, 16, 2, 2, 3)).astype(np.float32)
    infos: list[dict[str, Any]] = [{"video_fps": 16.0}] * 2
    meta = {"reward_fn": {"cosmos_reason1": 1.0}, "prompts": ["a", "b"], "video_infos": infos}
    with running_service(config) as (url, _):
        r = _enqueue(url, meta, npy_bytes(latents))
        assert r.status_code == 200, r.text
        doc = _pull(url, r.json()["uuid"], "cosmos_reason1")
        r = _enqueue(url, {**meta, "reward_fn": {"dance_grpo": 1.0}}, npy_bytes(latents))
        assert r.status_code == 400 and "dance_grpo" in r.text and "KwaiVGI/VideoReward" in r.text, r.text
    pixels = LatentDecoder(config.latent_decoder).decode(latents)
    handler = CosmosReason1("cosmos_reason1", config)
    handler.set_up()
    want = handler.score(Batch(media_type="video", size=2, media=pixels, prompts=["a", "b"], video_infos=infos))
    assert doc["scores"]["prediction"] == want["prediction"]
    for key in ("no_score", "yes_logit", "no_logit"):
        assert doc["scores"][key] == pytest.approx(want[key], rel=1e-5), key
    assert doc["type"] == "cosmos_reason1"

    video = np.zeros((1, 3, 4, 8, 8), dtype=np.uint8)
    with running_service(_config()) as (url, _):
        r = _enqueue(url, {"reward_fn": {"cosmos_reason1": 1.0}, "media_type": "video"}, npy_bytes(video))
        assert r.status_code == 400 and "[handlers.cosmos_reason1] model_path" in r.text, r.text
        r = _enqueue(url, {"reward_fn": {"dance_grpo": 1.0}, "media_type": "video"}, npy_bytes(video))
        assert r.status_code == 400 and "unknown reward" not in r.text and "dance_grpo" in r.text, r.text


def test_any_family_timestamps_in_memory_frames(tmp_path: Path) -> None:
    """A frame-timestamp family (Qwen3-VL) scores in-memory videos too: its `<t seconds>` come from the sampled
    frames' rate (encode_chat reads no file for a reader marked in_memory)."""
    from cosmos_train.models.tiny import make_tiny_model

    model = make_tiny_model(tmp_path / "qwen3_vl", family="qwen3_vl")
    handler = CosmosReason1("cosmos_reason1", _config(model))
    handler.set_up()
    video = np.random.default_rng(4).integers(0, 256, (1, 3, 4, 32, 32), dtype=np.uint8)
    got = handler.score(Batch(media_type="video", size=1, media=video, video_infos=[{"video_fps": 2.0}]))
    yes, no = got["yes_logit"][0], got["no_logit"][0]
    assert got["no_score"][0] == pytest.approx(float(np.exp(no) / (np.exp(yes) + np.exp(no))), rel=1e-5)
    assert got["prediction"][0] == ("Good" if no >= yes else "Bad")


def test_model_backed_and_refused_rewards_are_not_local_world_model_rewards() -> None:
    from cosmos_train.wfm.rewards import LOCAL_REWARDS

    assert {"brightness", "motion", "smoothness"} <= set(LOCAL_REWARDS)
    assert "cosmos_reason1" not in LOCAL_REWARDS and "dance_grpo" not in LOCAL_REWARDS
