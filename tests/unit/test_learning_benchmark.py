"""The learning benchmark's arithmetic (cosmos_train/sweep/learning.py) on run folders with known rows, the recipe
parser of its command (bench/learning.py) and the format-source rule (flows/learning_benchmark.py).

    pytest -q tests/unit/test_learning_benchmark.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.learning import parse_recipe
from cosmos_train.data.synthetic_families import FAMILIES
from cosmos_train.sweep.learning import cell_metrics, markdown_table, summary_rows
from flows.learning_benchmark import format_source


def _run(tmp_path: Path, name: str, val: list[tuple[int, float]], entropy: list[float], verdicts=()) -> Path:
    run = tmp_path / name
    run.mkdir()
    rows = [{"kind": "train", "step": i + 1, "entropy": e, "reward_mean": 0.5} for i, e in enumerate(entropy)]
    rows += [{"kind": "val", "step": s, "accuracy": a, "n": 64} for s, a in val]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    health = {"healthy": not verdicts, "steps": len(entropy), "verdicts": [{"name": v} for v in verdicts]}
    (run / "result.json").write_text(json.dumps({"step": len(entropy), "health": health}))
    return run


def test_a_cell_reads_best_final_reach_entropy_and_verdicts(tmp_path: Path) -> None:
    # validation 0.30 -> 0.95 (step 20, first >= 0.9 at step 10: 0.90) -> 0.60 at the end: a late collapse of 0.35
    run = _run(
        tmp_path,
        "a",
        [(0, 0.30), (10, 0.90), (20, 0.95), (30, 0.95), (40, 0.60)],
        [2.0] * 5 + [1.0] * 10,
        ["late_collapse"],
    )
    cell = cell_metrics(run, task="speed", recipe="default", seed=1, start_accuracy=0.27, final_accuracy=0.58)
    assert (cell.val_start, cell.val_best, cell.val_best_step, cell.val_final) == (0.30, 0.95, 20, 0.60)
    assert cell.steps_to_reach == 10
    assert cell.collapse == pytest.approx(0.35)
    assert cell.final_entropy == pytest.approx(1.0)  # the mean of the last 10 train steps, not of all 15
    assert cell.gain == pytest.approx(0.31) and cell.learned
    assert cell.verdicts == ["late_collapse"] and cell.steps == 15


def test_a_run_that_never_reaches_has_no_step_and_does_not_learn(tmp_path: Path) -> None:
    run = _run(tmp_path, "b", [(0, 0.5), (10, 0.52)], [0.3, 0.3])
    cell = cell_metrics(run, task="gravity", recipe="default", seed=0, start_accuracy=0.50, final_accuracy=0.69)
    assert cell.steps_to_reach is None and not cell.learned  # +0.19 is under the 0.20 bar


def test_rows_count_learned_seeds_and_take_medians(tmp_path: Path) -> None:
    cells = [
        cell_metrics(
            _run(tmp_path, f"s{seed}", [(0, 0.3), (10, acc)], [1.0, 0.5], verdicts),
            task="speed",
            recipe="default",
            seed=seed,
            start_accuracy=0.25,
            final_accuracy=final,
        )
        for seed, acc, final, verdicts in (
            (0, 0.95, 0.90, ()),
            (1, 0.40, 0.30, ("entropy_collapse", "reward_flat")),
            (2, 0.92, 0.85, ("entropy_collapse",)),
        )
    ]
    (row,) = summary_rows(cells, {"speed": 0.97})
    assert (row["learned"], row["seeds"], row["reached"]) == (2, 3, 2)
    assert row["median_gain"] == pytest.approx(0.60)
    assert row["median_steps_to_reach"] == 10
    assert row["verdicts"] == {"entropy_collapse": 2, "reward_flat": 1}
    table = markdown_table([row])
    header, rule, line = table.splitlines()
    assert header.count("|") == rule.count("|") == line.count("|")
    assert "| speed | 0.97 | default | 2/3 | 0.25 | +0.60 (+0.65 +0.05 +0.60) | 2/3: 10 |" in line


def test_recipes_parse_with_commas_inside_values() -> None:
    assert parse_recipe("default") == ("default", [])
    assert parse_recipe('kl=train.train_policy.kl_beta=0.01,train.optm_decay_type="cosine"') == (
        "kl",
        ["train.train_policy.kl_beta=0.01", 'train.optm_decay_type="cosine"'],
    )
    assert parse_recipe('r=logging.logger=["console","jsonl"],train.seed=3')[1] == [
        'logging.logger=["console","jsonl"]',
        "train.seed=3",
    ]


def test_every_task_starts_from_another_tasks_format_sft() -> None:
    sources = {t: format_source(t) for t in FAMILIES}
    assert all(s != t and s in FAMILIES for t, s in sources.items())
