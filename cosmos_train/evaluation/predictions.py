"""Prediction files in the reference layout, and the resume check.

One JSON file per video, `<results_dir>/<model basename>/<answer_type>/<dataset>/<video_id>.json`,
holding a list with one record per question:

    {"datasource", "video_id", "prompt", "correct_answer", "reasoning", "answer", "full_response", "is_correct"}

`answer` is "" when no option could be read from the response (as the reference writes it).
Files are written to a temporary name and renamed, so an interrupted run never leaves a half file
that a resumed run (skip_saved) would take for a finished video.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cosmos_train.atomic import write_json_atomic
from cosmos_train.errors import BenchmarkError

RECORD_KEYS = (
    "datasource",
    "video_id",
    "prompt",
    "correct_answer",
    "reasoning",
    "answer",
    "full_response",
    "is_correct",
)


class PredictionFileError(BenchmarkError):
    """A prediction file that does not hold the reference layout (file and entry named)."""


def prediction_path(run_dir: str | Path, dataset: str, video_id: str) -> Path:
    return Path(run_dir) / dataset / f"{video_id}.json"


def make_record(
    dataset: str,
    video_id: str,
    prompt: Any,
    correct_answer: str,
    reasoning: str,
    answer: str | None,
    full_response: str,
    is_correct: bool,
) -> dict[str, Any]:
    return {
        "datasource": dataset,
        "video_id": video_id,
        "prompt": prompt,
        "correct_answer": correct_answer,
        "reasoning": reasoning,
        "answer": answer or "",
        "full_response": full_response,
        "is_correct": bool(is_correct),
    }


def write_video_predictions(path: str | Path, records: Sequence[dict[str, Any]]) -> Path:
    """Write one video's records atomically."""
    return write_json_atomic(path, list(records))


def read_video_predictions(path: str | Path) -> list[dict[str, Any]]:
    """The records of one prediction file, checked for the reference keys."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise PredictionFileError(f"{path}: not valid JSON ({e})") from e
    if isinstance(data, dict):  # a single record written without the list
        data = [data]
    if not isinstance(data, list):
        raise PredictionFileError(f"{path}: expected a list of records, got {type(data).__name__}")
    for i, rec in enumerate(data):
        if not isinstance(rec, dict):
            raise PredictionFileError(f"{path}: entry {i} is not an object")
        missing = [k for k in ("datasource", "video_id", "correct_answer", "answer", "is_correct") if k not in rec]
        if missing:
            raise PredictionFileError(f"{path}: entry {i} lacks {', '.join(missing)}")
    return data


def read_dataset_predictions(folder: str | Path) -> list[dict[str, Any]]:
    """Every record under one dataset folder (files in name order)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise PredictionFileError(f"{folder}: no such prediction folder")
    out: list[dict[str, Any]] = []
    for f in sorted(folder.glob("*.json")):
        out.extend(read_video_predictions(f))
    return out


def saved_records(path: str | Path, n_questions: int) -> list[dict[str, Any]] | None:
    """The saved records of a finished video, or None when it must be (re)done.

    Finished means the file reads back with one record per question; a file from an older
    benchmark version with a different question count is redone rather than trusted.
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        records = read_video_predictions(path)
    except PredictionFileError:
        return None
    return records if len(records) == n_questions else None
