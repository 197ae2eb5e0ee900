"""Evaluate one model on the config's benchmarks: ask, parse, retry, save, score.

    python -m cosmos_train.evaluation.runner --config configs/eval-tiny.toml [--model PATH] [--set k=v ...]

`evaluate_model(cfg, model_path=None, engine=None) -> EvalResult` is the library entry point the CLI,
the Prefect task and the demo call. Questions go to the engine in batches of `batch_size`; a
question whose answer cannot be read is asked again up to `generation.max_retries` times with more
tokens and a slightly higher temperature (the reference's retry), and then counted wrong and listed
in `EvalResult.unanswered`. Each video's file is written as soon as all its questions are answered,
so an interrupted run loses at most one batch; with `evaluation.skip_saved` a rerun loads finished
videos from disk and never sends them to the engine. Nothing measured is an error, never accuracy
0.0: a benchmark with no question fails before the model loads (BenchmarkError), and so does, at
the end, a dataset whose every clip failed to decode (on_bad_media = "skip").
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cosmos_train.data.media import MediaError
from cosmos_train.errors import BenchmarkError
from cosmos_train.evaluation.benchmark import BenchmarkVideo, Question, load_benchmark
from cosmos_train.evaluation.config import EvalConfig, load_eval_config
from cosmos_train.evaluation.predictions import (
    make_record,
    prediction_path,
    saved_records,
    write_video_predictions,
)
from cosmos_train.evaluation.prompts import build_messages
from cosmos_train.evaluation.sampling import base_sampling, retry_sampling
from cosmos_train.evaluation.scoring import Scores, format_table, score_records, write_results
from cosmos_train.generation import GenerationEngine, SamplingParams, create_engine, resolve_engine_name
from cosmos_train.rewards.parsing import is_correct, parse_response

logger = logging.getLogger(__name__)


@dataclass
class EvalResult:
    """What one model's evaluation produced (paths on disk plus the numbers)."""

    model: str  # the checkpoint path or hub id evaluated
    label: str  # results folder name (basename of the model, or model.name)
    answer_type: str
    engine: str
    run_dir: Path  # <results_dir>/<label>/<answer_type>
    results_json: Path
    results_csv: Path
    scores: Scores
    asked: int = 0  # questions sent to the engine in this run
    skipped_videos: int = 0  # videos loaded from saved files (skip_saved)
    unanswered: list[dict[str, Any]] = field(default_factory=list)  # unreadable after every retry
    bad_media: list[dict[str, Any]] = field(default_factory=list)  # left out: clip not decodable ("skip")
    wrong: list[dict[str, Any]] = field(default_factory=list)  # every wrong answer, for a quick look
    seconds: float = 0.0
    answers: dict[str, int] = field(default_factory=dict)  # letter read -> questions ("" = unreadable)
    chance: float | None = None  # expected accuracy of a uniform guess: mean of 1 / options per question

    @property
    def accuracy(self) -> dict[str, float]:
        return self.scores.accuracy_dict()

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (paths as strings): what a flow returns."""
        return {
            "model": self.model,
            "label": self.label,
            "answer_type": self.answer_type,
            "engine": self.engine,
            "run_dir": str(self.run_dir),
            "results_json": str(self.results_json),
            "results_csv": str(self.results_csv),
            "accuracy": self.accuracy,
            "scores": self.scores.as_dict(),
            "asked": self.asked,
            "skipped_videos": self.skipped_videos,
            "unanswered": self.unanswered,
            "bad_media": self.bad_media,
            "wrong": self.wrong,
            "seconds": round(self.seconds, 3),
            "answers": dict(self.answers),
            "chance": self.chance,
        }


@dataclass
class _Pending:
    """One question of a video still to be answered in this run."""

    video: BenchmarkVideo
    question: Question
    chat: list[dict[str, Any]]
    record: dict[str, Any] | None = None
    media_error: str | None = None  # the clip could not be decoded (on_bad_media = "skip")


def _vision_extras(cfg: EvalConfig) -> dict[str, Any]:
    ev = cfg.evaluation
    return {"max_pixels": ev.max_pixels, "min_pixels": ev.min_pixels, "max_frames": ev.max_frames}


def _same_file(a: str | Path, b: str | Path) -> bool:
    return Path(a).resolve() == Path(b).resolve()


def _generate(
    engine: GenerationEngine,
    todo: list[_Pending],
    sampling: SamplingParams,
    cfg: EvalConfig,
    log: Callable[[str], None],
) -> tuple[list[_Pending], list[str]]:
    """engine.generate over `todo` (one sample each); with on_bad_media = "skip", questions whose clip
    fails to decode are marked and left out, and the rest asked again. Returns (items answered, their texts)."""
    while todo:
        try:
            groups = engine.generate([p.chat for p in todo], sampling)
            if len(groups) != len(todo) or any(len(g) != 1 for g in groups):
                raise RuntimeError(
                    f"engine {engine.name} returned {[len(g) for g in groups]} completions for {len(todo)} chats, n=1"
                )
            return todo, [g[0].text for g in groups]
        except MediaError as error:
            bad = [p for p in todo if p.video.video_path is not None and _same_file(p.video.video_path, error.path)]
            if cfg.evaluation.on_bad_media == "fail" or not bad:
                raise MediaError(
                    error.path, f'{error.reason} (evaluation.on_bad_media = "skip" leaves its questions out)'
                ) from error
            log(f"skipping {len(bad)} question(s) of {error.path}: {error.reason}")
            for p in bad:
                p.media_error = error.reason
            todo = [p for p in todo if p.media_error is None]
    return [], []


def _answer(
    engine: GenerationEngine, batch: list[_Pending], cfg: EvalConfig, log: Callable[[str], None]
) -> list[dict[str, Any]]:
    """Ask the batch, retry unreadable answers, fill each item's record; returns the unanswered ones."""
    answer_type = cfg.evaluation.answer_type
    base = base_sampling(answer_type, cfg.generation, cfg.evaluation.seed)
    todo = list(batch)
    for attempt in range(cfg.generation.max_retries + 1):
        sampling = base if attempt == 0 else retry_sampling(base, attempt - 1)
        todo, texts = _generate(engine, todo, sampling, cfg, log)
        if len(texts) != len(todo):
            raise RuntimeError(f"engine {engine.name} returned {len(texts)} responses for {len(todo)} chats")
        still = []
        for item, text in zip(todo, texts):
            q = item.question
            parsed = parse_response(text, answer_type, q.options)
            # A retry only replaces a first answer when it reads (the reference keeps the last try otherwise).
            if item.record is None or parsed.answer is not None:
                item.record = make_record(
                    q.dataset,
                    q.video_id,
                    item.chat,
                    q.answer,
                    parsed.reasoning,
                    parsed.answer,
                    text,
                    is_correct(parsed.answer, q.answer, answer_type, q.options),
                )
            if parsed.answer is None:
                still.append(item)
        todo = still
        if not todo:
            break
        if attempt < cfg.generation.max_retries:
            log(f"{len(todo)} unreadable answer(s); retry {attempt + 1}/{cfg.generation.max_retries}")
    return [
        {
            "dataset": p.question.dataset,
            "video_id": p.question.video_id,
            "question_index": p.question.index,
            "full_response": p.record["full_response"] if p.record else "",
        }
        for p in todo
    ]


def question_of(record: dict[str, Any]) -> str:
    """The question line of a saved record's prompt (for reports)."""
    prompt = record.get("prompt")
    if isinstance(prompt, list):
        for message in prompt:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and part.get("type") == "text":
                        return str(part.get("text", "")).split("\n", 1)[0]
    return ""


def _check_measured(
    records: dict[str, dict[str, list[dict[str, Any]]]], bad_media: list[dict[str, Any]], run_dir: Path
) -> None:
    """Raise BenchmarkError when a dataset has no answered question: every one was left out because
    its clip did not decode (on_bad_media = "skip"). Its accuracy would read 0.0 as if measured, and a
    whole dataset failing to decode is a broken file set or a missing codec, not bad luck."""
    for ds, by_video in records.items():
        if by_video:
            continue
        # Every question of a loaded benchmark is answered, saved or left out, so left_out is not empty.
        left_out = [b for b in bad_media if b["dataset"] == ds]
        example = f"{left_out[0]['video']}: {left_out[0]['error']}"
        raise BenchmarkError(
            f"benchmark {ds!r}: all {len(left_out)} question(s) were left out because their clips could not be "
            f'decoded (evaluation.on_bad_media = "skip"), so nothing was measured; e.g. {example}. Check that '
            f"the clips decode (ffprobe), or remove {ds!r} from datasets. The other datasets' predictions are "
            f"saved under {run_dir} (evaluation.skip_saved = true reuses them)."
        )


def evaluate_model(
    cfg: EvalConfig,
    model_path: str | None = None,
    engine: GenerationEngine | None = None,
    log: Callable[[str], None] | None = None,
) -> EvalResult:
    """Evaluate one model on every dataset of `cfg`; write predictions, results.json and results.csv.

    model_path: overrides cfg.model.model_name (its basename names the results folder unless
    cfg.model.name is set). engine: an engine to reuse (not closed here); default: built from cfg
    only when some question is still unanswered, and closed at the end.
    """
    log = log or logger.info
    started = time.perf_counter()
    if model_path is not None:
        cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"model_name": str(model_path)})})
    answer_type = cfg.evaluation.answer_type
    run_dir = cfg.run_dir()
    fps = cfg.evaluation.fps

    records: dict[str, dict[str, list[dict[str, Any]]]] = {}  # dataset -> video_id -> records
    option_counts: list[int] = []  # per question, for the chance level
    pending: list[_Pending] = []
    skipped = 0
    for ds in cfg.datasets:
        videos = load_benchmark(
            cfg.data_dir,
            ds,
            cfg.limit,
            require_options=answer_type != "freeform",
            allow_media_outside_root=cfg.evaluation.allow_media_outside_root,
        )
        records[ds] = {}
        for video in videos:
            option_counts += [len(q.options) for q in video.questions if q.options]
            if cfg.evaluation.skip_saved:
                saved = saved_records(prediction_path(run_dir, ds, video.video_id), len(video.questions))
                if saved is not None:
                    records[ds][video.video_id] = saved
                    skipped += 1
                    continue
            for q in video.questions:
                clip = None if video.video_path is None else str(video.video_path)
                chat = build_messages(q, clip, answer_type, fps, _vision_extras(cfg), cfg.evaluation.system_prompt)
                pending.append(_Pending(video, q, chat))
        n_q = sum(len(v.questions) for v in videos)
        log(f"{ds}: {len(videos)} videos, {n_q} questions")
    if skipped:
        log(f"skip_saved: {skipped} finished video(s) loaded from {run_dir}")

    own_engine = engine is None and bool(pending)
    if own_engine:
        engine = create_engine(cfg.generation_config())
    engine_name = engine.name if engine is not None else resolve_engine_name(cfg.engine)
    unanswered: list[dict[str, Any]] = []
    bad_media: list[dict[str, Any]] = []
    try:
        remaining: dict[tuple[str, str], int] = {}
        for p in pending:
            key = (p.question.dataset, p.question.video_id)
            remaining[key] = remaining.get(key, 0) + 1
        done_by_video: dict[tuple[str, str], list[_Pending]] = {}
        for start in range(0, len(pending), cfg.batch_size):
            batch = pending[start : start + cfg.batch_size]
            assert engine is not None  # given, or created above whenever a question is pending
            unanswered += _answer(engine, batch, cfg, log)
            for p in batch:
                key = (p.question.dataset, p.question.video_id)
                done_by_video.setdefault(key, []).append(p)
                remaining[key] -= 1
                if remaining[key] == 0:
                    items = sorted(done_by_video.pop(key), key=lambda x: x.question.index)
                    bad_media += [
                        {
                            "dataset": x.question.dataset,
                            "video_id": x.question.video_id,
                            "question_index": x.question.index,
                            "video": str(x.video.video_path),
                            "error": x.media_error,
                        }
                        for x in items
                        if x.media_error is not None
                    ]
                    recs = [x.record for x in items if x.record is not None]
                    # A clip that failed to decode gets no prediction file: skip_saved asks it again.
                    if len(recs) == len(items):
                        write_video_predictions(prediction_path(run_dir, key[0], key[1]), recs)
                    if recs:
                        records[key[0]][key[1]] = recs
            log(f"asked {min(start + cfg.batch_size, len(pending))}/{len(pending)} questions")
    finally:
        if own_engine and engine is not None:
            engine.close()

    _check_measured(records, bad_media, run_dir)
    scores = score_records({ds: [r for recs in by_video.values() for r in recs] for ds, by_video in records.items()})
    if unanswered:
        log(f"{len(unanswered)} question(s) unreadable after {cfg.generation.max_retries} retries, counted wrong")
    if bad_media:
        log(f"{len(bad_media)} question(s) left out: their clip could not be decoded (listed in results.json)")
    meta = {
        "model": cfg.model.model_name,
        "label": cfg.model_basename,
        "answer_type": answer_type,
        "engine": engine_name,
        "datasets_evaluated": list(cfg.datasets),
        "asked": len(pending),
        "skipped_videos": skipped,
        "unanswered": unanswered,
        "bad_media": bad_media,
        "config": cfg.to_dict(),
    }
    json_path, csv_path = write_results(run_dir, scores, meta)
    wrong = [
        {
            "dataset": r["datasource"],
            "video_id": r["video_id"],
            "question": question_of(r),
            "correct_answer": r["correct_answer"],
            "answer": r["answer"],
            "full_response": r["full_response"],
        }
        for by_video in records.values()
        for recs in by_video.values()
        for r in recs
        if not r["is_correct"]
    ]
    answers: dict[str, int] = {}
    for by_video in records.values():
        for recs in by_video.values():
            for r in recs:
                answers[r["answer"]] = answers.get(r["answer"], 0) + 1
    log("\n" + format_table(scores))
    return EvalResult(
        model=cfg.model.model_name,
        label=cfg.model_basename,
        answer_type=answer_type,
        engine=engine_name,
        run_dir=run_dir,
        results_json=json_path,
        results_csv=csv_path,
        scores=scores,
        asked=len(pending),
        skipped_videos=skipped,
        unanswered=unanswered,
        bad_media=bad_media,
        wrong=wrong,
        seconds=time.perf_counter() - started,
        answers=dict(sorted(answers.items())),
        chance=sum(1 / n for n in option_counts) / len(option_counts) if option_counts else None,
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Evaluate a model on Cosmos-Reason style benchmarks.")
    p.add_argument("--config", type=Path, required=True, help="Evaluation config (.toml, or the reference .yaml).")
    p.add_argument("--model", default=None, help="Checkpoint folder or hub id (default: model.model_name).")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    result = evaluate_model(load_eval_config(args.config, args.overrides), args.model)
    print(result.results_json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
