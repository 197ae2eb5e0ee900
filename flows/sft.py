"""The `sft` flow: validate config and data, train under torchrun, report.

    cosmos-train sft --config configs/tiny-sft.toml --set train.epoch=2
    prefect deployment run 'sft/sft' --param params='{"config": "configs/tiny-sft.toml"}'
    prefect deployment run 'sft/sft-nodes' --param params='{"config": "configs/tiny-sft.toml",
      "overrides": ["launch.nnodes=2", "launch.nproc_per_node=1"]}'   # a multi-node job: one run, a flow run per node

Steps (tasks/training_run.py, shared with `grpo`; the job TOML is read once, then each step gets the resolved
job): resolve-config -> prepare-data (manifest.jsonl) -> torchrun (checkpoints/, safetensors/final) ->
artifacts: `sft-summary`, `training-curves` (loss, lr, grad norm, tokens/s; refreshed during training),
`training-metrics` (per-step table), `sft-export` (paths as text). A retry of the training task resumes from the run
folder's newest checkpoint instead of starting over. A multi-node job run from a deployment (`sft-nodes`) is one
run: it is node 0 and starts the other nodes' runs itself (tasks/node_runs.py `other_nodes`).
"""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from cosmos_train.metrics import read_metrics
from cosmos_train.train.report import export_markdown, sft_summary_markdown
from tasks.curves import publish_curves
from tasks.errors import user_errors_reported
from tasks.node_runs import other_nodes
from tasks.training_run import TrainJobParams, resolve_training_job, run_trainer


class SFTParams(TrainJobParams):
    """What a user passes from the UI, a schedule or `prefect deployment run`."""


@flow(name="sft", log_prints=True)
def sft(params: SFTParams) -> dict:
    with user_errors_reported("SFT"):
        return _sft(params)


def _sft(params: SFTParams) -> dict:
    job = resolve_training_job(params, "sft")  # the one read of the job TOML; later steps get `job`
    with other_nodes(params, job):  # node 0 of a multi-node deployment run: the other nodes' runs
        result = run_trainer(job, "sft", retries=params.train_retries, timeout_s=params.timeout_s)
    run = job.run
    create_markdown_artifact(
        sft_summary_markdown(run, result, read_metrics(run)), key="sft-summary", description=f"SFT {run.name}"
    )
    publish_curves(run, "sft")  # the final version of the curves refreshed during training
    create_markdown_artifact(export_markdown(result), key="sft-export", description=f"SFT {run.name}: exports")
    return {"run_dir": str(run), **result}
