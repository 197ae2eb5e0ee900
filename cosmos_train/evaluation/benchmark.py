"""Load a Cosmos-Reason style benchmark: `<data>/benchmark/<ds>/<ds>_benchmark_qa_pairs.json` + `clips/`.

Each row is {"video": "clips/<id>.mp4", "qa_pairs": {...} | [{...}, ...]} with every qa pair
{"question", "index2ans": {"A": ..., ...}, "answer" | "correct_answer"}. Rows naming the same
video are merged into one `BenchmarkVideo` (the reference writes one prediction file per video).
A row without "video" is a text-only question (for text-only models): its "id" (else "q<row>") names it,
and its `video_path` is None.
Any dataset name works; nothing here knows robovqa from av. Problems raise `BenchmarkError`
naming the file and row: a missing clip, a missing key, an answer that is not one of the options,
and a benchmark with no question to ask (an empty file, or limit = 0).

Clips are confined to the benchmark folder as training media are to a dataset's media roots: a "video" that
resolves (`..` and symlinks followed, absolute or not) outside <data_dir>/benchmark/<ds> is refused before
anything opens it, unless evaluation.allow_media_outside_root = true says the rows are meant to point there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cosmos_train.errors import BenchmarkError

VIDEO_SUFFIXES = (".mp4", ".avi", ".mov", ".mkv", ".webm")


@dataclass(frozen=True)
class Question:
    """One multiple-choice (or free-form) question about a video."""

    dataset: str
    video_id: str
    index: int  # position among the video's questions
    question: str
    options: dict[str, str]  # letter -> option text; empty for free-form questions
    answer: str  # the correct letter (or text for free-form)
    origin: str  # "file:row" for messages


@dataclass
class BenchmarkVideo:
    """A clip and every question asked about it."""

    dataset: str
    video_id: str
    video_path: Path | None  # None: text-only questions (a row without "video")
    questions: list[Question] = field(default_factory=list)


def benchmark_dir(data_dir: str | Path, dataset: str) -> Path:
    """<data_dir>/benchmark/<dataset>; a data_dir that already is the benchmark folder works too."""
    data_dir = Path(data_dir)
    for candidate in (data_dir / "benchmark" / dataset, data_dir / dataset):
        if (candidate / f"{dataset}_benchmark_qa_pairs.json").is_file():
            return candidate
    return data_dir / "benchmark" / dataset


def load_benchmark(
    data_dir: str | Path,
    dataset: str,
    limit: int | None = None,
    require_options: bool = True,
    allow_media_outside_root: bool = False,
) -> list[BenchmarkVideo]:
    """The videos of one benchmark in file order, each with its questions.

    limit: stop adding videos once this many questions are gathered (whole videos, as the reference).
    require_options: every question must have index2ans (False for free-form benchmarks).
    allow_media_outside_root: read clips that lie outside the benchmark folder (evaluation.allow_media_outside_root).
    """
    folder = benchmark_dir(data_dir, dataset)
    qa_file = folder / f"{dataset}_benchmark_qa_pairs.json"
    if not qa_file.is_file():
        raise BenchmarkError(
            f"benchmark {dataset!r}: {qa_file} does not exist "
            "(expected <data_dir>/benchmark/<ds>/<ds>_benchmark_qa_pairs.json)"
        )
    try:
        rows = json.loads(qa_file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise BenchmarkError(f"{qa_file}: not valid JSON ({e})") from e
    if isinstance(rows, dict):  # a dict keyed by id is accepted as its values
        rows = list(rows.values())
    if not isinstance(rows, list):
        raise BenchmarkError(f"{qa_file}: expected a JSON list of rows, got {type(rows).__name__}")

    videos: dict[str, BenchmarkVideo] = {}
    n_questions = 0
    for row_idx, row in enumerate(rows):
        where = f"{qa_file}:row {row_idx}"
        if limit is not None and n_questions >= limit:
            break
        if not isinstance(row, dict):
            raise BenchmarkError(f"{where}: expected an object, got {type(row).__name__}")
        video = row.get("video")
        path: Path | None = None
        if "video" not in row:  # a text-only question
            video_id = str(row.get("id", f"q{row_idx}"))
        elif not isinstance(video, str) or not video:
            raise BenchmarkError(
                f"{where}: 'video' must name a clip (e.g. \"clips/<id>.mp4\"; leave the key out for "
                "a text-only question)"
            )
        else:
            path = Path(video) if Path(video).is_absolute() else folder / video
            if not allow_media_outside_root:
                check_inside_benchmark(path, video, folder, where)
            if not path.is_file():
                raise BenchmarkError(f"{where}: video file {path} does not exist")
            video_id = Path(video).name
            for suffix in VIDEO_SUFFIXES:
                if video_id.lower().endswith(suffix):
                    video_id = video_id[: -len(suffix)]
                    break
        qa = row.get("qa_pairs")
        if isinstance(qa, dict):
            qa = [qa]
        if not isinstance(qa, list) or not qa:
            raise BenchmarkError(f"{where}: 'qa_pairs' must be an object or a non-empty list of objects")
        item = videos.get(video_id)
        if item is None:
            item = videos[video_id] = BenchmarkVideo(dataset, video_id, path)
        elif item.video_path != path:
            raise BenchmarkError(f"{where}: video id {video_id!r} also names {item.video_path}; ids must be unique")
        for k, pair in enumerate(qa):
            q = _question(pair, dataset, video_id, len(item.questions), f"{where} qa_pairs[{k}]", require_options)
            item.questions.append(q)
            n_questions += 1
    if not videos:
        # Scoring nothing would report accuracy 0.0 as if measured; say so before any model loads.
        if limit == 0:
            raise BenchmarkError(
                f"benchmark {dataset!r}: limit = 0 leaves none of the questions of {qa_file}; "
                "set limit to a positive number of questions, or -1 for all"
            )
        raise BenchmarkError(
            f"benchmark {dataset!r}: {qa_file} holds no questions (no rows); add rows "
            '{"video": "clips/<id>.mp4", "qa_pairs": {"question", "index2ans", "answer"}} '
            f"or remove {dataset!r} from datasets"
        )
    return list(videos.values())


def check_inside_benchmark(path: Path, video: str, folder: Path, where: str) -> None:
    """BenchmarkError unless `path` lies under the benchmark `folder` once `..` and symlinks are resolved (the
    training data's media_outside_root rule, `data.sources.common.check_inside_roots`, for a benchmark row).
    Only the path is resolved: the file is not opened, so a row cannot make the evaluation read anything else."""
    real, root = path.resolve(), folder.resolve()
    if real.is_relative_to(root):
        return
    raise BenchmarkError(
        f"{where}: video {video!r} resolves to {real}, outside the benchmark folder ({root}); move it under "
        "the benchmark folder (e.g. clips/), or set evaluation.allow_media_outside_root = true if the rows are "
        "meant to point there"
    )


def _question(pair: Any, dataset: str, video_id: str, index: int, where: str, require_options: bool) -> Question:
    if not isinstance(pair, dict):
        raise BenchmarkError(f"{where}: expected an object, got {type(pair).__name__}")
    question = pair.get("question")
    if not isinstance(question, str) or not question.strip():
        raise BenchmarkError(f"{where}: missing 'question'")
    answer = pair.get("answer", pair.get("correct_answer"))
    if not isinstance(answer, str) or not answer.strip():
        raise BenchmarkError(f"{where}: missing 'answer' (or 'correct_answer')")
    options = pair.get("index2ans") or {}
    if not isinstance(options, dict) or not all(isinstance(v, str) for v in options.values()):
        raise BenchmarkError(f"{where}: 'index2ans' must map letters to option texts")
    options = {str(k).strip().upper(): v for k, v in options.items()}
    if require_options and not options:
        raise BenchmarkError(f"{where}: missing 'index2ans' (a multiple-choice question needs options)")
    answer = answer.strip()
    if options:
        answer = answer.upper()
        if answer not in options:
            raise BenchmarkError(f"{where}: answer {answer!r} is not one of the options {sorted(options)}")
    return Question(dataset, video_id, index, question, options, answer, where)
