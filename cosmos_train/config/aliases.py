"""cosmos-rl's other names for our keys, mapped onto ours in the raw TOML before validation: aliases (the same key
under an older name), conversions (the same setting said the other way round), and the policy type a recipe that
names none implies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cosmos_train.config.schema_policy import GRPO_ONLY_KEYS

# (alias path, canonical path): keys that appear only in the seed guides.
ALIASES: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    # cosmos-rl's older names, still in the Cosmos-Reason1 guide's configs.
    (("train", "enable_validation"), ("validation", "enable")),
    (("train", "validation_step"), ("validation", "freq")),
    (("train", "validation_batch_per_replica"), ("validation", "batch_size")),
    (("grpo", "num_samples_per_prompt"), ("rollout", "n_generation")),
    (("grpo", "kl_penalty"), ("train", "train_policy", "kl_beta")),
    (("train", "train_policy", "kl_penalty"), ("train", "train_policy", "kl_beta")),
    (("train", "train_policy", "rollout_batch_size"), ("rollout", "batch_size")),
    # cosmos-rl calls the micro-batch a mini_batch; in GRPO a mini-batch is an optimizer step's share.
    (("train", "train_policy", "mini_batch"), ("train", "train_policy", "micro_batch")),
    # cosmos-rl's world-model (--wfm-mode) recipes name the policy parallelism this way.
    (("model", "fsdp_shard_size"), ("policy", "parallelism", "dp_shard_size")),
    (("model", "dp_replicate_size"), ("policy", "parallelism", "dp_replicate_size")),
    (("model_parallel", "context_parallel_size"), ("policy", "parallelism", "cp_size")),
    (("model_parallel", "tensor_parallel_size"), ("policy", "parallelism", "tp_size")),
]


# dynamic_sampling_max_rounds for cosmos-rl's "retry until the batch is full"
UNTIL_FULL = 1_000_000

# (cosmos-rl key, our key, our value for its value): the same setting, said the other way round.
CONVERTED: list[tuple[tuple[str, ...], tuple[str, ...], Callable[[Any], Any]]] = [
    (
        ("train", "train_policy", "unbiased_advantage"),
        ("train", "train_policy", "scale_rewards"),
        lambda v: not v if isinstance(v, bool) else v,
    ),
    (
        ("train", "train_policy", "use_rollout_logprobs_for_loss"),
        ("train", "train_policy", "old_logprobs"),
        lambda v: ("engine" if v else "recompute") if isinstance(v, bool) else v,
    ),
    # cosmos-rl: > 0 refill rounds at most, <= 0 refill until the batch is full (here: a bound no run reaches)
    (
        ("train", "train_policy", "max_retry_for_on_policy"),
        ("train", "train_policy", "dynamic_sampling_max_rounds"),
        lambda v: (v if v > 0 else UNTIL_FULL) if isinstance(v, int) and not isinstance(v, bool) else v,
    ),
]


def apply_aliases(raw: dict[str, Any], problems: list[str]) -> None:
    """Move every alias and converted key of `raw` to our key (in place); an alias set beside its key to another
    value is a problem."""
    for alias, canonical, convert in [(a, c, None) for a, c in ALIASES] + CONVERTED:
        parent = _get_parent(raw, alias)
        if parent is None or alias[-1] not in parent:
            continue
        given = parent.pop(alias[-1])
        value = convert(given) if convert is not None else given
        target = _ensure_parent(raw, canonical)
        if canonical[-1] in target and target[canonical[-1]] != value:
            problems.append(
                f"{'.'.join(alias)} = {given!r} conflicts with {'.'.join(canonical)} = "
                f"{target[canonical[-1]]!r}: they are the same setting"
                + (f" ({'.'.join(alias)} = {given!r} means {canonical[-1]} = {value!r})" if convert else "")
                + ", keep one"
            )
            continue
        target[canonical[-1]] = value
    for section in ("grpo", "model", "model_parallel"):
        if isinstance(raw.get(section), dict) and not raw[section]:
            raw.pop(section)


def canonical_key(path: list[str], value: Any) -> tuple[list[str], Any]:
    """(our key path, our value) for a key path given under its alias name; other paths as they are."""
    for alias, canonical, convert in [(a, c, None) for a, c in ALIASES] + CONVERTED:
        if tuple(path) == alias:
            return list(canonical), convert(value) if convert is not None else value
    return path, value


def says_rl(raw: dict[str, Any]) -> bool:
    """The seed guides' RL recipe says GRPO only through these cosmos-rl names (no `type`): a [grpo] table or
    train.train_policy.rollout_batch_size. Read before the aliases move them."""
    policy_table = raw.get("train", {}).get("train_policy", {}) if isinstance(raw.get("train"), dict) else {}
    return "grpo" in raw or (isinstance(policy_table, dict) and "rollout_batch_size" in policy_table)


def resolve_policy_type(raw: dict[str, Any], rl_alias: bool) -> list[str]:
    """Set train.train_policy.type where the recipe names none: "grpo" when an RL alias (`rl_alias`) or a GRPO-only
    key implies it, else "sft". An explicit type = "sft" with GRPO-only keys is a problem naming each (the SFT
    table has no such key; the run would otherwise silently be another kind)."""
    train = raw.setdefault("train", {})
    policy_table = train.setdefault("train_policy", {}) if isinstance(train, dict) else None
    if not isinstance(policy_table, dict):
        return []  # not a table: validation names it
    grpo_keys = [k for k in GRPO_ONLY_KEYS if k in policy_table]
    if "type" not in policy_table:
        policy_table["type"] = "grpo" if rl_alias or grpo_keys else "sft"
        return []
    if policy_table["type"] != "sft":
        return []
    return [
        f'train.train_policy.{k}: a GRPO setting, but train.train_policy.type = "sft"; remove it for an SFT '
        'run, or set type = "grpo" for an RL run'
        for k in grpo_keys
    ]


def _get_parent(raw: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    node: Any = raw
    for part in path[:-1]:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, dict) else None


def _ensure_parent(raw: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    node = raw
    for part in path[:-1]:
        node = node.setdefault(part, {})
    return node
