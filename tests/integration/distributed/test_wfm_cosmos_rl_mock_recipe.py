"""cosmos-rl's 480p world-model GRPO recipe on mock data (configs/cosmos-predict2-5/cosmos-predict2-5-2b-480-grpo-
mock-data.toml, tests/data/cosmos_rl_configs/wfm/, as published) trains 2 iterations here, the recipe unchanged but
for these `--set` keys:

- checkpoint.load_path: the model. The recipe names none (cosmos-rl would start its DiT from random weights); here a
  tiny DiT made for it (`make_tiny_wfm`): it takes the recipe's 1024-wide prompt embeddings directly (t5_dim, as
  cosmos-rl's default net), its RoPE covers the 24 x 54 x 96 latents of 93 frames of 432 x 768, and it has 6 x 6
  patches (3456 tokens a video) and a VAE of base width 2;
- model.fsdp_shard_size = -1: one process instead of the recipe's 8 ranks;
- trainer.max_iter = 2 and job.output_dir: the run's length and place.

Everything else is the recipe's and cosmos-rl's defaults: cosmos-rl's mock video dataset (type = "web" with len_t5:
random clips of 93 frames of 432 x 768, random 512 x 1024 prompt embeddings, the prompt "placeholder";
wfm/mock_data.py), one prompt x 8 rollouts an iteration, video2world with one given latent frame of the mock clip,
train_on steps 0..7 of 10, KL to the reference (kl_beta 0.01), and cosmos-rl's reward: its remote service's
dance_grpo, sent the latents.
The service here is the reward service on loopback with a stand-in dance_grpo handler of this test (the mean of
latent channel 0): the real one needs VideoAlign's weights.

Cost (measured 2026-11-28 on this machine's CPU, one thread): the recipe's clips are 93 frames of 432 x 768 pixels
(92.6 MB each), and the Wan VAE's decoder and encoder work at that resolution whatever the model's width: ~53 s to
decode one video and ~33 s to encode one even at base width 2 (the tiny tests' VAE, base 16: 196 s / 90 s), the
time in CPU conv3d (slow_conv3d) over 31M pixels a video and the VAE's RMS norms. The run decodes 8 rollouts an
iteration (cosmos-rl decodes them too) and 8 evaluation samples before and after training (our [evaluation]), and
encodes each mock clip it conditions on: 1793 s for the 2 iterations (evaluation before: 708 s; iterations: 429 s
and 364 s, 25 s of it the DiT's training; evaluation after: ~300 s). So the test at the recipe's own shapes runs
where a GPU is, or with COSMOS_TRAIN_FULL_SIZE_WFM=1; the other test runs the same recipe with only its shape keys
made small (resolution "256": 320 x 192, 9 frames; a tiny DiT of 2 x 2 patches), in about 40 s.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from cosmos_train.metrics import read_metrics
from cosmos_train.reward_service.handlers import HANDLERS, Batch, Handler
from cosmos_train.wfm.config import load_wfm_config
from cosmos_train.wfm.tiny_model import make_tiny_wfm
from tests.conftest import ROOT
from tests.reward_server import TOKEN, ServiceThread
from tests.torchrun import LAUNCH, torchrun

pytestmark = pytest.mark.slow

RECIPE = ROOT / "tests" / "data" / "cosmos_rl_configs" / "wfm" / "cosmos-predict2-5-2b-480-grpo-mock-data.toml"
FULL_SIZE = os.environ.get("COSMOS_TRAIN_FULL_SIZE_WFM") == "1" or torch.cuda.is_available()
LATENT_GRID = (128, 240, 240)  # the RoPE's (T', H', W') reach: Cosmos-Predict2.5's


class LatentChannelMean(Handler):
    """A stand-in for the remote service's dance_grpo (VideoAlign): the mean of each sample's latent channel 0."""

    media_types = ("latent",)

    def score(self, batch: Batch) -> list[float]:
        assert batch.media is not None
        return [float(x[0].astype("float64").mean()) for x in batch.media]


@pytest.fixture
def reward_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The service the recipe's remote reward reaches (cosmos-rl's enqueue / fetch URLs and token)."""
    monkeypatch.setitem(HANDLERS, "dance_grpo", LatentChannelMean)  # the service thread runs in this process
    service = ServiceThread().start()
    try:
        yield {
            "WFM_REWARD_ENQUEUE_URL": f"{service.url}/api/reward/enqueue",
            "WFM_REWARD_FETCH_URL": f"{service.url}/api/reward/pull",
            "WFM_REWARD_TOKEN": TOKEN,
        }
    finally:
        service.stop()


def _train(model: Path, out: Path, env: dict[str, str], *shape: str) -> Path:
    """The recipe with the model, one process, 2 iterations, the output folder (and `shape` keys), under torchrun
    with one process; returns the run folder after checking that it finished."""
    overrides = [
        f"checkpoint.load_path='{model}'",
        "model.fsdp_shard_size=-1",
        "trainer.max_iter=2",
        f"job.output_dir='{out}'",
        *shape,
    ]
    cfg = load_wfm_config(RECIPE, overrides, env={})
    run = out / "run"
    run.mkdir(parents=True)
    cfg.write(run / "config.toml")
    args = ["-m", "cosmos_train.wfm.trainer", "--config", str(run / "config.toml")]
    torchrun(1, *args, launcher=LAUNCH, env=env, timeout=3 * 3600)
    return run


def _check(run: Path, frames: int, width: int, height: int) -> None:
    result = json.loads((run / "result.json").read_text())
    assert result["step"] == 2 and result["algorithm"] == "flow_grpo"
    assert result["data"] == {
        "type": "cosmos-rl mock video",
        "rows": 32768,
        "num_frames": frames,
        "width": width,
        "height": height,
        "len_t5": 512,
        "t5_dim": 1024,
    }
    train = [r for r in read_metrics(run) if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2]
    # one given latent frame (cosmos-rl's default), the rewards from the service's dance_grpo, 8 rollouts that differ
    assert all(r["num_conditional_frames"] == 1 for r in train)
    assert all(r["reward_dance_grpo"] == pytest.approx(r["reward_mean"], abs=1e-6) for r in train)
    assert all(r["reward_std"] > 0 and "kl" in r for r in train)
    assert Path(result["final"], "transformer", "diffusion_pytorch_model.safetensors").is_file()


@pytest.mark.skipif(
    not FULL_SIZE,
    reason="the recipe's own 93 x 432 x 768 clips: ~30 min on CPU (the VAE at full resolution; see the docstring); "
    "runs with a GPU or COSMOS_TRAIN_FULL_SIZE_WFM=1",
)
def test_published_mock_recipe_trains_two_iterations(reward_env: dict[str, str], tmp_path: Path) -> None:
    model = make_tiny_wfm(
        tmp_path / "model", text_embed_dim=1024, max_size=LATENT_GRID, patch_size=(1, 6, 6), vae_base_dim=2
    )
    _check(_train(model, tmp_path / "out", reward_env), 93, 768, 432)


def test_mock_recipe_at_small_shapes_trains_two_iterations(reward_env: dict[str, str], tmp_path: Path) -> None:
    """The same, with the shape keys of cosmos-rl's mock made small (resolution "256": 320 x 192, 9 frames)."""
    model = make_tiny_wfm(tmp_path / "model", text_embed_dim=1024, max_size=LATENT_GRID, vae_base_dim=2)
    small = [
        "dataloader_train.video_dataloader.dataloader.dataset.resolution='256'",
        "dataloader_train.video_dataloader.dataloader.dataset.num_video_frames=9",
    ]
    _check(_train(model, tmp_path / "out", reward_env, *small), 9, 320, 192)
