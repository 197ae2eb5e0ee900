"""`script` source: a user's Python file that builds the dataset (cosmos-rl's `... my_data.py`).

    cosmos-train sft --config configs/tiny-sft.toml examples/my_dataset.py
    cosmos-train prepare-data --config configs/tiny-sft.toml examples/my_dataset.py

The contract of a dataset script (examples/my_dataset.py is a complete one):

    def get_dataset(config: cosmos_train.config.Config) -> Iterable[dict]      # required: train rows
    def get_val_dataset(config: Config) -> Iterable[dict]                     # optional: held-out rows
    REWARD_FUNCTIONS = {"name": fn}                                           # optional, for GRPO

Without get_val_dataset, validation holds out `dataset.test_size` of get_dataset's rows (unset: 0.1) as cosmos-rl
does a launcher script's dataset: the first rows, or the last ones when it returns a `datasets.Dataset`
(`holdout`); with it, test_size is not read (cosmos-rl's `val_dataset`).

Each row is either a chat sample (`{"messages": [...], "id"?, "reference"?}`, media parts with
"video"/"image" paths) or a row any other source reads: Cosmos-Reason (`conversations` + `video`),
LLaVA (`from`/`value` turns with `<image>`/`<video>` + `image`/`images`/`video`), or RL
(`video` + `qa_pairs`). Anything iterable works: a list, a generator, a `datasets.Dataset`, a
torch map-style Dataset. Relative media paths are resolved against `dataset.media_path`, then the
script's folder; `[dataset.vision]` applies as for every source; `config.custom` holds the
free-form `[custom]` table of the TOML for the script's own settings.

A reward function is `fn(completion: str, reference: str | None, sample: dict) -> float` (the
sample is the chat sample the completion answers); `script_reward_functions` returns them for
the GRPO trainer to register next to the built-in rewards.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from cosmos_train.config import Config, DatasetConfig, TrainConfig, TrainPolicyConfig
from cosmos_train.data.sources.common import DatasetError, context_for, map_rows
from cosmos_train.data.sources.registry import register_source

_MODULES: dict[tuple[str, float], ModuleType] = {}


def load_script(path: str | Path) -> ModuleType:
    """Import a dataset script once per (path, mtime); errors name the file."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise DatasetError(f"dataset script {path} does not exist")
    key = (str(path), path.stat().st_mtime)
    if key in _MODULES:
        return _MODULES[key]
    name = f"cosmos_dataset_script_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise DatasetError(f"dataset script {path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    # The script may import helpers that sit next to it.
    sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise DatasetError(f"dataset script {path}: importing it failed: {type(e).__name__}: {e}") from e
    finally:
        sys.path.remove(str(path.parent))
    if not callable(getattr(module, "get_dataset", None)):
        raise DatasetError(f"dataset script {path}: defines no get_dataset(config) function")
    _MODULES[key] = module
    return module


def script_reward_functions(path: str | Path) -> dict[str, Callable[..., float]]:
    """The script's REWARD_FUNCTIONS ({} when it has none), checked to be callables."""
    module = load_script(path)
    rewards = getattr(module, "REWARD_FUNCTIONS", {}) or {}
    if not isinstance(rewards, dict):
        raise DatasetError(f"dataset script {path}: REWARD_FUNCTIONS must be a dict of name -> function")
    for name, fn in rewards.items():
        if not isinstance(name, str) or not callable(fn):
            raise DatasetError(f"dataset script {path}: REWARD_FUNCTIONS[{name!r}] is not a function")
    return dict(rewards)


def has_val_dataset(path: str | Path) -> bool:
    """Whether the script defines get_val_dataset: its own validation rows (cosmos-rl's `val_dataset`)."""
    return callable(getattr(load_script(path), "get_val_dataset", None))


def _iterate(rows: Any, where: str) -> Iterable[Any]:
    if isinstance(rows, dict) or isinstance(rows, str) or rows is None:
        raise DatasetError(f"{where} returned {type(rows).__name__}; expected an iterable of rows")
    if hasattr(rows, "__len__") and hasattr(rows, "__getitem__") and not hasattr(rows, "__iter__"):
        return (rows[i] for i in range(len(rows)))
    try:
        return iter(rows)
    except TypeError:
        if hasattr(rows, "__len__") and hasattr(rows, "__getitem__"):
            return (rows[i] for i in range(len(rows)))
        raise DatasetError(f"{where} returned {type(rows).__name__}; expected an iterable of rows") from None


def script_samples(
    path: str | Path, cfg: Config, split_role: str, on_rows: Callable[[Any], None] | None = None
) -> Iterator[dict]:
    """Chat samples from the script's get_dataset (role "train") or get_val_dataset (role "val"). `on_rows` is
    given what the function returned (test_size holds out rows by its kind: `holdout.kind_of_rows`)."""
    path = Path(path).expanduser().resolve()
    module = load_script(path)
    fn_name = "get_val_dataset" if split_role == "val" else "get_dataset"
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise DatasetError(
            f"dataset script {path} defines no {fn_name}(config): add it, or set dataset.test_size to hold out rows"
        )
    where = f"{path}:{fn_name}"
    try:
        rows = fn(cfg)
    except Exception as e:
        raise DatasetError(f"{where}(config) failed: {type(e).__name__}: {e}") from e
    if on_rows is not None:
        on_rows(rows)
    ds = cfg.train.train_policy.dataset
    roots = ([Path(ds.media_path).expanduser()] if ds.media_path else []) + [path.parent]
    # No media-root check: the script is the user's own code (it can read any file itself), and building
    # absolute paths to wherever the clips live is what scripts are for.
    ctx = context_for(cfg.train.train_policy, ds.vision.as_part_defaults(), media_roots=roots, allow_outside_root=True)
    yield from map_rows(_iterate(rows, where), where, ctx)


@register_source("script")
def script_source(ds: DatasetConfig, train_policy: TrainPolicyConfig, split_role: str, custom: dict) -> Iterator[dict]:
    """The registry's entry: `dataset.name` is the script. `load_samples(cfg, role, script=...)`
    calls `script_samples` with the whole job config instead."""
    cfg = Config(train=TrainConfig(train_policy=train_policy), custom=custom)
    yield from script_samples(ds.name, cfg, split_role)
