"""The `evaluate-wfm` flow: world models (the base, RL exports) compared on held-out prompts with the same noise.

    cosmos-train eval-wfm --config configs/tiny-wfm-flow-grpo.toml --model outputs/tiny-wfm --model RUN/diffusers/final
    prefect deployment run 'evaluate-wfm/evaluate-wfm' --param params='{"config": "configs/tiny-wfm-ddrl.toml",
        "models": ["outputs/tiny-wfm", "RUN/diffusers/final"]}'      # one JSON value, broken here only to fit the page

The world-model job config says what is evaluated: its held-out rows (or mock prompts past the training ones), its
evaluation sampler, its [reward] (local handlers, or the reward service through WFM_REWARD_*). One task per model
(one after the other: they share the accelerator; a reward service with reward.local_service is started for the
evaluation as the wfm_rl flow starts one for training), then OUT/results.json and OUT/grid.png, a table artifact with
each reward part and the total with 95% t intervals, each model's paired gain over the first, the held-out diffusion
loss and the collapse flags side by side (`wfm-eval-comparison`), and the sample grid, prompt x model
(`wfm-eval-samples`). Returns {"results": [per model], "table": rows, "out": OUT, "grid": PNG or None}.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from pydantic import BaseModel, Field, model_validator

from cosmos_train.config.paths import is_s3
from cosmos_train.curves import curves_markdown
from cosmos_train.errors import ConfigError, not_a_folder
from cosmos_train.wfm.config import load_wfm_config
from cosmos_train.wfm.eval_report import comparison_rows, format_table, sample_grid
from cosmos_train.wfm.evaluate import check_models, eval_plan, fetch_models, model_labels, write_comparison
from tasks.errors import user_errors_reported
from tasks.evaluate_wfm import evaluate_wfm_model_task
from tasks.wfm_job import wfm_reward_env


class EvaluateWfmParams(BaseModel):
    """Parameters, validated locally and by the server (a bad deployment run is refused up front)."""

    config: str = Field(..., description="The world-model job TOML (its data, sampler and [reward]).")
    models: list[str] = Field(
        default_factory=list,
        description="Diffusers folders, Hub ids or s3:// exports to compare, the first the baseline (e.g. the base "
        "model, then RUN/diffusers/final); default: the config's model.",
    )
    labels: list[str] | None = Field(None, description="Results-folder name per model (default: from the paths).")
    overrides: list[str] = Field(default_factory=list, description="key.path=value overrides, applied last.")
    prompts: int | None = Field(
        None, ge=1, le=4096, description="Held-out prompts to sample (default: evaluation.num_prompts)."
    )
    seed: int | None = Field(None, ge=0, description="Seed of the per-prompt noise (default: evaluation.seed).")
    out: str | None = Field(None, description="Results folder (default: <job.output_dir>/eval-wfm/<timestamp>).")
    eval_retries: int = Field(1, ge=0, le=100, description="Reruns of a model's evaluation after a crash.")

    @model_validator(mode="after")
    def _labels_match(self) -> EvaluateWfmParams:
        n_models = len(self.models) or 1
        if self.labels is not None and len(self.labels) != n_models:
            raise ValueError(f"labels: {len(self.labels)} given for {n_models} model(s)")
        if self.labels is not None and len(set(self.labels)) != len(self.labels):
            raise ValueError(f"labels must be distinct, got {self.labels}")
        return self


def checked_params(
    config: str | Path,
    overrides: list[str],
    models: list[str],
    prompts: int | None = None,
    seed: int | None = None,
    out: str | Path | None = None,
) -> EvaluateWfmParams:
    """`cosmos-train eval-wfm`'s arguments as the flow's parameters, every input checked first (the flags, the
    config, the model folders): a mistake is named before Prefect starts."""
    bad = []
    if prompts is not None and not 1 <= prompts <= 4096:
        bad.append(f"--prompts {prompts}: give between 1 and 4096 prompts")
    if seed is not None and seed < 0:
        bad.append(f"--seed {seed}: give a seed of 0 or more")
    if bad:
        raise ConfigError(bad, what="eval-wfm arguments")
    cfg = load_wfm_config(config, overrides)
    check_models(models, text_encoder=not cfg.video.offline_text_embedding)
    out = str(out) if out else None
    return EvaluateWfmParams(
        config=str(config), models=models, overrides=overrides, prompts=prompts, seed=seed, out=out
    )


def table_text(result: dict[str, Any]) -> str:
    """What the CLI prints: the comparison table, then the results folder."""
    return f"{format_table(result['table'])}\n{result['out']}"


@flow(name="evaluate-wfm", log_prints=True)
def evaluate_wfm(params: EvaluateWfmParams) -> dict[str, Any]:
    """Evaluate each world model, then publish the comparison table and the sample grid."""
    with user_errors_reported("world-model evaluation"):
        return _evaluate_wfm(params)


def _evaluate_wfm(params: EvaluateWfmParams) -> dict[str, Any]:
    logger = get_run_logger()
    cfg = load_wfm_config(params.config, params.overrides)  # the one read of the config; every task gets it
    models = list(params.models) or [cfg.model.model_name_or_path]
    labels = params.labels or model_labels(models)
    local = fetch_models(models, os.environ)  # an s3:// export (a run on S3) downloaded to its local copy
    for url, path in zip(models, local):
        if url != path:
            logger.info("%s: fetched to %s", url, path)
    models = local
    check_models(models, text_encoder=not cfg.video.offline_text_embedding)  # before any model loads
    root = "outputs" if is_s3(cfg.job.output_dir) else cfg.job.output_dir  # results stay on this machine
    out = Path(params.out or Path(root) / "eval-wfm" / datetime.now().strftime("%Y%m%d%H%M%S"))
    if blocked := not_a_folder("--out", out, subject=f"--out {str(out)!r}"):
        raise ConfigError([blocked], params.config)
    plan = eval_plan(cfg, params.prompts, params.seed)
    logger.info("%d prompts: %s; %d held-out clips; seed %d", len(plan.rows), plan.source, len(plan.heldout), plan.seed)
    run_one = evaluate_wfm_model_task.with_options(retries=params.eval_retries, retry_delay_seconds=2)
    with wfm_reward_env(cfg, out) as env:  # the reward service: started for this evaluation, or WFM_REWARD_*
        if env.get("WFM_REWARD_ENQUEUE_URL"):
            logger.info("reward service: %s", env["WFM_REWARD_ENQUEUE_URL"])
        results = [run_one(plan, model, label, str(out), env) for model, label in zip(models, labels)]
    rows = comparison_rows(results)
    write_comparison(out, results, rows)
    create_table_artifact(
        key="wfm-eval-comparison",
        table=rows,
        description=f"World models on {len(plan.rows)} prompts ({plan.source}), seed {plan.seed}: mean "
        "[Student t 95% CI]; gain: paired over the same prompts and noise",
    )
    grid = sample_grid(results, out / "grid.png")
    if grid is not None:
        create_markdown_artifact(
            curves_markdown(grid, f"Samples, prompt x model (same noise per prompt): {', '.join(labels)}"),
            key="wfm-eval-samples",
            description="World-model evaluation: samples, prompt x model",
        )
    for r in results:
        logger.info("%s: %s", r["label"], r["result_json"])
    return {"results": results, "table": rows, "out": str(out), "grid": str(grid) if grid else None}
