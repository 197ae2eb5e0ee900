"""The arguments several commands share: a job's config file with its `--set` overrides.

    cosmos-train sft --config configs/tiny-sft.toml --set train.epoch=2
    cosmos-train config check configs/tiny-sft.toml --set train.epoch=2

`Subparsers` is the type each command module's `register(sub)` takes.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TypeAlias

# what `add_subparsers()` returns: each command module's `register(sub)` adds its parser(s) to it
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_config_args(p: argparse.ArgumentParser, positional: bool = False) -> None:
    """The job TOML (`--config FILE`, or a positional FILE) and its repeatable `--set KEY=VALUE` (`overrides`)."""
    if positional:
        p.add_argument("config", type=Path, help="Job TOML file.")
    else:
        p.add_argument("--config", type=Path, required=True, help="Job TOML file.")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a key, e.g. --set train.epoch=2 (repeatable; applied after COSMOS_TRAIN__* env vars).",
    )
