"""Model comparison helpers: labels for checkpoints, the side-by-side table, the wrong-answer digest."""

from __future__ import annotations

from cosmos_train.evaluation.report import comparison_rows, unique_labels, wrong_answers_markdown


def test_unique_labels() -> None:
    assert unique_labels(["nvidia/Cosmos-Reason1-7B", "out/sft/final"]) == ["Cosmos-Reason1-7B", "final"]
    assert unique_labels(["o/sft/safetensors/final", "o/grpo/safetensors/final"]) == [
        "sft-safetensors-final",
        "grpo-safetensors-final",
    ]
    assert unique_labels(["a/m", "a/m/"]) == ["m-0", "m-1"]


def _result(label: str, acc: float, wrong: list | None = None) -> dict:
    s = {"accuracy": acc, "ci95_low": acc - 0.1, "ci95_high": acc + 0.1, "total": 10}
    return {
        "label": label, "run_dir": f"/r/{label}", "unanswered": [],
        "scores": {"datasets": {"av": s}, "overall": {"micro": s, "macro": s}},
        "wrong": wrong or [],
    }


def test_comparison_rows_side_by_side() -> None:
    rows = comparison_rows([_result("base", 0.4), _result("sft", 0.55)])
    assert rows[0] == {"dataset": "av", "base": "40.0 [30.0, 50.0]", "sft": "55.0 [45.0, 65.0]", "n": 10}
    assert [r["dataset"] for r in rows] == ["av", "overall (micro)", "overall (macro)"]


def test_wrong_answers_markdown() -> None:
    wrong = [{"dataset": "av", "video_id": "v|1", "question": "Which way?", "correct_answer": "B", "answer": "",
              "full_response": "line1\nline2"}]
    md = wrong_answers_markdown([_result("base", 0.4, wrong), _result("sft", 1.0)])
    assert "## base (1 wrong of 10" in md and "| av | v\\|1 | Which way? | B | (none) | line1 line2 |" in md
    assert "## sft (0 wrong of 10" in md and "None." in md
