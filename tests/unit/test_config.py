"""The job config: seeds' snippets accepted, typos named with a suggestion, overrides layered."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest
from pydantic import BaseModel

from cosmos_train.config import (
    CheckpointConfig,
    Config,
    ConfigError,
    TrainPolicyConfig,
    config_from_dict,
    field_bounds,
    load_config,
)
from cosmos_train.evaluation.config import EvalConfig
from tests.cli_inprocess import RunCli

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


def test_seed_upload_keys_load_as_written() -> None:
    ck = load_config(SNIPPETS[0].parent / "000_01.toml").train.ckpt
    assert ck.upload_hf is True and ck.hf_repo_name == "Cosmos-Reason1" and ck.hf_private is True
    assert ck.upload_s3 == "final" and ck.s3_bucket == "your-s3-bucket" and ck.s3_prefix == "outputs"


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
    # context_parallel_size = 2 is context parallel: each sequence split over 2 ranks, nothing folded
    assert (par.dp_shard_size, par.dp_replicate_size, par.cp_size) == (8, 4, 2)
    assert "policy.parallelism.cp_size" not in {n.key for n in cfg.no_effect}


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
        config_from_dict(
            {"policy": {"parallelism": {"dp_shard_size": 2, "dp_replicate_size": 2}}, "launch": {"nproc_per_node": 2}}
        )
    cfg = config_from_dict({"policy": {"parallelism": {"dp_shard_size": -1, "tp_size": 2}}})
    assert cfg.policy.parallelism.resolved_shard(8) == 4


def test_micro_batch_must_divide_batch() -> None:
    with pytest.raises(ConfigError, match="micro_batch: 3 must divide"):
        config_from_dict({"train": {"train_batch_per_replica": 8, "train_policy": {"micro_batch": 3}}})


def test_mini_batch_is_the_micro_batch() -> None:
    """cosmos-rl's `mini_batch` is our `micro_batch` (GRPO's mini-batch is a different thing)."""
    cfg = config_from_dict({"train": {"train_batch_per_replica": 8, "train_policy": {"mini_batch": 4}}})
    assert cfg.train.train_policy.micro_batch == 4
    with pytest.raises(ConfigError, match="same setting"):
        config_from_dict({"train": {"train_policy": {"mini_batch": 4, "micro_batch": 2}}})


@pytest.mark.parametrize(("in_file", "override"), [("micro_batch", "mini_batch"), ("mini_batch", "micro_batch")])
def test_an_override_under_either_name_wins_over_the_file(tmp_path: Path, in_file: str, override: str) -> None:
    """--set (and COSMOS_TRAIN__*) under one name of a key replaces the file's value under its other name, as
    every override replaces the file's value; both names in the file itself still conflict."""
    f = tmp_path / "job.toml"
    f.write_text(f"[train]\ntrain_batch_per_replica = 8\n[train.train_policy]\n{in_file} = 4\n")
    assert load_config(f, [f"train.train_policy.{override}=2"], env={}).train.train_policy.micro_batch == 2
    env = {f"COSMOS_TRAIN__TRAIN__TRAIN_POLICY__{override.upper()}": "1"}
    assert load_config(f, [], env=env).train.train_policy.micro_batch == 1
    assert load_config(f, [f"train.train_policy.{override}=2"], env=env).train.train_policy.micro_batch == 2
    # cosmos-rl's unbiased_advantage = true is our scale_rewards = false, from an override too
    f.write_text(
        "[train]\ntrain_batch_per_replica = 16\n[rollout]\nn_generation = 2\nbatch_size = 8\n"
        '[train.train_policy]\ntype = "grpo"\nscale_rewards = true\n'
    )
    cfg = load_config(f, ["train.train_policy.unbiased_advantage=true"], env={})
    assert cfg.train.train_policy.scale_rewards is False


def test_grpo_batch_checks() -> None:
    grpo = {"type": "grpo"}
    cfg = config_from_dict(
        {
            "train": {"train_batch_per_replica": 16, "train_policy": grpo},
            "rollout": {"batch_size": 4, "n_generation": 8},
        }
    )
    assert cfg.policy_type == "grpo"
    with pytest.raises(
        ConfigError, match="a step trains on 24 completions per replica; with rollout.n_generation = 16"
    ):
        config_from_dict(
            {
                "train": {"train_batch_per_replica": 24, "train_policy": grpo},
                "rollout": {"batch_size": 4, "n_generation": 16},
            }
        )
    # cosmos-rl's meaning: a step trains on train_batch_per_replica completions (rollout.batch_size is only the
    # engine's prompt batch): 48 completions = 6 prompts x 8, one optimizer update; 16 = 2 prompts
    big = config_from_dict(
        {
            "train": {"train_batch_per_replica": 48, "train_policy": grpo},
            "rollout": {"batch_size": 4, "n_generation": 8},
        }
    )
    assert big.prompts_per_step == 6 and cfg.prompts_per_step == 2 and cfg.rl_steps_per_step == 1
    # a group of 16 over steps of 8 (cosmos-rl's defaults): one prompt a step here, two of cosmos-rl's steps
    default = config_from_dict({"train": {"train_policy": grpo}})
    assert (default.prompts_per_step, default.rl_steps_per_step) == (1, 2)
    with pytest.raises(ConfigError, match="rollout.n_generation: GRPO compares"):
        config_from_dict(
            {"train": {"train_batch_per_replica": 1, "train_policy": grpo}, "rollout": {"n_generation": 1}}
        )
    with pytest.raises(ConfigError, match="more than train.train_policy.allowed_outdated_steps"):
        config_from_dict({"train": {"sync_weight_interval": 6, "train_batch_per_replica": 16, "train_policy": grpo}})
    with pytest.raises(ConfigError, match="on-policy rollouts need the newest weights"):
        config_from_dict(
            {
                "train": {
                    "sync_weight_interval": 2,
                    "train_batch_per_replica": 16,
                    "train_policy": {**grpo, "on_policy": True},
                }
            }
        )
    # cosmos-rl's recipes score the trainer's log-probs at train_policy.temperature and sample at the rollout's:
    # allowed, unless the loss reads the engine's log-probs, which are of the other distribution
    warm = {"train_batch_per_replica": 16, "train_policy": {**grpo, "temperature": 0.7}}
    assert config_from_dict({"train": warm, "rollout": {"n_generation": 16}}).train.train_policy.temperature == 0.7
    for key, value in (("old_logprobs", "engine"), ("use_decoupled_loss", True)):
        with pytest.raises(ConfigError, match=f"differ while the loss uses the engine's log-probs .*{key}"):
            config_from_dict(
                {
                    "train": {**warm, "train_policy": {**warm["train_policy"], key: value}},
                    "rollout": {"n_generation": 16},
                }
            )


def test_uploads_need_their_target() -> None:
    cfg = config_from_dict(
        {"train": {"ckpt": {"upload_hf": True, "hf_repo_name": "me/x", "upload_s3": "all", "s3_bucket": "bucket-one"}}}
    )
    assert cfg.train.ckpt.upload_s3 == "all"
    with pytest.raises(ConfigError) as e:
        config_from_dict(
            {
                "train": {
                    "ckpt": {
                        "upload_hf": True,
                        "upload_s3": True,
                        "export_safetensors": False,
                        "upload_part_size_mb": 4,
                    }
                }
            }
        )
    text = "\n".join(e.value.problems)
    assert "train.ckpt.upload_part_size_mb" in text  # below S3's 5 MiB part minimum
    with pytest.raises(ConfigError) as e:
        config_from_dict({"train": {"ckpt": {"upload_hf": True, "upload_s3": True, "export_safetensors": False}}})
    assert [p.split(":")[0] for p in e.value.problems] == [
        "train.ckpt.hf_repo_name",
        "train.ckpt.s3_bucket",
        "train.ckpt.export_safetensors",
    ]


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


def test_cli_config_check_exit_codes(tmp_path: Path, run_cli: RunCli) -> None:
    good = tmp_path / "good.toml"
    good.write_text("[train]\nepoch = 2\n")
    ok = run_cli("config", "check", good, "--set", "train.optm_lr=3e-4", cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    assert tomllib.loads(ok.stdout)["train"]["optm_lr"] == 3e-4
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nepohc = 2\n[policy]\nmodel_max_lenght = 5\n")
    res = run_cli("config", "check", bad, cwd=ROOT)
    assert res.returncode == 2
    assert "train.epohc" in res.stderr and "did you mean policy.model_max_length?" in res.stderr


@pytest.mark.parametrize(
    "recipe", sorted((ROOT / "configs").glob("**/*.toml")), ids=lambda p: str(p.relative_to(ROOT / "configs"))
)
def test_shipped_job_recipes_pass_check(recipe: Path, tmp_path: Path) -> None:
    from cosmos_train.config import is_world_model_recipe

    if is_world_model_recipe(recipe):  # configs/wfm/*.toml, configs/tiny-wfm-*.toml
        from cosmos_train.wfm.config import load_wfm_config

        wfm = load_wfm_config(recipe, [f"model.model_name_or_path='{tmp_path}'"], check_paths=False)
        assert wfm.policy_type == "wfm_rl" and recipe.read_text().startswith("#")
        return
    if recipe.name.startswith("eval-"):
        from cosmos_train.evaluation.config import load_eval_config

        load_eval_config(recipe)
        return
    if recipe.name.endswith("post-train.toml"):
        from cosmos_train.pipeline import load_pipeline_config

        assert load_pipeline_config(recipe).training_stages()
        return
    cfg = load_config(recipe, [f"policy.model_name_or_path='{tmp_path}'"])
    assert cfg.policy_type in ("sft", "grpo")
    first = recipe.read_text().splitlines()[0]
    assert first.startswith("#"), "each recipe starts with a comment giving the command that runs it"


# ------------------------------------------------------------------------------ bounds, described
BAD_VALUES = [
    ("train.optm_lr=0", "train.optm_lr"),
    ("train.optm_lr=-1e-5", "train.optm_lr"),
    ("train.optm_lr=nan", "train.optm_lr"),
    ("train.optm_lr=inf", "train.optm_lr"),
    ("train.optm_weight_decay=-0.01", "train.optm_weight_decay"),
    ("train.optm_betas=[1.0, 0.999]", "train.optm_betas[0]"),
    ("train.optm_betas=[0.9, -0.1]", "train.optm_betas[1]"),
    ("train.optm_betas=[0.9, nan]", "train.optm_betas[1]"),
    ("train.optm_warmup_steps=-1", "train.optm_warmup_steps"),
    ("train.optm_min_lr_factor=1.5", "train.optm_min_lr_factor"),
    ("train.optm_grad_norm_clip=-1.0", "train.optm_grad_norm_clip"),
    ("train.epsilon=0", "train.epsilon"),
    ("train.train_batch_per_replica=0", "train.train_batch_per_replica"),
    ("train.epoch=0", "train.epoch"),
    ("train.max_num_steps=0", "train.max_num_steps"),
    ("train.output_dir=''", "train.output_dir"),
    ("train.ckpt.max_keep=0", "train.ckpt.max_keep"),
    ("train.ckpt.max_keep=-2", "train.ckpt.max_keep"),
    ("train.ckpt.save_freq=0", "train.ckpt.save_freq"),
    ("train.train_policy.micro_batch=0", "train.train_policy.micro_batch"),
    ("train.train_policy.dataloader_num_workers=-1", "train.train_policy.dataloader_num_workers"),
    ("train.train_policy.temperature=-0.5", "train.train_policy.temperature"),
    ("train.train_policy.epsilon_low=-0.1", "train.train_policy.epsilon_low"),
    ("train.train_policy.epsilon_high=-0.1", "train.train_policy.epsilon_high"),
    ("train.train_policy.kl_beta=inf", "train.train_policy.kl_beta"),
    (
        "train.train_policy.remote_reward.reward_fns=[{name='a', weight=nan}]",
        "train.train_policy.remote_reward.reward_fns[0].weight",
    ),
    ("train.train_policy.reward_function={single_choice=nan}", "train.train_policy.reward_function.single_choice"),
    ("train.train_policy.dataset.test_size=0", "train.train_policy.dataset.test_size"),
    ("train.train_policy.dataset.vision.fps=0", "train.train_policy.dataset.vision.fps"),
    ("train.train_policy.dataset.vision.fps=nan", "train.train_policy.dataset.vision.fps"),
    ("train.train_policy.dataset.vision.nframes=0", "train.train_policy.dataset.vision.nframes"),
    ("train.train_policy.dataset.vision.max_pixels=0", "train.train_policy.dataset.vision.max_pixels"),
    ("train.train_policy.dataset.vision.video_start=-1.0", "train.train_policy.dataset.vision.video_start"),
    ("train.train_policy.dataset.vision={video_start=5.0, video_end=2.0}", "video_end"),
    ("train.train_policy.dataset.vision={fps=1.0, nframes=8}", "nframes"),
    ("policy.model_max_length=0", "policy.model_max_length"),
    ("policy.parallelism.tp_size=0", "policy.parallelism.tp_size"),
    ("policy.parallelism.dp_shard_size=0", "policy.parallelism.dp_shard_size"),
    ("policy.parallelism.dp_shard_size=-2", "policy.parallelism.dp_shard_size"),
    ("rollout.parallelism.tp_size=0", "rollout.parallelism.tp_size"),
    ("policy.lora={r=0}", "policy.lora.r"),
    ("rollout.batch_size=0", "rollout.batch_size"),
    ("rollout.n_generation=0", "rollout.n_generation"),
    ("rollout.max_response_length=0", "rollout.max_response_length"),
    ("rollout.gpu_memory_utilization=0", "rollout.gpu_memory_utilization"),
    ("rollout.gpu_memory_utilization=1.1", "rollout.gpu_memory_utilization"),
    ("rollout.sampling_config.top_p=0", "rollout.sampling_config.top_p"),
    ("rollout.sampling_config.top_p=1.5", "rollout.sampling_config.top_p"),
    ("rollout.sampling_config.top_k=0", "rollout.sampling_config.top_k"),
    ("rollout.sampling_config.temperature=-1.0", "rollout.sampling_config.temperature"),
    ("validation.freq=0", "validation.freq"),
    ("validation.batch_size=0", "validation.batch_size"),
    ("validation.n_generation=0", "validation.n_generation"),
    ("logging.log_interval=0", "logging.log_interval"),
    ("launch.nnodes=0", "launch.nnodes"),
    ("launch.nproc_per_node=0", "launch.nproc_per_node"),
    ("launch.node_rank=1", "launch.node_rank"),
    ("train.ckpt.upload_hf=true", "train.ckpt.hf_repo_name"),
    ("train.ckpt.upload_s3='final'", "train.ckpt.s3_bucket"),
    ("train.ckpt.upload_part_size_mb=4", "train.ckpt.upload_part_size_mb"),
]


@pytest.mark.parametrize(("override", "key"), BAD_VALUES, ids=[o for o, _ in BAD_VALUES])
def test_bad_value_is_refused_naming_the_key(override: str, key: str) -> None:
    with pytest.raises(ConfigError) as e:
        config_from_dict({}, [override])
    assert len(e.value.problems) == 1, e.value.problems  # one clear line per key
    assert key in e.value.problems[0]


def test_constraint_messages_read_as_words() -> None:
    def problems(*overrides: str) -> list[str]:
        with pytest.raises(ConfigError) as e:
            config_from_dict({}, list(overrides))
        return e.value.problems

    assert problems("train.optm_lr=inf") == ["train.optm_lr: must be a finite number > 0 (got inf)"]
    assert problems("train.optm_lr=0.0") == ["train.optm_lr: must be > 0 (got 0.0)"]
    assert problems("rollout.sampling_config.top_p=2.0") == [
        "rollout.sampling_config.top_p: must be > 0 and <= 1 (got 2.0)"
    ]
    assert problems("train.ckpt.max_keep=0") == ["train.ckpt.max_keep: must be -1 or >= 1 (got 0)"]
    assert problems("launch.nproc_per_node=0") == ["launch.nproc_per_node: must be >= 1 or 'auto' (got 0)"]
    assert problems("train.output_dir=''") == ["train.output_dir: must not be empty (got '')"]
    assert problems("train.epoch='two'") == ["train.epoch: must be a valid integer (got 'two')"]
    [source] = problems("train.train_policy.dataset.source='hff'")
    assert source.startswith("train.train_policy.dataset.source: must be one of 'auto', 'hf'")
    assert source.endswith("(got 'hff'); did you mean 'hf'?")


def test_legal_special_values_pass() -> None:
    cfg = config_from_dict(
        {},
        [
            "train.ckpt.max_keep=-1",
            "policy.parallelism.dp_shard_size=-1",
            "rollout.sampling_config.top_k=-1",
            "train.optm_grad_norm_clip=0.0",
            "train.optm_warmup_steps=0.1",
            "train.train_policy.dataset.test_size=0.1",
        ],
    )
    assert cfg.train.max_num_steps is None and cfg.train.ckpt.max_keep == -1


def _models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """`root` and every table model reachable from its fields."""
    found: list[type[BaseModel]] = []

    def walk(annotation: Any) -> None:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in found:
                found.append(annotation)
                for field in annotation.model_fields.values():
                    walk(field.annotation)
            return
        for arg in get_args(annotation):
            walk(arg)

    walk(root)
    return found


def _numeric(annotation: Any) -> bool:
    if annotation in (int, float):
        return True
    if get_origin(annotation) is Literal:
        return False
    return any(_numeric(arg) for arg in get_args(annotation))


ALL_MODELS = _models(Config) + _models(EvalConfig)
# Numbers that are legitimately unbounded (finite is still enforced for every float).
UNBOUNDED = {
    # Reward weights and remote-reward score clips: a negative weight turns a reward into a penalty,
    # and the clips are in whatever unit the reward service scores in.
    "SFTPolicyConfig.reward_function",
    "GRPOPolicyConfig.reward_function",
    "ValidationConfig.reward_function",
    "RemoteRewardFn.weight",
    "RemoteRewardFn.clip_min",
    "RemoteRewardFn.clip_max",
    "RemoteRewardConfig.reward_clip_min",
    "RemoteRewardConfig.reward_clip_max",
}


def test_walk_reaches_every_table() -> None:
    names = {m.__name__ for m in ALL_MODELS}
    assert {"VisionConfig", "RemoteRewardFn", "LoraConfig", "SamplingConfig", "GenerationSection"} <= names


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_every_field_has_a_description(model: type[BaseModel]) -> None:
    missing = [name for name, f in model.model_fields.items() if not (f.description or "").strip()]
    assert not missing, f"{model.__name__}: fields without a description: {missing}"


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_every_numeric_field_is_bounded(model: type[BaseModel]) -> None:
    unbounded = [
        name
        for name, f in model.model_fields.items()
        if _numeric(f.annotation) and not field_bounds(f) and f"{model.__name__}.{name}" not in UNBOUNDED
    ]
    assert not unbounded, f"{model.__name__}: bound (Field(ge=...)) or list in UNBOUNDED: {unbounded}"


def test_unbounded_allow_list_is_current() -> None:
    fields = {f"{m.__name__}.{n}": f for m in ALL_MODELS for n, f in m.model_fields.items()}
    assert all(name in fields and not field_bounds(fields[name]) for name in UNBOUNDED)


@pytest.mark.parametrize("model", ALL_MODELS, ids=lambda m: m.__name__)
def test_every_float_must_be_finite(model: type[BaseModel]) -> None:
    assert model.model_config.get("allow_inf_nan") is False


def test_dataset_source_names_match_the_source_registry() -> None:
    from cosmos_train.data.sources import SOURCES

    literal = get_args(TrainPolicyConfig.model_fields["dataset"].annotation.model_fields["source"].annotation)
    assert set(literal) == {"auto", *SOURCES}
