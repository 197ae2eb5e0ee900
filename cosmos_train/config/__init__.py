"""The job config and what every config kind shares: the public names the rest of the project imports.

    from cosmos_train.config import Config, load_config

Modules: base (the `Section` base, `read_toml`, `JobSettings`), schema (the job schema, `Config`) and its tables by
topic: schema_train, schema_run_health, schema_policy (SFT's and GRPO's train_policy tables), schema_model ([policy]),
schema_rollout ([rollout], [validation]), schema_launch ([logging], [launch]); aliases (cosmos-rl's other names),
overrides (`--set` and COSMOS_TRAIN__* values), explain (errors in words), validate (semantic checks), load
(`load_config`), compat (cosmos-rl's keys we do not implement; their rules in compat_rules, what the key table says
of ours in compat_notes), recipe_kind (telling a world-model recipe apart), paths, docs (the generated reference),
key_tests (the test that proves each key).
"""

from cosmos_train.config.aliases import ALIASES, CONVERTED, UNTIL_FULL
from cosmos_train.config.base import NO_EFFECT_HEADER, JobSettings, MinusOneOrPositive, Section, read_toml
from cosmos_train.config.compat import NoEffect
from cosmos_train.config.explain import check_name, explain_errors, field_bounds, unknown_keys
from cosmos_train.config.load import (
    config_from_dict,
    fold_pipeline,
    load_config,
    parse_config,
    speed_only_settings,
)
from cosmos_train.config.overrides import ENV_PREFIX, apply_overrides, env_overrides, parse_override, set_path
from cosmos_train.config.paths import looks_local
from cosmos_train.config.recipe_kind import is_world_model_recipe, world_model_refusal, world_model_sections
from cosmos_train.config.schema import Config
from cosmos_train.config.schema_launch import LaunchConfig, LoggingConfig
from cosmos_train.config.schema_model import LoraConfig, ParallelismConfig, PolicyConfig, pattern_list
from cosmos_train.config.schema_policy import (
    GRPO_ONLY_KEYS,
    DatasetConfig,
    GRPOPolicyConfig,
    OverlongPenaltyConfig,
    RemoteRewardConfig,
    RemoteRewardFn,
    SFTPolicyConfig,
    TrainPolicy,
    TrainPolicyConfig,
    VisionConfig,
)
from cosmos_train.config.schema_rollout import (
    RolloutConfig,
    RolloutParallelismConfig,
    SamplingConfig,
    ValidationConfig,
)
from cosmos_train.config.schema_run_health import RunHealthConfig
from cosmos_train.config.schema_train import CheckpointConfig, TrainConfig
from cosmos_train.config.validate import semantic_problems, unsupported_settings, validate
from cosmos_train.errors import ConfigError

__all__ = [
    "ALIASES",
    "CONVERTED",
    "ENV_PREFIX",
    "GRPO_ONLY_KEYS",
    "NO_EFFECT_HEADER",
    "UNTIL_FULL",
    "CheckpointConfig",
    "Config",
    "ConfigError",
    "DatasetConfig",
    "GRPOPolicyConfig",
    "JobSettings",
    "LaunchConfig",
    "LoggingConfig",
    "LoraConfig",
    "MinusOneOrPositive",
    "NoEffect",
    "OverlongPenaltyConfig",
    "ParallelismConfig",
    "PolicyConfig",
    "RemoteRewardConfig",
    "RemoteRewardFn",
    "RolloutConfig",
    "RolloutParallelismConfig",
    "RunHealthConfig",
    "SFTPolicyConfig",
    "SamplingConfig",
    "Section",
    "TrainConfig",
    "TrainPolicy",
    "TrainPolicyConfig",
    "ValidationConfig",
    "VisionConfig",
    "apply_overrides",
    "check_name",
    "config_from_dict",
    "env_overrides",
    "explain_errors",
    "field_bounds",
    "fold_pipeline",
    "is_world_model_recipe",
    "load_config",
    "looks_local",
    "parse_config",
    "parse_override",
    "pattern_list",
    "read_toml",
    "semantic_problems",
    "set_path",
    "speed_only_settings",
    "unknown_keys",
    "unsupported_settings",
    "validate",
    "world_model_refusal",
    "world_model_sections",
]
