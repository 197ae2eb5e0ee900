"""Prefect task `evaluate-model`: evaluate one checkpoint on the config's benchmarks.

Wraps `cosmos_train.evaluation.runner.evaluate_model` (the library does everything; this file
only wires and logs). Takes the evaluation config the flow loaded once (each model's task works on its own
copy) and the checkpoint path, returns `EvalResult.to_dict()` (result paths plus accuracy dicts), never a
model. The flow sets how many retries; with `evaluation.skip_saved` a retry resumes where the failed attempt
stopped.
"""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from cosmos_train.evaluation.config import EvalConfig
from cosmos_train.evaluation.runner import evaluate_model
from tasks.errors import retry_only_crashes


@task(
    name="evaluate-model",
    cache_policy=NO_CACHE,
    task_run_name="evaluate-{label}",
    retry_condition_fn=retry_only_crashes,
)
def evaluate_model_task(config: EvalConfig, model: str | None, label: str) -> dict[str, Any]:
    """Evaluate `model` (default: the config's model.model_name) under results folder `label`."""
    logger = get_run_logger()
    cfg = config.model_copy(deep=True)  # the label is this model's; the flow's config serves every model
    cfg.model.name = label
    result = evaluate_model(cfg, model, log=logger.info)
    logger.info(
        "%s: micro %.3f, macro %.3f -> %s",
        label,
        result.scores.micro.accuracy,
        result.scores.macro.accuracy,
        result.results_json,
    )
    return result.to_dict()
