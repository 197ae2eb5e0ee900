"""A cosmos-rl world-model recipe as published (configs/cosmos-predict2-5/cosmos-predict2-5-2b-720-reason-embedding-
ddrl.toml) trains here: its model swapped for the tiny world model, its dataset for the synthetic one, its sizes for
the tiny ones, everything else as the recipe and cosmos-rl's defaults say (DDRL with data_beta 0.01, 8 rollouts
per prompt from different initial noises, train_on its 10 fixed steps of 20, text dropout 0.2 in the data term,
grad_clip 1.0 with force_finite). 2 iterations under torchrun with one process."""

from __future__ import annotations

import json
from pathlib import Path

from cosmos_train.metrics import read_metrics
from cosmos_train.wfm.config import load_wfm_config
from tests.conftest import ROOT
from tests.torchrun import LAUNCH, torchrun

RECIPE = ROOT / "tests" / "data" / "cosmos_rl_configs" / "wfm" / "cosmos-predict2-5-2b-720-reason-embedding-ddrl.toml"


def test_published_ddrl_recipe_trains_two_iterations(tiny_wfm_dir: Path, wfm_data_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    cfg = load_wfm_config(
        RECIPE,
        [
            # the model: the tiny diffusers folder instead of cosmos-rl's .pt checkpoint; one CPU process
            f"checkpoint.load_path='{tiny_wfm_dir}'",
            "checkpoint.model_id=''",
            "model.fsdp_shard_size=-1",
            "model.dp_replicate_size=1",
            "model_parallel.context_parallel_size=1",
            # text2world (cosmos-rl's default max_num_conditional_frames = 1 asks for a conditioning frame)
            "model.rl.max_num_conditional_frames=0",
            # the data: the synthetic dataset at its size
            f"dataloader_train.video_dataloader.dataset_dir='{wfm_data_dir}'",
            "dataloader_train.video_dataloader.num_frames=5",
            "dataloader_train.video_dataloader.video_size=[32, 32]",
            "dataloader_train.video_dataloader.heldout_videos=2",
            # a local reward (cosmos-rl's is its remote service), the run's length and place
            "reward.backend='local'",
            "reward.fns={brightness=1.0}",
            "trainer.max_iter=2",
            "evaluation.num_prompts=2",
            "model.rl.eval_sample_steps=4",
            "job.wandb_mode='disabled'",
            f"job.output_dir='{tmp_path}'",
        ],
        env={},
    )
    rl = cfg.model.rl
    assert (rl.algorithm, rl.num_generations, rl.sample_steps, rl.use_same_seed) == ("ddrl", 8, 20, False)
    assert rl.train_on == list(range(0, 20, 2)) and cfg.text_dropout_rate() == 0.2 and cfg.grad_force_finite()
    cfg.write(run / "config.toml")
    torchrun(1, "-m", "cosmos_train.wfm.trainer", "--config", str(run / "config.toml"), launcher=LAUNCH)
    result = json.loads((run / "result.json").read_text())
    assert result["step"] == 2 and result["algorithm"] == "ddrl"
    train = [r for r in read_metrics(run) if r["kind"] == "train"]
    assert [r["step"] for r in train] == [1, 2]
    assert all(r["data_loss"] > 0 and 0 <= r["reward_mean"] <= 1 and r["reward_std"] > 0 for r in train)
    assert Path(result["final"], "transformer", "diffusion_pytorch_model.safetensors").is_file()
