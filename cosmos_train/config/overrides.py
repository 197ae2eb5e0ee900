"""Overrides on top of a config file: `COSMOS_TRAIN__SECTION__KEY=value` environment variables, then
`--set key.path=value` texts (later wins). A value is read as TOML (`1e-5`, `["a", "b"]`), else taken as a string."""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from typing import Any

from cosmos_train.config.aliases import canonical_key
from cosmos_train.errors import ConfigError

ENV_PREFIX = "COSMOS_TRAIN__"


def parse_override(text: str) -> tuple[list[str], Any]:
    """'train.optm_lr=1e-5' -> (['train', 'optm_lr'], 1e-5); the value is read as TOML, else a string."""
    if "=" not in text:
        raise ConfigError([f"--set {text!r}: expected key.path=value"])
    key, value = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ConfigError([f"--set {text!r}: empty key"])
    return path, _parse_value(value.strip())


def _parse_value(value: str) -> Any:
    try:
        return tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return value


def env_overrides(env: Mapping[str, str]) -> list[tuple[list[str], Any]]:
    """COSMOS_TRAIN__TRAIN__OPTM_LR=1e-5 -> (['train', 'optm_lr'], 1e-5)."""
    out = []
    for name, value in sorted(env.items()):
        if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
            path = [p.lower() for p in name[len(ENV_PREFIX) :].split("__") if p]
            out.append((path, _parse_value(value)))
    return out


def apply_overrides(
    raw: dict[str, Any], overrides: Iterable[str], env: Mapping[str, str], *, canonical_names: bool = False
) -> None:
    """COSMOS_TRAIN__* variables of `env`, then `--set key.path=value` texts (later wins), into `raw`.

    canonical_names: an override naming a key by its other name (ALIASES, CONVERTED: cosmos-rl's
    `mini_batch` for our `micro_batch`) is set under ours, so it replaces the file's value whichever of the
    two names the file used, as every override does (job configs; the world-model schema has its own names).
    """
    pairs = [*env_overrides(env), *(parse_override(text) for text in overrides)]
    for key_path, value in pairs:
        if canonical_names:
            key_path, value = canonical_key(key_path, value)
        set_path(raw, key_path, value)


def set_path(raw: dict[str, Any], path: list[str], value: Any) -> None:
    """raw[path[0]][path[1]]... = value, making the tables on the way."""
    node = raw
    for part in path[:-1]:
        nxt = node.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ConfigError([f"{'.'.join(path)}: {part!r} holds a value, not a table"])
        node = nxt
    node[path[-1]] = value
