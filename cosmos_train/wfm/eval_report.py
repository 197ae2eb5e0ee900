"""World-model evaluation, compared: intervals of continuous scores, the collapse flag, the comparison table and the
sample grid (prompt x model). Plain data in, plain data out; the flow only publishes what these return.

    stats = t_interval([0.61, 0.58, 0.70])          # {"mean", "ci95_low", "ci95_high", "std", "n"}
    rows = comparison_rows(results)                  # one row per metric, one column per model
    png = sample_grid(results, Path("OUT/grid.png")) # per prompt, every model's frames side by side

Intervals: a reward or a loss is continuous, so the binomial Wilson interval of evaluation.scoring does not fit;
each is a Student t 95% interval of the mean over prompts (clips, for the held-out loss):
mean +- t(0.975, n-1) s / sqrt(n). It is exact for normal scores and honest at the few prompts an evaluation has,
where a bootstrap's percentile interval comes out too narrow. Every model sees the same prompts with the same
noise, so a model's gain over the first one is also given as a paired t interval of the per-prompt differences
(narrower than the two intervals side by side suggest). With one prompt there is no interval (None).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from cosmos_train.evaluation.scoring import Z95

COLLAPSE_SPREAD = 0.01  # samples whose pixels vary across prompts by less than 1% of the range: collapsed
PAD = 2
LABEL_H = 12


# ----------------------------------------------------------------------------- intervals
def _t_pdf(x: float, df: int) -> float:
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1) / 2 * math.log1p(x * x / df))


def _t_cdf_above_zero(x: float, df: int, steps: int = 1000) -> float:
    """P(0 < T < x) by Simpson's rule (the pdf is smooth; 1000 steps: error < 1e-8 for x < 13)."""
    h = x / steps
    total = _t_pdf(0.0, df) + _t_pdf(x, df)
    total += sum((4 if i % 2 else 2) * _t_pdf(i * h, df) for i in range(1, steps))
    return total * h / 3


@functools.lru_cache(maxsize=256)
def t_quantile_975(df: int) -> float:
    """The 97.5% quantile of Student's t with df degrees of freedom (12.706 at 1, 2.228 at 10, -> 1.960);
    the normal's beyond 1000 (they differ by < 0.001 there). Bisection on the integrated density: no scipy here."""
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    if df > 1000:
        return Z95
    lo, hi = Z95, 13.0
    for _ in range(40):  # 11 / 2^40: far below the 1e-4 a table gives
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _t_cdf_above_zero(mid, df) < 0.475 else (lo, mid)
    return (lo + hi) / 2


def t_interval(values: Sequence[float] | np.ndarray) -> dict[str, Any]:
    """Mean and Student t 95% interval of the mean; ci95_low / ci95_high None with fewer than 2 values."""
    x = np.asarray(values, dtype=np.float64)
    n = int(x.size)
    if n == 0:
        return {"mean": None, "ci95_low": None, "ci95_high": None, "std": None, "n": 0}
    mean = float(x.mean())
    if n < 2:
        return {"mean": mean, "ci95_low": None, "ci95_high": None, "std": None, "n": n}
    std = float(x.std(ddof=1))
    half = t_quantile_975(n - 1) * std / math.sqrt(n)
    return {"mean": mean, "ci95_low": mean - half, "ci95_high": mean + half, "std": std, "n": n}


def paired_difference(values: Sequence[float], baseline: Sequence[float]) -> dict[str, Any]:
    """t interval of the per-prompt differences values - baseline (same prompts, same noise: paired)."""
    a, b = np.asarray(values, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired scores differ in length: {a.shape} vs {b.shape}")
    return t_interval(a - b)


# ----------------------------------------------------------------------------- collapse
def sample_spread(videos: np.ndarray) -> float | None:
    """How much a model's samples differ across prompts: the mean over pixel positions of the standard deviation
    across samples, pixels in [0, 1]. videos uint8 [N, 3, T, H, W]; None with fewer than 2 samples."""
    if len(videos) < 2:
        return None
    return float((np.asarray(videos, dtype=np.float32) / 255.0).std(axis=0).mean())


def collapse_flags(spread: float | None) -> list[str]:
    """The flag for a model whose samples are nearly the same whatever the prompt and noise."""
    if spread is None or spread >= COLLAPSE_SPREAD:
        return []
    return [
        f"samples collapsed: they vary across prompts by {100 * spread:.2f}% of the pixel range "
        f"(< {100 * COLLAPSE_SPREAD:.0f}%)"
    ]


# ----------------------------------------------------------------------------- the table
def format_stat(s: dict[str, Any] | None, digits: int = 4, signed: bool = False) -> str:
    """'0.6123 [0.5800, 0.6400]' (or the mean alone without an interval; '-' for nothing measured)."""
    if not s or s.get("mean") is None:
        return "-"
    fmt = f"{{:{'+' if signed else ''}.{digits}f}}"
    text = fmt.format(s["mean"])
    if s.get("ci95_low") is not None:
        text += f" [{fmt.format(s['ci95_low'])}, {fmt.format(s['ci95_high'])}]"
    return text


def comparison_rows(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per metric, a column per model (its label): each reward part and the weighted total with their
    95% intervals, each later model's paired gain in total reward over the first, the held-out diffusion loss,
    the sample spread, the flags, the counts and the model folder.

    results: `wfm.evaluate.evaluate_wfm_model` dicts, the first one the baseline."""
    labels = [r["label"] for r in results]
    rows: list[dict[str, Any]] = []

    def row(metric: str, cells: Sequence[str]) -> None:
        rows.append({"metric": metric, **dict(zip(labels, cells))})

    weights = results[0]["weights"] if results else {}
    for name, w in weights.items():
        row(f"reward {name} (weight {w:g})", [format_stat(r["rewards"].get(name)) for r in results])
    row("reward (weighted total)", [format_stat(r["reward_total"]) for r in results])
    if len(results) > 1:
        base = results[0]
        row(
            f"gain in total reward over {base['label']} (paired)",
            ["-"]
            + [
                format_stat(paired_difference(r["per_prompt"]["total"], base["per_prompt"]["total"]), signed=True)
                for r in results[1:]
            ],
        )
    row("held-out diffusion loss", [format_stat(r["heldout_diffusion_loss"]) for r in results])
    row("sample spread across prompts", [format_stat({"mean": r["sample_spread"]}) for r in results])
    row("flags", [("⚠ " + "; ".join(r["flags"])) if r["flags"] else "ok" for r in results])
    row("prompts / held-out clips", [f"{r['num_prompts']} / {r['num_heldout_clips']}" for r in results])
    row("model", [r["model"] for r in results])
    return rows


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The comparison rows as fixed-width text (the CLI's output)."""
    if not rows:
        return ""
    columns = list(rows[0])
    widths = {c: max(len(str(c)), *(len(str(r.get(c, ""))) for r in rows)) for c in columns}
    lines = ["  ".join(f"{c:<{widths[c]}}" for c in columns)]
    lines += ["  ".join(f"{str(r.get(c, '')):<{widths[c]}}" for c in columns) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


# ----------------------------------------------------------------------------- the grid
def _strip(video: np.ndarray, scale: int) -> np.ndarray:
    """[3, T, H, W] uint8 -> its frames side by side [H*scale, T*(W*scale + PAD), 3]."""
    frames = [np.kron(f.transpose(1, 2, 0), np.ones((scale, scale, 1), dtype=np.uint8)) for f in video.swapaxes(0, 1)]
    pad = np.full((frames[0].shape[0], PAD, 3), 255, dtype=np.uint8)
    return np.concatenate([x for f in frames for x in (f, pad)], axis=1)


def _label(text: str, width: int) -> np.ndarray:
    img = Image.new("RGB", (max(width, 1), LABEL_H), "white")
    ImageDraw.Draw(img).text((1, 0), text, fill="black")
    return np.asarray(img)


def sample_grid(
    results: Sequence[dict[str, Any]], out: Path, max_prompts: int = 8, scale: int = 2, gap: int = 8
) -> Path | None:
    """A PNG: a header with the model labels, then per prompt a caption and each model's frames side by side (same
    prompt, same noise, so a column differs only by the model). None when no model saved samples."""
    videos = [np.load(r["samples"]) for r in results if r.get("samples")]
    if not videos or len(videos) != len(results):
        return None
    prompts = results[0]["prompts"]
    cell_w = _strip(videos[0][0], scale).shape[1]
    width = len(results) * (cell_w + gap)
    spacer = np.full((LABEL_H, gap, 3), 255, dtype=np.uint8)
    header = np.concatenate(
        [x for r in results for x in (_label(str(r["label"])[: cell_w // 6], cell_w), spacer)], axis=1
    )
    parts = [header]
    for i in range(min(max_prompts, len(prompts))):
        parts.append(_label(f"{i}: {prompts[i]}"[: width // 6], width))
        strips = [_strip(v[i], scale) for v in videos]
        pad = np.full((strips[0].shape[0], gap, 3), 255, dtype=np.uint8)
        parts.append(np.concatenate([x for s in strips for x in (s, pad)], axis=1))
        parts.append(np.full((PAD, width, 3), 255, dtype=np.uint8))
    out.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.concatenate(parts, axis=0)).save(out)
    return out
