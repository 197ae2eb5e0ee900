"""Loading a job config: `load_config(path, overrides)` is the one way in.

    cosmos-train config check configs/tiny-sft.toml --set train.epoch=2

It reads the TOML, maps cosmos-rl's aliases onto their canonical keys, applies `COSMOS_TRAIN__SECTION__KEY=value`
environment variables and then `--set key.path=value` overrides (in that order, later wins), validates the schema
and then every semantic check (`validate`). Every problem is collected into one `ConfigError` that names the full
key path (and the closest valid key for a typo). The resolved config is written into each run folder as
`config.toml`; every process reads that file.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cosmos_train.config.aliases import apply_aliases, resolve_policy_type, says_rl
from cosmos_train.config.base import read_toml
from cosmos_train.config.compat import NoEffect, take_foreign_keys
from cosmos_train.config.compat_notes import INERT
from cosmos_train.config.explain import explain_errors, unknown_keys
from cosmos_train.config.overrides import apply_overrides
from cosmos_train.config.paths import cosmos_cache
from cosmos_train.config.recipe_kind import world_model_refusal, world_model_sections
from cosmos_train.config.schema import Config
from cosmos_train.config.schema_model import ParallelismConfig
from cosmos_train.config.schema_policy import GRPOPolicyConfig
from cosmos_train.config.validate import semantic_problems, validate
from cosmos_train.errors import ConfigError


def load_config(
    path: str | Path | None = None,
    overrides: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    check_paths: bool = True,
) -> Config:
    """Parse, alias, override and validate a job config, every check included (`validate`: settings the trainers
    do not implement are refused here too). Raises ConfigError listing every problem."""
    raw, source = read_toml(path)
    cfg = parse_config(raw, overrides, os.environ if env is None else env, source)
    validate(cfg, check_paths, source)
    return cfg


def config_from_dict(
    raw: dict[str, Any],
    overrides: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    source: str | None = None,
    check_paths: bool = False,
) -> Config:
    """A config built in memory (tests, tools): the schema and semantic_problems. Settings the trainers do not
    implement yet are left for `unsupported_settings` to list; `load_config` refuses them."""
    cfg = parse_config(raw, overrides, env, source)
    if problems := semantic_problems(cfg, check_paths):
        raise ConfigError(problems, source)
    return cfg


def parse_config(
    raw: dict[str, Any], overrides: Iterable[str] = (), env: Mapping[str, str] | None = None, source: str | None = None
) -> Config:
    """The schema's view of `raw` with aliases and overrides applied, cosmos-rl's foreign keys taken out (said in
    `no_effect`) and the derived settings resolved; no semantic check yet."""
    if world_model := world_model_sections(raw):
        raise ConfigError([world_model_refusal(world_model)], source)
    policy_raw = raw.get("policy")
    if isinstance(policy_raw, dict) and policy_raw.get("is_diffusers"):
        tp_any = raw.get("train", {}).get("train_policy", {}) if isinstance(raw.get("train"), dict) else {}
        trainer_type = tp_any.get("trainer_type") if isinstance(tp_any, dict) else None
        raise ConfigError([world_model_refusal(["policy.is_diffusers = true"], trainer_type)], source)
    raw = copy.deepcopy(raw)
    problems: list[str] = []
    rl_alias = says_rl(raw)
    apply_aliases(raw, problems)
    apply_overrides(raw, overrides, env or {}, canonical_names=True)
    apply_aliases(raw, problems)  # an override may set a table holding an alias name
    type_problems = resolve_policy_type(raw, rl_alias)
    no_effect: list[NoEffect] = []
    problems += type_problems + take_foreign_keys(raw, no_effect)
    said = tuple(p.split(":")[0] + ":" for p in type_problems)  # a GRPO key in an SFT table: said once, with why
    problems += [p for p in unknown_keys(raw, Config) if not p.startswith(said)] if said else unknown_keys(raw, Config)
    if problems:
        raise ConfigError(problems, source)
    try:
        cfg = Config.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(explain_errors(e, Config), source) from None
    cfg._no_effect = no_effect
    _resolve_dataset_cache(cfg)
    no_effect += fold_pipeline(cfg.policy.parallelism) + speed_only_settings(cfg)
    return cfg


def fold_pipeline(par: ParallelismConfig) -> list[NoEffect]:
    """pp_size > 1 as more FSDP shards (the same ranks, the same global batch and loss, so the same result; the
    memory per rank differs: all layers' activations per rank). cp_size is honoured: each sequence is split over
    the cp ranks (`cosmos_train.context_parallel`, `cosmos_train.train.cp_language`)."""
    if par.pp_size == 1:
        return []
    shard = par.dp_shard_size
    note = NoEffect(
        "policy.parallelism.pp_size",
        par.pp_size,
        "no pipeline parallelism here: its ranks shard the model with FSDP instead "
        f"(dp_shard_size {'-1, all ranks' if shard == -1 else f'{shard} -> {shard * par.pp_size}'}); the "
        "same result, but each rank holds all layers (gradient checkpointing keeps activations small)",
    )
    if shard != -1:
        par.dp_shard_size = shard * par.pp_size
    par.pp_size = 1
    return [note]


def speed_only_settings(cfg: Config) -> list[NoEffect]:
    """Keys of ours set to a value that would only change speed, which the trainers do not act on yet, or that
    another key's value leaves without effect (as in cosmos-rl)."""
    out = []
    if cfg.train.async_tp_enabled:
        out.append(
            NoEffect(
                "train.async_tp_enabled",
                True,
                "tensor-parallel communication is not overlapped yet: the same math, in sequence",
            )
        )
    # off their defaults (a written run config sets every key): precision or speed only
    if cfg.train.logprob_dtype != "float32":
        out.append(NoEffect("train.logprob_dtype", cfg.train.logprob_dtype, INERT["train.logprob_dtype"]))
    if cfg.rollout.quantization != "none":
        out.append(NoEffect("rollout.quantization", cfg.rollout.quantization, INERT["rollout.quantization"]))
    if cfg.rollout.enable_chunked_prefill:
        out.append(NoEffect("rollout.enable_chunked_prefill", True, INERT["rollout.enable_chunked_prefill"]))
    if cfg.policy_type == "grpo" and "batch_size" in cfg.rollout.model_fields_set:
        out.append(NoEffect("rollout.batch_size", cfg.rollout.batch_size, INERT["rollout.batch_size"]))
    policy_cfg = cfg.train.train_policy
    if not isinstance(policy_cfg, GRPOPolicyConfig):  # the keys below are GRPO's
        return out
    flag = "train.train_policy.overlong_reward.enable_overlong_penalty"
    if policy_cfg.overlong_reward.enable_overlong_penalty:
        out.append(NoEffect(flag, True, INERT[flag]))
    if policy_cfg.behav_imp_weight_cap is not None and not policy_cfg.use_decoupled_loss:
        out.append(
            NoEffect(
                "train.train_policy.behav_imp_weight_cap",
                policy_cfg.behav_imp_weight_cap,
                "caps the decoupled loss's importance weights; use_decoupled_loss is false (as in "
                "cosmos-rl, the cap then does nothing)",
            )
        )
    for key, default in (("advantage_low", -5.0), ("advantage_high", 5.0)):
        if not policy_cfg.clip_advantages and getattr(policy_cfg, key) != default:
            out.append(
                NoEffect(
                    f"train.train_policy.{key}",
                    getattr(policy_cfg, key),
                    "cosmos-rl's language-model GRPO trainer does not clip advantages; set "
                    "train.train_policy.clip_advantages = true to clip them here",
                )
            )
    return out


def _resolve_dataset_cache(cfg: Config) -> None:
    """enable_dataset_cache without a dataset.cache_dir: the shared cache folder (written into the resolved
    config, so every process and a resumed run use the same one)."""
    if not cfg.train.train_policy.enable_dataset_cache:
        return
    for ds in (cfg.train.train_policy.dataset, cfg.validation.dataset):
        if ds is not None and ds.cache_dir is None:
            ds.cache_dir = str(cosmos_cache() / "clip_cache")
