"""Model comparison helpers: labels for checkpoints, the side-by-side table, the wrong-answer digest."""

from __future__ import annotations

import json
from pathlib import Path

from cosmos_train.evaluation.report import (
    answer_profile,
    comparison_rows,
    run_label,
    unique_labels,
    verdict_markdown,
    wrong_answers_markdown,
)


def test_unique_labels() -> None:
    assert unique_labels(["nvidia/Cosmos-Reason1-7B", "out/sft/final"]) == ["Cosmos-Reason1-7B", "final"]
    assert unique_labels(["o/sft/safetensors/final", "o/grpo/safetensors/final"]) == [
        "sft-safetensors-final",
        "grpo-safetensors-final",
    ]
    assert unique_labels(["a/m", "a/m/"]) == ["m-0", "m-1"]


def _result(
    label: str, acc: float, wrong: list | None = None, answers: dict | None = None, chance: float | None = None
) -> dict:
    s = {"accuracy": acc, "ci95_low": acc - 0.1, "ci95_high": acc + 0.1, "total": 10}
    return {
        "label": label,
        "model": f"/ckpt/{label}",
        "run_dir": f"/r/{label}",
        "unanswered": [],
        "scores": {"datasets": {"av": s}, "overall": {"micro": s, "macro": s}},
        "wrong": wrong or [],
        "answers": answers or {},
        "chance": chance,
    }


def test_comparison_rows_side_by_side() -> None:
    rows = comparison_rows([_result("base", 0.4), _result("sft", 0.55)])
    assert rows[0] == {"dataset": "av", "base": "40.0 [30.0, 50.0]", "sft": "55.0 [45.0, 65.0]", "n": 10}
    assert [r["dataset"] for r in rows] == ["av", "overall (micro)", "overall (macro)", "checkpoint"]
    assert rows[-1] == {"dataset": "checkpoint", "base": "/ckpt/base", "sft": "/ckpt/sft"}


def test_a_constant_answer_model_is_flagged_and_a_good_one_is_not() -> None:
    """The issue's case: a model answering D to everything scores the share of D; one that cannot be read
    scores below chance. Both flagged, next to the benchmark's chance level; a good model is not."""
    constant = _result("sft-40", 0.24, answers={"D": 100}, chance=0.25)
    unreadable = _result("base", 0.02, answers={"": 32, "A": 20, "B": 18, "C": 15, "D": 15}, chance=0.25)
    good = _result("grpo", 0.9, answers={"A": 26, "B": 24, "C": 25, "D": 25}, chance=0.25)
    assert answer_profile(constant)["flags"] == ["answers D to 100% of the questions", "not above chance (25.0%)"]
    assert answer_profile(unreadable)["flags"] == ["32% of the answers unreadable", "not above chance (25.0%)"]
    assert answer_profile(good)["flags"] == [] and answer_profile(good)["unreadable"] == 0
    rows = {r["dataset"]: r for r in comparison_rows([constant, unreadable, good])}
    assert rows["chance level"] == {"dataset": "chance level", "sft-40": "25.0", "base": "25.0", "grpo": "25.0"}
    assert rows["answers given"]["grpo"] == "A 26% · B 24% · C 25% · D 25% · unreadable 0%"
    assert rows["flags"]["sft-40"].startswith("⚠ answers D to 100%") and rows["flags"]["grpo"] == "ok"
    assert "**check this model**: answers D to 100%" in verdict_markdown("sft-40", constant)
    assert "above chance, no degenerate answers" in verdict_markdown("grpo", good, run_dir="/runs/g")
    assert answer_profile(_result("free", 0.5)) == {}  # free-form: no options, no profile


def test_exports_are_labelled_by_stage_run_and_step(tmp_path: Path) -> None:
    run = tmp_path / "20261124193700"
    (run / "safetensors" / "final").mkdir(parents=True)
    (run / "safetensors" / "best").mkdir()
    (run / "config.toml").write_text('[train.train_policy]\ntype = "grpo"\n')
    (run / "result.json").write_text(json.dumps({"step": 40, "best": {"step": 30}}))
    final, best = str(run / "safetensors" / "final"), str(run / "safetensors" / "best")
    assert run_label(final) == "grpo@20261124193700-step40" and run_label(best) == "grpo@20261124193700-step30-best"
    assert run_label(str(run / "safetensors" / "step_20")) == "grpo@20261124193700-step20"
    assert run_label("nvidia/Cosmos-Reason1-7B") is None
    assert unique_labels(["nvidia/Cosmos-Reason1-7B", final]) == ["Cosmos-Reason1-7B", "grpo@20261124193700-step40"]


def test_wrong_answers_markdown() -> None:
    wrong = [
        {
            "dataset": "av",
            "video_id": "v|1",
            "question": "Which way?",
            "correct_answer": "B",
            "answer": "",
            "full_response": "line1\nline2",
        }
    ]
    md = wrong_answers_markdown([_result("base", 0.4, wrong), _result("sft", 1.0)])
    assert "## base (1 wrong of 10" in md and "| av | v\\|1 | Which way? | B | (none) | line1 line2 |" in md
    assert "## sft (0 wrong of 10" in md and "None." in md
