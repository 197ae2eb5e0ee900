"""Publish a training run's curves and per-step table as artifacts, during the run and at its end.

    publish_curves(run_dir, "sft")   # `training-curves` (markdown, the PNG embedded), `training-metrics` (table)

The same keys each time, so the UI keeps every version and shows the newest; tasks/torchrun.py calls it
while the trainer runs (when new steps were logged: after REFRESH_S seconds, then at doubling intervals
up to 10 minutes), the flows once more at the end.
"""

from __future__ import annotations

from pathlib import Path

from prefect.artifacts import create_markdown_artifact, create_table_artifact

from cosmos_train.curves import curves_markdown, metrics_table, plot_curves

REFRESH_S = 30.0


def publish_curves(run_dir: Path, policy_type: str) -> None:
    run_dir = Path(run_dir)
    png = plot_curves(run_dir, policy_type)
    what = policy_type.upper()
    create_markdown_artifact(
        curves_markdown(png, f"{what} curves: {run_dir.name}"),
        key="training-curves",
        description=f"{what} {run_dir.name}: training curves",
    )
    table = metrics_table(run_dir, policy_type)
    if table:
        sampled = "" if len(table) == table[-1]["step"] - table[0]["step"] + 1 else f", {len(table)} sampled"
        create_table_artifact(
            table,
            key="training-metrics",
            description=f"{what} {run_dir.name}: per-step metrics (steps {table[0]['step']}-"
            f"{table[-1]['step']}{sampled})",
        )
