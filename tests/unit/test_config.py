"""The job config: seeds' snippets accepted, typos named with a suggestion, overrides layered."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from cosmos_train.config import CheckpointConfig, Config, ConfigError, config_from_dict, load_config

SNIPPETS = sorted((Path(__file__).parent.parent / "data" / "seed_snippets").glob("*.toml"))
ROOT = Path(__file__).resolve().parents[2]
# Two seed snippets turn uploads on, which this release refuses (test_seed_upload_keys_are_refused).
UPLOADS_OFF = ["train.ckpt.upload_hf=false", "train.ckpt.upload_s3=false"]


@pytest.mark.parametrize("snippet", SNIPPETS, ids=lambda p: p.name)
def test_every_seed_snippet_passes(snippet: Path, tmp_path: Path) -> None:
    # The seed's RL snippet points at an SFT checkpoint folder; give it one that exists.
    model = tmp_path / "model"
    model.mkdir()
    cfg = load_config(snippet, [f"policy.model_name_or_path='{model}'", *UPLOADS_OFF])
    assert isinstance(cfg, Config)


def test_seed_upload_keys_are_refused() -> None:
    with pytest.raises(ConfigError) as e:
        load_config(SNIPPETS[0].parent / "000_01.toml")
    assert [p.split(":")[0] for p in e.value.problems] == ["train.ckpt.upload_hf", "train.ckpt.upload_s3"]
    assert all("not implemented in this release; remove the key" in p for p in e.value.problems)


def test_seed_rl_snippet_maps_aliases(tmp_path: Path) -> None:
    cfg = load_config(SNIPPETS[0].parent / "002_05.toml", [f"policy.model_name_or_path='{tmp_path}'"])
    assert cfg.policy_type == "grpo"
    assert cfg.rollout.n_generation == 4
    assert cfg.rollout.batch_size == 32
    assert cfg.rollout.parallelism.tp_size == 2
    assert cfg.policy.parallelism.dp_shard_size == 8


def test_seed_wfm_snippet_maps_parallelism() -> None:
    cfg = load_config(SNIPPETS[0].parent / "004_07_rst.toml")
    par = cfg.policy.parallelism
    assert (par.dp_shard_size, par.dp_replicate_size, par.cp_size) == (8, 4, 2)


def test_upload_keys_still_parse() -> None:
    # The schema keeps the seed guides' upload keys for the release that implements uploads.
    assert CheckpointConfig(upload_s3=True).upload_s3 == "final"
    cfg = load_config(SNIPPETS[0].parent / "000_01.toml", UPLOADS_OFF)
    assert cfg.train.ckpt.hf_repo_name == "Cosmos-Reason1" and cfg.train.ckpt.s3_bucket == "your-s3-bucket"


def test_typo_is_named_with_suggestion() -> None:
    with pytest.raises(ConfigError) as e:
        config_from_dict({"train": {"ckpt": {"save_freqq": 3}, "optm_lr": 1e-5}, "polcy": {}})
    msg = str(e.value)
    assert "train.ckpt.save_freqq" in msg and "did you mean train.ckpt.save_freq?" in msg
    assert "polcy" in msg and "did you mean policy?" in msg
    assert len(e.value.problems) == 2


def test_wrong_type_and_exclusive_patterns() -> None:
    with pytest.raises(ConfigError) as e:
        config_from_dict(
            {"train": {"epoch": "two"}, "policy": {"freeze_pattern": ["visual"], "trainable_pattern": "lm_head"}}
        )
    msg = str(e.value)
    assert "train.epoch" in msg and "'two'" in msg
    assert "freeze_pattern and trainable_pattern are exclusive" in msg


def test_bad_regex_is_named() -> None:
    with pytest.raises(ConfigError, match=r"freeze_pattern: '\(' is not a valid regex"):
        config_from_dict({"policy": {"freeze_pattern": "("}})


def test_parallelism_product_must_match_world_size() -> None:
    with pytest.raises(ConfigError, match=r"2\*2\*1\*1\*1 = 4, but 2 processes"):
        config_from_dict({"policy": {"parallelism": {"dp_shard_size": 2, "dp_replicate_size": 2}},
                          "launch": {"nproc_per_node": 2}})
    cfg = config_from_dict({"policy": {"parallelism": {"dp_shard_size": -1, "tp_size": 2}}})
    assert cfg.policy.parallelism.resolved_shard(8) == 4


def test_mini_batch_must_divide_batch() -> None:
    with pytest.raises(ConfigError, match="mini_batch: 3 must divide"):
        config_from_dict({"train": {"train_batch_per_replica": 8, "train_policy": {"mini_batch": 3}}})


def test_uploads_are_refused() -> None:
    with pytest.raises(ConfigError) as e:
        config_from_dict({"train": {"ckpt": {"upload_hf": True, "hf_repo_name": "me/x", "upload_s3": "all"}}})
    assert len(e.value.problems) == 2
    assert all("uploads are not implemented in this release" in p for p in e.value.problems)


def test_overrides_layer_file_env_cli(tmp_path: Path) -> None:
    f = tmp_path / "job.toml"
    f.write_text('[train]\nepoch = 1\noptm_lr = 1e-6\n[logging]\nlogger = ["console"]\n')
    env = {"COSMOS_TRAIN__TRAIN__EPOCH": "5", "COSMOS_TRAIN__TRAIN__OPTM_LR": "2e-5", "UNRELATED": "x"}
    cfg = load_config(f, ["train.epoch=7", 'logging.experiment_name="exp a"'], env=env)
    assert cfg.train.epoch == 7  # --set beats env
    assert cfg.train.optm_lr == 2e-5  # env beats file
    assert cfg.logging.experiment_name == "exp a"


def test_override_typo_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="train.epohc: unknown key"):
        config_from_dict({}, ["train.epohc=2"])


def test_alias_conflict_is_an_error() -> None:
    with pytest.raises(ConfigError, match="grpo.num_samples_per_prompt = 4 conflicts with rollout.n_generation = 8"):
        config_from_dict({"grpo": {"num_samples_per_prompt": 4}, "rollout": {"n_generation": 8}})


def test_grpo_inferred_from_grpo_keys() -> None:
    assert config_from_dict({"train": {"train_policy": {"kl_beta": 0.1}}}).policy_type == "grpo"
    assert config_from_dict({}).policy_type == "sft"


def test_resolved_toml_round_trips(tmp_path: Path) -> None:
    cfg = config_from_dict({"train": {"epoch": 3, "train_policy": {"dataset": {"name": "x", "split": ["a", "b"]}}}})
    path = cfg.write(tmp_path / "run" / "config.toml")
    again = load_config(path, check_paths=False)
    assert again == cfg
    assert tomllib.loads(path.read_text())["train"]["epoch"] == 3


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[train\nepoch = 1\n")
    with pytest.raises(ConfigError, match="TOML syntax"):
        load_config(bad)


def test_cli_config_check_exit_codes(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text("[train]\nepoch = 2\n")
    ok = subprocess.run([sys.executable, "-m", "cosmos_train.cli", "config", "check", str(good),
                         "--set", "train.optm_lr=3e-4"], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    assert tomllib.loads(ok.stdout)["train"]["optm_lr"] == 3e-4
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nepohc = 2\n[policy]\nmodel_max_lenght = 5\n")
    res = subprocess.run([sys.executable, "-m", "cosmos_train.cli", "config", "check", str(bad)],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 2
    assert "train.epohc" in res.stderr and "did you mean policy.model_max_length?" in res.stderr


@pytest.mark.parametrize("recipe", sorted((ROOT / "configs").glob("*.toml")), ids=lambda p: p.name)
def test_shipped_job_recipes_pass_check(recipe: Path, tmp_path: Path) -> None:
    if recipe.name.startswith("eval-"):
        from cosmos_train.evaluation.config import load_eval_config

        load_eval_config(recipe)
        return
    cfg = load_config(recipe, [f"policy.model_name_or_path='{tmp_path}'"])
    assert cfg.policy_type in ("sft", "grpo")
    first = recipe.read_text().splitlines()[0]
    assert first.startswith("#"), "each recipe starts with a comment giving the command that runs it"
