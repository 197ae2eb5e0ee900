"""One training run of the `sft` and `grpo` flows: their parameters, the job resolved once, the trainer's run.

    job = resolve_training_job(params, "grpo")      # the flow's one read of the job TOML -> RUN/config.toml
    result = run_trainer(job, "grpo", retries=params.train_retries, timeout_s=params.timeout_s)

check_job (the user's TOML + overrides, read and validated once) -> run folder (resolve-config writes
RUN/config.toml) -> prepare-data (manifest.jsonl, from the config object already loaded) -> torchrun of the
trainer module, whose ranks read RUN/config.toml (once each), relaunched up to `train_retries` times after a
crash; each retry passes --resume-own-run, so it continues from the run folder's newest checkpoint ->
RUN/result.json. A GRPO run with `remote_reward.local_service` gets its own reward service around the training,
restarted when it dies (tasks/reward_service.py); `train.ckpt.upload_s3` / `upload_hf` send checkpoints and
exports during and after it (tasks/upload.py), recorded in the result's "uploads" (a failed upload never fails
the run). Each flow then builds its own report from the run folder.

A multi-node job (launch.nnodes > 1) run from a deployment: `resolve_training_job` adds this run's node to the job
(tasks/node_runs.py `job_overrides`), and the flows wrap the training in `other_nodes`, which makes node 0 of a
process-pool deployment run start and await the other nodes' runs:

    job = resolve_training_job(params, "sft")
    with other_nodes(params, job):                  # tasks/node_runs.py
        result = run_trainer(job, "sft", ...)
"""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Callable
from typing import Any, Literal

from prefect import get_run_logger
from prefect.context import FlowRunContext
from pydantic import BaseModel, Field

from cosmos_train.config import Config, GRPOPolicyConfig
from cosmos_train.config.paths import is_s3
from cosmos_train.preflight import check_job
from tasks.errors import retry_only_crashes
from tasks.node_runs import job_overrides, own_deployment_id
from tasks.prepare_data import prepare_data_task
from tasks.reward_service import local_reward_service, remote_reward_env, wants_local_service
from tasks.run_folder import ResolvedJob, prepare_run_folder
from tasks.torchrun import run_torchrun
from tasks.upload import run_uploads, trainer_s3_env

PolicyType = Literal["sft", "grpo"]


class TrainJobParams(BaseModel):
    """What a user passes from the UI, a schedule or `prefect deployment run`."""

    config: str = Field(..., description="Path of the job TOML.")
    overrides: list[str] = Field(default_factory=list, description="key.path=value overrides, applied last.")
    dataset_script: str | None = Field(None, description="Optional dataset script (see examples/).")
    run_dir: str | None = Field(None, description="Continue in this existing run folder instead of a new one.")
    train_retries: int = Field(1, ge=0, description="Relaunches of a failed training job (each resumes).")
    timeout_s: float | None = Field(None, description="Stop training after this many seconds.")
    node_rank: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Multi-node job run from a deployment: this flow run is that node of the job (launch.node_rank, "
        "< launch.nnodes). Set by node 0 on the runs it starts (and by a Kubernetes Indexed-Job pod on its own run); "
        "leave it unset: the run is then node 0 and starts the others, unless its machine's environment names its "
        "node (COSMOS_TRAIN__LAUNCH__NODE_RANK: its infrastructure started every node).",
    )
    nodes_wait_s: float = Field(
        600.0,
        ge=0,
        le=86400,
        description="Node 0 of a multi-node deployment run: how long it waits, once its own training ended, for the "
        "other nodes' flow runs to end before it fails naming those still running.",
    )


def resolve_training_job(params: TrainJobParams, policy_type: PolicyType) -> ResolvedJob[Config]:
    """The job config read, validated and written into its run folder, once; call it inside a flow."""
    ctx = FlowRunContext.get()
    assert ctx is not None and ctx.flow_run is not None, "resolve_training_job runs inside a flow"
    overrides = job_overrides(params, own_deployment_id(), ctx.flow_run.id, socket.gethostname())
    # Input errors before any data is read or process started (the CLI ran this too; a deployment did not).
    cfg = check_job(
        params.config, overrides, params.dataset_script, params.run_dir, read_rows=False, policy_type=policy_type
    )
    job = prepare_run_folder(cfg, params.config, overrides, params.run_dir, params.dataset_script)
    logger = get_run_logger()
    launch = cfg.launch
    if launch.nnodes > 1:
        logger.info(
            "node %d of %d on %s (rendezvous %s, id %s)",
            launch.node_rank,
            launch.nnodes,
            socket.gethostname(),
            launch.rdzv_endpoint,
            launch.rdzv_id,
        )
    logger.info("run folder: %s", job.run)
    return job


def run_trainer(
    job: ResolvedJob[Config], policy_type: PolicyType, retries: int = 1, timeout_s: float | None = None
) -> dict[str, Any]:
    """Prepare the data and train with cosmos_train.train.<policy_type> in the job's run folder.

    Returns its result.json (with the keys that had no effect and the uploads). Call it inside a flow: it uses
    the run logger and tasks."""
    logger = get_run_logger()
    cfg, run = job.cfg, job.run
    prep = prepare_data_task(job)
    logger.info("data prepared: %s", prep)
    args = ["--config", str(job.config_file), "--resume-own-run"]
    if job.dataset_script:
        args += ["--dataset-script", job.dataset_script]
    retry_if: Callable[[Any, Any, Any], bool] = retry_only_crashes
    with contextlib.ExitStack() as services:
        env = remote_reward_env(cfg)  # a token kept in a Prefect Secret block
        tp = cfg.train.train_policy
        # a service for this run: up for every attempt (restarted when it dies), stopped after the last
        if isinstance(tp, GRPOPolicyConfig) and wants_local_service(cfg):
            service = services.enter_context(local_reward_service(run, tp.remote_reward.token_env, logger))
            env = service.env
            retry_if = service.up_before(retry_only_crashes)  # a relaunch waits for a restart under way
            logger.info("reward service for this run: %s", env["REMOTE_REWARD_ENQUEUE_URL"])
        train = run_torchrun.with_options(retries=retries, retry_delay_seconds=2, retry_condition_fn=retry_if)
        if is_s3(cfg.train.output_dir):  # the ranks mirror the run to the bucket with the Secret block's keys
            env = {**env, **trainer_s3_env(cfg.train.ckpt)}
        uploads = services.enter_context(run_uploads(cfg, run))  # upload_s3 = "all": meanwhile, in a thread
        # a failed or cancelled run stops the background uploads (run_uploads' exit) and reports its error;
        # what went up stays
        train(
            cfg,
            f"cosmos_train.train.{policy_type}",
            str(run),
            args,
            total_steps=cfg.train.max_num_steps,
            timeout_s=timeout_s,
            env=env,
        )
        records = uploads.finish()
    result = json.loads((run / "result.json").read_text())
    if cfg.no_effect:  # the config's keys that had no effect here, for the summary
        result["no_effect"] = [n.line() for n in cfg.no_effect]
    if records:  # beside the trainer's own (an s3:// output_dir: the run folder's mirror)
        result["uploads"] = [*(result.get("uploads") or []), *records]
    return result
