"""rewards.toml errors read like the job config's: the key path, the bound in words, the closest key."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosmos_train.errors import ConfigError
from cosmos_train.reward_service.config import load_service_config


def test_typo_names_the_closest_key(tmp_path: Path) -> None:
    path = tmp_path / "rewards.toml"
    path.write_text("queue_sise = 3\n")
    with pytest.raises(ConfigError, match=r"queue_sise: unknown key in \[top level\] \(did you mean queue_size\?\)"):
        load_service_config(path)


def test_out_of_bounds_value_says_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "rewards.toml"
    path.write_text("workers = 0\n")
    with pytest.raises(ConfigError, match=r"workers: must be >= 1"):
        load_service_config(path)
    path.write_text("workers = 2\n")
    assert load_service_config(path).workers == 2
