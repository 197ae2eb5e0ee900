"""Scoring against hand-made prediction files; Wilson intervals; the reference file layout."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from cosmos_train.evaluation.predictions import (
    PredictionFileError,
    make_record,
    prediction_path,
    read_video_predictions,
    saved_records,
    write_video_predictions,
)
from cosmos_train.evaluation.scoring import score_run_dir, wilson_interval, write_results


def test_wilson_known_values() -> None:
    # 8/10: the textbook Wilson 95% interval is (0.4902, 0.9433).
    lo, hi = wilson_interval(8, 10)
    assert lo == pytest.approx(0.4902, abs=1e-4) and hi == pytest.approx(0.9433, abs=1e-4)
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0 and hi == pytest.approx(0.1611, abs=1e-4)
    assert wilson_interval(5, 5)[1] == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def _write(run: Path, ds: str, vid: str, answers: list[tuple[str, str]]) -> None:
    recs = [make_record(ds, vid, [], ref, "", ans, f"<answer>{ans}</answer>", ans == ref) for ref, ans in answers]
    write_video_predictions(prediction_path(run, ds, vid), recs)


def test_score_hand_made_files(tmp_path: Path) -> None:
    run = tmp_path / "results" / "model" / "reasoning"
    _write(run, "av", "v1", [("A", "A"), ("B", "C")])
    _write(run, "av", "v2", [("D", "D")])
    _write(run, "robovqa", "r1", [("A", ""), ("B", "B"), ("C", "A"), ("D", "A")])
    scores = score_run_dir(run)
    av, rv = scores.datasets["av"], scores.datasets["robovqa"]
    assert (av.correct, av.total, av.unanswered) == (2, 3, 0)
    assert (rv.correct, rv.total, rv.unanswered) == (1, 4, 1)
    assert av.accuracy == pytest.approx(2 / 3) and rv.accuracy == pytest.approx(0.25)
    assert (av.ci95_low, av.ci95_high) == pytest.approx(wilson_interval(2, 3))
    assert scores.micro.accuracy == pytest.approx(3 / 7)
    assert (scores.micro.ci95_low, scores.micro.ci95_high) == pytest.approx(wilson_interval(3, 7))
    assert scores.macro.accuracy == pytest.approx((2 / 3 + 0.25) / 2)
    below = math.sqrt((av.accuracy - av.ci95_low) ** 2 + (rv.accuracy - rv.ci95_low) ** 2) / 2
    assert scores.macro.ci95_low == pytest.approx(scores.macro.accuracy - below)
    assert scores.accuracy_dict() == pytest.approx(
        {"av": 2 / 3, "robovqa": 0.25, "micro": 3 / 7, "macro": (2 / 3 + 0.25) / 2}
    )

    json_path, csv_path = write_results(run, scores, {"model": "m"})
    data = json.loads(json_path.read_text())
    assert data["model"] == "m" and data["overall"]["micro"]["total"] == 7
    assert data["datasets"]["av"]["correct"] == 2
    rows = list(csv.DictReader(csv_path.open()))
    assert [r["name"] for r in rows] == ["av", "robovqa", "micro", "macro"]
    assert float(rows[1]["accuracy"]) == pytest.approx(0.25)


def test_single_dataset_macro_equals_wilson(tmp_path: Path) -> None:
    run = tmp_path / "r"
    _write(run, "x", "v", [("A", "A"), ("A", "B"), ("A", "A")])
    s = score_run_dir(run)
    assert (s.macro.ci95_low, s.macro.ci95_high) == pytest.approx((s.micro.ci95_low, s.micro.ci95_high))


def test_record_layout_and_resume_check(tmp_path: Path) -> None:
    path = prediction_path(tmp_path, "av", "clip-1")
    assert path == tmp_path / "av" / "clip-1.json"
    write_video_predictions(path, [make_record("av", "clip-1", [{"role": "system"}], "B", "why", None, "??", False)])
    (rec,) = json.loads(path.read_text())
    assert list(rec) == [
        "datasource",
        "video_id",
        "prompt",
        "correct_answer",
        "reasoning",
        "answer",
        "full_response",
        "is_correct",
    ]
    assert rec["answer"] == ""  # unreadable answers are written as the reference does
    assert saved_records(path, 1) == [rec]
    assert saved_records(path, 2) is None  # question count changed: redo
    assert saved_records(tmp_path / "av" / "other.json", 1) is None
    path.write_text("[{")  # a truncated file is not a finished video
    assert saved_records(path, 1) is None
    with pytest.raises(PredictionFileError, match="clip-1.json: not valid JSON"):
        read_video_predictions(path)
    path.write_text(json.dumps([{"video_id": "x"}]))
    with pytest.raises(PredictionFileError, match="entry 0 lacks datasource"):
        read_video_predictions(path)
    assert not list((tmp_path / "av").glob("*.tmp"))


def test_nothing_to_score_is_an_error(tmp_path: Path) -> None:
    run = tmp_path / "results" / "model" / "letter"
    run.mkdir(parents=True)
    with pytest.raises(PredictionFileError, match="no dataset folders"):
        score_run_dir(run)
    (run / "av").mkdir()
    with pytest.raises(PredictionFileError, match=r"av: no prediction files; evaluate 'av' first"):
        score_run_dir(run)
