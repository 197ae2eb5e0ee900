"""Telling a world-model (Cosmos-Predict) recipe from a vision-language job, and the refusal that points it to
`cosmos-train wfm-rl`."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

# The top-level sections of world-model (Cosmos-Predict) recipes (cosmos-rl's, and cosmos_train/wfm/config.py's),
# none of which a vision-language job has.
WORLD_MODEL_SECTIONS = (
    "model",
    "model_parallel",
    "trainer",
    "dataloader_train",
    "dataloader_val",
    "optimizer",
    "scheduler",
    "checkpoint",
    "job",
)


def world_model_sections(raw: dict[str, Any]) -> list[str]:
    """The world-model sections of a config that has at least two of them (one could be a typo of ours), one
    beyond [model] / [model_parallel]: those two alone carry the seed guide's parallelism keys, which load
    as aliases of [policy.parallelism] (aliases.ALIASES)."""
    found = [k for k in WORLD_MODEL_SECTIONS if isinstance(raw.get(k), dict | list)]
    beyond = [k for k in found if k not in ("model", "model_parallel")]
    return found if len(found) >= 2 and beyond else []


def is_world_model_recipe(path: str | Path) -> bool:
    """True for a TOML file in the world-model layout (cosmos-rl's configs/wfm/, ours configs/tiny-wfm-*.toml);
    False for anything else, a file that does not parse included (its own loader says why)."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return bool(world_model_sections(raw))


def world_model_refusal(sections: list[str], trainer_type: str | None = None) -> str:
    """One paragraph for a world-model recipe: its own layout (sections) or cosmos-rl's diffusers trainer
    (['policy.is_diffusers = true'], with its train.train_policy.trainer_type: "diffusion_nft" is named)."""
    if any(s.startswith("policy.") for s in sections):
        nft = (
            f'; its train.train_policy.trainer_type = "{trainer_type}" (DiffusionNFT: LoRA adapters, no '
            "per-step likelihood) is not implemented here"
            if trainer_type == "diffusion_nft"
            else f'; its train.train_policy.trainer_type = "{trainer_type}" is not a trainer here'
            if trainer_type
            else ""
        )
        return (
            f"this is a recipe of cosmos-rl's diffusers trainer ({', '.join(sections)}), not a vision-language "
            f"job ([train], [policy], [rollout], [validation]){nft}; world-model RL (Flow-GRPO / DDRL on a "
            "Cosmos-Predict DiT, the same diffusers model: model.model_name_or_path = policy.model_name_or_path, "
            "model.model_revision = policy.model_revision) runs here from the world-model layout ([model], "
            "[model.rl], [trainer], [dataloader_train], ...: configs/wfm/*.toml, configs/tiny-wfm-*.toml) with "
            "`cosmos-train wfm-rl --config FILE`. See docs/MIGRATING_FROM_COSMOS_RL.md"
        )
    return (
        f"this is a world-model (Cosmos-Predict) recipe ({', '.join(f'[{k}]' for k in sections)}), not a "
        "vision-language job: run it with `cosmos-train wfm-rl --config FILE` (or cosmos-rl's form "
        "`cosmos-train --config FILE`); `cosmos-train config check FILE` checks it"
    )
