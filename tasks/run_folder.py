"""A job's run folder and its resolved config: created and written once per flow run, then handed down.

    cfg = check_job(params.config, params.overrides, ...)          # the flow's one read of the user's TOML
    job = prepare_run_folder(cfg, params.config, params.overrides, params.run_dir, params.dataset_script)
    job.run, job.config_file, job.cfg                             # what every later task gets

The run folder is `<output_dir>/<timestamp>/` (a multi-node job: `<output_dir>/<rdzv_id>/`); its config.toml
is the resolved config (the user's file, COSMOS_TRAIN__* variables and overrides applied), the one file data
preparation's report, the trainer's ranks and a retry read. No later stage applies the overrides again.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Generic, TypeVar

from prefect import task
from prefect.cache_policies import NO_CACHE

from cosmos_train.config import Config, load_config
from cosmos_train.errors import path_errors
from cosmos_train.wfm.config_schema import WfmConfig

CONFIG_FILE = "config.toml"

JobConfig = TypeVar("JobConfig", Config, WfmConfig)


@dataclass(frozen=True)
class ResolvedJob(Generic[JobConfig]):
    """A job's resolved config and its run folder, as the flow's first step made them."""

    cfg: JobConfig
    run: Path  # the run folder
    dataset_script: str | None = None  # absolute, as the trainer's command line gets it

    @property
    def config_file(self) -> Path:
        """RUN/config.toml: the resolved config every later stage and rank reads."""
        return self.run / CONFIG_FILE


def output_key(cfg: Config | WfmConfig) -> str:
    """The config key of the folder run folders are made in, for messages."""
    return "job.output_dir" if isinstance(cfg, WfmConfig) else "train.output_dir"


def folder_errors(cfg: Config | WfmConfig, run_dir: str | None) -> AbstractContextManager[None]:
    """A file where a folder is needed, no permission, a read-only disk ... while the run folder is made or
    written: the user's paragraph naming the key (or --run-dir) and the path, never retried as a crash."""
    return path_errors("--run-dir" if run_dir else output_key(cfg))


def new_run_dir(cfg: Config | WfmConfig) -> Path:
    """A new timestamped folder under output_dir; for a multi-node job, <output_dir>/<rdzv_id>, the one folder
    every node's flow run agrees on without talking to the others (on storage they share)."""
    root = Path(cfg.run_root).expanduser().resolve()
    with folder_errors(cfg, None):
        if cfg.launch.nnodes > 1 and cfg.launch.rdzv_id:
            run = root / cfg.launch.rdzv_id
            run.mkdir(parents=True, exist_ok=True)
            return run
        stamp = datetime.now().strftime("%Y%m%d%H%M%S")
        run = root / stamp
        n = 1
        while run.exists():  # two runs in the same second get distinct folders
            run = root / f"{stamp}-{n}"
            n += 1
        run.mkdir(parents=True)
        return run


def is_own_config(config: str | Path, run: Path) -> bool:
    """`config` is the run folder's own resolved config.toml (a caller that resolved the job already, such as
    the post-train pipeline, passes that file): nothing is left to resolve or to write."""
    return Path(config).expanduser().resolve() == (run / CONFIG_FILE).resolve()


def absolute_script(dataset_script: str | None) -> str | None:
    return str(Path(dataset_script).expanduser().resolve()) if dataset_script else None


@task(name="resolve-config", cache_policy=NO_CACHE)
def prepare_run_folder(
    cfg: Config, config: str, overrides: list[str], run_dir: str | None = None, dataset_script: str | None = None
) -> ResolvedJob[Config]:
    """Write `cfg` (the job config the flow loaded from `config` + `overrides`) as RUN/config.toml, once.

    Continuing a run folder that has its own config.toml: that file with the same overrides (the run keeps the
    settings it started with; COSMOS_TRAIN__* variables are not applied again), the keys with no effect that
    `config` set kept beside its own. Where `config` is that very file and no override changes it, it is the
    resolved config already and stays as it is."""
    run = Path(run_dir) if run_dir else new_run_dir(cfg)
    if run_dir and (run / CONFIG_FILE).exists():
        if is_own_config(config, run) and not overrides:
            return ResolvedJob(cfg, run, absolute_script(dataset_script))  # written by whoever resolved it
        asked = cfg.no_effect  # the keys the job's file set that have no effect (config.toml keeps them as comments)
        cfg = load_config(run / CONFIG_FILE, overrides, env={})  # continuing an existing run folder
        cfg.no_effect[:] = asked + [n for n in cfg.no_effect if n not in asked]
    with folder_errors(cfg, run_dir):
        cfg.write(run / CONFIG_FILE)
    return ResolvedJob(cfg, run, absolute_script(dataset_script))
