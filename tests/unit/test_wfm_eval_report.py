"""The world-model evaluation's numbers: Student t intervals (quantiles, coverage), the paired gain, the collapse
flag, the comparison table and the prompt x model sample grid. No model: plain arrays in, plain data out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cosmos_train.wfm.eval_report import (
    COLLAPSE_SPREAD,
    LABEL_H,
    PAD,
    collapse_flags,
    comparison_rows,
    format_table,
    paired_difference,
    sample_grid,
    sample_spread,
    t_interval,
    t_quantile_975,
)


@pytest.mark.parametrize(
    ("df", "want"), [(1, 12.7062), (2, 4.3027), (4, 2.7764), (9, 2.2622), (29, 2.0452), (120, 1.9799)]
)
def test_t_quantiles_match_the_tables(df: int, want: float) -> None:
    assert t_quantile_975(df) == pytest.approx(want, abs=2e-4)


def test_t_interval_by_hand_and_without_enough_values() -> None:
    s = t_interval([1.0, 2.0, 3.0, 6.0])
    half = 3.182446 * np.std([1, 2, 3, 6], ddof=1) / 2
    assert s["mean"] == 3.0 and s["n"] == 4
    assert (s["ci95_low"], s["ci95_high"]) == pytest.approx((3 - half, 3 + half), abs=1e-4)
    assert t_interval([0.5]) == {"mean": 0.5, "ci95_low": None, "ci95_high": None, "std": None, "n": 1}
    assert t_interval([])["mean"] is None


def test_t_interval_covers_the_mean_95_percent_of_the_time_at_five_prompts() -> None:
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(4000):
        s = t_interval(rng.normal(0.3, 0.2, size=5))
        hits += s["ci95_low"] <= 0.3 <= s["ci95_high"]
    assert 0.94 <= hits / 4000 <= 0.96  # a normal interval (1.96) would cover ~88% at n = 5


def test_paired_gain_sees_a_shift_the_side_by_side_intervals_hide() -> None:
    rng = np.random.default_rng(1)
    base = rng.uniform(0.2, 0.8, size=8)  # prompts differ a lot ...
    better = base + 0.02 + rng.normal(0, 0.002, size=8)  # ... the model adds the same little to each
    a, b = t_interval(base), t_interval(better)
    assert a["ci95_high"] > b["ci95_low"]  # the two intervals overlap
    gain = paired_difference(better, base)
    assert gain["ci95_low"] > 0 and gain["mean"] == pytest.approx(0.02, abs=0.003)
    with pytest.raises(ValueError, match="differ in length"):
        paired_difference([1.0, 2.0], [1.0])


def test_collapse_flag_for_samples_that_ignore_prompt_and_noise() -> None:
    rng = np.random.default_rng(2)
    varied = rng.integers(0, 256, size=(4, 3, 5, 8, 8), dtype=np.uint8)
    same = np.repeat(varied[:1], 4, axis=0)
    same[1, 0, 0, 0, 0] ^= 1  # one pixel differs by one grey level
    assert sample_spread(varied) > 0.2 and collapse_flags(sample_spread(varied)) == []
    spread = sample_spread(same)
    assert spread is not None and 0 < spread < COLLAPSE_SPREAD
    assert "samples collapsed" in collapse_flags(spread)[0]
    assert sample_spread(varied[:1]) is None and collapse_flags(None) == []


def _result(tmp_path: Path, label: str, totals: list[float], videos: np.ndarray, flags: list[str]) -> dict:
    folder = tmp_path / label
    folder.mkdir()
    np.save(folder / "samples.npy", videos)
    return {
        "label": label,
        "model": f"/models/{label}",
        "weights": {"brightness": 1.0},
        "rewards": {"brightness": t_interval(totals)},
        "reward_total": t_interval(totals),
        "per_prompt": {"total": totals, "brightness": totals},
        "heldout_diffusion_loss": t_interval([2.0, 2.5]) if label == "base" else None,
        "sample_spread": sample_spread(videos),
        "flags": flags,
        "num_prompts": len(totals),
        "num_heldout_clips": 2 if label == "base" else 0,
        "prompts": [f"prompt {i}" for i in range(len(totals))],
        "samples": str(folder / "samples.npy"),
    }


def test_comparison_rows_table_and_grid(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    videos = rng.integers(0, 256, size=(3, 3, 5, 16, 16), dtype=np.uint8)
    base = _result(tmp_path, "base", [0.5, 0.6, 0.7], videos, [])
    trained = _result(tmp_path, "trained", [0.6, 0.7, 0.8], videos[::-1].copy(), ["samples collapsed: ..."])
    rows = comparison_rows([base, trained])
    by = {r["metric"]: r for r in rows}
    assert by["reward brightness (weight 1)"]["base"].startswith("0.6000 [")
    gain = by["gain in total reward over base (paired)"]
    assert gain["base"] == "-" and gain["trained"] == "+0.1000 [+0.1000, +0.1000]"  # the same +0.1 on each prompt
    assert by["held-out diffusion loss"]["trained"] == "-" and by["held-out diffusion loss"]["base"].startswith("2.25")
    assert by["flags"] == {"metric": "flags", "base": "ok", "trained": "⚠ samples collapsed: ..."}
    assert by["model"]["trained"] == "/models/trained"
    text = format_table(rows).splitlines()
    assert text[0].split() == ["metric", "base", "trained"] and len(text) == len(rows) + 1

    png = sample_grid([base, trained], tmp_path / "grid.png", scale=2, gap=8)
    assert png is not None
    img = np.asarray(Image.open(png))
    cell_w = 5 * (16 * 2 + PAD)
    assert img.shape == (LABEL_H + 3 * (LABEL_H + 16 * 2 + PAD), 2 * (cell_w + 8), 3)
    # prompt 0's row: the base's first frame, then the trained model's (its videos reversed: base's prompt 2)
    top = LABEL_H + LABEL_H
    first = np.kron(videos[0][:, 0].transpose(1, 2, 0), np.ones((2, 2, 1), dtype=np.uint8))
    assert np.array_equal(img[top : top + 32, 0:32], first)
    last = np.kron(videos[2][:, 0].transpose(1, 2, 0), np.ones((2, 2, 1), dtype=np.uint8))
    assert np.array_equal(img[top : top + 32, cell_w + 8 : cell_w + 8 + 32], last)
