"""Data preparation: check every row before training, keep the good ones, report the rest.

    from cosmos_train.data.prepare import prepare_split
    report = prepare_split(cfg, "train", run_dir, processor)   # RUN/manifest.jsonl + RUN/prep_report.json

(`cosmos-train prepare-data --config FILE [--set k=v] [script.py]` runs this through the
`prepare_data` Prefect flow.)

Each chat sample is checked for:
- a well-formed conversation: non-empty, roles system/user/assistant, system first only, user and
  assistant alternating from a user turn, no empty turn; SFT rows need an assistant turn; a GRPO
  row is a prompt (ending with a user turn) or an SFT row (its last assistant turn is then the
  reference and the prompt is what comes before it: `cosmos_train.data.prompt`), with a reference
  (a `reference` / response column, or that last turn) when a reward needs one;
- media that exists and decodes (`cosmos_train.data.media`, through `encode_chat`);
- a token length (chat template + vision tokens, `cosmos_train.data.chat.encode_chat`) within
  `policy.model_max_length`, handled by `train_policy.overlength` (error / truncate / skip).

A failing row follows `dataset.on_bad_row`: "fail" collects up to `max_problems` problems and
raises DataValidationError naming each file:row and reason; "skip" drops it and counts it by
reason, keeping the first examples. Outputs in the run folder (val files carry a `_val` suffix):
`manifest.jsonl` (kept samples plus `n_tokens` and `frames`), `prep_report.json` (the split read and
the rows each file gave it, counts, skipped-by-reason examples, length / frame statistics) and `prep_histograms.png`.
With `dataset.cache_dir` set, the clips decoded for the check are stored in the clip cache
(`cosmos_train.data.clip_cache`) under the same keys the trainer's `SFTDataset` looks up, so
training reads every clip from the cache instead of decoding it a second time.
Rows are checked in a thread pool (decoding releases the GIL) with an optional progress callback.
"""

from __future__ import annotations

import base64
import json
import os
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cosmos_train.atomic import write_atomic
from cosmos_train.config import Config
from cosmos_train.data import media
from cosmos_train.data.chat import ChatTooLongError, encode_chat
from cosmos_train.data.clip_cache import ClipCache, open_clip_cache
from cosmos_train.data.prompt import prompt_messages, reference_answer
from cosmos_train.data.sources import SplitRole, load_samples, split_plan
from cosmos_train.data.sources.common import DatasetError, read_jsonl, reward_names
from cosmos_train.errors import DataError, from_os_error
from cosmos_train.vision.processor import vision_layout_of

ROLES = ("system", "user", "assistant")
# Rewards that compare with the row's reference answer (format-only rewards need none).
REFERENCE_REWARDS = ("single_choice", "choice_letter")
ProgressFn = Callable[[int, int], None]


@dataclass
class RowProblem:
    id: str
    origin: str
    reason: str
    message: str

    def __str__(self) -> str:
        return f"{self.origin} (id {self.id}): {self.reason}: {self.message}"


class DataValidationError(DataError):
    """Rows that did not validate under on_bad_row = "fail", each naming file:row and reason."""

    def __init__(self, problems: list[RowProblem], rows_checked: int, total: int, report_path: str | None = None):
        self.problems = problems
        more = "" if rows_checked >= total else f" (stopped after {rows_checked} of {total} rows)"
        tail = f"\nfull report: {report_path}" if report_path else ""
        super().__init__(
            f'{len(problems)} bad row(s){more}; fix them or set dataset.on_bad_row = "skip":\n'
            + "\n".join(f"  - {p}" for p in problems)
            + tail
        )


@dataclass
class CheckResult:
    sample: dict[str, Any]
    problem: RowProblem | None = None
    n_tokens: int | None = None
    frames: list[int] = field(default_factory=list)
    truncated: bool = False
    skip_always: bool = False  # overlength = "skip": dropped whatever on_bad_row says


@dataclass
class PrepReport:
    split_role: str
    dataset: str
    split: str = ""  # the dataset's split these rows are (`split_read`)
    files: dict[str, int] = field(default_factory=dict)  # file (or table) -> rows of it read: which fed this split
    rows_read: int = 0
    rows_kept: int = 0
    truncated: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    problems: list[dict[str, str]] = field(default_factory=list)  # on_bad_row = "fail" only
    token_lengths: list[int] = field(default_factory=list)
    frames: list[int] = field(default_factory=list)
    manifest_path: str | None = None
    report_path: str | None = None
    histogram_path: str | None = None
    elapsed_s: float = 0.0
    kept: list[dict[str, Any]] = field(default_factory=list, repr=False)

    @property
    def rows_skipped(self) -> int:
        return sum(self.skipped.values())

    def summary(self) -> dict[str, Any]:
        """The JSON-able report (prep_report.json): counts, examples, statistics; no rows."""
        out = {k: v for k, v in asdict(self).items() if k not in ("kept", "token_lengths", "frames")}
        out["rows_skipped"] = self.rows_skipped
        out["token_length_stats"] = _stats(self.token_lengths)
        out["frames_per_clip_stats"] = _stats(self.frames)
        return out


def _stats(values: Sequence[int]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {
        "min": ordered[0],
        "max": ordered[-1],
        "mean": round(statistics.fmean(ordered), 2),
        "p50": ordered[len(ordered) // 2],
        "p95": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
    }


# ------------------------------------------------------------------------------- conversation
def check_conversation(messages: Any, policy_type: str) -> tuple[str, str] | None:
    """(reason, message) for the first structural problem of a chat, or None when it is well-formed."""
    if not isinstance(messages, list) or not messages:
        return "empty_conversation", "the conversation has no turns"
    turns = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
            return "bad_conversation", f"turn {i} is not an object with 'role' and 'content'"
        role = msg["role"]
        if role not in ROLES:
            return "wrong_role", f"turn {i} has role {role!r}; expected one of {', '.join(ROLES)} (or human/gpt)"
        content = msg["content"]
        if isinstance(content, str):
            empty = not content.strip()
        elif isinstance(content, list):
            empty = not any(
                isinstance(p, dict) and (p.get("type") in ("image", "video") or str(p.get("text", "")).strip())
                for p in content
            )
        else:
            return "bad_conversation", f"turn {i} content must be a string or a list of parts"
        if empty:
            return "empty_turn", f"turn {i} ({role}) has no content"
        if role == "system":
            if i != 0:
                return "bad_alternation", f"turn {i}: a system turn may only come first"
            continue
        turns.append((i, role))
    if not turns:
        return "empty_conversation", "the conversation has only a system turn"
    if turns[0][1] != "user":
        return "bad_alternation", f"turn {turns[0][0]}: the first turn after the system prompt must be the user's"
    for (_, prev), (i, role) in zip(turns, turns[1:]):
        if role == prev:
            return "bad_alternation", f"turn {i}: two {role} turns in a row (user and assistant must alternate)"
    has_assistant = any(role == "assistant" for _, role in turns)
    if policy_type == "sft" and not has_assistant:
        return "no_assistant_turn", "an SFT row needs at least one assistant turn to learn from"
    # GRPO: a row ending with the assistant's turn is an SFT row reused for RL: the prompt is the turns before
    # it (they end with a user turn: the alternation above) and that turn is the reference (data/prompt.py).
    return None


def media_parts(messages: Iterable[dict]) -> list[tuple[str, str, dict]]:
    """(kind, path, part) of every image / video part, in order."""
    out = []
    for msg in messages:
        if isinstance(msg.get("content"), list):
            for part in msg["content"]:
                if isinstance(part, dict) and part.get("type") in ("image", "video"):
                    out.append((part["type"], str(part.get(part["type"], "")), part))
    return out


def _media_reason(reason: str) -> str:
    text = reason.lower()
    if "file not found" in text or "not a regular file" in text:
        return "missing_media"
    if "has no frames" in text or "no decodable frames" in text or "no video stream" in text:
        return "empty_video"
    return "bad_media"


# ------------------------------------------------------------------------------------ one row
def check_sample(
    sample: dict[str, Any], cfg: Config, processor: Any | None, clip_cache: ClipCache | None = None
) -> CheckResult:
    """Validate one chat sample (structure, media, length). Never raises for a bad row.

    clip_cache: decoded clips are read from / stored in it (dataset.cache_dir), so validating a row
    also warms the cache the trainer reads: each clip is decoded once for prep and training together.
    """
    sid, origin = str(sample.get("id", "?")), str(sample.get("origin", "?"))
    res = CheckResult(sample)

    def bad(reason: str, message: str) -> CheckResult:
        res.problem = RowProblem(sid, origin, reason, message)
        return res

    if "error" in sample:  # the source could not map the row
        return bad(sample["error"]["reason"], sample["error"]["message"])
    policy_cfg = cfg.train.train_policy
    policy = cfg.policy_type
    messages = sample.get("messages")
    found = check_conversation(messages, policy)
    if found:
        return bad(*found)
    assert isinstance(messages, list)  # check_conversation refuses anything else
    if policy == "grpo" and reference_answer(sample) is None:
        needs = [r for r in reward_names(policy_cfg.reward_function) if r in REFERENCE_REWARDS]
        if needs:
            return bad("missing_reference", f"no reference answer, which the {needs[0]} reward compares with")
    for kind, path, _ in media_parts(messages):
        if not path.startswith(("http://", "https://")) and not Path(path).is_file():
            return bad("missing_media", f"{kind} file not found: {path}")

    limit = cfg.policy.model_max_length
    try:
        if processor is None:
            # No model to tokenise with: check media only (frame counts, no length).
            read_video = clip_cache.read_video if clip_cache is not None else media.read_video
            load_image = clip_cache.load_image if clip_cache is not None else media.load_image
            for kind, path, part in media_parts(messages):
                settings = media.VisionSettings.from_part(part)
                if kind == "video":
                    res.frames.append(int(read_video(path, settings)[0].shape[0]))
                else:
                    load_image(path, settings)
            return res
        gen = policy == "grpo"
        if gen:  # what the engine is asked: an SFT row's answer (the reference) is not part of it
            messages = prompt_messages(messages)
        enc = encode_chat(processor, messages, add_generation_prompt=gen, origin=origin, clip_cache=clip_cache)
        res.n_tokens = len(enc)
        if res.n_tokens > limit and policy_cfg.overlength == "truncate":
            # The trainer cuts it; it still has to keep an assistant token (else ChatTooLongError).
            cut = encode_chat(
                processor,
                messages,
                add_generation_prompt=gen,
                origin=origin,
                max_length=limit,
                truncation="right",
                clip_cache=clip_cache,
            )
            res.n_tokens, res.truncated = len(cut), True
    except media.MediaError as e:
        return bad(_media_reason(e.reason), str(e))
    except ChatTooLongError as e:
        return bad("too_long", str(e))
    except ValueError as e:  # a malformed part or setting encode_chat refuses
        return bad("bad_conversation", str(e))
    if enc.video_grid_thw is not None:
        temporal = vision_layout_of(processor).temporal_patch_size  # frames per temporal patch
        res.frames = [int(t) * temporal for t in enc.video_grid_thw[:, 0]]
    if res.n_tokens > limit:
        res.skip_always = policy_cfg.overlength == "skip"
        return bad("too_long", f"{res.n_tokens} tokens (vision included) > policy.model_max_length {limit}")
    return res


# ------------------------------------------------------------------------------------ all rows
def validate_samples(
    samples: Sequence[dict[str, Any]],
    cfg: Config,
    processor: Any | None,
    *,
    split_role: str = "train",
    run_dir: str | Path | None = None,
    workers: int | None = None,
    progress: ProgressFn | None = None,
    max_problems: int = 20,
    max_examples: int = 3,
    script: str | Path | None = None,
) -> PrepReport:
    """Check every sample; keep, skip or fail per `dataset.on_bad_row` (see the module docstring).

    With `run_dir`, writes the manifest, report and histogram there (the report also on failure).
    `processor=None` checks structure and media only (no token lengths). With `dataset.cache_dir`
    set, every decoded clip is stored in that cache, so training starts with all clips cached. `script`: the
    dataset script the rows came from, for the report's words on which rows they are.
    """
    start = time.monotonic()
    ds = cfg.train.train_policy.dataset
    if split_role == "val" and cfg.validation.dataset is not None:
        ds = cfg.validation.dataset
    on_bad = ds.on_bad_row
    # One cache object for all threads (it is thread-safe): a file is hashed once per process.
    clip_cache = open_clip_cache(ds.cache_dir)
    report = PrepReport(
        split_role=split_role,
        dataset=ds.name or str(ds.annotation_path or ""),
        split=split_read(cfg, split_role, script),
        files=rows_by_file(samples),
    )
    problems: list[RowProblem] = []
    total = len(samples)
    workers = workers or min(4, os.cpu_count() or 1)
    done = 0

    def take(result: CheckResult) -> None:
        report.rows_read += 1
        p = result.problem
        if p is None:
            row = dict(result.sample)
            row["n_tokens"] = result.n_tokens
            row["frames"] = result.frames
            report.kept.append(row)
            if result.n_tokens is not None:
                report.token_lengths.append(result.n_tokens)
            report.frames.extend(result.frames)
            report.truncated += int(result.truncated)
            return
        if on_bad == "fail" and not result.skip_always:
            problems.append(p)
        report.skipped[p.reason] = report.skipped.get(p.reason, 0) + 1
        examples = report.examples.setdefault(p.reason, [])
        if len(examples) < max_examples:
            examples.append({"id": p.id, "origin": p.origin, "message": p.message})

    # A bounded window of futures: results are taken in order, and "fail" can stop early.
    with ThreadPoolExecutor(max_workers=workers) as pool:
        window: list[Future[CheckResult]] = []
        it = iter(samples)
        exhausted = False
        while True:
            while not exhausted and len(window) < workers * 4:
                try:
                    window.append(pool.submit(check_sample, next(it), cfg, processor, clip_cache))
                except StopIteration:
                    exhausted = True
            if not window:
                break
            take(window.pop(0).result())
            done += 1
            if progress is not None:
                progress(done, total)
            if len(problems) >= max_problems:
                for f in window:
                    f.cancel()
                break
    report.elapsed_s = round(time.monotonic() - start, 3)
    if problems:
        report.problems = [asdict(p) for p in problems]
        report.rows_kept = len(report.kept)
        if run_dir is not None:
            report.report_path = str(_write_report(report, Path(run_dir)))
        raise DataValidationError(problems, report.rows_read, total, report.report_path)
    report.rows_kept = len(report.kept)
    if run_dir is not None:
        write_outputs(report, Path(run_dir))
    return report


def split_read(cfg: Config, split_role: str, script: str | Path | None = None) -> str:
    """Which split of which dataset config the `split_role` rows are, in words (the report's `split`)."""
    ds = cfg.train.train_policy.dataset
    try:
        plan = split_plan(cfg, "val" if split_role == "val" else "train", script)
    except DatasetError:  # a dataset load_samples could not read either: the words need not say more
        return _split_names(ds.split)
    names = _split_names(plan.dataset.split)
    if plan.where == "validation.dataset":
        names += " ([validation.dataset])"
        if plan.hold_out:
            return f"the rows validation.dataset.test_size = {plan.dataset.test_size} holds out of {names}"
        return names
    if plan.hold_out:
        size = "unset (cosmos-rl's default)" if ds.test_size is None else str(ds.test_size)
        held = f"the rows dataset.test_size = {size} holds out"
        return f"{held} of {names}" if split_role == "val" else f"{names} less {held}"
    if plan.read_role == "val":
        return "the train dataset's own validation split (no [validation.dataset] set)"
    return names


def _split_names(split: str | list[str]) -> str:
    return repr(split) if isinstance(split, str) else " + ".join(repr(s) for s in split)


def rows_by_file(samples: Iterable[dict[str, Any]]) -> dict[str, int]:
    """file (or table) -> rows of it among `samples` (by their origin `file:row`; a row with several samples,
    qa_pairs, counts once), in order of first appearance."""
    origins = dict.fromkeys(str(s.get("origin", "?")) for s in samples)
    out: dict[str, int] = {}
    for origin in origins:
        name = origin.rsplit(":", 1)[0] if ":" in origin else origin
        out[name] = out.get(name, 0) + 1
    return out


# ------------------------------------------------------------------------------------ outputs
def output_names(split_role: str) -> dict[str, str]:
    """File names in the run folder; cosmos_train.train.data reads manifest.jsonl / manifest_val.jsonl."""
    suffix = "" if split_role == "train" else f"_{split_role}"
    return {
        "manifest": f"manifest{suffix}.jsonl",
        "report": f"prep_report{suffix}.json",
        "histogram": f"prep_histograms{suffix}.png",
    }


def _atomic_write(path: Path, text: str) -> None:
    try:
        write_atomic(path, text)
    except OSError as e:
        disk_full = from_os_error(e, path)
        if disk_full is None:
            raise
        raise disk_full from e


def _write_report(report: PrepReport, run_dir: Path) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / output_names(report.split_role)["report"]
    report.report_path = str(path)
    _atomic_write(path, json.dumps(report.summary(), indent=1, ensure_ascii=False) + "\n")
    return path


def write_outputs(report: PrepReport, run_dir: Path) -> None:
    """manifest (kept rows), histogram PNG, then the report (which names the other two)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    names = output_names(report.split_role)
    manifest = run_dir / names["manifest"]
    _atomic_write(manifest, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in report.kept))
    report.manifest_path = str(manifest)
    hist = run_dir / names["histogram"]
    plot_histograms(report.token_lengths, report.frames, hist, f"{report.split_role}: {report.rows_kept} rows kept")
    report.histogram_path = str(hist)
    _write_report(report, run_dir)


def plot_histograms(token_lengths: Sequence[int], frames: Sequence[int], path: Path, title: str = "") -> Path:
    """Token-length and frames-per-clip histograms side by side (Agg canvas: no display needed)."""
    # why: matplotlib (and its fonttools, kiwisolver, ...) only for this plot: the trainers import this module
    # for read_manifest, and a GPU machine that only trains need not have it (scripts/gpu_check.sh).
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.2), dpi=100)
    FigureCanvasAgg(fig)
    for ax, values, label in (
        (fig.add_subplot(1, 2, 1), token_lengths, "tokens per sample (vision included)"),
        (fig.add_subplot(1, 2, 2), frames, "frames per clip (as sampled)"),
    ):
        if values:
            ax.hist(values, bins=_bins(values), color="#4c72b0")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel(label)
        ax.set_ylabel("rows" if label.startswith("tokens") else "clips")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def _bins(values: Sequence[int]) -> list[float] | int:
    """One bar per integer when the range is small (frame counts), else 30 bins."""
    lo, hi = min(values), max(values)
    if hi - lo <= 60:
        return [v - 0.5 for v in range(lo, hi + 2)]
    return 30


def report_markdown(report: PrepReport, embed_png: bool = True) -> str:
    """A markdown summary: counts, skipped rows by reason with first examples, the histograms."""
    s = report.summary()
    lines = [
        f"# Data preparation ({report.split_role})",
        "",
        f"Dataset: `{report.dataset}`, split {report.split}",
        "",
        *(
            ["| file | rows read |", "|---|---|", *(f"| `{f}` | {n} |" for f, n in report.files.items()), ""]
            if report.files
            else []
        ),
        "| rows read | kept | skipped | truncated |",
        "|---|---|---|---|",
        f"| {report.rows_read} | {report.rows_kept} | {report.rows_skipped} | {report.truncated} |",
        "",
    ]
    if report.skipped:
        lines += ["## Skipped by reason", "", "| reason | rows | first examples |", "|---|---|---|"]
        for reason, n in sorted(report.skipped.items(), key=lambda kv: -kv[1]):
            ex = "<br>".join(
                f"`{e['origin']}`: {e['message'].replace('|', '/')[:200]}" for e in report.examples.get(reason, [])
            )
            lines.append(f"| {reason} | {n} | {ex} |")
        lines.append("")
    for key, label in (("token_length_stats", "Tokens per sample"), ("frames_per_clip_stats", "Frames per clip")):
        if s[key]:
            st = s[key]
            lines.append(
                f"- {label}: min {st['min']}, p50 {st['p50']}, mean {st['mean']}, p95 {st['p95']}, max {st['max']}"
            )
    lines.append("")
    if report.manifest_path:
        lines.append(f"Manifest: `{report.manifest_path}`")
    if report.histogram_path:
        lines += [f"Histograms: `{report.histogram_path}`", ""]
        if embed_png and Path(report.histogram_path).is_file():
            data = base64.b64encode(Path(report.histogram_path).read_bytes()).decode()
            lines.append(f"![histograms](data:image/png;base64,{data})")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------ one call
def prepare_split(
    cfg: Config,
    split_role: SplitRole,
    run_dir: str | Path,
    processor: Any | None,
    script: str | Path | None = None,
    *,
    progress: ProgressFn | None = None,
    workers: int | None = None,
) -> PrepReport:
    """load_samples + validate_samples + outputs in `run_dir` (the data-prep step of a run)."""
    samples = load_samples(cfg, split_role, script, keep_errors=True)
    return validate_samples(
        samples,
        cfg,
        processor,
        split_role=split_role,
        run_dir=run_dir,
        workers=workers,
        progress=progress,
        script=script,
    )


def read_manifest(path: str | Path) -> list[dict[str, Any]]:
    """The kept samples of a manifest (each with `n_tokens` and `frames`)."""
    return read_jsonl(Path(path))
