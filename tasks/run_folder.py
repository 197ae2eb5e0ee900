"""Create the run folder `<output_dir>/<timestamp>/` (a multi-node job: `<output_dir>/<rdzv_id>/`) and write
the resolved config into it."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from cosmos_train.config import Config, load_config
from cosmos_train.wfm.config import WfmConfig


def new_run_dir(cfg: Config | WfmConfig) -> Path:
    """A new timestamped folder under output_dir; for a multi-node job, <output_dir>/<rdzv_id>, the one folder
    every node's flow run agrees on without talking to the others (on storage they share)."""
    root = Path(cfg.run_root).expanduser().resolve()
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


@task(name="resolve-config", cache_policy=NO_CACHE)
def resolve_config(config: str, overrides: list[str], run_dir: str | None = None) -> tuple[Config, str]:
    """Validate the job config (every error at once) and write it as RUN/config.toml."""
    cfg = load_config(config, overrides)
    run = Path(run_dir) if run_dir else new_run_dir(cfg)
    if run_dir and (run / "config.toml").exists():
        asked = cfg.no_effect  # the keys the job's file set that have no effect (config.toml keeps them as comments)
        cfg = load_config(run / "config.toml", overrides, env={})  # continuing an existing run folder
        cfg.no_effect[:] = asked + [n for n in cfg.no_effect if n not in asked]
    cfg.write(run / "config.toml")
    return cfg, str(run)
