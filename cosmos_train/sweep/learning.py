"""The learning benchmark's numbers: does a GRPO recipe learn a task it was never shown, over seeds? (No Prefect:
flows/learning_benchmark.py runs the cells and publishes these.)

    cell = cell_metrics(run_dir, start_accuracy=0.27, final_accuracy=0.81)  # one (task, recipe, seed) GRPO run
    rows = summary_rows(cells)              # one row per (task, recipe): success rate, median gain, ...
    print(markdown_table(rows))
    print(remedy_table(remedy_rows(cells)))  # did the recipes fix the runs `default` failed, per verdict?

A cell is one GRPO run from a format-only SFT (an SFT on another task, which teaches the answer format and
nothing of this task) scored on the task's held-out benchmark before (`start_accuracy`, the SFT export) and
after (`final_accuracy`, the run's final weights: what a user keeps). What each row says:
- success: gain (final - start held-out accuracy) of at least SUCCESS_GAIN, as a count over the seeds;
- median gain over the seeds;
- steps to 0.9: the first validation step at or above REACHED accuracy (median over the seeds that reached it);
- best - final: validation accuracy at its best step minus at the last one (a late collapse, when large);
- final entropy: the mean token entropy of the last ENTROPY_TAIL train steps (a collapsed policy is near 0);
- verdicts: the run-health verdicts, today's rules on the run's metrics (result.json's `health` is what the run
  said when it ended), counted over the seeds;
- SFT ceiling (when measured): the held-out accuracy of an SFT on the task's own answers, what the model can
  learn of the task at all.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cosmos_train.config import load_config
from cosmos_train.curves import per_step, series
from cosmos_train.errors import ConfigError
from cosmos_train.metrics import reaches, read_metrics
from cosmos_train.train.run_health import assess, ratio_moves_of

SUCCESS_GAIN = 0.20  # held-out accuracy points a seed must gain to count as learning the task
REACHED = 0.9  # the validation accuracy "steps to" counts to
ENTROPY_TAIL = 10  # train steps the final entropy is averaged over


@dataclass
class Cell:
    """One (task, recipe, seed) GRPO run, measured."""

    task: str
    recipe: str
    seed: int
    run_dir: str
    start_accuracy: float  # held-out, the SFT export GRPO starts from
    final_accuracy: float  # held-out, the run's final export
    steps: int = 0  # train steps logged
    val_start: float | None = None  # validation accuracy at the first validation (step 0 when validated there)
    val_best: float | None = None
    val_best_step: int | None = None
    val_final: float | None = None
    steps_to_reach: int | None = None  # first validation step with accuracy >= REACHED
    final_entropy: float | None = None
    verdicts: list[str] = field(default_factory=list)

    @property
    def gain(self) -> float:
        return self.final_accuracy - self.start_accuracy

    @property
    def learned(self) -> bool:
        return reaches(self.gain, SUCCESS_GAIN)

    @property
    def collapse(self) -> float | None:
        """Validation accuracy lost after its best step (best - final)."""
        return None if self.val_best is None or self.val_final is None else self.val_best - self.val_final

    def record(self) -> dict[str, Any]:
        return {**asdict(self), "gain": self.gain, "learned": self.learned, "collapse": self.collapse}


def cell_metrics(
    run_dir: str | Path, *, task: str, recipe: str, seed: int, start_accuracy: float, final_accuracy: float
) -> Cell:
    """A cell from its GRPO run folder (metrics.jsonl, result.json) and its two held-out scores."""
    run = Path(run_dir)
    metrics = read_metrics(run) if run.is_dir() else []
    train, val = per_step(metrics, "train"), per_step(metrics, "val")
    cell = Cell(task, recipe, seed, str(run), start_accuracy, final_accuracy, steps=len(train))
    steps, acc = series(val, "accuracy")
    if acc:
        cell.val_start, cell.val_final = acc[0], acc[-1]
        best = max(range(len(acc)), key=lambda i: (acc[i], -steps[i]))  # the earliest of equal bests
        cell.val_best, cell.val_best_step = acc[best], steps[best]
        cell.steps_to_reach = next((s for s, a in zip(steps, acc) if a >= REACHED), None)
    _, entropy = series(train, "entropy")
    if entropy:
        tail = entropy[-ENTROPY_TAIL:]
        cell.final_entropy = sum(tail) / len(tail)
    cell.verdicts = _verdicts(run, metrics)
    return cell


def _verdicts(run: Path, metrics: list[dict[str, Any]]) -> list[str]:
    """The run judged by today's run-health rules with its own thresholds (RUN/config.toml), so runs made before a
    rule changed are counted alike; RUN/result.json's `health` where the config cannot be read."""
    try:
        cfg = load_config(run / "config.toml", check_paths=False, env={})
    except (OSError, ConfigError):
        result_file = run / "result.json"
        if not result_file.is_file():
            return []
        health = json.loads(result_file.read_text()).get("health") or {}
        return [v["name"] for v in health.get("verdicts", [])]
    ratio_moves = ratio_moves_of(cfg.train.train_policy)
    return [v.name for v in assess(metrics, cfg.train.run_health, ratio_moves).verdicts]


def _median(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


def summary_rows(cells: Iterable[Cell], ceilings: Mapping[str, float] | None = None) -> list[dict[str, Any]]:
    """One row per (task, recipe), in the order the cells came. ceilings: task -> held-out accuracy of an SFT on
    the task's own answers (what the model can learn of it at all; a task it cannot is no test of a recipe)."""
    groups: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        groups.setdefault((c.task, c.recipe), []).append(c)
    rows = []
    for (task, recipe), group in groups.items():
        reached = [c.steps_to_reach for c in group if c.steps_to_reach is not None]
        collapses = [c.collapse for c in group if c.collapse is not None]
        entropies = [c.final_entropy for c in group if c.final_entropy is not None]
        verdicts = Counter(v for c in group for v in c.verdicts)
        rows.append(
            {
                "task": task,
                "recipe": recipe,
                "sft_ceiling": (ceilings or {}).get(task),
                "learned": sum(c.learned for c in group),
                "seeds": len(group),
                "start_accuracy": _median([c.start_accuracy for c in group]),
                "median_gain": _median([c.gain for c in group]),
                "gains": [round(c.gain, 3) for c in group],
                "reached": len(reached),
                "median_steps_to_reach": _median([float(s) for s in reached]),
                "median_collapse": _median(collapses),
                "max_collapse": max(collapses) if collapses else None,
                "median_final_entropy": _median(entropies),
                "verdicts": dict(sorted(verdicts.items())),
            }
        )
    return rows


def remedy_rows(cells: Iterable[Cell], baseline: str = "default") -> list[dict[str, Any]]:
    """Does the remedy a verdict names work? For every verdict of a `baseline` run that failed with it (did not
    learn, or for `late_collapse` lost its best), and every other recipe run on the same task and seed (a recipe
    may also change the start: `<name>-own<N>`): the recipe fixed that run when its run ends without that verdict
    and with final held-out accuracy SUCCESS_GAIN above the failed run's (no lower, where the failed run learnt
    and only lost its best). One row per (verdict, recipe): the failed runs it was tried on, how many it fixed,
    and which (task sSEED)."""
    by_key = {(c.task, c.recipe, c.seed): c for c in cells}
    recipes = list(dict.fromkeys(c.recipe for c in by_key.values() if c.recipe != baseline))
    tried: dict[tuple[str, str], list[tuple[str, bool]]] = {}
    for (task, recipe, seed), c in by_key.items():
        if recipe != baseline:
            continue
        for verdict in dict.fromkeys(c.verdicts):
            if c.learned and verdict != "late_collapse":
                continue  # the run learned anyway: nothing for a remedy to fix
            for other in recipes:
                fix = by_key.get((task, other, seed))
                if fix is not None:
                    better = reaches(fix.final_accuracy - c.final_accuracy, 0.0 if c.learned else SUCCESS_GAIN)
                    fixed = better and verdict not in fix.verdicts
                    tried.setdefault((verdict, other), []).append((f"{task} s{seed}", fixed))
    return [
        {
            "verdict": verdict,
            "recipe": recipe,
            "failed_runs": len(runs),
            "fixed": sum(fixed for _, fixed in runs),
            "fixed_runs": [name for name, fixed in runs if fixed],
            "not_fixed_runs": [name for name, fixed in runs if not fixed],
        }
        for (verdict, recipe), runs in sorted(tried.items())
    ]


REMEDY_HEADER = (
    "| verdict | recipe | fixed (without the verdict, final >= 0.20 above the failed run's) | fixed runs | not fixed |"
)


def remedy_table(rows: Iterable[dict[str, Any]], baseline: str = "default") -> str:
    """remedy_rows as markdown: per verdict of a failed `baseline` run, what each recipe did on the same seeds."""
    lines = [f"Runs of `{baseline}` that failed with a verdict, run again with each recipe:", "", REMEDY_HEADER]
    lines.append("|" + "---|" * (REMEDY_HEADER.count("|") - 1))
    for r in rows:
        lines.append(
            f"| {r['verdict']} | {r['recipe']} | {r['fixed']}/{r['failed_runs']} | "
            f"{', '.join(r['fixed_runs']) or '-'} | {', '.join(r['not_fixed_runs']) or '-'} |"
        )
    return "\n".join(lines) + "\n"


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


TABLE_HEADER = (
    "| task | SFT ceiling | recipe | learned (gain >= 0.20) | start | median gain (per seed) "
    "| reached 0.9 val: median step | val best - final: median (max) | final entropy | verdicts (seeds) |"
)


def markdown_table(rows: Iterable[dict[str, Any]]) -> str:
    """The benchmark's table, one line per (task, recipe)."""
    lines = [TABLE_HEADER, "|" + "---|" * (TABLE_HEADER.count("|") - 1)]
    for r in rows:
        reach = f"{r['reached']}/{r['seeds']}"
        if r["median_steps_to_reach"] is not None:
            reach += f": {r['median_steps_to_reach']:.0f}"
        verdicts = ", ".join(f"{k} ({n})" for k, n in r["verdicts"].items()) or "none"
        gains = " ".join(f"{g:+.2f}" for g in r["gains"])
        lines.append(
            f"| {r['task']} | {_fmt(r['sft_ceiling'])} | {r['recipe']} | {r['learned']}/{r['seeds']} | "
            f"{_fmt(r['start_accuracy'])} | {_fmt(r['median_gain'], '+.2f')} ({gains}) | {reach} | "
            f"{_fmt(r['median_collapse'])} ({_fmt(r['max_collapse'])}) | "
            f"{_fmt(r['median_final_entropy'], '.3g')} | {verdicts} |"
        )
    return "\n".join(lines) + "\n"


__all__ = [
    "ENTROPY_TAIL",
    "REACHED",
    "SUCCESS_GAIN",
    "Cell",
    "cell_metrics",
    "markdown_table",
    "remedy_rows",
    "remedy_table",
    "summary_rows",
]
