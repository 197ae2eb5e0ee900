"""The config package's contracts: SFT and GRPO are one discriminated union on train.train_policy.type,
load_config always runs every check (validate), and every config kind stands on the one Section base."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from cosmos_train.config import (
    GRPO_ONLY_KEYS,
    Config,
    ConfigError,
    GRPOPolicyConfig,
    Section,
    SFTPolicyConfig,
    config_from_dict,
    load_config,
    read_toml,
    unsupported_settings,
    validate,
)
from cosmos_train.config.explain import section_models
from cosmos_train.evaluation.config import EvalConfig
from cosmos_train.pipeline import PipelineConfig
from cosmos_train.reward_service.config import ServiceConfig
from cosmos_train.wfm.config_schema import WfmConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_explicit_sft_with_a_grpo_key_names_the_key() -> None:
    with pytest.raises(ConfigError) as e:
        config_from_dict({"train": {"train_policy": {"type": "sft", "temperature": 0.7, "micro_batch": 2}}})
    assert e.value.problems == [
        'train.train_policy.temperature: a GRPO setting, but train.train_policy.type = "sft"; '
        'remove it for an SFT run, or set type = "grpo" for an RL run'
    ]


def test_no_type_is_sft_unless_a_grpo_key_or_rl_alias_says_grpo() -> None:
    assert isinstance(config_from_dict({}).train.train_policy, SFTPolicyConfig)
    for key in ("kl_beta", "loss_type", "mu_iterations"):
        value = {"kl_beta": 0.1, "loss_type": "token-sum", "mu_iterations": 2}[key]
        cfg = config_from_dict({"train": {"train_policy": {key: value}}})
        assert cfg.policy_type == "grpo" and isinstance(cfg.train.train_policy, GRPOPolicyConfig), key
    assert config_from_dict({"grpo": {"num_samples_per_prompt": 4}}).policy_type == "grpo"
    assert {"temperature", "kl_beta", "use_remote_reward"} <= set(GRPO_ONLY_KEYS)
    assert not {"dataset", "micro_batch", "reward_function"} & set(GRPO_ONLY_KEYS)


def test_grpo_recipe_loads_as_the_grpo_table() -> None:
    cfg = load_config(CONFIGS / "tiny-grpo.toml", check_paths=False, env={})
    tp = cfg.train.train_policy
    assert isinstance(tp, GRPOPolicyConfig) and cfg.policy_type == "grpo"
    assert tp.temperature >= 0 and tp.epsilon_low >= 0  # the GRPO fields every GRPO reader uses
    sft = load_config(CONFIGS / "tiny-sft.toml", check_paths=False, env={})
    assert isinstance(sft.train.train_policy, SFTPolicyConfig) and not hasattr(sft.train.train_policy, "kl_beta")


def test_an_unknown_type_is_named() -> None:
    with pytest.raises(ConfigError, match="train.train_policy: type = 'ppo' is not one of 'sft', 'grpo'"):
        config_from_dict({"train": {"train_policy": {"type": "ppo"}}})


def test_a_grpo_typo_is_suggested_from_the_grpo_table() -> None:
    with pytest.raises(ConfigError, match=r"did you mean train.train_policy.temperature\?"):
        config_from_dict({"train": {"train_policy": {"type": "grpo", "temperatur": 0.5}}})


def test_resolved_config_round_trips_each_kind(tmp_path: Path) -> None:
    for raw in ({}, {"train": {"train_policy": {"kl_beta": 0.1}}}):
        cfg = config_from_dict(raw)
        path = cfg.write(tmp_path / f"{cfg.policy_type}.toml")
        back = load_config(path, check_paths=False, env={})
        assert back.model_dump() == cfg.model_dump()
    assert "kl_beta" not in config_from_dict({}).to_toml()  # an SFT run's record holds no GRPO key


def test_load_config_refuses_unsupported_settings_itself(tmp_path: Path) -> None:
    """validate() runs inside load_config: a setting the trainers do not implement fails there, not in a caller."""
    path = tmp_path / "job.toml"
    path.write_text('[train]\nfused_linear_ce = true\n[train.train_policy]\ntype = "grpo"\n')
    with pytest.raises(ConfigError, match="train.fused_linear_ce: the fused LM head"):
        load_config(path, check_paths=False, env={})
    cfg = config_from_dict({"train": {"fused_linear_ce": True, "train_policy": {"type": "grpo"}}})
    assert [p.split(":")[0] for p in unsupported_settings(cfg)] == ["train.fused_linear_ce"]
    with pytest.raises(ConfigError, match="train.fused_linear_ce"):
        validate(cfg)


def _tables(root: type[BaseModel]) -> list[type[BaseModel]]:
    found: list[type[BaseModel]] = []

    def walk(model: type[BaseModel]) -> None:
        if model in found:
            return
        found.append(model)
        for field in model.model_fields.values():
            for sub in section_models(field.annotation):
                walk(sub)

    walk(root)
    return found


@pytest.mark.parametrize(
    "root", [Config, WfmConfig, EvalConfig, ServiceConfig, PipelineConfig], ids=lambda m: m.__name__
)
def test_every_config_kind_stands_on_the_one_section_base(root: type[BaseModel]) -> None:
    tables = _tables(root)
    assert len(tables) > 1
    others = [t.__name__ for t in tables if not issubclass(t, Section)]
    assert not others, f"{root.__name__}: tables not on config.base.Section: {others}"
    forbid: dict[str, Any] = {t.__name__: t.model_config.get("extra") for t in tables}
    assert set(forbid.values()) == {"forbid"}


def test_read_toml_is_the_one_reader(tmp_path: Path) -> None:
    assert read_toml(None) == ({}, None)
    with pytest.raises(ConfigError, match="pipeline config file .* does not exist"):
        read_toml(tmp_path / "missing.toml", what="pipeline config")
    bad = tmp_path / "bad.toml"
    bad.write_text("a = \n")
    with pytest.raises(ConfigError, match="TOML syntax"):
        read_toml(bad)
