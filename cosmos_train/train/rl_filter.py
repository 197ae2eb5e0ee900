"""RL data filtering: keep the prompts the current model sometimes gets right (pass rate strictly inside a band).

    cosmos-train filter-rl-data --config configs/tiny-grpo.toml --model RUN/safetensors/final --samples 8
    result = filter_rl_data(cfg, FilterSettings(samples=8), out=Path("RUN/filtered.json"))
    result.dataset, result.kept, result.dropped, result.overrides   # overrides: train GRPO on the file

A prompt every sample answers right, or none does, gives GRPO a group whose rewards are all equal: no
advantage, nothing to learn, a step's share spent for nothing. This asks the model `samples` times per training
prompt, the way GRPO's rollout does (`rollout.groups.collect_rollouts`: the one prompt builder, the [rollout]
sampling settings with n = samples, the config's reward_function and reward shaping, a dataset script's
REWARD_FUNCTIONS, seeds from `derive_seed`), and keeps the prompts whose pass rate p satisfies
min_pass < p < max_pass (default 0 < p < 1).

A completion passes when the config's accuracy reward (`rewards.accuracy_reward`: single_choice, exact_match,
boxed_math, gsm8k) is 1; a reward set without one (a format reward alone, a script's reward) passes when the
completion's total reward (with the `overlong` reward when named, as GRPO sees it) is >= `threshold`.

The kept rows are written in the input's own format: each kept row of a local row file (json, jsonl, parquet,
arrow: the hf / llava / synthetic sources) as it stands there, every field unchanged but for relative media
paths, made absolute (so they resolve from any folder); a row holding a list of qa_pairs keeps the pairs that
were kept. Rows from a dataset script or the hub (no local row file) are written as the chat samples they became
(`messages`, `reference`, `options`). Beside the file: `<stem>_report.json` (per prompt: id, pass rate, kept,
why) and `<stem>_pass_rates.png` (a histogram). `overrides` are the --set keys that make the same GRPO config
train on the written file: the hf source on it, media_path the kept media's common folder (absolute paths must
lie under a media root), and, when validation read the input's held-out split, that split as validation.dataset.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cosmos_train.atomic import write_atomic
from cosmos_train.config import Config
from cosmos_train.data.sources import detect_source, load_samples
from cosmos_train.data.sources.common import ROW_FILE_SUFFIXES, read_rows
from cosmos_train.data.sources.embedded import is_embedded
from cosmos_train.data.sources.hf import held_out_split
from cosmos_train.data.sources.holdout import DEFAULT_TEST_SIZE, kind_of_source
from cosmos_train.errors import ConfigError, DataError, ModelError
from cosmos_train.generation import GenerationEngine, create_engine, from_rollout
from cosmos_train.models.load import load_processor
from cosmos_train.rewards import RewardSet, accuracy_reward
from cosmos_train.train.rollout.groups import (
    collect_rollouts,
    derive_seed,
    grpo_policy,
    reward_shaping,
    step_sampling,
    training_rewards,
)
from cosmos_train.vision.processor import get_tokenizer

logger = logging.getLogger(__name__)

PROMPTS_PER_CALL = 16  # prompts per engine call: each call shares every prompt's prefill across its samples
MEDIA_KEYS = ("video", "videos", "image", "images")  # a row's media columns (data.sources.common)
OUT_SUFFIXES = (".json", ".jsonl")


@dataclass(frozen=True)
class FilterSettings:
    """What to sample and what to keep (the CLI's and the flow's options)."""

    samples: int = 8  # completions per prompt
    min_pass: float = 0.0  # keep min_pass < pass rate < max_pass
    max_pass: float = 1.0
    threshold: float = 1.0  # without an accuracy reward: a completion passes when its reward >= this
    seed: int | None = None  # sampling seed (None: the config's train.seed)
    model: str | None = None  # the model to sample (None: policy.model_name_or_path)
    dataset_script: str | None = None  # a dataset script: its rows and REWARD_FUNCTIONS, as GRPO takes them
    prompts_per_call: int = PROMPTS_PER_CALL

    def problems(self) -> list[str]:
        """Each bad setting as one line naming its option; empty when all are usable."""
        out = []
        if self.samples < 1:
            out.append(f"--samples {self.samples}: sample each prompt at least once (8 is the default)")
        for name, value in (("--min-pass", self.min_pass), ("--max-pass", self.max_pass)):
            if not 0.0 <= value <= 1.0 or math.isnan(value):
                out.append(f"{name} {value}: a pass rate, between 0 and 1")
        if not out and self.min_pass >= self.max_pass:
            out.append(
                f"--min-pass {self.min_pass} >= --max-pass {self.max_pass}: the band min_pass < pass rate < "
                "max_pass is empty (the default 0 and 1 keep every prompt the model sometimes gets right)"
            )
        if self.prompts_per_call < 1:
            out.append(f"prompts_per_call {self.prompts_per_call}: at least 1")
        return out

    def check(self, out: Path | None = None) -> None:
        """ConfigError listing every bad option (and an `out` that is not a .json / .jsonl file)."""
        bad = self.problems()
        if out is not None and out.suffix.lower() not in OUT_SUFFIXES:
            bad.append(f"--out {out}: the filtered dataset is written as JSON rows; name a .json or .jsonl file")
        if bad:
            raise ConfigError(bad, what="filter-rl-data options")


def check_model_path(model: str, key: str = "--model") -> None:
    """ModelError when `model` names a local folder that is not there (a hub id, org/name, is left to loading)."""
    path = Path(model).expanduser()
    hub_id = model.count("/") == 1 and not model.startswith((".", "/", "~")) and not path.exists()
    if not hub_id and not path.is_dir():
        raise ModelError(
            f"{key} {model}: no such model folder; pass a Hugging Face folder (config.json and weights), e.g. a "
            "run's safetensors/final, or a hub id (org/name)"
        )


@dataclass
class PromptScore:
    """One training prompt: its sample's id and origin (file:row), and how many of its completions passed."""

    id: str
    origin: str
    passes: int
    samples: int
    kept: bool = False
    why: str = ""  # "kept", "all fail", "all pass", "at or below min_pass", "at or above max_pass"

    @property
    def pass_rate(self) -> float:
        return self.passes / self.samples

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "origin": self.origin,
            "pass_rate": self.pass_rate,
            "passes": self.passes,
            "samples": self.samples,
            "kept": self.kept,
            "why": self.why,
        }


@dataclass
class FilterResult:
    """What a filtering run wrote and decided (`to_dict` is the report json's summary)."""

    prompts: list[PromptScore]
    dataset: Path
    report: Path
    histogram: Path
    pass_rule: str
    row_format: str  # "rows" (the input's own rows) or "chat samples"
    rows_written: int
    overrides: list[str] = field(default_factory=list)
    settings: FilterSettings = field(default_factory=FilterSettings)
    model: str = ""
    seconds: float = 0.0

    @property
    def kept(self) -> int:
        return sum(p.kept for p in self.prompts)

    @property
    def dropped(self) -> int:
        return len(self.prompts) - self.kept

    def counts(self) -> dict[str, int]:
        """Prompts by decision: kept, and each reason for dropping one (in a fixed order, zeros included)."""
        out = {why: 0 for why in ("kept", "all fail", "all pass", "at or below min_pass", "at or above max_pass")}
        for p in self.prompts:
            out[p.why] = out.get(p.why, 0) + 1
        return out

    def counts_table(self) -> list[dict[str, Any]]:
        """The counts as table rows (the flow's table artifact)."""
        total = max(len(self.prompts), 1)
        return [
            {"prompts": why, "count": n, "share": round(n / total, 4)}
            for why, n in self.counts().items()
            if n or why in ("kept", "all fail", "all pass")
        ]

    def summary(self) -> dict[str, Any]:
        s = self.settings
        return {
            "dataset": str(self.dataset),
            "model": self.model,
            "samples": s.samples,
            "band": {"min_pass": s.min_pass, "max_pass": s.max_pass, "exclusive": True},
            "pass_rule": self.pass_rule,
            "prompts": len(self.prompts),
            "kept": self.kept,
            "dropped": self.dropped,
            "counts": self.counts(),
            "row_format": self.row_format,
            "rows_written": self.rows_written,
            "overrides": self.overrides,
            "seconds": round(self.seconds, 2),
        }


# ---------------------------------------------------------------------------------------------- scoring
def pass_rule(rewards: RewardSet, threshold: float) -> tuple[str, Callable[[float, Mapping[str, float]], bool]]:
    """(description, passed(total, parts)): the accuracy reward when the set has one, else total >= threshold."""
    accuracy = accuracy_reward(rewards.names)
    if accuracy is not None:
        return f"{accuracy} = 1", lambda total, parts: parts.get(accuracy, 0.0) >= 1.0
    return f"reward >= {threshold:g}", lambda total, parts: total >= threshold


def decide(score: PromptScore, min_pass: float, max_pass: float) -> PromptScore:
    """Set `kept` and `why` for the band min_pass < pass rate < max_pass."""
    p = score.pass_rate
    if p == 0.0:
        score.why = "all fail"
    elif p == 1.0:
        score.why = "all pass"
    elif p <= min_pass:
        score.why = "at or below min_pass"
    elif p >= max_pass:
        score.why = "at or above max_pass"
    else:
        score.why = "kept"
    score.kept = min_pass < p < max_pass
    return score


def _chunks(rows: Sequence[Mapping[str, Any]], size: int) -> Iterator[tuple[int, Sequence[Mapping[str, Any]]]]:
    for i in range(0, len(rows), size):
        yield i // size, rows[i : i + size]


def score_prompts(
    engine: GenerationEngine,
    rows: Sequence[Mapping[str, Any]],
    rewards: RewardSet,
    cfg: Config,
    settings: FilterSettings,
    seed: int,
) -> tuple[list[PromptScore], str]:
    """Sample every row `settings.samples` times and count the completions that pass; (scores, pass rule)."""
    rule, passed = pass_rule(rewards, settings.threshold)
    shaping = reward_shaping(cfg)
    scores: list[PromptScore] = []
    start = time.monotonic()
    for chunk, part in _chunks(rows, settings.prompts_per_call):
        # the trainer's sampling settings with n = samples; a seed per chunk (as a step's), so a run is repeatable
        sampling = replace(step_sampling(cfg, derive_seed(seed, step=chunk)), n=settings.samples)
        rollout = collect_rollouts(engine, part, rewards, sampling, shaping=shaping)
        for group in rollout.groups:
            n_pass = sum(passed(total, parts) for total, parts in zip(group.rewards, group.parts))
            row = group.row
            scores.append(PromptScore(str(row.get("id", "")), str(row.get("origin", "")), n_pass, len(group.rewards)))
        logger.info(
            "filter-rl-data: %d / %d prompts sampled (%.1f s)", len(scores), len(rows), time.monotonic() - start
        )
    return scores, rule


# ---------------------------------------------------------------------------------------------- writing
def _origin_row(origin: str) -> tuple[Path, int] | None:
    """(row file, row index) of a sample's origin "file:row" when the file is a local row file, else None."""
    file, _, index = origin.rpartition(":")
    if not index.isdigit() or not file:
        return None
    path = Path(file)
    if path.suffix.lower() not in ROW_FILE_SUFFIXES or not path.is_file():
        return None
    return path, int(index)


def _absolute(value: Any, roots: Sequence[Path]) -> Any:
    """A media value with a relative local path made absolute: the first root that has it (as the sources
    resolve it), else the first root. URLs, absolute paths and media held in the row stay as they are."""
    if isinstance(value, Mapping) and isinstance(value.get("path"), str) and value.get("bytes") is None:
        return {**value, "path": _absolute(value["path"], roots)}
    if not isinstance(value, str) or not value or is_embedded(value):
        return value
    if value.startswith(("http://", "https://", "file://")) or Path(value).expanduser().is_absolute():
        return value
    path = Path(value)
    found = next((root / path for root in roots if (root / path).exists()), roots[0] / path)
    return str(Path(os.path.abspath(found)))


def _with_absolute_media(row: Mapping[str, Any], roots: Sequence[Path], conversation: str) -> dict[str, Any]:
    """`row` with its relative media paths absolute: the media columns, and media parts inside its turns."""
    out = dict(row)
    for key in MEDIA_KEYS:
        value = out.get(key)
        if isinstance(value, list | tuple):
            out[key] = [_absolute(v, roots) for v in value]
        elif value is not None:
            out[key] = _absolute(value, roots)
    for key in ("messages", conversation):
        turns = out.get(key)
        if not isinstance(turns, list):
            continue
        new_turns = []
        for turn in turns:
            content = turn.get("content") if isinstance(turn, Mapping) else None
            if isinstance(content, list):
                parts = [
                    {**p, p["type"]: _absolute(p[p["type"]], roots)}
                    if isinstance(p, Mapping) and p.get("type") in ("image", "video") and p.get(p["type"]) is not None
                    else p
                    for p in content
                ]
                turn = {**turn, "content": parts}
            new_turns.append(turn)
        out[key] = new_turns
    return out


def _kept_qa_pairs(row: Mapping[str, Any], kept_ids: set[str], sample_ids: list[str]) -> Any:
    """A row's qa_pairs list cut to the pairs that were kept (samples `<id>#<k>`); other rows' unchanged."""
    pairs = row.get("qa_pairs")
    as_text = isinstance(pairs, str)
    if as_text:
        pairs = json.loads(str(pairs))
    if not isinstance(pairs, list) or len(sample_ids) < 2:
        return row.get("qa_pairs")
    keep = [int(sid.rpartition("#")[2]) for sid in sample_ids if sid in kept_ids and sid.rpartition("#")[2].isdigit()]
    chosen = [pairs[k] for k in sorted(keep) if k < len(pairs)]
    return json.dumps(chosen) if as_text else chosen


def _media_paths(value: Any) -> Iterator[str]:
    """Every local media path under a row or chat sample: the media columns' and media parts' strings."""
    if isinstance(value, Mapping):
        for key, v in value.items():
            for x in v if key in (*MEDIA_KEYS, "path") and isinstance(v, list | tuple) else [v]:
                if key in (*MEDIA_KEYS, "path") and isinstance(x, str):
                    if Path(x).is_absolute():
                        yield x
                else:
                    yield from _media_paths(x)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _media_paths(v)


def kept_rows(
    samples: Sequence[Mapping[str, Any]], scores: Sequence[PromptScore], cfg: Config
) -> tuple[list[dict[str, Any]], str]:
    """The rows to write and their format ("rows": the input's own rows, relative media made absolute;
    "chat samples": where some sample has no local row file to come from)."""
    # a prompt is its (origin, id): ids need not be unique across files
    kept = {(p.origin, p.id) for p in scores if p.kept}
    origins = [str(s.get("origin", "")) for s in samples]
    ids = [str(s.get("id", "")) for s in samples]
    chat_samples = [
        {k: v for k, v in s.items() if k != "origin"} for s, key in zip(samples, zip(origins, ids)) if key in kept
    ]
    located = {o: _origin_row(o) for o in dict.fromkeys(origins)}
    if not samples or any(v is None for v in located.values()):
        return chat_samples, "chat samples"
    ds = cfg.train.train_policy.dataset
    conversation = cfg.train.train_policy.conversation_column_name
    files: dict[Path, list[dict[str, Any]]] = {}
    by_origin: dict[str, list[str]] = {}
    for o, i in zip(origins, ids):
        by_origin.setdefault(o, []).append(i)
    out = []
    for origin, row_ids in by_origin.items():
        kept_ids = {i for i in row_ids if (origin, i) in kept}
        if not kept_ids:
            continue
        path, index = located[origin]  # type: ignore[misc]  # every origin was located above
        if path not in files:
            files[path] = read_rows(path)
        row = files[path][index]
        # where the sources look for a relative path: media_path, the row file's folder, the dataset folder
        roots = [Path(p).expanduser() for p in (ds.media_path, str(path.parent), ds.name, ds.local_dir or "") if p]
        roots = [r for r in roots if r.is_dir()] or [path.parent]
        new = _with_absolute_media(row, roots, conversation)
        if "qa_pairs" in new:
            new["qa_pairs"] = _kept_qa_pairs(row, kept_ids, row_ids)
        out.append(new)
    try:
        json.dumps(out)
    except (TypeError, ValueError):  # a parquet / arrow row holding bytes (embedded media): its chat samples
        return chat_samples, "chat samples"
    return out, "rows"


def _toml(value: Any) -> str:
    """A value as a --set override's TOML literal."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(value)


def training_overrides(cfg: Config, dataset: Path, media_root: Path | None, row_format: str) -> list[str]:
    """The --set keys that make `cfg` train on the written file (module docstring)."""
    key = "train.train_policy.dataset"
    out = [f'{key}.source="hf"', f"{key}.name={_toml(str(dataset))}"]
    if media_root is not None:
        out.append(f"{key}.media_path={_toml(str(media_root))}")
    ds = cfg.train.train_policy.dataset
    if cfg.validation.enable and cfg.validation.dataset is None and row_format == "rows":
        # validation read the input's own held-out rows: name that split, since the written file has none
        settings = ds.model_dump(exclude_defaults=True)
        if ds.test_size is None:
            source = detect_source(ds)
            if source == "synthetic":
                settings["split"] = "val"
            elif source == "hf" and (split := held_out_split(ds)) is not None:
                settings["split"] = split
            elif source != "script":  # validation held out cosmos-rl's default part: name the same rows
                settings["test_size"] = DEFAULT_TEST_SIZE[kind_of_source(source)]
        settings.setdefault("source", detect_source(ds))
        out += [f"validation.dataset.{k}={_toml(v)}" for k, v in settings.items()]
    return out


def write_filtered(
    samples: Sequence[Mapping[str, Any]], scores: Sequence[PromptScore], cfg: Config, out: Path
) -> tuple[int, str, list[str]]:
    """Write the kept rows to `out` (.json: a list; .jsonl: a row a line); (rows, format, overrides)."""
    rows, row_format = kept_rows(samples, scores, cfg)
    if out.suffix.lower() == ".jsonl":
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    else:
        text = json.dumps(rows, indent=1, ensure_ascii=False) + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, text)
    media = [p for r in rows for p in _media_paths(r)]
    root = Path(os.path.commonpath([str(Path(p).parent) for p in media])) if media else None
    return len(rows), row_format, training_overrides(cfg, out.absolute(), root, row_format)


def plot_pass_rates(scores: Sequence[PromptScore], path: Path, settings: FilterSettings, title: str = "") -> Path:
    """A histogram of the prompts' pass rates, one bar per possible rate (k / samples), the band's bounds marked."""
    # why: matplotlib (and its fonttools, kiwisolver, ...) only for this plot: GRPO imports the train package
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = settings.samples
    counts = [0] * (n + 1)
    for s in scores:
        counts[s.passes * n // s.samples] += 1
    fig = Figure(figsize=(6.4, 3.4), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    rates = [k / n for k in range(n + 1)]
    colors = ["#4c72b0" if settings.min_pass < r < settings.max_pass else "#c44e52" for r in rates]
    ax.bar(rates, counts, width=0.8 / n, color=colors)
    for bound in (settings.min_pass, settings.max_pass):
        ax.axvline(bound, color="#555555", linestyle="--", linewidth=1)
    ax.set_xlabel(f"pass rate over {n} samples (blue: kept, red: dropped)")
    ax.set_ylabel("prompts")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def pass_rates_markdown(result: FilterResult) -> str:
    """The histogram embedded as a data: URI (an artifact cannot link to the worker's disk), with the counts."""
    s = result.settings
    data = base64.b64encode(result.histogram.read_bytes()).decode()
    counts = ", ".join(f"{why} {n}" for why, n in result.counts().items() if n)
    return (
        f"# RL data filtering: {result.kept} of {len(result.prompts)} prompts kept\n\n"
        f"- model: `{result.model}`, {s.samples} samples per prompt, pass: {result.pass_rule}\n"
        f"- kept: {s.min_pass:g} < pass rate < {s.max_pass:g}; {counts}\n"
        f"- written: `{result.dataset}` ({result.rows_written} {result.row_format}), report `{result.report}`\n\n"
        f"![pass rates](data:image/png;base64,{data})\n"
    )


def side_files(out: Path) -> tuple[Path, Path]:
    """(report json, histogram png) beside the written dataset."""
    return out.with_name(f"{out.stem}_report.json"), out.with_name(f"{out.stem}_pass_rates.png")


# ---------------------------------------------------------------------------------------------- the job
def filter_rl_data(cfg: Config, settings: FilterSettings, out: Path) -> FilterResult:
    """Sample, score, decide, write (module docstring). ConfigError / DataError on bad input."""
    settings.check(out)
    policy_cfg = grpo_policy(cfg)
    started = time.monotonic()
    model = settings.model or cfg.policy.model_name_or_path
    # the sampled model's tokenizer, loaded only when a reward counts tokens (`overlong`)
    rewards = training_rewards(cfg, lambda: get_tokenizer(load_processor(model)), settings.dataset_script)
    on_bad_row = policy_cfg.dataset.on_bad_row
    samples = load_samples(cfg, "train", settings.dataset_script, keep_errors=on_bad_row == "skip")
    bad = [s for s in samples if "error" in s]
    samples = [s for s in samples if "error" not in s]
    if bad:
        logger.warning("filter-rl-data: %d bad row(s) skipped (dataset.on_bad_row = skip)", len(bad))
    if not samples:
        raise DataError("filter-rl-data: the dataset has no usable training rows to sample")
    engine = create_engine(from_rollout(cfg, model_path=model))
    try:
        seed = cfg.train.seed if settings.seed is None else settings.seed
        scores, rule = score_prompts(engine, samples, rewards, cfg, settings, seed)
    finally:
        engine.close()
    for s in scores:
        decide(s, settings.min_pass, settings.max_pass)
    n_rows, row_format, overrides = write_filtered(samples, scores, cfg, out)
    report, histogram = side_files(out)
    kept = sum(s.kept for s in scores)
    plot_pass_rates(scores, histogram, settings, f"{kept} of {len(scores)} prompts kept ({rule})")
    result = FilterResult(
        prompts=scores,
        dataset=out,
        report=report,
        histogram=histogram,
        pass_rule=rule,
        row_format=row_format,
        rows_written=n_rows,
        overrides=overrides,
        settings=settings,
        model=str(model),
        seconds=time.monotonic() - started,
    )
    write_atomic(
        report,
        json.dumps({**result.summary(), "prompts_scored": [s.to_dict() for s in scores]}, indent=1) + "\n",
    )
    logger.info(
        "filter-rl-data: kept %d of %d prompts (%s), %d rows written to %s",
        result.kept,
        len(scores),
        ", ".join(f"{k} {v}" for k, v in result.counts().items() if v),
        n_rows,
        out,
    )
    return result


__all__ = [
    "FilterResult",
    "FilterSettings",
    "PromptScore",
    "decide",
    "filter_rl_data",
    "check_model_path",
    "kept_rows",
    "pass_rates_markdown",
    "pass_rule",
    "plot_pass_rates",
    "score_prompts",
    "side_files",
    "training_overrides",
    "write_filtered",
]
