"""A sweep's results from its trials' run folders: each trial's metrics, the best one, the comparison table,
the overlaid curves and the early-stop decision (no Prefect: flows/sweep.py publishes them).

    m = trial_metrics(run_dir)        # {"steps": 3, "loss": 2.1, "val_loss": 2.3, "export": ".../final", ...}
    best_trial(entries, "val_loss", "min")
    rows = table_rows(entries, labels, "sft", "val_loss", best)
    plot_overlay([(name, run_dir), ...], "sft", "val_loss", out)    # every trial's curves in one PNG

A metric is a key of the run's last train row of metrics.jsonl (`loss`, `reward_mean`, `accuracy`, ...) or of
its last validation row, prefixed `val_` (`val_loss`, `val_accuracy`, `val_reward_mean`); a validation
accuracy over `n` answers gets its 95 % Wilson interval (`val_accuracy_ci95`). A benchmark evaluation written
into the run folder (`cosmos-train eval` with results_dir=RUN/eval: RUN/eval/**/results.json, the newest)
gives `benchmark_accuracy` (micro) with its interval.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from cosmos_train.curves import number, per_step, series
from cosmos_train.evaluation.scoring import wilson_interval
from cosmos_train.metrics import read_metrics
from cosmos_train.sweep.record import FINISHED

# the metrics each kind's table shows (beside the sweep's own metric), and the overlay's panels:
# (title, row kind, metric key)
TABLE_METRICS: dict[str, tuple[str, ...]] = {
    "sft": ("loss", "val_loss"),
    "grpo": ("reward_mean", "accuracy", "val_reward_mean", "val_accuracy"),
    "wfm-rl": ("reward_mean", "val_reward_mean", "val_heldout_diffusion_loss"),
}
OVERLAY: dict[str, tuple[tuple[str, str, str], ...]] = {
    "sft": (("train loss", "train", "loss"), ("validation loss", "val", "loss")),
    "grpo": (
        ("mean reward", "train", "reward_mean"),
        ("validation accuracy", "val", "accuracy"),
        ("validation reward", "val", "reward_mean"),
        ("KL to reference", "train", "kl"),
        ("token entropy", "train", "entropy"),  # a collapse shows here before the reward stalls
    ),
    "wfm-rl": (
        ("mean reward", "train", "reward_mean"),
        ("validation reward", "val", "reward_mean"),
        ("held-out diffusion loss", "val", "heldout_diffusion_loss"),
    ),
}
SKIP_KEYS = ("step", "total_steps", "kind", "time")
EVAL_FOLDER = "eval"  # RUN/eval/<model>/<answer_type>/results.json, where an evaluation of the run was written


def metric_source(metric: str) -> tuple[str, str]:
    """`val_loss` -> ("val", "loss"); `loss` -> ("train", "loss")."""
    return ("val", metric.removeprefix("val_")) if metric.startswith("val_") else ("train", metric)


def trial_metrics(run_dir: str | Path) -> dict[str, Any]:
    """The run's last train and validation values, its step count and exports (missing files: fewer keys)."""
    run = Path(run_dir)
    metrics = read_metrics(run) if run.is_dir() else []
    out: dict[str, Any] = {}
    for kind, prefix in (("train", ""), ("val", "val_")):
        rows = per_step(metrics, kind)
        if not rows:
            continue
        last = rows[-1]
        if kind == "train":
            out["steps"] = int(last["step"])
        for k in last:
            if k not in SKIP_KEYS and (v := number(last, k)) is not None:
                out[prefix + k] = v
        n = number(last, "n")
        if kind == "val" and "val_accuracy" in out and n:
            total = int(n)
            correct = min(total, max(0, round(out["val_accuracy"] * total)))
            out["val_accuracy_ci95"] = list(wilson_interval(correct, total))
    out.update(benchmark_metrics(run))
    result_file = run / "result.json"
    if result_file.is_file():
        try:
            result = json.loads(result_file.read_text())
        except json.JSONDecodeError:
            result = {}
        out["steps"] = result.get("step", out.get("steps"))
        if result.get("final"):
            out["export"] = result["final"]
        best = result.get("best") or {}
        if best.get("path"):
            out["best_export"] = best["path"]
    return out


def benchmark_metrics(run: Path) -> dict[str, Any]:
    """The micro accuracy of the newest RUN/eval/**/results.json, with its interval and count; {} without one."""
    found = sorted((run / EVAL_FOLDER).glob("**/results.json"), key=lambda p: p.stat().st_mtime) if run.is_dir() else []
    for path in reversed(found):
        try:
            micro = json.loads(path.read_text())["overall"]["micro"]
            return {
                "benchmark_accuracy": float(micro["accuracy"]),
                "benchmark_accuracy_ci95": [float(micro["ci95_low"]), float(micro["ci95_high"])],
                "benchmark_n": int(micro["total"]),
            }
        except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue  # a results file being written, or not an evaluation's: the next newest
    return {}


def latest(run_dir: str | Path, metric: str) -> tuple[int, float] | None:
    """(step, value) of the metric's newest logged value in a running trial's metrics.jsonl."""
    kind, key = metric_source(metric)
    steps, values = series(per_step(read_metrics(Path(run_dir)), kind), key)
    return (steps[-1], values[-1]) if values else None


def _better(a: float, b: float, mode: str) -> bool:
    return a > b if mode == "max" else a < b


def best_trial(entries: Iterable[dict[str, Any]], metric: str, mode: str) -> str | None:
    """The name of the finished trial with the best value of `metric` (the first of equals), or None when
    no finished trial has it."""
    best: tuple[str, float] | None = None
    for e in entries:
        v = (e.get("metrics") or {}).get(metric)
        if e.get("state") not in FINISHED or not isinstance(v, int | float) or not math.isfinite(v):
            continue
        if best is None or _better(float(v), best[1], mode):
            best = (e["name"], float(v))
    return best[0] if best else None


def early_stops(
    progress: Mapping[str, tuple[int, int | None, float | None]], mode: str, margin: float, after: float
) -> list[str]:
    """Trials to stop: name -> (steps done, total steps, newest metric value). A trial past `after` of its
    steps whose value trails the best value any trial has shown by more than `margin` is stopped."""
    values = [v for _, _, v in progress.values() if v is not None and math.isfinite(v)]
    if not values:
        return []
    best = max(values) if mode == "max" else min(values)
    out = []
    for name, (done, total, v) in progress.items():
        if v is None or not total or done < after * total:
            continue
        trails = v < best - margin if mode == "max" else v > best + margin
        if trails:
            out.append(name)
    return out


def _cell(metrics: dict[str, Any], key: str) -> Any:
    v = metrics.get(key)
    if v is None:
        return ""
    interval = metrics.get(f"{key}_ci95")
    if interval:
        n = metrics.get("val_n" if key.startswith("val_") else "benchmark_n", 0)
        return f"{v:.3f} [{interval[0]:.3f}, {interval[1]:.3f}] (n={int(n)})"
    return float(f"{v:.4g}") if isinstance(v, float) else v


def table_rows(
    entries: list[dict[str, Any]], labels: dict[str, str], kind: str, metric: str, best: str | None
) -> list[dict[str, Any]]:
    """One row per trial, every row every column: the settings, state, steps, metrics (the sweep's metric
    first), whether it is the best, its export, run folder and error."""
    shown = [metric, *(m for m in TABLE_METRICS.get(kind, ()) if m != metric)]
    if metric != "benchmark_accuracy" and any("benchmark_accuracy" in (e.get("metrics") or {}) for e in entries):
        shown.append("benchmark_accuracy")
    rows = []
    for e in entries:
        m = e.get("metrics") or {}
        row: dict[str, Any] = {"trial": e["name"]}
        for key, label in labels.items():
            v = e["settings"].get(key)
            row[label] = v if isinstance(v, int | float | str) else json.dumps(v)
        row["state"] = e["state"]
        row["steps"] = m.get("steps", "")
        for key in shown:
            row[key] = _cell(m, key)
        row["best"] = "best" if e["name"] == best else ""
        row["seconds"] = e.get("seconds", "")
        row["export"] = m.get("best_export") or m.get("export") or ""
        row["run folder"] = e.get("run_dir", "")
        row["error"] = (e.get("error") or "")[:300]
        rows.append(row)
    return rows


def plot_overlay(runs: list[tuple[str, Path]], kind: str, metric: str, out: Path) -> Path | None:
    """Every trial's curves overlaid, one panel per curve that any trial logged (the sweep's metric's
    panel always among them); None when no trial logged a step."""
    panels = list(OVERLAY.get(kind, OVERLAY["sft"]))
    source = metric_source(metric)
    if not any((k, key) == source for _, k, key in panels):
        panels.insert(0, (metric, *source))
    data = {name: read_metrics(Path(run)) if Path(run).is_dir() else [] for name, run in runs}
    rows = {name: {k: per_step(m, k) for k in ("train", "val")} for name, m in data.items()}
    panels = [p for p in panels if any(series(rows[n][p[1]], p[2])[1] for n in rows)]
    if not panels:
        return None
    cols = min(2, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(5.0 * cols, 2.8 * nrows + 0.3 * math.ceil(len(runs) / 2)), dpi=72)
    FigureCanvasAgg(fig)
    for i, (title, k, key) in enumerate(panels):
        ax = fig.add_subplot(nrows, cols, i + 1)
        for j, (name, _) in enumerate(runs):
            x, y = series(rows[name][k], key)
            if y:
                ax.plot(x, y, "o-" if k == "val" else "-", color=f"C{j % 10}", markersize=3, linewidth=1.2, label=name)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    handles, names = [], []
    for ax in fig.axes:  # one legend for the figure: every trial that drew a line somewhere
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    fig.legend(handles, names, loc="lower center", ncol=min(2, len(names)) or 1, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.06 + 0.03 * math.ceil(len(names) / 2), 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    return out
