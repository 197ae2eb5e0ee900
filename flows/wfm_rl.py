"""The `wfm_rl` flow: world-model RL (Flow-GRPO / DDRL) of a Cosmos-Predict DiT, from a world-model job TOML.

    cosmos-train wfm-rl --config configs/tiny-wfm-flow-grpo.toml --set trainer.max_iter=4
    prefect deployment run 'wfm_rl/wfm-rl' --param params='{"config": "configs/tiny-wfm-ddrl.toml"}'

Steps: resolve-config (RUN/config.toml) -> check-data (every dataset row, or the mock prompts) -> the reward
service (started for the run with reward.local_service and restarted when it dies, or reached through WFM_REWARD_*;
one that stays down stops the run saved, exit 75) -> torchrun of
cosmos_train.wfm.trainer (checkpoints/, metrics.jsonl, samples/, diffusers/final; a retry resumes from the run
folder's newest checkpoint) -> artifacts: `wfm-summary` (reward and held-out diffusion loss before / after, the
export), `training-curves` (reward, held-out loss, data loss, KL, clip fraction, grad norm, lr; refreshed during
training), `training-metrics` (per-iteration table), `wfm-samples` (a grid of evaluation videos before and after
training: same prompts, same noise), `run-health` (the states in which RL cannot learn or lost what it learnt,
cosmos_train/train/run_health.py, thresholds [trainer.run_health]: groups without reward variance, flat reward and
evaluation, pinned clip fraction, late collapse; the summary has its line, RUN/result.json and the returned
result its "health", the CLI's last lines its verdicts). With trainer.stop_when_stuck a run that cannot learn ends
early, saved (exit 3, not retried): its artifacts are published, then the flow fails with its paragraph.
"""

from __future__ import annotations

import json

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from pydantic import BaseModel, Field

from cosmos_train.curves import curves_markdown
from cosmos_train.errors import RunStuck
from cosmos_train.train.run_health import assess_run
from cosmos_train.wfm.report import run_summary, sample_grid, summary_markdown
from tasks.curves import publish_curves
from tasks.errors import user_errors_reported
from tasks.wfm_job import check_wfm_data, resolve_wfm_config, train_wfm


class WfmRLParams(BaseModel):
    """What a user passes from the UI, a schedule or `prefect deployment run`."""

    config: str = Field(..., description="Path of the world-model job TOML (configs/wfm/*.toml layout).")
    overrides: list[str] = Field(default_factory=list, description="key.path=value overrides, applied last.")
    run_dir: str | None = Field(None, description="Continue in this existing run folder instead of a new one.")
    train_retries: int = Field(1, ge=0, description="Relaunches of a failed training job (each resumes).")
    timeout_s: float | None = Field(None, description="Stop training after this many seconds.")


@flow(name="wfm_rl", log_prints=True)
def wfm_rl(params: WfmRLParams) -> dict:
    with user_errors_reported("World-model RL"):
        return _wfm_rl(params)


def _wfm_rl(params: WfmRLParams) -> dict:
    logger = get_run_logger()
    job = resolve_wfm_config(params.config, params.overrides, params.run_dir)  # the one read of the job TOML
    cfg, run = job.cfg, job.run
    logger.info("run folder: %s", run)
    data = check_wfm_data(job)
    logger.info("data: %s", data.get("summary") or data)
    stuck: RunStuck | None = None
    try:
        train_wfm(job, params.train_retries, params.timeout_s)  # the reward service around it, restarted when it dies
    except RunStuck as e:  # trainer.stop_when_stuck ended it, saved as at a normal end: report, then fail with it
        stuck = e
    result = json.loads((run / "result.json").read_text())
    summary = run_summary(run)
    # as the trainer judged it (result.json's "health"): a ratio that only moves after the first pass
    health = assess_run(run, cfg.trainer.run_health, ratio_moves=cfg.model.rl.mu_iterations > 1, world_model=True)
    create_markdown_artifact(
        health.markdown(run.name),
        key="run-health",
        description=f"world-model RL {run.name}: "
        + ("healthy" if health.healthy else f"{len(health.verdicts)} verdict(s)"),
    )
    create_markdown_artifact(
        summary_markdown(summary, run) + health.line() + "\n",
        key="wfm-summary",
        description=f"world-model RL {run.name}",
    )
    publish_curves(run, "wfm_rl")
    grid = sample_grid(run)
    if grid is not None:
        create_markdown_artifact(
            curves_markdown(grid, f"Samples before / after training: {run.name}"),
            key="wfm-samples",
            description=f"world-model RL {run.name}: samples",
        )
    if stuck is not None:
        raise stuck
    if cfg.no_effect:
        result["no_effect"] = [n.line() for n in cfg.no_effect]
    result.setdefault("health", health.to_dict())  # the trainer's own (the same rows and thresholds)
    logger.info("world-model RL done: %s; %s", result.get("final"), health.line().removeprefix("- "))
    return {"run_dir": str(run), "data": data, "summary": summary, **result}
