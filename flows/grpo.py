"""The `grpo` flow: validate config and data, run the GRPO trainer under torchrun, report.

    cosmos-train grpo --config configs/tiny-grpo.toml --set train.max_num_steps=3
    prefect deployment run 'grpo/grpo' --param params='{"config": "configs/tiny-grpo.toml"}'
    prefect deployment run 'grpo/grpo-nodes' --param params='{"config": "configs/tiny-grpo.toml",
      "overrides": ["launch.nnodes=2"]}'   # a multi-node job: one run, a flow run per node

Steps (tasks/training_run.py, shared with `sft`; the job TOML is read once): resolve-config -> prepare-data
(manifest.jsonl) -> torchrun of cosmos_train.train.grpo (checkpoints/, metrics.jsonl, completions.jsonl,
safetensors/final and safetensors/best) -> artifacts: `grpo-summary` (markdown), `grpo-completions`
(table of the last sampled step's completions and rewards), `training-curves` (reward, accuracy, KL,
length, grad norm, lr, throughput; refreshed during training, also RUN/plots/curves.png),
`training-metrics` (per-step table), `grpo-export` (the export paths as text, and their uploads), `run-health`
(the states in which RL cannot learn, with their evidence and what to change, or "healthy" with the numbers
checked: cosmos_train/train/run_health.py, thresholds under [train.run_health]; the same verdicts are in
RUN/result.json's "health", in the returned result and in the CLI's last lines). A retry of the training task
resumes from the run folder's newest checkpoint instead of starting over; a run that train.stop_when_stuck ended
is not retried: its artifacts are published (not the generic `training-failure`: the verdicts say why), then the
flow fails with its paragraph. A multi-node job run from a
deployment (`grpo-nodes`) is one run: it is node 0 and starts the other nodes' runs itself (tasks/node_runs.py
`other_nodes`).
"""

from __future__ import annotations

import json

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from cosmos_train.errors import RunStuck
from cosmos_train.train.report import (
    completions_table,
    export_markdown,
    grpo_summary_markdown,
    read_run_report,
)
from cosmos_train.train.run_health import assess_run, ratio_moves_of
from tasks.curves import publish_curves
from tasks.errors import user_errors_reported
from tasks.node_runs import other_nodes
from tasks.training_run import TrainJobParams, resolve_training_job, run_trainer


class GRPOParams(TrainJobParams):
    """What a user passes from the UI, a schedule or `prefect deployment run`."""


@flow(name="grpo", log_prints=True)
def grpo(params: GRPOParams) -> dict:
    with user_errors_reported("GRPO"):
        return _grpo(params)


def _grpo(params: GRPOParams) -> dict:
    job = resolve_training_job(params, "grpo")  # the one read of the job TOML; later steps get `job`
    run = job.run
    stuck: RunStuck | None = None
    try:
        with other_nodes(params, job):  # node 0 of a multi-node deployment run: the other nodes' runs
            result = run_trainer(job, "grpo", retries=params.train_retries, timeout_s=params.timeout_s)
    except RunStuck as e:  # train.stop_when_stuck ended it, saved as at a normal end: report, then fail with it
        stuck, result = e, json.loads((run / "result.json").read_text())
    report = read_run_report(run)
    health = assess_run(run, job.cfg.train.run_health, ratio_moves_of(job.cfg.train.train_policy))
    create_markdown_artifact(
        health.markdown(run.name),
        key="run-health",
        description=f"GRPO {run.name}: " + ("healthy" if health.healthy else f"{len(health.verdicts)} verdict(s)"),
    )
    create_markdown_artifact(grpo_summary_markdown(report, health), key="grpo-summary", description=f"GRPO {run.name}")
    table = completions_table(report.completions)
    if table:
        create_table_artifact(
            table,
            key="grpo-completions",
            description=f"GRPO {run.name}: sampled completions of step {table[0]['step']}",
        )
    publish_curves(run, "grpo")  # the final version of the curves refreshed during training
    create_markdown_artifact(export_markdown(result), key="grpo-export", description=f"GRPO {run.name}: exports")
    if stuck is not None:
        raise stuck
    result.setdefault("health", health.to_dict())  # the trainer's own (the same rows and thresholds)
    line = health.line().removeprefix("- ")
    get_run_logger().info("GRPO done: %s (curves in %s); %s", result.get("final"), run / "plots", line)
    return {"run_dir": str(run), **result}
