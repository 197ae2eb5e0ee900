"""Hyperparameter sweeps over a job config (no Prefect: flows/sweep.py runs the trials).

    cosmos-train sweep --config configs/tiny-sft.toml --grid train.optm_lr=1e-5,3e-5 --parallel 2

spec: the --grid / --random specs, the trials they expand to, their names. plan: the specs checked against the
config, each trial's folder and key. record: sweep.json, what finished. report: each trial's metrics, the best
one, the comparison table, the overlaid curves, the early-stop decision.
"""

from cosmos_train.sweep.plan import DEFAULT_METRIC, KINDS, SweepPlan, Trial, plan_sweep
from cosmos_train.sweep.record import FINISHED, RECORD_FILE, SweepRecord
from cosmos_train.sweep.report import best_trial, early_stops, latest, plot_overlay, table_rows, trial_metrics
from cosmos_train.sweep.spec import expand, parse_axes, parse_grid, parse_random, trial_name

__all__ = [
    "DEFAULT_METRIC",
    "FINISHED",
    "KINDS",
    "RECORD_FILE",
    "SweepPlan",
    "SweepRecord",
    "Trial",
    "best_trial",
    "early_stops",
    "expand",
    "latest",
    "parse_axes",
    "parse_grid",
    "parse_random",
    "plan_sweep",
    "plot_overlay",
    "table_rows",
    "trial_metrics",
    "trial_name",
]
