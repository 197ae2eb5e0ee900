"""Loading the world-model RL job config: cosmos-rl's `configs/wfm/*.toml` layout ([model], [model.rl],
[model_parallel], [trainer], [optimizer], [scheduler], [dataloader_train], [job], [checkpoint]) plus our [reward],
[evaluation] and [launch], read into the typed `WfmConfig` (wfm/config_schema.py, its tables in config_sections)
with every problem in one ConfigError (`load_wfm_config`, `wfm_config_from_dict`).

    cosmos-train config check configs/tiny-wfm-flow-grpo.toml --set model.rl.sample_steps=8
    cosmos-train wfm-rl --config configs/tiny-wfm-flow-grpo.toml

cosmos-rl's own recipes (configs/cosmos-predict2-5/*.toml) load as they are. A recipe that names no
model.model_name_or_path is read in cosmos-rl's form: its model is [checkpoint] load_path, and every result-changing
key it leaves out takes cosmos-rl's default (COSMOS_RL_DEFAULTS: e.g. kl_beta 0.01, num_rollout 8, train_on 0..7,
one conditioning frame), so the run is the one cosmos-rl would make or is refused. Each entry of the imaginaire
tables is in one stated state (CALLBACK_STATES, conditioner_states): implemented (grad_clip's clip_norm and
force_finite, the text conditioner's dropout_rate), accepted with no effect and listed with why (logging callbacks,
the fps / padding-mask remaps), or refused by name with what to do (ema_model, conditioning frames on mock data,
a context-parallel size the DiT's heads or the launched ranks do not divide by, cosmos-rl's .pt checkpoints:
convert them to a diffusers folder): wfm/config_states.py says each entry's state, wfm/config_checks.py
refuses what cannot run.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cosmos_train.config.base import read_toml
from cosmos_train.config.explain import explain_errors, unknown_keys
from cosmos_train.config.overrides import apply_overrides
from cosmos_train.errors import ConfigError
from cosmos_train.wfm.config_checks import wfm_problems
from cosmos_train.wfm.config_schema import WfmConfig
from cosmos_train.wfm.config_states import wfm_no_effect
from cosmos_train.wfm.cosmos_rl_form import apply_cosmos_rl_defaults, is_cosmos_rl_form, rename_rl_aliases
from cosmos_train.wfm.mock_data import read_mock_video


def load_wfm_config(
    path: str | Path | None = None,
    overrides: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    check_paths: bool = True,
) -> WfmConfig:
    """Parse, override (COSMOS_TRAIN__* env, then --set) and validate; every problem in one ConfigError."""
    raw, source = read_toml(path)
    return wfm_config_from_dict(raw, overrides, os.environ if env is None else env, source, check_paths)


def wfm_config_from_dict(
    raw: dict[str, Any],
    overrides: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    source: str | None = None,
    check_paths: bool = False,
) -> WfmConfig:
    """A world-model config from its tables: overrides, cosmos-rl's names and defaults, the schema, wfm_problems."""
    raw = copy.deepcopy(raw)
    cosmos_rl_form = is_cosmos_rl_form(raw)  # what the file says, before overrides
    apply_overrides(raw, overrides, env or {})
    problems = rename_rl_aliases(raw)
    defaulted = apply_cosmos_rl_defaults(raw) if cosmos_rl_form and not problems else []
    problems += read_mock_video(raw)  # cosmos-rl's mock video dataset: its keys fill ours (wfm/mock_data.py)
    problems += unknown_keys(raw, WfmConfig)
    if problems:
        raise ConfigError(problems, source)
    try:
        cfg = WfmConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(explain_errors(e, WfmConfig), source) from None
    cfg._cosmos_rl_defaults = defaulted
    cfg._no_effect = wfm_no_effect(cfg)
    problems = wfm_problems(cfg, check_paths)
    if problems:
        raise ConfigError(problems, source)
    return cfg
