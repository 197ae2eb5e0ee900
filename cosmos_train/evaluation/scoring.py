"""Accuracy with Wilson 95% intervals, per dataset and pooled (micro) and averaged (macro).

    python -m cosmos_train.evaluation.scoring results/Cosmos-Reason1-7B/reasoning [--datasets robovqa av]

Accuracy = correct / total, as the reference's calculate_accuracy.py; a question whose answer could
not be read counts as asked and wrong (and is counted in `unanswered`). Micro pools every question;
macro is the mean of the per-dataset accuracies; its interval combines the per-dataset Wilson
intervals' lower and upper distances from each accuracy as independent errors (root of the sum of
squares, over the number of datasets), so with one dataset it is that dataset's Wilson interval.
"""

from __future__ import annotations

import argparse
import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cosmos_train.atomic import write_atomic, write_json_atomic
from cosmos_train.evaluation.predictions import PredictionFileError, read_dataset_predictions

Z95 = 1.959963984540054


def wilson_interval(correct: int, total: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion; (0, 1) when total is 0."""
    if total < 0 or correct < 0 or correct > total:
        raise ValueError(f"need 0 <= correct <= total, got {correct}/{total}")
    if total == 0:
        return 0.0, 1.0
    p = correct / total
    denom = 1 + z * z / total
    centre = (p + z * z / (2 * total)) / denom
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / denom
    # The bounds are exactly 0 / 1 at the extremes; the formula leaves rounding error there.
    lo = 0.0 if correct == 0 else max(0.0, centre - half)
    hi = 1.0 if correct == total else min(1.0, centre + half)
    return lo, hi


@dataclass(frozen=True)
class Score:
    """Accuracy of one group of questions."""

    name: str
    correct: int
    total: int
    unanswered: int
    accuracy: float
    ci95_low: float
    ci95_high: float

    @classmethod
    def of(cls, name: str, correct: int, total: int, unanswered: int = 0) -> Score:
        lo, hi = wilson_interval(correct, total)
        return cls(name, correct, total, unanswered, correct / total if total else 0.0, lo, hi)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Scores:
    datasets: dict[str, Score]
    micro: Score
    macro: Score

    def as_dict(self) -> dict[str, Any]:
        return {
            "datasets": {k: v.as_dict() for k, v in self.datasets.items()},
            "overall": {"micro": self.micro.as_dict(), "macro": self.macro.as_dict()},
        }

    def accuracy_dict(self) -> dict[str, float]:
        """{dataset: accuracy, ..., "micro": ..., "macro": ...}: the numbers a table compares."""
        out = {k: v.accuracy for k, v in self.datasets.items()}
        out["micro"] = self.micro.accuracy
        out["macro"] = self.macro.accuracy
        return out


def score_dataset(name: str, records: Iterable[Mapping[str, Any]]) -> Score:
    """Score prediction records ({is_correct, answer, ...}) of one dataset."""
    correct = total = unanswered = 0
    for r in records:
        total += 1
        correct += bool(r["is_correct"])
        unanswered += not r.get("answer")
    return Score.of(name, correct, total, unanswered)


def combine(per_dataset: Mapping[str, Score]) -> Scores:
    scores = dict(per_dataset)
    micro = Score.of(
        "micro",
        sum(s.correct for s in scores.values()),
        sum(s.total for s in scores.values()),
        sum(s.unanswered for s in scores.values()),
    )
    used = [s for s in scores.values() if s.total]
    if used:
        mean = sum(s.accuracy for s in used) / len(used)
        below = math.sqrt(sum((s.accuracy - s.ci95_low) ** 2 for s in used)) / len(used)
        above = math.sqrt(sum((s.ci95_high - s.accuracy) ** 2 for s in used)) / len(used)
        macro = Score(
            "macro", micro.correct, micro.total, micro.unanswered, mean, max(0.0, mean - below), min(1.0, mean + above)
        )
    else:
        macro = Score("macro", 0, 0, 0, 0.0, 0.0, 1.0)
    return Scores(scores, micro, macro)


def score_records(records_by_dataset: Mapping[str, Iterable[Mapping[str, Any]]]) -> Scores:
    return combine({ds: score_dataset(ds, recs) for ds, recs in records_by_dataset.items()})


def score_run_dir(run_dir: str | Path, datasets: Sequence[str] | None = None) -> Scores:
    """Score every prediction file under <run_dir>/<dataset>/ (all dataset folders when None)."""
    run_dir = Path(run_dir)
    if datasets is None:
        datasets = sorted(p.name for p in run_dir.iterdir() if p.is_dir())
    if not datasets:
        raise PredictionFileError(f"{run_dir}: no dataset folders of prediction files; evaluate a model first")
    records = {ds: read_dataset_predictions(run_dir / ds) for ds in datasets}
    for ds, recs in records.items():
        # An empty folder is nothing measured, not accuracy 0.0.
        if not recs:
            raise PredictionFileError(
                f"{run_dir / ds}: no prediction files; evaluate {ds!r} first or leave it out of --datasets"
            )
    return score_records(records)


def write_results(run_dir: str | Path, scores: Scores, meta: Mapping[str, Any] | None = None) -> tuple[Path, Path]:
    """<run_dir>/results.json (scores + meta) and results.csv (one row per dataset, then micro, macro)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = run_dir / "results.json", run_dir / "results.csv"
    payload = {**(dict(meta) if meta else {}), **scores.as_dict()}
    write_json_atomic(json_path, payload)
    fields = ["name", "correct", "total", "unanswered", "accuracy", "ci95_low", "ci95_high"]
    table = io.StringIO(newline="")
    w = csv.DictWriter(table, fieldnames=fields)
    w.writeheader()
    for s in [*scores.datasets.values(), scores.micro, scores.macro]:
        w.writerow({k: (round(v, 6) if isinstance(v, float) else v) for k, v in s.as_dict().items()})
    write_atomic(csv_path, table.getvalue())
    return json_path, csv_path


def format_table(scores: Scores) -> str:
    lines = [f"{'dataset':<20} {'acc':>7} {'95% CI':>17} {'n':>6} {'unans':>6}"]
    for s in [*scores.datasets.values(), scores.micro, scores.macro]:
        ci = f"[{s.ci95_low:.3f}, {s.ci95_high:.3f}]"
        lines.append(f"{s.name:<20} {s.accuracy:>7.3f} {ci:>17} {s.total:>6} {s.unanswered:>6}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Score a folder of prediction files (<run_dir>/<dataset>/*.json).")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--datasets", nargs="*", default=None)
    args = p.parse_args(argv)
    scores = score_run_dir(args.run_dir, args.datasets)
    write_results(args.run_dir, scores)
    print(format_table(scores))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
