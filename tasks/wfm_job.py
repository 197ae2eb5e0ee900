"""The world-model RL job's tasks: its run folder, its data check, its reward service, and the trainer launch.

job = resolve_wfm_config("configs/tiny-wfm-flow-grpo.toml", [])   # the one read of the TOML -> RUN/config.toml
report = check_wfm_data(job)                                        # the config object, not the file again
with wfm_reward_env(job.cfg, job.run) as env:                       # WFM_REWARD_* when the reward is a service
    run_torchrun(job.cfg, "cosmos_train.wfm.trainer", str(job.run), ["--config", str(job.config_file)], env=env)
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from cosmos_train.data.shards import shard_urls
from cosmos_train.storage import s3_client, s3_settings
from cosmos_train.wfm.config import WfmConfig, load_wfm_config
from tasks.reward_service import reward_service
from tasks.run_folder import CONFIG_FILE, ResolvedJob, folder_errors, is_own_config, new_run_dir


@task(name="resolve-config", cache_policy=NO_CACHE)
def resolve_wfm_config(config: str, overrides: list[str], run_dir: str | None = None) -> ResolvedJob[WfmConfig]:
    """Read and validate the world-model job config once and write it as RUN/config.toml (an existing run folder
    keeps its own, with the same overrides; where `config` is that very file and no override changes it, it
    stays as it is)."""
    cfg = load_wfm_config(config, overrides)
    run = Path(run_dir) if run_dir else new_run_dir(cfg)
    if run_dir and (run / CONFIG_FILE).exists():
        if is_own_config(config, run) and not overrides:
            return ResolvedJob(cfg, run)
        cfg = load_wfm_config(run / CONFIG_FILE, overrides, env={})
    with folder_errors(cfg, run_dir):
        cfg.write(run / CONFIG_FILE)
    return ResolvedJob(cfg, run)


@task(name="check-data", cache_policy=NO_CACHE)
def check_wfm_data(job: ResolvedJob[WfmConfig]) -> dict[str, Any]:
    """Every row of a local dataset checked before any process starts (bad rows named, or counted and skipped as
    on_bad_row says); mock prompts need no check."""
    # why here: the world-model data module loads torch; importing a flow (prefect deploy, --help) must not wait
    from cosmos_train.wfm.data import SCAN_FILE, save_scan, scan_dataset

    cfg = job.cfg
    if cfg.dataloader_train.type == "web":  # the shards are listed (URL, credentials) before any process starts
        urls = shard_urls(cfg.video.dataset_dir, s3_client(s3_settings(os.environ)))
        return {"type": "web", "dataset": cfg.video.dataset_dir, "shards": len(urls)}
    if cfg.dataloader_train.type != "local":
        return {"type": cfg.dataloader_train.type, "rows": cfg.video.mock_prompts}
    settings = cfg.video.scan_settings
    samples, report = scan_dataset(**settings)
    save_scan(job.run / SCAN_FILE, settings, samples, report)  # the ranks reuse it
    return {
        "type": "local",
        "rows": len(samples),
        "skipped": report.n_skipped,
        "skipped_by_reason": report.by_reason,
        "problems": report.problems,
        "summary": report.summary(),
    }


@contextlib.contextmanager
def wfm_reward_env(cfg: WfmConfig, run_dir: Path) -> Iterator[dict[str, str]]:
    """The ranks' reward-service environment: a service started for the run (reward.local_service), or the
    WFM_REWARD_* variables of this process passed on; nothing for local rewards."""
    rc = cfg.reward
    if rc.backend != "service":
        yield {}
        return
    if not rc.local_service:
        yield {
            k: os.environ[k]
            for k in ("WFM_REWARD_TOKEN", "WFM_REWARD_ENQUEUE_URL", "WFM_REWARD_FETCH_URL")
            if k in os.environ
        }
        return
    with reward_service(run_dir / "logs" / "reward_service.log") as (_, base, token):
        yield {
            "WFM_REWARD_ENQUEUE_URL": f"{base}/enqueue",
            "WFM_REWARD_FETCH_URL": f"{base}/pull",
            "WFM_REWARD_TOKEN": token,
        }
