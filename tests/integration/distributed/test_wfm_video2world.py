"""Video2world world-model RL under torchrun with 2 processes (FSDP2 over the DiT, gloo): DDRL with the KL term
(a reference model) conditioned on the first latent frame of dataset clips, k drawn per rollout group from
[min_num_conditional_frames, max_num_conditional_frames] as cosmos-rl does, the first_frame_brightness reward.

HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q tests/integration/distributed/test_wfm_video2world.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from cosmos_train.metrics import read_metrics
from tests.integration.distributed.test_wfm_dist import _common, _run


def test_video2world_steps_keep_the_given_frames(tiny_wfm_dir: Path, wfm_data_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    overrides = _common(tiny_wfm_dir, wfm_data_dir, tmp_path, 3) + [
        "model.rl.min_num_conditional_frames=0",
        "model.rl.max_num_conditional_frames=1",
        "model.rl.kl_beta=0.01",
        "reward.fns={first_frame_brightness=1.0}",
        "checkpoint.export_diffusers=false",
    ]
    done = _run(run, "tiny-wfm-ddrl.toml", overrides)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads((run / "result.json").read_text())["step"] == 3
    rows = read_metrics(run)
    train = [r for r in rows if r["kind"] == "train"]
    val = [r for r in rows if r["kind"] == "val"]
    assert [r["step"] for r in train] == [1, 2, 3]
    # each rank draws its rollout group's k in {0, 1}; the metric is their mean (seed 0: rank 1 draws 1 at first)
    assert all(0 <= r["num_conditional_frames"] <= 1 for r in train) and train[0]["num_conditional_frames"] > 0
    assert all(0 <= r["reward_first_frame_brightness"] <= 1 and np.isfinite(r["data_loss"]) for r in train)
    assert all(np.isfinite(r["kl"]) and np.isfinite(r["policy_loss"]) for r in train)
    assert np.isfinite(val[0]["heldout_diffusion_loss"]) and np.isfinite(val[-1]["heldout_diffusion_loss"])
    # evaluation conditions on the held-out clips' first latent frame: the first decoded frame (the causal VAE
    # decodes it from that latent frame alone) is the clip's before and after training; the rest is generated
    before, after = np.load(run / "samples" / "iter_0.npy"), np.load(run / "samples" / "iter_3.npy")
    assert before.shape == after.shape == (2, 3, 5, 32, 32)
    assert np.array_equal(before[:, :, 0], after[:, :, 0])
    assert not np.array_equal(before[:, :, 1:], after[:, :, 1:]), "training changed no generated frame"
