"""The `evaluate` flow: evaluate several checkpoints (base, SFT, RL ...) and compare them.

    cosmos-train eval --config configs/eval-tiny.toml --model outputs/tiny-model --model RUN/safetensors/final
    prefect deployment run 'evaluate/evaluate' --param params='{"config": "configs/eval-tiny.toml",
        "models": ["outputs/tiny-model"]}'                   # one JSON value, broken here only to fit the page

One task per model (run one after the other: they share the accelerator), then a table artifact
with every model's accuracy and Wilson 95% interval per dataset side by side (`eval-comparison`),
and a markdown artifact listing wrong answers (`eval-wrong-answers`). Returns
{"results": [EvalResult.to_dict() per model], "table": rows}.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from pydantic import BaseModel, Field, model_validator

from cosmos_train.checkpoint_paths import newest_export
from cosmos_train.errors import ModelError
from cosmos_train.evaluation.report import comparison_rows, unique_labels, wrong_answers_markdown
from cosmos_train.preflight import check_eval
from tasks.errors import user_errors_reported
from tasks.evaluate import evaluate_model_task


class EvaluateParams(BaseModel):
    """Parameters, validated locally and by the server (a bad deployment run is refused up front)."""

    config: str = Field(..., description="Evaluation config (.toml, or the reference tool's .yaml).")
    models: list[str] = Field(
        default_factory=list,
        description="Checkpoint folders or hub ids to compare, e.g. base, SFT and RL; default: the config's model.",
    )
    labels: list[str] | None = Field(None, description="Results-folder name per model (default: from the paths).")
    newest_export_in: str | None = Field(
        None,
        description="Also evaluate the newest <run>/safetensors/final found under this folder (e.g. the "
        "training output_dir; a nightly schedule scores the latest model this way).",
    )
    overrides: list[str] = Field(default_factory=list, description="key.path=value overrides, applied last.")
    eval_retries: int = Field(
        1,
        ge=0,
        description="Reruns of a model's evaluation after a crash (not after bad input); with "
        "evaluation.skip_saved a rerun resumes from the videos already written.",
    )

    @model_validator(mode="after")
    def _labels_match(self) -> EvaluateParams:
        n_models = len(self.models) + (self.newest_export_in is not None) or 1
        if self.labels is not None and len(self.labels) != n_models:
            raise ValueError(f"labels: {len(self.labels)} given for {n_models} model(s)")
        if self.labels is not None and len(set(self.labels)) != len(self.labels):
            raise ValueError(f"labels must be distinct, got {self.labels}")
        return self


@flow(name="evaluate", log_prints=True)
def evaluate(params: EvaluateParams) -> dict[str, Any]:
    """Evaluate each model, then publish the comparison table and the wrong answers."""
    with user_errors_reported("evaluation"):
        return _evaluate(params)


def _evaluate(params: EvaluateParams) -> dict[str, Any]:
    logger = get_run_logger()
    models = list(params.models)
    if params.newest_export_in:
        newest = newest_export(Path(params.newest_export_in))
        if newest is None:
            raise ModelError(
                f"newest_export_in: no <run>/safetensors/final export under {params.newest_export_in} "
                "(train a model there first, or point at the training output_dir)"
            )
        logger.info("newest export under %s: %s", params.newest_export_in, newest)
        models.append(str(newest))
    # fail before any model loads; the one read of the evaluation config, every model's task gets it
    cfg = check_eval(params.config, params.overrides, models)
    labels = params.labels or ([cfg.model_basename] if not models else unique_labels(models))
    models = models or [cfg.model.model_name]
    run_one = evaluate_model_task.with_options(retries=params.eval_retries, retry_delay_seconds=2)
    results = [run_one(cfg, model, label) for model, label in zip(models, labels)]
    rows = comparison_rows(results)
    create_table_artifact(
        key="eval-comparison",
        table=rows,
        description=f"Accuracy % [Wilson 95% CI] on {', '.join(cfg.datasets)} ({cfg.evaluation.answer_type} mode)",
    )
    create_markdown_artifact(
        key="eval-wrong-answers",
        markdown=wrong_answers_markdown(results),
        description="Wrong answers per model (first 20 each)",
    )
    for r in results:
        logger.info("%s: %s", r["label"], r["results_json"])
    return {"results": results, "table": rows}
