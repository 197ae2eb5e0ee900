"""Prefect task `evaluate-wfm-model`: evaluate one world model (a diffusers folder) on the plan's held-out prompts.

Wraps `cosmos_train.wfm.evaluate.evaluate_wfm_model` (the library does everything; this file only wires and logs).
Takes the plan the flow built once (prompts, held-out clips, seed: the same for every model) and returns the
model's result dict (rewards with intervals, held-out diffusion loss, flags, where its samples are), never a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from cosmos_train.wfm.evaluate import EvalPlan, evaluate_wfm_model
from tasks.errors import retry_only_crashes


@task(
    name="evaluate-wfm-model",
    cache_policy=NO_CACHE,
    task_run_name="evaluate-wfm-{label}",
    retry_condition_fn=retry_only_crashes,
)
def evaluate_wfm_model_task(
    plan: EvalPlan, model: str, label: str, out_dir: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Sample, score and measure `model` under OUT/<label>/ (env: the reward service's WFM_REWARD_*)."""
    logger = get_run_logger()
    result = evaluate_wfm_model(plan, model, label, Path(out_dir), log=logger.info, env=env)
    loss = result["heldout_diffusion_loss"]
    logger.info(
        "%s: reward %.4f, held-out diffusion loss %s -> %s",
        label,
        result["reward_total"]["mean"],
        "-" if loss is None else f"{loss['mean']:.4f}",
        result["result_json"],
    )
    return result
