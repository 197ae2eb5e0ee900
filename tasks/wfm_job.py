"""The world-model RL job's tasks: its run folder, its data check, its reward service, and the trainer launch.

job = resolve_wfm_config("configs/tiny-wfm-flow-grpo.toml", [])   # the one read of the TOML -> RUN/config.toml
report = check_wfm_data(job)                                        # the config object, not the file again
train_wfm(job, retries=1, timeout_s=None)                           # torchrun of the trainer, the reward service around

The run's own reward service (reward.local_service) is the GRPO flow's, supervised (tasks/reward_service.py): when it
dies it is started again on the same port with the same token and state, and a relaunch of the training waits for
it; the ranks find it through WFM_REWARD_*. A service that stays down (an external one, or the run's own left down)
stops the ranks saved once their retries ([reward] max_retries, backoff_s) run out: exit 75, not retried.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from cosmos_train.data.shards import shard_urls
from cosmos_train.rewards.remote import WFM_ENV
from cosmos_train.storage.s3 import s3_client, s3_settings
from cosmos_train.wfm.config import load_wfm_config
from cosmos_train.wfm.config_schema import WfmConfig
from cosmos_train.wfm.mock_data import MOCK_ROWS
from tasks.errors import retry_only_crashes
from tasks.reward_service import WFM_CLIENT, local_reward_service
from tasks.run_folder import CONFIG_FILE, ResolvedJob, folder_errors, is_own_config, new_run_dir
from tasks.torchrun import run_torchrun


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
    if (mock := cfg.dataloader_train.mock_video) is not None:  # cosmos-rl's mock video dataset: no file to check
        return {"type": "cosmos-rl mock video", "rows": MOCK_ROWS, **vars(mock)}
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


@dataclass(frozen=True)
class WfmReward:
    """How the ranks reach their reward: `env` (WFM_REWARD_*), and the retry condition of their torchrun task (with
    the run's own service, it first waits for a restart under way)."""

    env: dict[str, str]
    retry_if: Callable[[Any, Any, Any], bool] = retry_only_crashes


@contextlib.contextmanager
def wfm_reward(cfg: WfmConfig, run_dir: Path, logger: Any = None) -> Iterator[WfmReward]:
    """A supervised service started for the run (reward.local_service; state and scratch under
    RUN/.reward_service, log RUN/logs/reward_service.log), or the WFM_REWARD_* variables of this process passed on;
    nothing for local rewards."""
    rc = cfg.reward
    if rc.backend != "service":
        yield WfmReward({})
        return
    if not rc.local_service:
        yield WfmReward({k: os.environ[k] for k in WFM_ENV if k in os.environ})
        return
    token_env = WFM_ENV[0]
    with local_reward_service(run_dir, token_env, logger, WFM_CLIENT) as service:
        yield WfmReward(service.env, service.up_before(retry_only_crashes))


@contextlib.contextmanager
def wfm_reward_env(cfg: WfmConfig, run_dir: Path) -> Iterator[dict[str, str]]:
    """`wfm_reward`'s environment alone (an evaluation's tasks)."""
    with wfm_reward(cfg, run_dir) as reward:
        yield reward.env


def train_wfm(job: ResolvedJob[WfmConfig], retries: int = 1, timeout_s: float | None = None) -> None:
    """torchrun of cosmos_train.wfm.trainer in the job's run folder with its reward (`wfm_reward`), relaunched up to
    `retries` times after a crash (each resumes from the run folder's newest checkpoint). Call it inside a flow."""
    logger = get_run_logger()
    with wfm_reward(job.cfg, job.run, logger) as reward:
        if url := reward.env.get(WFM_CLIENT.enqueue_url):
            logger.info("reward service: %s", url)
        train = run_torchrun.with_options(retries=retries, retry_delay_seconds=2, retry_condition_fn=reward.retry_if)
        train(
            job.cfg,
            "cosmos_train.wfm.trainer",
            str(job.run),
            ["--config", str(job.config_file), "--resume-own-run"],
            total_steps=job.cfg.trainer.max_iter,
            timeout_s=timeout_s,
            env=reward.env,
        )
