"""Turning the rows users have (Cosmos-Reason, LLaVA, chat samples, RL qa_pairs) into chat samples.

Every source reads its rows and hands each one to `row_to_samples` with a `RowContext` saying
where media paths are relative to and which vision settings apply. One mapper for all sources
means a LLaVA row inside a parquet file or a Cosmos row inside a user's script behaves the same.

A row that cannot be mapped raises `RowError(reason, message)`; sources turn it into an *error
sample* (`{"id", "origin", "messages": [], "error": {"reason", "message"}}`) so that data
preparation can apply `dataset.on_bad_row` (fail naming file and row, or skip and count).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cosmos_train.config import TrainPolicyConfig
from cosmos_train.config.paths import cosmos_cache
from cosmos_train.data.prompt import choice_question_text
from cosmos_train.data.sources.embedded import is_embedded, store_embedded
from cosmos_train.errors import DataError
from cosmos_train.vision.settings import VISION_KEYS

# Settings that mean something for a still image (qwen-vl-utils fetch_image).
IMAGE_KEYS = ("max_pixels", "min_pixels", "resized_height", "resized_width")
ROLE_ALIASES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}
PLACEHOLDER = re.compile(r"<(image|video)>")


class DatasetError(DataError):
    """A dataset that cannot be read at all (missing file, unknown layout, hub failure)."""


class RowError(DataError):
    """One row that cannot be turned into a chat sample; `reason` is a short count key."""

    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(message)


@dataclass
class RowContext:
    """How to read the rows of one file.

    media_roots: folders tried in order for relative media paths (the first is named when none has it).
    media_lookup: maps a row's media value to a local path (Cosmos: by basename); tried first.
    vision: the dataset's vision settings, merged under each part's own keys.
    media_every_user_turn: Cosmos-Reason rows put the video in front of every user turn; LLaVA
        rows without placeholders put media in front of the first user turn only.
    reasoning_prompt: RL prompts ask for <think>/<answer> (when the format reward is used).
    embedded_store: where images/videos held inside rows (PIL, {"bytes"} structs) are written;
        default $COSMOS_CACHE/embedded_media.
    allow_outside_root: read local media outside every media root (dataset.allow_media_outside_root);
        otherwise such a row is a RowError "media_outside_root" (see `check_inside_roots`).
    """

    media_roots: list[Path] = field(default_factory=list)
    media_lookup: Callable[[str], Path | None] | None = None
    vision: dict[str, Any] = field(default_factory=dict)
    conversation_column: str = "conversations"
    prompt_column: str | None = None
    response_column: str | None = None  # the reference answer's column (None: reference/answer/correct_answer)
    media_every_user_turn: bool = False
    reasoning_prompt: bool = False
    embedded_store: Path | None = None
    write_embedded: bool = True  # False: a dry run that only looks at paths (no image encoding)
    allow_outside_root: bool = False


def context_for(train_policy: TrainPolicyConfig, vision: Mapping[str, Any], **kw: Any) -> RowContext:
    """A RowContext with the train policy's column names and reward-dependent prompt style."""
    return RowContext(
        vision=dict(vision),
        conversation_column=train_policy.conversation_column_name,
        prompt_column=train_policy.prompt_column_name,
        response_column=train_policy.response_column_name or None,
        reasoning_prompt="format" in reward_names(train_policy.reward_function),
        **kw,
    )


def reward_names(spec: str | list[str] | dict[str, float]) -> list[str]:
    if isinstance(spec, str):
        return [spec]
    return list(spec)


# ------------------------------------------------------------------------------------- rows
def error_sample(sample_id: str, origin: str, reason: str, message: str) -> dict[str, Any]:
    return {"id": sample_id, "origin": origin, "messages": [], "error": {"reason": reason, "message": message}}


def map_rows(
    rows: Iterable[Mapping[str, Any]], origin_file: str, ctx: RowContext, id_prefix: str = ""
) -> Iterator[dict]:
    """row_to_samples over rows; a row that fails becomes an error sample naming file:row."""
    for index, row in enumerate(rows):
        origin = f"{origin_file}:{index}"
        try:
            if not isinstance(row, Mapping):
                raise RowError("bad_row", f"row is a {type(row).__name__}, not an object")
            yield from row_to_samples(row, origin, _row_id(row, id_prefix, index), ctx)
        except RowError as e:
            yield error_sample(_row_id(row, id_prefix, index), origin, e.reason, f"{origin}: {e}")


def _row_id(row: Any, prefix: str, index: int) -> str:
    rid = row.get("id") if isinstance(row, Mapping) else None
    return f"{prefix}{rid if rid not in (None, '') else index}"


def row_to_samples(row: Mapping[str, Any], origin: str, sample_id: str, ctx: RowContext) -> list[dict]:
    """One row -> chat samples (several when a row holds a list of qa_pairs)."""
    row_vision = {k: row[k] for k in VISION_KEYS if row.get(k) is not None}
    reference = _reference(row, ctx.response_column)
    if "messages" in row and ctx.conversation_column not in row:
        messages = _chat_messages(row["messages"], ctx, row_vision, _row_media(row, ctx, row_vision))
    elif ctx.conversation_column in row:
        turns = _turns(row[ctx.conversation_column], ctx.conversation_column)
        messages = _place_media(turns, _row_media(row, ctx, row_vision), ctx)
    elif "qa_pairs" in row:
        return _qa_samples(row, origin, sample_id, ctx, row_vision)
    elif ctx.prompt_column and ctx.prompt_column in row:
        turns = [{"role": "user", "content": _text(row[ctx.prompt_column], ctx.prompt_column)}]
        messages = _place_media(turns, _row_media(row, ctx, row_vision), ctx)
    else:
        wanted = [ctx.conversation_column, "messages", "qa_pairs"] + ([ctx.prompt_column] if ctx.prompt_column else [])
        raise RowError(
            "unknown_column",
            f"row has none of the columns {wanted} (it has {sorted(row)}); set "
            "train.train_policy.conversation_column_name (or prompt_column_name for RL prompts)",
        )
    sample: dict[str, Any] = {"id": sample_id, "origin": origin, "messages": messages}
    if reference is not None:
        sample["reference"] = reference
    return [sample]


def _reference(row: Mapping[str, Any], column: str | None = None) -> str | None:
    if column is not None:
        if not isinstance(row.get(column), str | int | float):
            raise RowError(
                "missing_reference",
                f"row has no reference answer in column {column!r} "
                f"(train.train_policy.response_column_name; it has {sorted(row)})",
            )
        return str(row[column])
    for key in ("reference", "answer", "correct_answer"):
        if isinstance(row.get(key), str | int):
            return str(row[key])
    return None


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise RowError("bad_conversation", f"{what} must be a string, got {type(value).__name__}")
    return value


def _turns(value: Any, column: str) -> list[dict[str, Any]]:
    """The conversation column (a list, or that list as a JSON string) as [{role, content}]."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise RowError("bad_conversation", f"column {column!r} is a string but not JSON: {e}") from None
    if hasattr(value, "tolist"):  # numpy arrays from parquet
        value = value.tolist()
    if not isinstance(value, list):
        raise RowError("bad_conversation", f"column {column!r} must be a list of turns, got {type(value).__name__}")
    turns = []
    for i, turn in enumerate(value):
        if not isinstance(turn, Mapping):
            raise RowError("bad_conversation", f"{column}[{i}] must be an object, got {turn!r}")
        if "role" in turn:
            role, content = turn["role"], turn.get("content")
        elif "from" in turn:
            role, content = turn["from"], turn.get("value")
        else:
            raise RowError("bad_conversation", f"{column}[{i}] has neither 'role' nor 'from' (keys {sorted(turn)})")
        # Unknown roles are kept as written: validation names them ("wrong role").
        role = ROLE_ALIASES.get(str(role).lower(), role)
        if content is None:
            raise RowError("bad_conversation", f"{column}[{i}] has no content")
        if hasattr(content, "tolist"):
            content = content.tolist()
        turns.append({"role": role, "content": copy.deepcopy(content)})
    return turns


# ------------------------------------------------------------------------------------ media
def resolve_media(value: str, ctx: RowContext) -> str:
    """A row's media reference -> an absolute path string (existence is checked by validation).

    Media held in the row itself (a PIL image, a {"bytes", "path"} struct) is written to
    `ctx.embedded_store` first; a struct with only a path is that path.
    """
    if is_embedded(value):
        if not ctx.write_embedded:
            return "<embedded>"
        try:
            return str(store_embedded(value, ctx.embedded_store or cosmos_cache() / "embedded_media"))
        except OSError as e:
            raise RowError("bad_media", f"cannot store the row's embedded media: {e}") from None
    if isinstance(value, Mapping) and value.get("bytes") is None and isinstance(value.get("path"), str):
        value = value["path"]
    if not isinstance(value, str) or not value:
        raise RowError("bad_row", f"media path must be a non-empty string, got {value!r}")
    if value.startswith(("http://", "https://")):
        return value
    if ctx.media_lookup is not None:
        found = ctx.media_lookup(value)
        if found is not None:
            return str(check_inside_roots(Path(found), value, ctx))
    path = Path(value.removeprefix("file://")).expanduser()
    if path.is_absolute():
        return str(check_inside_roots(path, value, ctx))
    for root in ctx.media_roots:
        if (root / path).exists():
            return str(check_inside_roots((root / path).resolve(), value, ctx))
    base = ctx.media_roots[0] if ctx.media_roots else Path.cwd()
    return str(check_inside_roots((base / path).absolute(), value, ctx))


def check_inside_roots(path: Path, value: Any, ctx: RowContext) -> Path:
    """`path`, when it lies under one of ctx.media_roots once `..` and symlinks are resolved; else
    RowError "media_outside_root" (unless ctx.allow_outside_root).

    The media roots are the folders a source resolves relative paths against (dataset.media_path, the
    annotation / data file's folder, dataset.local_dir, the hub snapshot, the video folder, the
    extracted clips). An absolute path under one of them is fine; one elsewhere (a LLaVA file with
    media_path = "" and absolute paths) needs dataset.allow_media_outside_root = true, which says so
    on purpose. Media written from the rows' own bytes (the embedded store) is never checked: we wrote it.
    A root inside a Hugging Face cache snapshot (`.../snapshots/<rev>`) also admits its repo's `blobs/`:
    the snapshot's files are symlinks into it by design.
    """
    if ctx.allow_outside_root:
        return path
    real = path.resolve()
    roots = [root.resolve() for root in ctx.media_roots]
    blobs = [root.parent.parent / "blobs" for root in ctx.media_roots if root.parent.name == "snapshots"]
    if any(real.is_relative_to(root) for root in roots + [b.resolve() for b in blobs]):
        return path
    where = ", ".join(str(r) for r in roots) if roots else "none: this dataset has no local media folder"
    raise RowError(
        "media_outside_root",
        f"media {value!r} resolves to {real}, outside the dataset's media roots ({where}); move it under "
        "dataset.media_path, or set train.train_policy.dataset.allow_media_outside_root = true (or "
        "validation.dataset's) if the rows are meant to point there",
    )


def media_part(kind: str, path: str, ctx: RowContext, own: Mapping[str, Any]) -> dict[str, Any]:
    """{"type": kind, kind: path, **dataset vision, **the row's own settings}."""
    keys = VISION_KEYS if kind == "video" else IMAGE_KEYS
    merged = {k: v for k, v in {**ctx.vision, **own}.items() if k in keys}
    return {"type": kind, kind: path, **merged}


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if hasattr(value, "tolist"):
        value = value.tolist()
    return list(value) if isinstance(value, list | tuple) else [value]


def _row_media(row: Mapping[str, Any], ctx: RowContext, own: Mapping[str, Any]) -> dict[str, list[dict]]:
    """The row's media columns (video, videos, image, images) as parts, by kind."""
    out: dict[str, list[dict]] = {"video": [], "image": []}
    for kind, keys in (("video", ("video", "videos")), ("image", ("image", "images"))):
        for key in keys:
            for value in _as_list(row.get(key)):
                out[kind].append(media_part(kind, resolve_media(value, ctx), ctx, own))
    return out


def _split_placeholders(text: str, media: dict[str, list[dict]], used: dict[str, int]) -> list[dict]:
    parts: list[dict] = []
    pos = 0
    for m in PLACEHOLDER.finditer(text):
        kind = m.group(1)
        before = text[pos : m.start()].strip("\n")
        if before:
            parts.append({"type": "text", "text": before})
        if used[kind] < len(media[kind]):
            parts.append(media[kind][used[kind]])
        used[kind] += 1
        pos = m.end()
    rest = text[pos:].strip("\n")
    if rest:
        parts.append({"type": "text", "text": rest})
    return parts


def _place_media(turns: list[dict], media: dict[str, list[dict]], ctx: RowContext) -> list[dict]:
    """Put media parts into the turns: where <image>/<video> placeholders stand, else in front
    of the first user turn (every user turn for Cosmos-Reason rows)."""
    texts = [t["content"] for t in turns if isinstance(t["content"], str)]
    counts = {k: sum(len(re.findall(f"<{k}>", s)) for s in texts) for k in ("image", "video")}
    if any(counts.values()):
        for kind in ("image", "video"):
            if counts[kind] != len(media[kind]):
                raise RowError(
                    "placeholder_mismatch",
                    f"{counts[kind]} <{kind}> placeholder(s) in the conversation but {len(media[kind])} "
                    f"{kind}(s) in the row",
                )
        used = {"image": 0, "video": 0}
        return [
            {**t, "content": _split_placeholders(t["content"], media, used)}
            if isinstance(t["content"], str) and PLACEHOLDER.search(t["content"])
            else t
            for t in turns
        ]
    parts = media["image"] + media["video"]
    if not parts:
        return turns
    out, placed = [], False
    for t in turns:
        if t["role"] == "user" and isinstance(t["content"], str) and (not placed or ctx.media_every_user_turn):
            t = {**t, "content": [copy.deepcopy(p) for p in parts] + [{"type": "text", "text": t["content"]}]}
            placed = True
        out.append(t)
    if not placed:
        raise RowError("bad_conversation", "the row has media but no user turn to attach it to")
    return out


def _chat_messages(value: Any, ctx: RowContext, own: Mapping[str, Any], media: dict[str, list[dict]]) -> list[dict]:
    """Rows already in chat-sample form: resolve media paths and merge vision settings.

    A media part without a value ({"type": "image"}, TRL's layout) takes the next item of the
    row's images/videos column, in order; every column item must find its part.
    """
    messages = _turns(value, "messages")
    used = {"image": 0, "video": 0}
    for msg in messages:
        if isinstance(msg["content"], list):
            new = []
            for part in msg["content"]:
                if isinstance(part, Mapping):
                    # datasets gives every part every key of the column's struct, None where unset;
                    # a text part with "image": None would read as an image to the chat template.
                    part = {k: v for k, v in part.items() if v is not None}
                kind = part.get("type") if isinstance(part, Mapping) else None
                if kind in ("image", "video") and part.get(kind) is not None:
                    extra = {k: v for k, v in part.items() if k not in ("type", kind)}
                    part = media_part(kind, resolve_media(part[kind], ctx), ctx, {**own, **extra})
                elif kind in ("image", "video"):
                    if used[kind] >= len(media[kind]):
                        raise RowError(
                            "placeholder_mismatch",
                            f"{'an' if kind == 'image' else 'a'} {kind} part without a value and no {kind} left in "
                            f"the row's {kind}s column "
                            f"({len(media[kind])} given)",
                        )
                    extra = {k: v for k, v in part.items() if k != "type"}
                    part = {**media[kind][used[kind]], **extra}
                    used[kind] += 1
                new.append(part)
            msg["content"] = new
    for kind in ("image", "video"):
        if used[kind] != len(media[kind]):
            raise RowError(
                "placeholder_mismatch",
                f"the row has {len(media[kind])} {kind}(s) but the messages have {used[kind]} {kind} part(s) "
                "without a value to put them in",
            )
    return messages


# ------------------------------------------------------------------------------------ RL rows
def _qa_samples(
    row: Mapping[str, Any], origin: str, sample_id: str, ctx: RowContext, own: Mapping[str, Any]
) -> list[dict]:
    pairs = row["qa_pairs"]
    if isinstance(pairs, str):
        try:
            pairs = json.loads(pairs)
        except json.JSONDecodeError as e:
            raise RowError("bad_row", f"qa_pairs is a string but not JSON: {e}") from None
    many = isinstance(pairs, list)
    samples = []
    for k, qa in enumerate(pairs if many else [pairs]):
        where = f"qa_pairs[{k}]" if many else "qa_pairs"
        if not isinstance(qa, Mapping) or not isinstance(qa.get("question"), str):
            raise RowError("bad_row", f"{where} must be an object with a 'question' string")
        options = qa.get("index2ans") or {}
        if not isinstance(options, Mapping):
            raise RowError("bad_row", f"{where}.index2ans must be an object of letter -> answer")
        answer = qa.get("answer", qa.get("correct_answer"))
        if options and answer not in options:
            # Some rows store the answer text instead of its letter.
            letters = [key for key, text in options.items() if text == answer]
            if len(letters) != 1:
                raise RowError(
                    "bad_row", f"{where}: answer {answer!r} is neither a key of index2ans nor one of its values"
                )
            answer = letters[0]
        turns = [{"role": "user", "content": choice_question_text(qa["question"], options, ctx.reasoning_prompt)}]
        media = _row_media(row, ctx, own)
        sample: dict[str, Any] = {
            "id": f"{sample_id}#{k}" if many else sample_id,
            "origin": origin,
            "messages": _place_media(turns, media, ctx),
        }
        if answer is not None:
            sample["reference"] = str(answer)
        if options:
            sample["options"] = {str(k): str(v) for k, v in options.items()}  # for rewards reading the letter
        samples.append(sample)
    return samples


# ------------------------------------------------------------------------------------ files
ROW_FILE_SUFFIXES = (".json", ".jsonl", ".parquet", ".arrow")


def read_jsonl(path: Path) -> list[Any]:
    """One JSON value per non-empty line; a bad line, the last one too, is named by file and line number.

    Strict on purpose: the data-prep manifest is read with it, and a torn or corrupt row there must
    stop the run rather than silently train on fewer rows. Lines are split on "\n" only: rows written
    with ensure_ascii=False keep U+2028 / U+0085 inside strings, where str.splitlines() would split.
    """
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise DatasetError(f"{path}:{n}: not valid JSON: {e}") from None
    return rows


def read_rows(path: Path) -> list[dict[str, Any]]:
    """Rows of a json (list, or {"data"|"rows": list}), jsonl, parquet or arrow file."""
    suffix = path.suffix.lower()
    if not path.is_file():
        raise DatasetError(f"{path}: file not found")
    if suffix == ".jsonl":
        return read_jsonl(path)
    if suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise DatasetError(f"{path}: not valid JSON: {e}") from None
        if isinstance(data, dict):
            for key in ("data", "rows", "annotations"):
                if isinstance(data.get(key), list):
                    return data[key]
            raise DatasetError(f"{path}: a JSON object without a 'data' list; expected a list of rows")
        if not isinstance(data, list):
            raise DatasetError(f"{path}: expected a JSON list of rows, got {type(data).__name__}")
        return data
    if suffix in (".parquet", ".arrow"):
        if suffix == ".parquet":
            import pyarrow.parquet as pq  # why: comes with datasets, a slow import; parquet rows only

            return pq.read_table(path).to_pylist()
        # .arrow files are what datasets.save_to_disk writes: memory-mapped, no cache
        import datasets  # why: datasets takes seconds to import; only hub / parquet / arrow datasets need it

        return list(datasets.Dataset.from_file(str(path)))
    raise DatasetError(f"{path}: unsupported file type {suffix!r} (use one of {', '.join(ROW_FILE_SUFFIXES)})")
