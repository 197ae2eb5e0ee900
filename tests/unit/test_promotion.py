"""cosmos_train/promotion.py: the gate's decision on an export against its parent, its verdict, the model card."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from cosmos_train.errors import EXIT_USER_ERROR, UserError, user_error_of
from cosmos_train.evaluation.report import answer_profile
from cosmos_train.evaluation.scoring import score_records
from cosmos_train.promotion import (
    EXIT_NOT_PROMOTED,
    FLAG_KINDS,
    NotPromoted,
    flag_kind,
    gate_decision,
    gate_markdown,
    model_card,
    stop_paragraph,
)


def _result(label: str, answers: str, correct: str, chance: float | None = 0.25) -> dict[str, Any]:
    """An evaluation result as the evaluate flow returns it, scored by the real scorer: one question per
    letter of `answers` ("" for an unreadable answer: "_"), right where it equals `correct`'s letter."""
    given = ["" if a == "_" else a for a in answers]
    records = [{"is_correct": a == c, "answer": a} for a, c in zip(given, correct, strict=True)]
    counts: dict[str, int] = {}
    for a in given:
        counts[a] = counts.get(a, 0) + 1
    return {
        "label": label,
        "model": f"/pipe/{label}/safetensors/final",
        "run_dir": f"/pipe/eval/{label}",
        "scores": score_records({"bench": records}).as_dict(),
        "answers": counts,
        "chance": chance,
    }


KEY = "ABCD" * 10  # 40 questions, every option equally often
BASE = _result("base", "A" * 10 + "B" * 10 + "C" * 10 + "D" * 10, KEY)  # 10/40 = chance: flagged
GOOD = _result("sft", KEY[:30] + "BCDA" * 2 + "BC", KEY)  # 30/40, varied answers: no flag


def test_a_better_export_without_flags_is_promoted() -> None:
    assert answer_profile(GOOD)["flags"] == []
    d = gate_decision("sft", "base", GOOD, BASE, min_gain=10.0, blocking=FLAG_KINDS)
    assert d["promoted"] and d["reasons"] == []
    assert d["accuracy"] == pytest.approx(75.0) and d["parent_accuracy"] == pytest.approx(25.0)
    assert d["gain"] == pytest.approx(50.0) and d["n"] == d["parent_n"] == 40
    assert d["ci95"][0] < 75.0 < d["ci95"][1] and d["parent_ci95"][0] < 25.0 < d["parent_ci95"][1]
    assert d["model"] == GOOD["model"] and d["parent_model"] == BASE["model"]


def test_the_gain_is_measured_in_points_and_exactly_min_gain_passes() -> None:
    same = _result("sft", "A" * 10 + "B" * 10 + "C" * 10 + "D" * 10, KEY)
    assert gate_decision("sft", "base", same, BASE, 0.0, blocking=[])["promoted"]  # not worse: enough at 0
    d = gate_decision("sft", "base", same, BASE, 0.1, blocking=[])
    assert not d["promoted"] and d["reasons"] == ["gain +0.0 points, below gate.min_gain = 0.1"]
    worse = _result("grpo", "D" + "A" * 9 + "B" * 10 + "C" * 10 + "D" * 10, KEY)  # 9/40: -2.5 points
    assert gate_decision("grpo", "sft", worse, BASE, -2.5, blocking=[])["promoted"]  # a tolerated loss
    assert not gate_decision("grpo", "sft", worse, BASE, -2.4, blocking=[])["promoted"]
    # 0.1 + 0.2 style rounding must not turn "exactly" into "below": 7/40 - 3/40 = 10 points
    a, b = _result("x", KEY[:7] + "_" * 33, KEY, None), _result("y", KEY[:3] + "_" * 37, KEY, None)
    assert gate_decision("x", "y", a, b, 10.0, blocking=[])["promoted"]


def test_flags_block_unless_left_out_of_blocking_flags() -> None:
    constant = _result("sft", "A" * 40, KEY)  # 10/40, one option only
    unreadable = _result("sft", KEY[:28] + "_" * 12, KEY)  # 28/40, 30% unreadable
    assert [flag_kind(f) for f in answer_profile(constant)["flags"]] == ["constant_answer", "not_above_chance"]
    assert [flag_kind(f) for f in answer_profile(unreadable)["flags"]] == ["unreadable"]

    d = gate_decision("sft", "base", unreadable, BASE, -100.0, blocking=FLAG_KINDS)
    assert not d["promoted"] and d["reasons"] == ["flag: 30% of the answers unreadable"]
    assert d["flags"] == [{"flag": "30% of the answers unreadable", "kind": "unreadable", "blocks": True}]
    assert gate_decision("sft", "base", unreadable, BASE, -100.0, blocking=["not_above_chance"])["promoted"]

    d = gate_decision("sft", "base", constant, BASE, 5.0, blocking=["constant_answer"])
    assert d["reasons"] == [
        "gain +0.0 points, below gate.min_gain = 5",
        "flag: answers A to 100% of the questions",
    ]
    assert [f["blocks"] for f in d["flags"]] == [True, False]
    assert gate_decision("sft", "base", constant, BASE, 0.0, blocking=[])["promoted"]  # the score alone decides


def test_every_flag_the_evaluation_raises_has_a_kind() -> None:
    """The gate reads answer_profile's sentences: a reworded flag must fail here, not pass the gate unseen."""
    cases = [
        _result("a", "B" * 40, KEY),
        _result("b", "_" * 20 + KEY[20:], KEY),
        _result("c", "C" * 35 + "_" * 5, KEY, chance=0.5),
    ]
    flags = [f for r in cases for f in answer_profile(r)["flags"]]
    assert {flag_kind(f) for f in flags} == set(FLAG_KINDS), flags
    assert flag_kind("something new") is None


def test_an_unknown_flag_blocks_unless_flags_are_off(monkeypatch: pytest.MonkeyPatch) -> None:
    import cosmos_train.promotion as promotion

    monkeypatch.setattr(promotion, "answer_profile", lambda r: {"flags": ["a new kind of trouble"]})
    assert not gate_decision("sft", "base", GOOD, BASE, 0.0, blocking=["unreadable"])["promoted"]
    assert gate_decision("sft", "base", GOOD, BASE, 0.0, blocking=[])["promoted"]


def test_free_form_evaluation_has_no_flags_and_the_score_decides() -> None:
    free = _result("sft", KEY[:20] + "_" * 20, KEY, chance=None)  # no chance level: no profile
    d = gate_decision("sft", "base", free, BASE, 20.0, blocking=FLAG_KINDS)
    assert d["flags"] == [] and d["promoted"]


def test_verdict_and_paragraph_say_stage_scores_gain_needed_and_flags(tmp_path: Path) -> None:
    d = gate_decision("sft", "base", _result("sft", "A" * 40, KEY), BASE, 5.0, blocking=FLAG_KINDS)
    text = gate_markdown(d)
    assert text.startswith("# Gate: `sft` NOT promoted")
    assert "| sft (this stage) | 25.0% [14.2, 40.2] | 40 |" in text
    assert "| base (its parent) | 25.0% [14.2, 40.2] | 40 |" in text
    assert "- gain: +0.0 points; needed: at least +5 (gate.min_gain)" in text
    assert "  - answers A to 100% of the questions: blocks" in text
    assert (
        "- verdict: **stopped**: gain +0.0 points, below gate.min_gain = 5" in text and "nothing was uploaded" in text
    )
    paragraph = stop_paragraph(d, tmp_path)
    assert paragraph.startswith("post-train stopped by [gate]: the sft stage's export /pipe/sft/safetensors/final")
    assert str(tmp_path / "pipeline.json") in paragraph and "gate.min_gain = 5" in paragraph
    ok = gate_markdown(gate_decision("sft", "base", GOOD, BASE, 5.0, blocking=FLAG_KINDS))
    assert ok.startswith("# Gate: `sft` promoted") and "- flags: none" in ok and "**promoted**" in ok


def test_not_promoted_is_a_user_error_with_its_own_exit_code() -> None:
    err = NotPromoted("post-train stopped by [gate]: ...")
    assert isinstance(err, UserError) and user_error_of(err) is err and err.kind == "gate"
    assert err.exit_code == EXIT_NOT_PROMOTED != EXIT_USER_ERROR
    again = pickle.loads(pickle.dumps(err))  # Prefect stores a failed flow run's exception
    assert type(again) is NotPromoted and str(again) == str(err)


def test_model_card_lineage_data_scores_and_uploads() -> None:
    decisions = {"sft": gate_decision("sft", "base", GOOD, BASE, 0.0, blocking=FLAG_KINDS)}
    card = model_card(
        pipeline="tiny",
        folder="/pipe",
        stage="sft",
        lineage=[
            {"stage": "base", "model": "nvidia/Cosmos-Reason1-7B", "run_dir": None, "config": None},
            {"stage": "sft", "model": GOOD["model"], "run_dir": "/pipe/sft/r1", "config": "/pipe/sft/r1/config.toml"},
        ],
        data=[{"stage": "sft", "dataset": "/data/synthetic", "rows": "400 used of 400"}],
        evaluations={"base": BASE, "sft": GOOD},
        decisions=decisions,
        eval_config="/configs/eval-tiny.toml",
        uploads=[{"url": "s3://bucket/tiny", "status": "upload target"}],
    )
    head, body = card.split("---\n")[1], card.split("---\n", 2)[2]
    assert "library_name: transformers" in head and "base_model: nvidia/Cosmos-Reason1-7B" in head
    assert "tags: [cosmos-train, sft]" in head
    assert "# tiny: sft" in body and "base -> sft" in body
    assert "| sft | `/pipe/sft/safetensors/final` | `/pipe/sft/r1` | `/pipe/sft/r1/config.toml` |" in body
    assert "| sft | `/data/synthetic` | 400 used of 400 |" in body
    assert "Accuracy on bench (config `/configs/eval-tiny.toml`)" in body
    assert "| base | 25.0% [14.2, 40.2] | 40 | - | not above chance (25.0%) | - |" in body
    assert "| sft | 75.0% [59.8, 85.8] | 40 | +50.0 points (needed +0) | none | promoted |" in body
    assert "- s3://bucket/tiny (upload target)" in body
    bare = model_card(
        pipeline="tiny",
        folder="/pipe",
        stage="sft",
        lineage=[{"stage": "base", "model": "/models/base"}, {"stage": "sft", "model": "/x"}],
        data=[],
        evaluations={},
        decisions={},
        eval_config=None,
        uploads=[],
    )
    assert "base_model" not in bare  # a local base model is no Hub id: the Hub refuses it as base_model
    assert "Not evaluated" in bare and "Not uploaded by the pipeline." in bare
