"""What the training flows (`sft`, `grpo`) share: their parameters and the run of one trainer.

    run, result = run_training_job(params, "grpo")   # inside a flow: trains cosmos_train.train.grpo

validate (check_job) -> run folder (resolve-config, RUN/config.toml) -> prepare-data (manifest.jsonl)
-> torchrun of the trainer module, relaunched up to `train_retries` times after a crash; each retry
passes --resume-own-run, so it continues from the run folder's newest checkpoint -> RUN/result.json.
A GRPO run with `remote_reward.local_service` gets its own reward service around the training
(tasks/reward_service.py); `train.ckpt.upload_s3` / `upload_hf` send checkpoints and exports during and
after it (tasks/upload.py), recorded in the result's "uploads" (a failed upload never fails the run).
Each flow then builds its own report from the run folder.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Literal

from prefect import get_run_logger
from pydantic import BaseModel, Field

from cosmos_train.preflight import check_job
from tasks.prepare_data import prepare_data_task
from tasks.reward_service import local_reward_service, remote_reward_env, wants_local_service
from tasks.run_folder import resolve_config
from tasks.torchrun import run_torchrun
from tasks.upload import run_uploads


class TrainJobParams(BaseModel):
    """What a user passes from the UI, a schedule or `prefect deployment run`."""

    config: str = Field(..., description="Path of the job TOML.")
    overrides: list[str] = Field(default_factory=list, description="key.path=value overrides, applied last.")
    dataset_script: str | None = Field(None, description="Optional dataset script (see examples/).")
    run_dir: str | None = Field(None, description="Continue in this existing run folder instead of a new one.")
    train_retries: int = Field(1, ge=0, description="Relaunches of a failed training job (each resumes).")
    timeout_s: float | None = Field(None, description="Stop training after this many seconds.")


def run_training_job(params: TrainJobParams, policy_type: Literal["sft", "grpo"]) -> tuple[Path, dict[str, Any]]:
    """Prepare the data and train with cosmos_train.train.<policy_type> in a run folder.

    Returns the run folder and its result.json. Call it inside a flow: it uses the run logger and tasks."""
    logger = get_run_logger()
    # Input errors before any data is read or process started (the CLI ran this too; a deployment did not).
    check_job(params.config, params.overrides, params.dataset_script, params.run_dir, read_rows=False,
              policy_type=policy_type)
    cfg, run_dir = resolve_config(params.config, params.overrides, params.run_dir)
    run = Path(run_dir)
    logger.info("run folder: %s", run)
    prep = prepare_data_task(config=str(run / "config.toml"), run_dir=run_dir, dataset_script=params.dataset_script)
    logger.info("data prepared: %s", prep)
    args = ["--config", str(run / "config.toml"), "--resume-own-run"]
    if params.dataset_script:
        args += ["--dataset-script", str(Path(params.dataset_script).resolve())]
    train = run_torchrun.with_options(retries=params.train_retries, retry_delay_seconds=2)
    with contextlib.ExitStack() as services:
        env = remote_reward_env(cfg)  # a token kept in a Prefect Secret block
        if wants_local_service(cfg):  # up for every attempt, stopped after the last
            env = services.enter_context(local_reward_service(run, cfg.train.train_policy.remote_reward.token_env))
            logger.info("reward service for this run: %s", env["REMOTE_REWARD_ENQUEUE_URL"])
        uploads = services.enter_context(run_uploads(cfg, run))  # upload_s3 = "all": meanwhile, in a thread
        # a failed or cancelled run stops the background uploads (run_uploads' exit) and reports its error;
        # what went up stays
        train(cfg, f"cosmos_train.train.{policy_type}", run_dir, args, total_steps=cfg.train.max_num_steps,
              timeout_s=params.timeout_s, env=env)
        records = uploads.finish()
    result = json.loads((run / "result.json").read_text())
    if cfg.no_effect:  # the config's keys that had no effect here, for the summary
        result["no_effect"] = [n.line() for n in cfg.no_effect]
    if records:
        result["uploads"] = records
    return run, result
