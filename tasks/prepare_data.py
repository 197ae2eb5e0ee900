"""Prefect task `prepare-data`: validate the dataset rows of a run and record what was kept.

Takes the job the flow resolved (its config object and run folder: no config file is read again), loads the
processor, reads the train rows (and the val rows when `validation.enable`) through
`cosmos_train.data.sources`, checks them with `cosmos_train.data.prepare`, follows progress in a progress
artifact and publishes a markdown report artifact (rows read / kept / skipped by reason with first examples,
the histograms).
Everything else is library code; this file only wires and records.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from uuid import UUID

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE

from cosmos_train.config import Config
from cosmos_train.data.prepare import DataValidationError, PrepReport, prepare_split, report_markdown
from cosmos_train.data.sources import SplitRole
from cosmos_train.errors import DataError
from tasks.run_folder import ResolvedJob

# Progress artifact updates are API calls: at most one per this many seconds (plus the last one).
PROGRESS_INTERVAL_S = 1.0


class _Progress:
    """A progress callback that updates one Prefect progress artifact, throttled."""

    def __init__(self, key: str, description: str):
        artifact_id = create_progress_artifact(progress=0.0, key=key, description=description)
        assert isinstance(
            artifact_id, UUID
        )  # prefect's async_dispatch types results as value | coroutine; sync callers get the value
        self.artifact_id = artifact_id
        self.last = 0.0

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done == total or now - self.last >= PROGRESS_INTERVAL_S:
            self.last = now
            update_progress_artifact(self.artifact_id, progress=100.0 * done / max(total, 1))


def _failure_markdown(split_role: str, error: DataValidationError) -> str:
    lines = [
        f"# Data preparation failed ({split_role})",
        "",
        'Rows that did not validate (set `dataset.on_bad_row = "skip"` to drop and count them):',
        "",
        "| file:row | id | reason | message |",
        "|---|---|---|---|",
    ]
    for p in error.problems:
        lines.append(f"| `{p.origin}` | {p.id} | {p.reason} | {p.message.replace('|', '/')[:300]} |")
    return "\n".join(lines) + "\n"


@task(name="prepare-data", cache_policy=NO_CACHE)
def prepare_data_task(job: ResolvedJob[Config]) -> dict[str, Any]:
    """Validate the rows of the job's resolved config into its run folder; returns the manifest paths and counts.

    Raises DataValidationError (naming each bad file:row) under on_bad_row = "fail".
    """
    # why here: transformers and torch load in seconds; importing a flow (prefect deploy, --help) must not wait
    from cosmos_train.models.load import load_processor

    logger = get_run_logger()
    cfg, run_dir, dataset_script = job.cfg, str(job.run), job.dataset_script
    processor = load_processor(cfg.policy.model_name_or_path)
    roles: list[SplitRole] = ["train", "val"] if cfg.validation.enable else ["train"]
    out: dict[str, Any] = {"run_dir": run_dir}
    for role in roles:
        suffix = "" if role == "train" else f"-{role}"
        progress = _Progress(f"prepare-data-progress{suffix}", f"rows checked ({role})")
        try:
            report: PrepReport = prepare_split(cfg, role, run_dir, processor, dataset_script, progress=progress)
        except DataValidationError as e:
            create_markdown_artifact(
                _failure_markdown(role, e),
                key=f"prepare-data-report{suffix}",
                description=f"data preparation failed ({role})",
            )
            raise
        logger.info(
            "%s: %d rows read, %d kept, %d skipped %s, %d truncated -> %s",
            role,
            report.rows_read,
            report.rows_kept,
            report.rows_skipped,
            report.skipped or "",
            report.truncated,
            report.manifest_path,
        )
        if report.rows_kept == 0:
            raise DataError(
                f"{report.dataset}: none of its {report.rows_read} {role} rows passed validation (skipped by "
                f"reason: {report.skipped}); the first examples of each reason are in {report.report_path}"
            )
        create_markdown_artifact(
            report_markdown(report),
            key=f"prepare-data-report{suffix}",
            description=f"data preparation ({role}): {Path(run_dir).name}",
        )
        key = "manifest" if role == "train" else f"{role}_manifest"
        out[key] = report.manifest_path
        out[f"{role}_rows_kept"] = report.rows_kept
        out[f"{role}_rows_skipped"] = report.rows_skipped
    return out
