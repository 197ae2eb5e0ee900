"""The `prepare_data` flow: resolve the config into a run folder, validate the rows, report.

    cosmos-train prepare-data --config configs/tiny-sft.toml [--set k=v ...] [my_dataset.py]
    prefect deployment run 'prepare-data/prepare-data' --param params='{"config": "configs/tiny-sft.toml"}'

Writes RUN/config.toml, RUN/manifest.jsonl (+ manifest_val.jsonl when validation is enabled),
RUN/prep_report.json and RUN/prep_histograms.png; returns the manifest path.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from pydantic import BaseModel, Field

from cosmos_train.preflight import check_job
from tasks.errors import user_errors_reported
from tasks.prepare_data import prepare_data_task
from tasks.run_folder import prepare_run_folder


class PrepareDataParams(BaseModel):
    """Parameters, validated locally and by the server (a bad deployment run is refused up front)."""

    config: str = Field(..., description="Path of the job TOML.")
    overrides: list[str] = Field(default_factory=list, description="key.path=value overrides, applied last.")
    run_dir: str | None = Field(None, description="Write into this run folder instead of a new timestamped one.")
    dataset_script: str | None = Field(None, description="Optional dataset script (see examples/my_dataset.py).")


@flow(name="prepare-data", log_prints=True)
def prepare_data(params: PrepareDataParams) -> str:
    """Validate the job's dataset rows; returns RUN/manifest.jsonl."""
    with user_errors_reported("data preparation"):
        return _prepare_data(params)


def _prepare_data(params: PrepareDataParams) -> str:
    logger = get_run_logger()
    # the one read of the job TOML + overrides; the later steps get the resolved job
    cfg = check_job(params.config, params.overrides, params.dataset_script, params.run_dir, read_rows=False)
    job = prepare_run_folder(cfg, params.config, params.overrides, params.run_dir, params.dataset_script)
    result = prepare_data_task(job)
    logger.info("manifest: %s", result["manifest"])
    return result["manifest"]
