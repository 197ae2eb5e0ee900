"""The `sft` flow: validate config and data, train under torchrun, report.

    cosmos-train sft --config configs/tiny-sft.toml --set train.epoch=2
    prefect deployment run 'sft/sft' --param params='{"config": "configs/tiny-sft.toml"}'

Steps (each hands the next a path): resolve-config -> prepare-data (manifest.jsonl) -> torchrun
(checkpoints/, safetensors/final) -> artifacts: `sft-summary`, `training-curves` (loss, lr, grad norm,
tokens/s; refreshed during training), `training-metrics` (per-step table), `sft-export` (paths as
text). A retry of the training task resumes from the run folder's newest checkpoint instead of
starting over.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from cosmos_train.metrics import read_metrics
from flows.train_report import export_markdown, result_notes
from tasks.curves import publish_curves
from tasks.errors import user_errors_reported
from tasks.train_job import TrainJobParams, run_training_job


class SFTParams(TrainJobParams):
    """What a user passes from the UI, a schedule or `prefect deployment run`."""


def _summary_markdown(run_dir: Path, result: dict, metrics: list[dict]) -> str:
    train = [m for m in metrics if m.get("kind") == "train"]
    val = [m for m in metrics if m.get("kind") == "val"]
    lines = [f"# SFT run `{run_dir.name}`", "", f"- run folder: `{run_dir}`",
             f"- steps: {result.get('step')}", f"- export: `{result.get('final')}`"]
    if train:
        first, last = train[0], train[-1]
        lines += [f"- loss: {first['loss']:.4f} (step {first['step']}) -> {last['loss']:.4f} (step {last['step']})",
                  f"- throughput (last step): {last['tokens_per_s']:.0f} tokens/s, {last['samples_per_s']:.1f} samples/s",
                  f"- peak memory: {max(m['peak_mem_gb'] for m in train):.2f} GB"]
        if "tflops_per_device" in last:
            mfu = f", MFU {last['mfu']:.1%}" if "mfu" in last else " (MFU: peak unknown, set COSMOS_PEAK_TFLOPS)"
            lines.append(f"- model FLOPs (last step): {last['tflops_per_device']:.3g} TFLOP/s per device{mfu}")
    if val:
        lines.append(f"- validation loss (step {val[-1]['step']}): {val[-1]['loss']:.4f}")
    lines += result_notes(result)
    return "\n".join(lines)


@flow(name="sft", log_prints=True)
def sft(params: SFTParams) -> dict:
    with user_errors_reported("SFT"):
        return _sft(params)


def _sft(params: SFTParams) -> dict:
    run, result = run_training_job(params, "sft")
    create_markdown_artifact(_summary_markdown(run, result, read_metrics(run)), key="sft-summary",
                             description=f"SFT {run.name}")
    publish_curves(run, "sft")  # the final version of the curves refreshed during training
    create_markdown_artifact(export_markdown(result), key="sft-export", description=f"SFT {run.name}: exports")
    return {"run_dir": str(run), **result}
