"""cosmos-rl's own reward clients, unchanged, against our real reward service over HTTP (issue 30, item 6).

- `RemoteRewardCalculator` (cosmos_rl.reward.remote_calculator, the trainer's): env REMOTE_REWARD_ENQUEUE_URL /
  REMOTE_REWARD_FETCH_URL / REMOTE_REWARD_TOKEN; videos go out as Wan latents (media_type "latent", float16),
  images as uint8 [B, H, W, C] (media_type "image"); its rewards are the clipped, weighted sum of the pulled
  scores.
- `RemoteReward` (cosmos_rl.policy.model.wfm.rewards.reward_models, the world model's): latents with NO
  media_type, which the service reads as latent, as the reference does.
Expected scores: our handlers (brightness, motion) on the pixels our LatentDecoder gives for the same latents.

What stands in, and why (nothing of the clients' own code is replaced):
- the video `tokenizer`: cosmos-rl builds Wan2pt1VAEInterface, which does not import here (cosmos-rl[wfm] needs
  einops) and would load the 127M-parameter Wan2.1 checkpoint from a path; its setup() logs that failure, as it
  does anywhere without the checkpoint, and the test gives it the tiny Wan2.1 VAE's encoder in the same contract:
  encode(video [B, C, T, H, W] in [-1, 1]) -> normalised latents (mu - latents_mean) / latents_std;
- `cosmos_rl.dispatcher.data.packer`: remote_calculator imports BaseDataPacker for type hints only, and the
  packer package imports cosmos_rl.utils.util, which needs msgpack and pynvml (not installed); a stand-in module
  with that one class is set in sys.modules while remote_calculator imports;
- `make_request_with_retry`: the clients' own retry helper, with its bounds lowered (3 tries, 10 ms apart) in
  their modules, so a failing test fails in seconds instead of retrying for an hour (60 tries, backoff to 60 s).
  It raises at once on a 4xx other than 408 / 425 / 429, e.g. the 400 "not ready" of a pull (the reference
  service answers the same), so the test waits for the result before the client fetches it.
"""

from __future__ import annotations

import functools
import sys
import time
import types
from pathlib import Path
from queue import Queue
from typing import Any

import numpy as np
import pytest
import requests
import torch

from cosmos_train.reward_service.config import ServiceConfig
from cosmos_train.reward_service.handlers import HANDLERS, Batch
from cosmos_train.reward_service.latents import LatentDecoder
from tests.cosmos_rl_oracle import oracle_config, oracle_module
from tests.reward_server import TOKEN, auth, running_service
from tests.wan_vae import make_tiny_wan_vae

CALCULATOR = "cosmos_rl.reward.remote_calculator"
WORLD_MODEL = "cosmos_rl.policy.model.wfm.rewards.reward_models"


def _bounded_retries(monkeypatch: pytest.MonkeyPatch, module: types.ModuleType) -> None:
    original = oracle_module("cosmos_rl.utils.network_util").make_request_with_retry
    bounded = functools.partial(original, max_retries=3, retries_per_delay=1, initial_delay=0.01, max_delay=0.01)
    monkeypatch.setattr(module, "make_request_with_retry", bounded)


def _calculator_module() -> types.ModuleType:
    oracle_module("cosmos_rl.dispatcher.data.schema")  # leaves cosmos_rl.dispatcher.data's __init__ (msgpack) unrun
    oracle_module("cosmos_rl.dispatcher.algo.grpo")  # registers GRPO; dispatcher.algo's __init__ needs math_verify
    if CALCULATOR not in sys.modules:
        packer = types.ModuleType("cosmos_rl.dispatcher.data.packer")
        packer.BaseDataPacker = type("BaseDataPacker", (), {})  # type: ignore[attr-defined]
        with pytest.MonkeyPatch.context() as mp:
            mp.setitem(sys.modules, packer.__name__, packer)
            return oracle_module(CALCULATOR)
    return sys.modules[CALCULATOR]


class TinyWanEncoder:
    """The video tokenizer's contract (Wan2pt1VAEInterface.encode) over the tiny Wan2.1 VAE (see the docstring)."""

    def __init__(self, folder: Path):
        from diffusers import AutoencoderKLWan

        self.vae = AutoencoderKLWan.from_pretrained(folder).eval()
        self.mean = torch.tensor(self.vae.config.latents_mean).view(1, -1, 1, 1, 1)
        self.std = torch.tensor(self.vae.config.latents_std).view(1, -1, 1, 1, 1)

    @torch.no_grad()
    def encode(self, video: torch.Tensor) -> torch.Tensor:
        mu = self.vae.encode(video.float()).latent_dist.mean
        return (mu - self.mean) / self.std


@pytest.fixture(scope="module")
def vae_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_wan_vae(tmp_path_factory.mktemp("wan21") / "vae", z_dim=16, seed=5)


def _service_config(vae_dir: Path) -> ServiceConfig:
    return ServiceConfig.model_validate({"latent_decoder": {"wan21_vae": str(vae_dir)}})


def _handler_scores(names: list[str], pixels: np.ndarray, media_type: str = "video") -> dict[str, np.ndarray]:
    batch = Batch(media_type=media_type, size=len(pixels), media=pixels)
    return {n: np.asarray(HANDLERS[n](n, ServiceConfig()).score(batch), dtype=np.float64) for n in names}


def _wait_done(url: str, uuid: str, names: list[str]) -> None:
    deadline = time.monotonic() + 120
    for name in names:
        while True:
            p = requests.post(url + "/api/reward/pull", data={"uuid": uuid, "type": name}, headers=auth(), timeout=30)
            if p.status_code == 200:
                break
            assert p.status_code == 400 and "not ready" in p.text and time.monotonic() < deadline, p.text
            time.sleep(0.05)


def _calculator(monkeypatch: pytest.MonkeyPatch, url: str, fns: list[dict[str, Any]]) -> Any:
    rc = _calculator_module()
    _bounded_retries(monkeypatch, rc)
    monkeypatch.setenv("REMOTE_REWARD_ENQUEUE_URL", url + "/api/reward/enqueue")
    monkeypatch.setenv("REMOTE_REWARD_FETCH_URL", url + "/api/reward/pull")
    monkeypatch.setenv("REMOTE_REWARD_TOKEN", TOKEN)
    cfg = oracle_config(
        {"train": {"output_dir": "unused", "train_policy": {"type": "grpo", "remote_reward": {"reward_fns": fns}}}}
    )
    calc = rc.RemoteRewardCalculator()
    calc.setup(cfg)
    return calc


def _payloads(completions: torch.Tensor, per_prompt: int, extra: dict[str, Any]) -> list[Any]:
    rl_payload = oracle_module("cosmos_rl.dispatcher.data.schema").RLPayload
    return [
        rl_payload(prompt={"prompt": f"prompt {i}"}, prompt_idx=i, completions=chunk, extra_info=extra)
        for i, chunk in enumerate(completions.split(per_prompt))
    ]


def test_remote_reward_calculator_video_latents(monkeypatch: pytest.MonkeyPatch, vae_dir: Path) -> None:
    # 2 prompts x 2 completions of 5 frames [T, C, H, W] in [0, 1]
    videos = torch.rand(4, 5, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    videos[1] *= 0.2  # a dark one
    fns = [{"name": "brightness", "weight": 1.0}, {"name": "motion", "weight": 0.5, "clip_max": 0.1}]
    with running_service(_service_config(vae_dir)) as (url, _):
        calc = _calculator(monkeypatch, url, fns)
        assert not hasattr(calc, "tokenizer")  # Wan2pt1VAEInterface could not be built here (see the docstring)
        calc.tokenizer = TinyWanEncoder(vae_dir)
        uuid = calc.compute_rewards(_payloads(videos, 2, {"modality": "video", "video_fps": 16.0}), False, 7)
        _wait_done(url, uuid, ["brightness", "motion"])
        uuids: Queue[str] = Queue()
        uuids.put(uuid)
        out, is_validation, step = calc.get_results(uuids)
    assert (is_validation, step, len(out)) == (False, 7, 2)
    # the same latents the client sent (float16 on the wire), decoded by our decoder, scored by our handlers
    latents = calc.tokenizer.encode((videos.permute(0, 2, 1, 3, 4) - 0.5) * 2).to(torch.float16).numpy()
    pixels = LatentDecoder(_service_config(vae_dir).latent_decoder).decode(latents)
    s = _handler_scores(["brightness", "motion"], pixels)
    assert s["brightness"][1] < s["brightness"][0]
    want = np.clip(np.clip(s["brightness"], -5, 5) + 0.5 * np.clip(s["motion"], -5, 0.1), -5, 5)
    got = [r for p in out for r in p.rewards]
    assert got == pytest.approx(want.tolist(), rel=1e-5, abs=1e-6)


def test_remote_reward_calculator_images(monkeypatch: pytest.MonkeyPatch, vae_dir: Path) -> None:
    images = torch.rand(3, 3, 8, 12, generator=torch.Generator().manual_seed(1))  # [B, C, H, W] in [0, 1]
    with running_service(_service_config(vae_dir)) as (url, _):
        calc = _calculator(monkeypatch, url, [{"name": "brightness", "weight": 2.0}])
        uuid = calc.compute_rewards(_payloads(images, 3, {"modality": "image"}), False, 0)
        _wait_done(url, uuid, ["brightness"])
        uuids: Queue[str] = Queue()
        uuids.put(uuid)
        out, _, _ = calc.get_results(uuids)
    pixels = (images.permute(0, 2, 3, 1) * 255).round().clamp(0, 255).to(torch.uint8).numpy()  # the client's rule
    want = np.clip(2.0 * _handler_scores(["brightness"], pixels, "image")["brightness"], -5, 5)
    assert out[0].rewards == pytest.approx(want.tolist(), rel=1e-5)


def test_world_model_remote_reward_sends_latents_without_media_type(
    monkeypatch: pytest.MonkeyPatch, vae_dir: Path
) -> None:
    rm = oracle_module(WORLD_MODEL)
    _bounded_retries(monkeypatch, rm)
    config_cls = oracle_module("cosmos_rl.policy.config.wfm").RemoteRewardConfig
    latents = torch.randn(2, 16, 3, 2, 2, generator=torch.Generator().manual_seed(2))
    pixels = LatentDecoder(_service_config(vae_dir).latent_decoder).decode(latents.numpy())
    want = _handler_scores(["brightness", "motion"], pixels)
    with running_service(_service_config(vae_dir)) as (url, _):
        for name in ("brightness", "motion"):
            cfg = config_cls(
                reward_fn=name,
                score_key=name,
                scale=2.0,
                token=TOKEN,
                enqueue_url=url + "/api/reward/enqueue",
                fetch_url=url + "/api/reward/pull",
            )
            reward = rm.RemoteReward(cfg)
            zeros, uuid, replica = reward.compute_reward(
                {"ai_caption": ["a", "b"]}, None, latents=latents, is_async=True
            )
            assert zeros.tolist() == [0.0, 0.0]
            _wait_done(url, uuid, [name])
            got = reward.fetch_reward(uuid, replica)
            assert got.tolist() == pytest.approx((2.0 * np.clip(want[name], -5, 5)).tolist(), rel=1e-5), name
            # return_all: the whole scores object, keyed as the reference's
            assert list(reward.fetch_reward(uuid, replica, return_all=True)) == [name]

    # no VAE for 16-channel latents: the enqueue's 400 names the key to set, and the client raises it at once
    with running_service(ServiceConfig()) as (url, _):
        reward = rm.RemoteReward(
            config_cls(
                reward_fn="brightness",
                score_key="brightness",
                token=TOKEN,
                enqueue_url=url + "/api/reward/enqueue",
                fetch_url=url + "/api/reward/pull",
            )
        )
        with pytest.raises(requests.HTTPError) as err:
            reward.compute_reward({"ai_caption": ["a", "b"]}, None, latents=latents, is_async=True)
    response = err.value.response
    assert response is not None and response.status_code == 400 and "wan21_vae" in response.text
