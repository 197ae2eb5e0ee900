"""A run's training curves and per-step table from RUN/metrics.jsonl (matplotlib, no Prefect).

    from cosmos_train.curves import plot_curves, metrics_table
    png = plot_curves(Path("RUN"), "sft")          # RUN/plots/curves.png: loss, lr, grad norm, tokens/s
    rows = metrics_table(Path("RUN"), "grpo")      # every step of a short run, evenly sampled for a long one

SFT: loss (train, and validation when logged), learning rate, gradient norm, throughput. GRPO: mean
reward (with its std band and validation), accuracy (train rollouts and validation), KL to the
reference, completion length, gradient norm, learning rate, throughput. A panel with no finite value
is left out; the figure is one small PNG so a Prefect artifact can embed it.
"""

from __future__ import annotations

import base64
import math
from pathlib import Path
from typing import Any

from cosmos_train.metrics import read_metrics

# (panel title, metric key, draw the validation rows too) per policy type
CURVES: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "sft": (
        ("loss", "loss", True),
        ("learning rate", "lr", False),
        ("grad norm", "grad_norm", False),
        ("tokens/s", "tokens_per_s", False),
    ),
    "grpo": (
        ("mean reward", "reward_mean", True),
        ("accuracy", "accuracy", True),
        ("KL to reference", "kl", False),
        ("completion tokens (mean)", "response_length_mean", False),
        ("grad norm", "grad_norm", False),
        ("learning rate", "lr", False),
        ("tokens/s", "tokens_per_s", False),
    ),
    "wfm_rl": (
        ("mean reward", "reward_mean", True),
        ("held-out diffusion loss", "heldout_diffusion_loss", True),
        ("data (flow-matching) loss", "data_loss", False),
        ("KL to reference", "kl", False),
        ("clipped fraction", "clip_frac", False),
        ("grad norm", "grad_norm", False),
        ("learning rate", "lr", False),
    ),
}
# the per-step table's columns (the step first), in this order where present
TABLE_KEYS: dict[str, tuple[str, ...]] = {
    "sft": (
        "loss",
        "lr",
        "grad_norm",
        "tokens_per_s",
        "samples_per_s",
        "step_time",
        "peak_mem_gb",
        "tflops_per_device",
        "mfu",
    ),
    "grpo": (
        "reward_mean",
        "reward_std",
        "accuracy",
        "kl",
        "response_length_mean",
        "loss",
        "grad_norm",
        "lr",
        "tokens_per_s",
        "rollout_time",
        "train_time",
        "update_tflops_per_device",
        "update_mfu",
    ),
    "wfm_rl": (
        "reward_mean",
        "reward_std",
        "policy_loss",
        "data_loss",
        "kl",
        "clip_frac",
        "ratio",
        "grad_norm",
        "lr",
        "rollout_time",
        "step_time",
    ),
}
TABLE_ROWS = 100


def per_step(metrics: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """Rows of one kind by step, the last row of a step winning (an attempt before a resume may have
    logged a step the retry logged again)."""
    by_step = {int(r["step"]): r for r in metrics if r.get("kind") == kind and "step" in r}
    return [by_step[s] for s in sorted(by_step)]


def number(row: dict[str, Any], key: str) -> float | None:
    v = row.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return None
    return float(v)


def series(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of `key` over the rows that hold a finite number for it."""
    pairs = [(int(r["step"]), v) for r in rows if (v := number(r, key)) is not None]
    return [s for s, _ in pairs], [v for _, v in pairs]


def sample_rows(rows: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """All rows when there are at most `limit`, else `limit` of them evenly spaced, the first and last kept."""
    if len(rows) <= limit:
        return rows
    picks = sorted({round(i * (len(rows) - 1) / (limit - 1)) for i in range(limit)})
    return [rows[i] for i in picks]


def metrics_table(run_dir: Path, policy_type: str, limit: int = TABLE_ROWS) -> list[dict[str, Any]]:
    """One row per logged train step (sampled to `limit`): the step and the policy type's columns."""
    rows = per_step(read_metrics(Path(run_dir)), "train")
    keys = TABLE_KEYS.get(policy_type, TABLE_KEYS["sft"])
    out = []
    for r in sample_rows(rows, limit):
        row: dict[str, Any] = {"step": int(r["step"])}
        for k in keys:
            v = number(r, k)
            if v is not None:
                row[k] = float(f"{v:.4g}")
        out.append(row)
    return out


def plot_curves(run_dir: Path, policy_type: str, out: Path | None = None) -> Path | None:
    """RUN/plots/curves.png: one panel per curve that has data; None when no step is logged yet."""
    run_dir = Path(run_dir)
    metrics = read_metrics(run_dir)
    train, val = per_step(metrics, "train"), per_step(metrics, "val")
    panels = [
        (title, key, with_val)
        for title, key, with_val in CURVES.get(policy_type, CURVES["sft"])
        if series(train, key)[1] or (with_val and series(val, key)[1])
    ]
    if not panels:
        return None
    cols = 2
    rows = math.ceil(len(panels) / cols)
    # why: matplotlib (and its fonttools, kiwisolver, ...) only for this plot: the GRPO trainer imports this module
    # (run-health reads the series), and the GPU check's environment has no matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(4.2 * cols, 2.4 * rows), dpi=72)
    FigureCanvasAgg(fig)
    for i, (title, key, with_val) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        x, y = series(train, key)
        if y:
            ax.plot(x, y, color="#4c72b0", linewidth=1.2, label="train")
        if key == "reward_mean" and y:
            sx, sd = series([r for r in train if number(r, key) is not None], "reward_std")
            if len(sx) == len(x):
                ax.fill_between(
                    x,
                    [m - s for m, s in zip(y, sd)],
                    [m + s for m, s in zip(y, sd)],
                    color="#4c72b0",
                    alpha=0.2,
                    label="± std",
                )
        if with_val:
            vx, vy = series(val, key)
            if vy:
                ax.plot(vx, vy, "o-", color="#dd8452", markersize=3, linewidth=1.2, label="validation")
        ax.set_title(title, fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
        if with_val or key == "reward_mean":
            ax.legend(fontsize=7)
    fig.supxlabel("step", fontsize=8)
    fig.tight_layout()
    path = out or run_dir / "plots" / "curves.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def curves_markdown(png: Path | None, title: str) -> str:
    """The curves embedded as a data: URI (an artifact cannot link to a file on the worker's disk)."""
    if png is None:
        return f"# {title}\n\nNo train or validation rows in metrics.jsonl yet.\n"
    data = base64.b64encode(Path(png).read_bytes()).decode()
    return f"# {title}\n\n`{png}`\n\n![curves](data:image/png;base64,{data})\n"
