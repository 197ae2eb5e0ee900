"""A sweep planned against its job config: which flow, where it goes, each trial's settings, folder and key.

    plan = plan_sweep("configs/tiny-sft.toml", grid=["train.optm_lr=1e-5,3e-5"], parallel=2)
    plan.folder                 # <train.output_dir>/sweeps/tiny-sft: sweep.json, plots/, one folder per trial
    plan.trials[0].name         # "lr=1e-05"
    plan.trials[0].run_dir      # <folder>/lr=1e-05/<key[:12]>: the trial's run folder (config.toml written there)

Every spec is checked against the config before anything runs: each grid value and each range's ends are
applied alone (a bad key or value names its spec), then every trial's whole config is loaded. A trial's key
is a hash of its resolved config and the fingerprints of its model and dataset folders (pipeline.stage_key):
the same key finds the same run folder, so a rerun skips a finished trial and continues an unfinished one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cosmos_train.config import Config, is_world_model_recipe, load_config
from cosmos_train.errors import ConfigError
from cosmos_train.pipeline import stage_key
from cosmos_train.sweep.spec import (
    MAX_TRIALS,
    WHAT,
    Axis,
    expand,
    folder_name,
    overrides_of,
    parse_axes,
    toml_value,
    trial_name,
)
from cosmos_train.sweep.spec import labels as key_labels
from cosmos_train.wfm.config import load_wfm_config
from cosmos_train.wfm.config_schema import WfmConfig

Kind = Literal["sft", "grpo", "wfm-rl"]
Mode = Literal["max", "min"]
KINDS: tuple[Kind, ...] = ("sft", "grpo", "wfm-rl")
# the metric a sweep of each kind is judged by when --metric is not given (a key of report.trial_metrics)
DEFAULT_METRIC: dict[str, tuple[str, Mode]] = {
    "sft": ("val_loss", "min"),
    "grpo": ("val_accuracy", "max"),
    "wfm-rl": ("val_reward_mean", "max"),
}
JobConfig = Config | WfmConfig


@dataclass
class Trial:
    """One point of the search: its settings and where it runs."""

    name: str  # the flow run's name: "lr=1e-05,kl_beta=0"
    settings: dict[str, Any]  # config key -> value
    overrides: list[str]  # the sweep's --set overrides, the settings, the trial's output folder
    key: str  # hash of the resolved config and inputs
    run_dir: Path
    total_steps: int | None  # None: the trainer says (an epoch-based SFT run)
    cfg: JobConfig = field(repr=False)


@dataclass
class SweepPlan:
    config: str
    kind: Kind
    folder: Path
    axes: list[Axis]
    trials: list[Trial]
    metric: str
    mode: Mode
    labels: dict[str, str]  # config key -> its column name


def job_kind(config: str | Path, kind: str | None = None) -> Kind:
    """The flow a config's trials run under: --kind, else a world-model recipe's wfm-rl or the config's
    train.train_policy.type."""
    if kind is not None:
        if kind not in KINDS:
            raise ConfigError([f"--kind {kind!r}: use one of {', '.join(KINDS)}"], what=WHAT)
        return kind
    if is_world_model_recipe(config):
        return "wfm-rl"
    return load_config(config, check_paths=False).policy_type


def _load(kind: Kind, config: str, overrides: list[str], check_paths: bool = False) -> JobConfig:
    if kind == "wfm-rl":
        return load_wfm_config(config, overrides, check_paths=check_paths)
    return load_config(config, overrides, check_paths=check_paths)


def _output_key(kind: Kind) -> str:
    return "job.output_dir" if kind == "wfm-rl" else "train.output_dir"


def _local_inputs(cfg: JobConfig, dataset_script: str | None) -> list[str]:
    """The folders whose contents a trial's key covers: the model and the dataset where they are local."""
    paths: list[str | None] = [dataset_script]
    if isinstance(cfg, Config):
        paths += [cfg.policy.model_name_or_path, cfg.train.train_policy.dataset.name]
    return [p for p in paths if p and Path(p).expanduser().exists()]


def _axis_problems(kind: Kind, config: str, overrides: list[str], axes: list[Axis]) -> list[str]:
    """Each axis's values applied alone: a key the config has not, or a value out of bounds, names its spec."""
    problems: list[str] = []
    for axis in axes:
        for value in axis.examples():
            try:
                _load(kind, config, [*overrides, f"{axis.key}={toml_value(value)}"])
            except ConfigError as e:
                problems += [f"{axis.spec!r} (value {value!r}): {p}" for p in e.problems]
                break
    return problems


def resolve_metric(kind: Kind, metric: str | None, mode: str | None) -> tuple[str, Mode]:
    """--metric / --mode, or the kind's default; a metric's mode defaults to min for a loss, else max."""
    if metric is None:
        default, default_mode = DEFAULT_METRIC[kind]
        return default, (mode or default_mode)  # type: ignore[return-value]
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", metric):
        raise ConfigError(
            [f"--metric {metric!r}: a metric name such as val_accuracy, val_loss, val_reward_mean or loss"], what=WHAT
        )
    if mode is not None and mode not in ("max", "min"):
        raise ConfigError([f"--mode {mode!r}: use max or min"], what=WHAT)
    return metric, (mode or ("min" if "loss" in metric else "max"))  # type: ignore[return-value]


def plan_sweep(
    config: str | Path,
    overrides: Iterable[str] = (),
    grid: Iterable[str] = (),
    random: Iterable[str] = (),
    trials: int = 8,
    seed: int = 0,
    kind: str | None = None,
    name: str | None = None,
    output_dir: str | None = None,
    metric: str | None = None,
    mode: str | None = None,
    dataset_script: str | None = None,
) -> SweepPlan:
    """Parse the specs, check them against the config and lay out every trial. Raises ConfigError naming each
    bad spec (or the config's own problems, as loading it alone reports them)."""
    config, overrides = str(config), list(overrides)
    if not 1 <= trials <= MAX_TRIALS:
        raise ConfigError([f"--trials {trials}: draw between 1 and {MAX_TRIALS} random trials"], what=WHAT)
    axes = parse_axes(grid, random)
    the_kind = job_kind(config, kind)
    base = _load(the_kind, config, overrides, check_paths=True)  # the config's own problems, as itself
    if problems := _axis_problems(the_kind, config, overrides, axes):
        raise ConfigError(problems, config, what=WHAT)
    metric_name, the_mode = resolve_metric(the_kind, metric, mode)
    if name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._=,+-]*", name):
        raise ConfigError(
            [f"--name {name!r}: letters, digits and ._=,+- only (it names the sweep's folder)"], what=WHAT
        )
    root = Path(output_dir).expanduser() if output_dir else Path(base.run_root).expanduser() / "sweeps"
    folder = (root / (name or Path(config).stem)).resolve()
    out: list[Trial] = []
    problems = []
    for settings in expand(axes, trials, seed):
        tname = trial_name(settings)
        trial_folder = folder / folder_name(tname)
        trial_overrides = [
            *overrides,
            *overrides_of(settings),
            f"{_output_key(the_kind)}={toml_value(str(trial_folder))}",
        ]
        try:
            cfg = _load(the_kind, config, trial_overrides)
        except ConfigError as e:
            problems += [f"trial {tname}: {p}" for p in e.problems]
            continue
        key = stage_key(f"sweep-{the_kind}", cfg.model_dump(mode="json"), _local_inputs(cfg, dataset_script))
        total = cfg.trainer.max_iter if isinstance(cfg, WfmConfig) else cfg.train.max_num_steps
        out.append(Trial(tname, settings, trial_overrides, key, trial_folder / key[:12], total, cfg))
    if problems:
        raise ConfigError(problems, config, what=WHAT)
    if len({t.run_dir.parent for t in out}) != len(out):
        raise ConfigError([f"two trials share a folder name; sweep fewer keys or shorter values: {folder}"], what=WHAT)
    return SweepPlan(config, the_kind, folder, axes, out, metric_name, the_mode, key_labels(a.key for a in axes))
