"""World-model evaluation on the tiny model: held-out prompts, the same noise for every model, rewards as the
trainer scores them, the held-out diffusion loss, and the input checks.

    pytest -q tests/unit/test_wfm_evaluate.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from cosmos_train.errors import DataError, ModelError
from cosmos_train.wfm.config import load_wfm_config
from cosmos_train.wfm.data import load_clip, mock_prompts
from cosmos_train.wfm.evaluate import check_models, eval_plan, evaluate_wfm_model, model_labels, row_noise
from cosmos_train.wfm.losses import flow_matching_loss, noised
from cosmos_train.wfm.model import (
    decode_latents,
    encode_prompts,
    encode_video,
    load_wfm,
    predict_velocity,
)
from cosmos_train.wfm.rewards import VideoScorer
from cosmos_train.wfm.rl_step import EVAL_SIGMAS
from tests.conftest import ROOT, wfm_eval_overrides

RECIPE = ROOT / "configs" / "tiny-wfm-ddrl.toml"


def _cfg(model: Path, data: Path, *more: str):
    return load_wfm_config(RECIPE, wfm_eval_overrides(model, data, *more))


def test_same_prompts_and_noise_for_every_model(
    tiny_wfm_dir: Path, wfm_data_dir: Path, moved_wfm_export: Path, tmp_path: Path
) -> None:
    cfg = _cfg(tiny_wfm_dir, wfm_data_dir)
    plan = eval_plan(cfg, num_prompts=3, seed=5)
    # the held-out rows: the last heldout_videos (4) of the 12, which the trainer never trains on
    assert [r["name"] for r in plan.rows] == ["clip_0008", "clip_0009", "clip_0010"]
    assert [r["name"] for r in plan.heldout] == ["clip_0008", "clip_0009", "clip_0010", "clip_0011"]
    base = evaluate_wfm_model(plan, str(tiny_wfm_dir), "base", tmp_path)
    again = evaluate_wfm_model(plan, str(tiny_wfm_dir), "again", tmp_path)
    rl = evaluate_wfm_model(plan, str(moved_wfm_export), "rl", tmp_path)
    videos = {r["label"]: np.load(r["samples"]) for r in (base, again, rl)}
    assert videos["base"].shape == (3, 3, 5, 32, 32) and videos["base"].dtype == np.uint8
    assert np.array_equal(videos["base"], videos["again"]) and base["per_prompt"] == again["per_prompt"]
    assert not np.array_equal(videos["base"], videos["rl"])
    # a prompt's noise is its own: asked alone, with another seed's plan's order, it gives the same video
    alone = eval_plan(cfg, num_prompts=1, seed=5)
    one = evaluate_wfm_model(alone, str(tiny_wfm_dir), "alone", tmp_path)
    assert np.array_equal(np.load(one["samples"])[0], videos["base"][0])
    other_seed = evaluate_wfm_model(eval_plan(cfg, 1, seed=6), str(tiny_wfm_dir), "seed6", tmp_path)
    assert not np.array_equal(np.load(other_seed["samples"])[0], videos["base"][0])
    # the rewards are the [reward] handlers' on those very pixels, weighted as the trainer weighs them
    total, parts = VideoScorer.from_config(cfg.reward).score(videos["rl"], None, rl["prompts"])
    assert rl["per_prompt"]["brightness"] == pytest.approx(parts["brightness"].tolist())
    assert rl["per_prompt"]["total"] == pytest.approx(total.tolist())
    assert rl["rewards"]["smoothness"]["mean"] == pytest.approx(float(parts["smoothness"].mean()))
    lo, hi = rl["reward_total"]["ci95_low"], rl["reward_total"]["ci95_high"]
    assert lo < rl["reward_total"]["mean"] < hi and rl["flags"] == [] and rl["sample_spread"] > 0.05
    saved = json.loads((tmp_path / "rl" / "result.json").read_text())
    assert saved["per_prompt"] == rl["per_prompt"] and saved["model"] == str(moved_wfm_export)


def test_heldout_diffusion_loss_is_the_flow_matching_loss_at_fixed_sigmas_and_noise(
    tiny_wfm_dir: Path, wfm_data_dir: Path, tmp_path: Path
) -> None:
    cfg = _cfg(tiny_wfm_dir, wfm_data_dir, "dataloader_train.video_dataloader.heldout_videos=2")
    plan = eval_plan(cfg, num_prompts=1, seed=0)
    result = evaluate_wfm_model(plan, str(tiny_wfm_dir), "base", tmp_path)
    assert result["num_heldout_clips"] == 2 and len(result["heldout_per_clip"]) == 2
    # clip_0011 alone, computed here from the model's parts and the losses module
    parts = load_wfm(tiny_wfm_dir)
    row = plan.heldout[1]
    x0 = encode_video(parts, load_clip(row["video"], 5, 32, 32).unsqueeze(0))
    eps = row_noise(1, [row["name"]], tuple(x0.shape[1:]), "cpu")
    emb = encode_prompts(parts, [row["prompt"]], cfg.model.max_prompt_length)
    losses = []
    with torch.no_grad():
        for s in EVAL_SIGMAS:
            sigma = torch.full((1,), s)
            v = predict_velocity(parts.transformer, noised(x0, eps, sigma), sigma, emb)
            losses.append(float(flow_matching_loss(v, x0, eps)))
    assert result["heldout_per_clip"][1] == pytest.approx(float(np.mean(losses)), rel=1e-5)
    assert result["heldout_diffusion_loss"]["mean"] == pytest.approx(float(np.mean(result["heldout_per_clip"])))
    assert set(result["heldout_by_sigma"]) == {f"{s:g}" for s in EVAL_SIGMAS}


def test_mock_prompts_held_out_of_training_and_the_input_errors(
    tiny_wfm_dir: Path, wfm_data_dir: Path, tmp_path: Path
) -> None:
    cfg = _cfg(tiny_wfm_dir, wfm_data_dir, "dataloader_train.type='mock'", "model.rl.algorithm='flow_grpo'")
    plan = eval_plan(cfg, num_prompts=4)
    training = set(mock_prompts(cfg.video.mock_prompts, seed=cfg.trainer.seed))
    assert len(plan.rows) == 4 and not training & {r["prompt"] for r in plan.rows} and plan.heldout == []
    assert plan.seed == cfg.evaluation.seed
    with pytest.raises(DataError, match="heldout_videos >= 1"):
        eval_plan(_cfg(tiny_wfm_dir, wfm_data_dir, "dataloader_train.video_dataloader.heldout_videos=0"))
    with pytest.raises(ModelError, match="--model .*no such folder"):
        check_models([str(tmp_path / "missing")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="--model .*no model_index.json"):
        check_models([str(tmp_path / "empty")])
    check_models([str(tiny_wfm_dir), "nvidia/Cosmos-Predict2.5-2B"])  # a Hub id is fetched when it loads


def test_labels_name_a_runs_export_by_algorithm_and_run(tmp_path: Path) -> None:
    run = tmp_path / "20261126120000"
    (run / "diffusers" / "final").mkdir(parents=True)
    (run / "config.toml").write_text("")
    (run / "result.json").write_text(json.dumps({"algorithm": "ddrl"}))
    assert model_labels(["outputs/tiny-wfm", str(run / "diffusers" / "final")]) == [
        "tiny-wfm",
        "ddrl@20261126120000-final",
    ]
    assert model_labels(["a/final", "b/final"]) == ["a-final", "b-final"]


def test_video2world_continues_each_prompts_own_clip(
    tiny_wfm_dir: Path, wfm_data_dir: Path, moved_wfm_export: Path, tmp_path: Path
) -> None:
    cfg = _cfg(
        tiny_wfm_dir,
        wfm_data_dir,
        "model.rl.min_num_conditional_frames=1",
        "model.rl.max_num_conditional_frames=1",
    )
    plan = eval_plan(cfg, num_prompts=2, seed=0)
    assert plan.conditional_frames == 1 and "video2world" in plan.source
    base = np.load(evaluate_wfm_model(plan, str(tiny_wfm_dir), "base", tmp_path)["samples"])
    rl_result = evaluate_wfm_model(plan, str(moved_wfm_export), "rl", tmp_path)
    rl = np.load(rl_result["samples"])
    # the given latent frame is the clip's, clean, whatever the model: the first pixel frame (the causal VAE
    # decodes it from that latent frame alone) is the same for both; the generated frames are each model's
    assert np.array_equal(base[:, :, 0], rl[:, :, 0]) and not np.array_equal(base[:, :, 1:], rl[:, :, 1:])
    parts = load_wfm(tiny_wfm_dir, text_encoder=False)
    clip = load_clip(plan.rows[0]["video"], 5, 32, 32).unsqueeze(0)
    given = decode_latents(parts, encode_video(parts, clip))[0, :, 0].numpy()  # the clip through the VAE
    assert np.abs(base[0, :, 0].astype(int) - given.astype(int)).max() <= 1
    assert rl_result["heldout_diffusion_loss"]["n"] == 4
