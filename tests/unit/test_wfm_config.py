"""The world-model RL job config (cosmos_train/wfm/config.py): cosmos-rl's configs/wfm layout, typed, every
refusal naming its key and what to do."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from cosmos_train.errors import ConfigError
from cosmos_train.wfm.config import load_wfm_config, wfm_config_from_dict
from tests.conftest import ROOT

TINY = ROOT / "configs" / "tiny-wfm-flow-grpo.toml"


def _load(*overrides: str):
    return load_wfm_config(TINY, ["model.model_name_or_path='/tmp'", *overrides], env={}, check_paths=False)


def test_tiny_recipe_loads_with_its_values() -> None:
    cfg = _load()
    assert cfg.model.rl.algorithm == "flow_grpo" and cfg.model.rl.clip_range == 1e-4
    assert cfg.video.video_size == (32, 32) and cfg.dataloader_train.type == "mock"
    assert cfg.parallelism.dp_shard_size == -1 and cfg.policy_type == "wfm_rl"
    assert cfg.logging.logger == ["console"]  # wandb_mode = "disabled"


@pytest.mark.parametrize(
    ("override", "key", "words"),
    [
        ("model_parallel.tensor_model_parallel_size=2", "model_parallel.tensor_model_parallel_size", "set it to 1"),
        ("model.rl.max_num_conditional_frames=1", "model.rl.min_num_conditional_frames", '"mock" has no videos'),
        ("model.rl.min_num_conditional_frames=2", "model.rl.min_num_conditional_frames", "min is above max"),
        ("model.rl.max_num_conditional_frames=2", "max_num_conditional_frames = 2", "leave none to generate"),
        ("dataloader_train.type='web'", "dataloader_train.type", "webdataset"),
        ("dataloader_train.type='local'", "dataloader_train.video_dataloader.dataset_dir", "required"),
        ("model.rl.algorithm='ddrl'", "model.rl.algorithm", "dataset videos"),
        ("dataloader_train.video_dataloader.num_frames=6", "num_frames = 6", "1 + 4k"),
        ("dataloader_train.video_dataloader.video_size=[40, 32]", "video_size", "multiples of 16"),
        ("reward.fns={aesthetic=1.0}", "reward.fns", "not a local reward function"),
        (
            "checkpoint.save_to_object_store={enabled=true}",
            "checkpoint.save_to_object_store.enabled",
            'job.output_dir = "s3://BUCKET/PREFIX"',
        ),
        ("model.rl.clip_range=0", "model.rl.clip_range", "> 0"),
        ("model.rl.num_generations=1", "model.rl.num_generations", ">= 2"),
        ("model.rl.sampel_steps=3", "model.rl.sampel_steps", "did you mean model.rl.sample_steps"),
    ],
)
def test_refusals_name_the_key_and_the_fix(override: str, key: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        _load(override)
    text = "\n".join(e.value.problems)
    assert key in text and words in text, text


def test_imaginaire_tables_load_with_no_effect_and_grad_clip_is_read() -> None:
    raw = {
        "model": {
            "model_name_or_path": "/tmp",
            "conditioner": [{"name": "text", "type": "text_attr"}, {"name": "fps"}],
        },
        "trainer": {
            "callbacks": [
                {"name": "grad_clip", "args": {"clip_norm": 0.5}},
                {"name": "manual_gc", "args": {"every_n": 5}},
            ]
        },
        "dataloader_val": {"type": "web"},
    }
    cfg = wfm_config_from_dict(raw)
    assert cfg.grad_clip() == 0.5
    keys = [n.key for n in cfg.no_effect]
    assert "model.conditioner[fps]" in keys and "dataloader_val" in keys and "trainer.callbacks[manual_gc]" in keys
    assert "model.conditioner[text]" not in keys  # the prompt embedding: implemented
    assert not any("grad_clip" in k for k in keys)


def test_scheduler_is_lambda_linear() -> None:
    cfg = wfm_config_from_dict(
        {
            "model": {"model_name_or_path": "/tmp"},
            "scheduler": {
                "f_start": [0.0],
                "f_max": [1.0],
                "f_min": [0.5],
                "warm_up_steps": [10],
                "cycle_lengths": [110],
            },
        }
    )
    s = cfg.scheduler
    assert s.factor(0) == 0.0 and math.isclose(s.factor(5), 0.5) and s.factor(10) == 1.0
    assert math.isclose(s.factor(60), 0.75) and s.factor(110) == 0.5 and s.factor(500) == 0.5


def test_env_and_overrides_and_written_config_round_trip(tmp_path: Path) -> None:
    cfg = load_wfm_config(
        TINY,
        ["model.model_name_or_path='/tmp'", "trainer.max_iter=7"],
        env={"COSMOS_TRAIN__MODEL__RL__SAMPLE_STEPS": "5"},
        check_paths=False,
    )
    assert cfg.trainer.max_iter == 7 and cfg.model.rl.sample_steps == 5
    cfg.write(tmp_path / "config.toml")
    again = load_wfm_config(tmp_path / "config.toml", env={}, check_paths=False)
    assert again == cfg


def test_missing_paths_are_named() -> None:
    with pytest.raises(ConfigError) as e:
        load_wfm_config(TINY, ["model.model_name_or_path='/nonexistent/wfm'"], env={})
    assert "model.model_name_or_path: /nonexistent/wfm does not exist" in "\n".join(e.value.problems)


def test_combinations_that_cannot_run() -> None:
    with pytest.raises(ConfigError, match="model.rl.guidance: classifier-free guidance needs the empty prompt"):
        _load(
            "dataloader_train.type='local'",
            "dataloader_train.video_dataloader.dataset_dir='/tmp'",
            "dataloader_train.video_dataloader.offline_text_embedding=true",
            "model.rl.guidance=2.0",
        )
    with pytest.raises(ConfigError, match='reward.payload = "latent": the run\'s service scores brightness'):
        _load("reward.backend='service'", "reward.local_service=true", "reward.payload='latent'")
