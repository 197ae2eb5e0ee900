"""The `sft` flow: validate config and data, train under torchrun, report.

    cosmos-train sft --config configs/tiny-sft.toml --set train.epoch=2
    prefect deployment run 'sft/sft' --param params='{"config": "configs/tiny-sft.toml"}'

Steps (each hands the next a path): resolve-config -> prepare-data (manifest.jsonl) -> torchrun
(checkpoints/, safetensors/final) -> report artifacts. A retry of the training task resumes from the
run folder's newest checkpoint instead of starting over.
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_link_artifact, create_markdown_artifact
from pydantic import BaseModel, Field

from cosmos_train.metrics import read_metrics
from cosmos_train.preflight import check_job
from tasks.errors import user_errors_reported
from tasks.prepare_data import prepare_data_task
from tasks.run_folder import resolve_config
from tasks.torchrun import run_torchrun


class SFTParams(BaseModel):
    """What a user passes from the UI, a schedule or `prefect deployment run`."""

    config: str = Field(..., description="Path of the job TOML.")
    overrides: list[str] = Field(default_factory=list, description="key.path=value overrides, applied last.")
    dataset_script: str | None = Field(None, description="Optional dataset script (see examples/).")
    run_dir: str | None = Field(None, description="Continue in this existing run folder instead of a new one.")
    train_retries: int = Field(1, ge=0, description="Relaunches of a failed training job (each resumes).")
    timeout_s: float | None = Field(None, description="Stop training after this many seconds.")


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
    if val:
        lines.append(f"- validation loss (step {val[-1]['step']}): {val[-1]['loss']:.4f}")
    if result.get("resumed_from"):
        lines.append(f"- resumed from `{result['resumed_from']}`")
    if result.get("resume_note"):
        lines.append(f"- {result['resume_note']}")
    if result.get("skipped_steps"):
        lines.append(f"- steps skipped for a non-finite loss or gradient norm: {result['skipped_steps']}")
    return "\n".join(lines)


@flow(name="sft", log_prints=True)
def sft(params: SFTParams) -> dict:
    with user_errors_reported("SFT"):
        return _sft(params)


def _sft(params: SFTParams) -> dict:
    logger = get_run_logger()
    # Input errors before any data is read or process started (the CLI ran this too; a deployment did not).
    check_job(params.config, params.overrides, params.dataset_script, params.run_dir, read_rows=False)
    cfg, run_dir = resolve_config(params.config, params.overrides, params.run_dir)
    run = Path(run_dir)
    logger.info("run folder: %s", run)
    prep = prepare_data_task(config=str(run / "config.toml"), run_dir=run_dir, dataset_script=params.dataset_script)
    logger.info("data prepared: %s", prep)
    args = ["--config", str(run / "config.toml"), "--resume-own-run"]
    if params.dataset_script:
        args += ["--dataset-script", str(Path(params.dataset_script).resolve())]
    train = run_torchrun.with_options(retries=params.train_retries, retry_delay_seconds=2)
    train(cfg, "cosmos_train.train.sft", run_dir, args, total_steps=cfg.train.max_num_steps,
          timeout_s=params.timeout_s)
    result = json.loads((run / "result.json").read_text())
    create_markdown_artifact(_summary_markdown(run, result, read_metrics(run)), key="sft-summary",
                             description=f"SFT {run.name}")
    if result.get("final"):
        create_link_artifact(f"file://{result['final']}", link_text="exported safetensors", key="sft-export")
    return {"run_dir": run_dir, **result}
