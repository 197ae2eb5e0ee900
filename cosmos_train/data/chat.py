"""Turn one Qwen-VL style chat (a sample's `messages`) into model inputs and SFT labels.

`encode_chat` renders the model's own chat template, loads each video / image part through
`cosmos_train.data.media` in the layout of the processor's model family, expands every <|video_pad|> /
<|image_pad|> to grid_t * grid_h * grid_w / merge**2 tokens, and builds labels.

Video time, per family (`VisionLayout.frame_timestamps`): Qwen2.5-VL keeps one vision block per video and
passes `second_per_grid_ts`; Qwen3-VL and Cosmos3-Edge write, for each temporal patch, `<{t:.1f} seconds>` and
a vision block of that patch's tokens, as their transformers processors (and vLLM) write it: Qwen3-VL in place
of the template's <|video_pad|>, inside its <|vision_start|> ... <|vision_end|>; Cosmos3-Edge in place of the
whole <|vision_start|><|video_pad|><|vision_end|> (`VisionLayout.keep_video_wrapper`). The text is expanded
before it is tokenised, so the timestamp tokens are those the processor gives.

Labels: -100 everywhere except the tokens of each assistant turn's content and its closing
<|im_end|> (a template without ChatML's turns, e.g. Llama's or Mistral's: the content as rendered and the
tokenizer's eos token when the template writes it right after). The newline the Qwen template writes after <|im_end|>
is NOT labelled: generation stops
at <|im_end|> (the eos), so the newline is never sampled and training on it teaches nothing.

Tokenisation matches inference: the text is cut at each assistant content boundary and the pieces
are tokenised separately, because at generation time the prompt ends with "<|im_start|>assistant\\n"
and the model's tokens start fresh after it (BPE could otherwise merge the header's newline with a
newline that starts the answer). Every other boundary is a special token, which splits anyway.

Truncation (only when max_length is set and the sample is longer):
  "error": raise ChatTooLongError naming the sample length and max_length.
  "right": drop tokens from the end. A vision block (<|vision_start|> pads <|vision_end|>) is never
           cut through: when the cut would land inside one, the whole block and everything after it
           go, and that item's pixels are dropped too. If the cut leaves no labelled token in a sample
           that had some, ChatTooLongError is raised, so callers can count the row as skipped instead
           of training on nothing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal, Protocol

import torch
from transformers import PreTrainedTokenizerBase

from cosmos_train.data import media
from cosmos_train.errors import DataError
from cosmos_train.vision.processor import get_tokenizer, vision_layout_of

IGNORE_INDEX = -100
# The vision tensors an EncodedChat may carry (its optional fields), as the model's forward names them.
VISION_TENSOR_KEYS = ("pixel_values_videos", "video_grid_thw", "second_per_grid_ts", "pixel_values", "image_grid_thw")
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
VISION_START, VISION_END = "<|vision_start|>", "<|vision_end|>"
IMAGE_PAD, VIDEO_PAD = "<|image_pad|>", "<|video_pad|>"
# mm_token_type_ids values transformers' Qwen2.5-VL uses to find vision tokens for 3D RoPE.
TEXT_TYPE, IMAGE_TYPE, VIDEO_TYPE = 0, 1, 2
ROLES = ("system", "user", "assistant")


class ChatTooLongError(DataError):
    """The encoded sample does not fit in max_length (and could not be truncated usefully)."""

    def __init__(self, message: str, length: int, max_length: int):
        super().__init__(message)
        self.length = length
        self.max_length = max_length


@dataclass
class EncodedChat:
    """One encoded chat; tensors have no batch dimension. Vision fields are None when absent.

    mm_token_type_ids (0 text, 1 image pad, 2 video pad) is what transformers' Qwen2.5-VL needs to
    build 3D RoPE positions; without it the model silently falls back to 1D positions.
    """

    input_ids: torch.Tensor  # LongTensor [L]
    labels: torch.Tensor  # LongTensor [L]
    attention_mask: torch.Tensor  # LongTensor [L], all ones
    mm_token_type_ids: torch.Tensor  # IntTensor [L]
    pixel_values_videos: torch.Tensor | None = None  # float32 [sum of video patches, C*2*14*14]
    video_grid_thw: torch.Tensor | None = None  # LongTensor [n_videos, 3]
    second_per_grid_ts: torch.Tensor | None = None  # float32 [n_videos]
    pixel_values: torch.Tensor | None = None  # float32 [sum of image patches, C*2*14*14]
    image_grid_thw: torch.Tensor | None = None  # LongTensor [n_images, 3]

    @property
    def num_label_tokens(self) -> int:
        return int((self.labels != IGNORE_INDEX).sum())

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    def model_inputs(self, with_labels: bool = False) -> dict[str, torch.Tensor]:
        """The keyword arguments of the model's forward / generate for this one sample (batch of 1)."""
        out: dict[str, torch.Tensor] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or (f.name == "labels" and not with_labels):
                continue
            batched = f.name in ("input_ids", "labels", "attention_mask", "mm_token_type_ids")
            out[f.name] = value.unsqueeze(0) if batched else value
        return out


@dataclass
class _VisionItem:
    kind: Literal["image", "video"]
    pixel_values: torch.Tensor
    grid_thw: torch.Tensor
    second_per_grid_t: float | None
    timestamps: tuple[float, ...] | None = None  # per temporal patch, frame-timestamp layouts only
    num_tokens: int = 0
    start: int = 0  # block span in the expanded ids, end exclusive
    end: int = 0

    def pad_runs(self, merge: int) -> list[int]:
        """Token counts of the runs of pad tokens this item fills: one run, or one per temporal patch."""
        total = int(self.grid_thw.prod())
        if self.timestamps is None:
            return [total // merge**2]
        return [total // int(self.grid_thw[0]) // merge**2] * int(self.grid_thw[0])


class FrameReader(Protocol):
    """Where decoded frames come from: `ClipCache` (disk, across runs) or `FrameMemo` (memory, one run)."""

    def read_video(
        self, path: str | os.PathLike, settings: media.VisionSettings | None = None
    ) -> tuple[torch.Tensor, float]: ...

    def load_image(self, source: Any, settings: media.VisionSettings | None = None) -> torch.Tensor: ...


def _where(origin: str | None) -> str:
    return f"{origin}: " if origin else ""


def _part_kind(part: dict) -> Literal["image", "video", "text"]:
    # Same precedence as the Qwen2.5-VL template: image keys first, then video, then text.
    if part.get("type") == "image" or "image" in part or "image_url" in part:
        return "image"
    if part.get("type") == "video" or "video" in part:
        return "video"
    if "text" in part:
        return "text"
    raise ValueError(f"part {part!r} is not text, image or video (the chat template would drop it)")


def _validate(messages: Sequence[dict], where: str) -> None:
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise ValueError(f"{where}messages must be a non-empty list of {{role, content}} dicts")
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
            raise ValueError(f"{where}messages[{i}] must be a dict with 'role' and 'content', got {msg!r}")
        if msg["role"] not in ROLES:
            raise ValueError(f"{where}messages[{i}].role is {msg['role']!r}; expected one of {ROLES}")
        content = msg["content"]
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise ValueError(f"{where}messages[{i}].content must be a string or a list of parts")
        for j, part in enumerate(content):
            if not isinstance(part, dict):
                raise ValueError(f"{where}messages[{i}].content[{j}] must be a dict, got {part!r}")
            try:
                kind = _part_kind(part)
            except ValueError as err:
                raise ValueError(f"{where}messages[{i}].content[{j}]: {err}") from None
            if kind != "text" and msg["role"] == "assistant":
                raise ValueError(f"{where}messages[{i}].content[{j}]: assistant turns cannot hold {kind} parts")


def _load_vision(
    messages: Sequence[dict],
    where: str,
    defaults: media.VisionSettings | None,
    clip_cache: FrameReader | None = None,
    layout: media.VisionLayout = media.QWEN2_VL_LAYOUT,
) -> list[_VisionItem]:
    """Decode and patchify every image / video part in `layout`, in the order the template renders them.

    With a clip cache, the decoded and resized frames come from it when present (see clip_cache);
    normalising and patchifying always run here, so cached and uncached results are identical."""
    read_video = clip_cache.read_video if clip_cache is not None else media.read_video
    load_image = clip_cache.load_image if clip_cache is not None else media.load_image
    items: list[_VisionItem] = []
    for i, msg in enumerate(messages):
        if isinstance(msg["content"], str):
            continue
        for j, part in enumerate(msg["content"]):
            kind = _part_kind(part)
            if kind == "text":
                continue
            try:
                settings = layout.settings(media.VisionSettings.from_part(part, defaults))
                if kind == "video":
                    frames, sample_fps = read_video(part["video"], settings)
                    # frames already in memory (a reader with `in_memory`, the reward service's videos) have no
                    # file to time: None takes them as a clip from 0 s at sample_fps (preprocess_video)
                    in_memory = bool(getattr(clip_cache, "in_memory", False))
                    timed = layout.frame_timestamps and not in_memory
                    times = media.sampled_frame_times(part["video"], settings) if timed else None
                    vi = media.preprocess_video(frames, settings, sample_fps, layout, times)
                    assert vi.second_per_grid_t is not None  # set for every video
                    spg = float(vi.second_per_grid_t)
                else:
                    source = part.get("image", part.get("image_url"))
                    vi = media.preprocess_image(load_image(source, settings), settings, layout)
                    spg = None
            except media.MediaError as err:
                raise media.MediaError(err.path, f"{where}messages[{i}].content[{j}]: {err.reason}") from err
            except (media.VisionSettingsError, KeyError, TypeError, ValueError) as err:
                raise ValueError(f"{where}messages[{i}].content[{j}] ({kind}): {err}") from err
            items.append(_VisionItem(kind, vi.pixel_values, vi.grid_thw.to(torch.long), spg, vi.timestamps))
    return items


def _timestamp_videos(
    chunks: list[tuple[str, bool]], items: list[_VisionItem], keep_wrapper: bool
) -> list[tuple[str, bool]]:
    """Write each timestamped video as `<t seconds><|vision_start|><|video_pad|><|vision_end|>` per temporal
    patch, in place of the template's <|video_pad|> (keep_wrapper, Qwen3VLProcessor) or of its whole
    <|vision_start|><|video_pad|><|vision_end|> (else a bare <|video_pad|>; Cosmos3EdgeProcessor);
    `_expand_pads` then widens each pad to its patch's tokens. A count mismatch is left for `_expand_pads`."""
    videos = iter([it for it in items if it.kind == "video"])
    whole = re.escape(VISION_START + VIDEO_PAD + VISION_END) + "|"
    pattern = re.compile(("" if keep_wrapper else whole) + re.escape(VIDEO_PAD))

    def expand(match: re.Match) -> str:
        item = next(videos, None)
        if item is None or item.timestamps is None:
            return match.group()
        return "".join(f"<{t:.1f} seconds>{VISION_START}{VIDEO_PAD}{VISION_END}" for t in item.timestamps)

    return [(pattern.sub(expand, text) if not labelled else text, labelled) for text, labelled in chunks]


_MEDIA_IN_TEMPLATE = re.compile(r"image|video")


def _has_media(messages: Sequence[dict]) -> bool:
    return any(
        isinstance(m.get("content"), list)
        and any(isinstance(part, dict) and _part_kind(part) in ("image", "video") for part in m["content"])
        for m in messages
    )


def _chat_template(processor_or_tokenizer: Any, tokenizer: PreTrainedTokenizerBase) -> str:
    template = getattr(processor_or_tokenizer, "chat_template", None) or tokenizer.chat_template
    if not template:
        raise ValueError("the processor / tokenizer has no chat template")
    return template


def _render_chunks(
    tokenizer: PreTrainedTokenizerBase, template: str, messages: Sequence[dict], add_generation_prompt: bool
) -> list[tuple[str, bool]]:
    """Split the rendered chat into (text, labelled) pieces; labelled = assistant content + <|im_end|> (a ChatML
    template), or the content as rendered + the eos token right after it (another template: Llama's, Mistral's).

    Renders growing prefixes of the conversation, so each message's text is found exactly where the
    template put it (including any default system prompt the template adds before the first turn).
    """

    def render(msgs: Sequence[dict], gen: bool) -> str:
        text = tokenizer.apply_chat_template(
            list(msgs), chat_template=template, tokenize=False, add_generation_prompt=gen
        )
        assert isinstance(text, str)  # tokenize=False renders text (the result is typed for every mode)
        return text

    chunks: list[tuple[str, bool]] = []
    prev = ""
    header = f"{IM_START}assistant\n"
    for i, msg in enumerate(messages):
        text = render(messages[: i + 1], False)
        if not text.startswith(prev):
            raise ValueError("the chat template renders earlier turns differently once later turns exist")
        seg = text[len(prev) :]
        prev = text
        if msg["role"] != "assistant":
            chunks.append((seg, False))
            continue
        end = seg.rfind(IM_END)
        start = seg.rfind(header, 0, end) if end >= 0 else -1
        if start >= 0:
            body_start, body_end = start + len(header), end + len(IM_END)
        else:  # another template (Llama's, Mistral's): the content as rendered, and the eos token right after it
            span = _assistant_span(seg, msg, tokenizer.eos_token)
            if span is None:
                raise ValueError(
                    f"messages[{i}]: the template rendered the assistant turn neither as "
                    f"{header!r}...{IM_END} nor with its content as written"
                )
            body_start, body_end = span
        chunks += [(seg[:body_start], False), (seg[body_start:body_end], True), (seg[body_end:], False)]
    if add_generation_prompt:
        text = render(messages, True)
        if not text.startswith(prev):
            raise ValueError("the chat template's generation prompt changes the earlier turns")
        chunks.append((text[len(prev) :], False))
    merged: list[tuple[str, bool]] = []
    for text, labelled in chunks:
        if merged and not labelled and not merged[-1][1]:
            merged[-1] = (merged[-1][0] + text, False)
        elif text:
            merged.append((text, labelled))
    return merged


def _assistant_span(seg: str, msg: dict, eos: str | None) -> tuple[int, int] | None:
    """(start, end) in `seg` of an assistant turn's content as a non-ChatML template renders it (its last
    occurrence as written, else whitespace-trimmed as some templates trim it), with the tokenizer's eos token when
    the template writes it right after; None when the content is not found."""
    content = msg.get("content")
    if isinstance(content, list):
        content = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    text = str(content or "")
    if text not in seg:
        text = text.strip()
    start = seg.rfind(text) if text else -1
    if start < 0:
        return None
    end = start + len(text)
    if eos and seg.startswith(eos, end):
        end += len(eos)
    return start, end


def _expand_pads(
    ids: list[int],
    labels: list[int],
    items: list[_VisionItem],
    tokenizer: PreTrainedTokenizerBase,
    merge: int,
    where: str,
) -> tuple[list[int], list[int], list[int]]:
    """Replace each pad token by its run of tokens (a timestamped video has one pad per temporal patch);
    record each item's block span, from its first timestamp to its last <|vision_end|>."""
    pad_ids = {
        "image": tokenizer.convert_tokens_to_ids(IMAGE_PAD),
        "video": tokenizer.convert_tokens_to_ids(VIDEO_PAD),
    }
    kind_of = {v: k for k, v in pad_ids.items()}
    vstart, vend = tokenizer.convert_tokens_to_ids(VISION_START), tokenizer.convert_tokens_to_ids(VISION_END)
    found = {k: sum(1 for t in ids if t == pad_ids[k]) for k in pad_ids}
    item_runs = [(it, it.pad_runs(merge)) for it in items]
    wanted = {k: sum(len(r) for it, r in item_runs if it.kind == k) for k in pad_ids}
    if found != wanted:
        parts = {k: sum(1 for it in items if it.kind == k) for k in pad_ids}
        raise ValueError(
            f"{where}the rendered chat has {found['image']} image and {found['video']} video pad tokens but the "
            f"messages hold {parts['image']} image and {parts['video']} video parts needing {wanted['image']} and "
            f"{wanted['video']} (does a text part contain a literal {IMAGE_PAD} or {VIDEO_PAD}?)"
        )
    # One entry per pad: (item, run length, the item's first run).
    runs = {k: iter([(it, n, i == 0) for it, r in item_runs if it.kind == k for i, n in enumerate(r)]) for k in pad_ids}
    out_ids: list[int] = []
    out_labels: list[int] = []
    types: list[int] = []
    for tok, lab in zip(ids, labels):
        kind = kind_of.get(tok)
        if kind is None:
            out_ids.append(tok)
            out_labels.append(lab)
            types.append(TEXT_TYPE)
            continue
        if lab != IGNORE_INDEX:
            raise ValueError(f"{where}a {kind} pad token falls inside an assistant turn")
        item, n, first = next(runs[kind])
        if first:
            total = int(item.grid_thw.prod())
            if sum(item.pad_runs(merge)) * merge**2 != total or item.pixel_values.shape[0] != total:
                raise ValueError(
                    f"{where}{kind} grid {item.grid_thw.tolist()} does not match {item.pixel_values.shape[0]} "
                    f"patches with spatial merge {merge}"
                )
            item.num_tokens = 0
            item.start = len(out_ids) - 1 if out_ids and out_ids[-1] == vstart else len(out_ids)
            if item.timestamps is not None:
                item.start = _timestamp_start(out_ids, item.start, item.timestamps[0], tokenizer)
        item.num_tokens += n
        out_ids += [tok] * n
        out_labels += [IGNORE_INDEX] * n
        types += [VIDEO_TYPE if kind == "video" else IMAGE_TYPE] * n
        item.end = len(out_ids)
    # Let a block's span include the <|vision_end|> right after its pads (and a video wrapper's own one).
    for item in items:
        for _ in range(2 if item.timestamps is not None else 1):
            if item.end < len(out_ids) and out_ids[item.end] == vend:
                item.end += 1
    return out_ids, out_labels, types


def _timestamp_start(ids: list[int], block_start: int, seconds: float, tokenizer: PreTrainedTokenizerBase) -> int:
    """Where the first `<t seconds>` before a video's first vision block starts, or the video wrapper's
    <|vision_start|> before it (so truncation drops the timestamp and wrapper with the block); the block itself
    when the text before it tokenised differently."""
    stamp = tokenizer(f"<{seconds:.1f} seconds>", add_special_tokens=False)["input_ids"]
    if not (stamp and block_start >= len(stamp) and ids[block_start - len(stamp) : block_start] == stamp):
        return block_start
    start = block_start - len(stamp)
    return start - 1 if start > 0 and ids[start - 1] == tokenizer.convert_tokens_to_ids(VISION_START) else start


def _stack(items: list[_VisionItem], kind: str) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
    chosen = [it for it in items if it.kind == kind]
    if not chosen:
        return None, None, None
    pixels = torch.cat([it.pixel_values.to(torch.float32) for it in chosen], dim=0)
    grids = torch.stack([it.grid_thw.reshape(3) for it in chosen]).to(torch.long)
    # Timestamped layouts (Qwen3-VL) carry video time in the prompt; their models take no second_per_grid_ts.
    spg = (
        torch.tensor([it.second_per_grid_t for it in chosen], dtype=torch.float32)
        if kind == "video" and chosen[0].timestamps is None
        else None
    )
    return pixels, grids, spg


def encode_chat(
    processor_or_tokenizer: Any,
    messages: Sequence[dict],
    *,
    max_length: int | None = None,
    add_generation_prompt: bool = False,
    truncation: Literal["error", "right"] = "error",
    origin: str | None = None,
    vision_defaults: media.VisionSettings | None = None,
    clip_cache: FrameReader | None = None,
) -> EncodedChat:
    """Encode `messages` for the model of `processor_or_tokenizer` (see the module docstring).

    origin: the sample's file and row, prefixed to error messages.
    vision_defaults: settings (e.g. from the config) under each part's own vision keys.
    clip_cache: a `cosmos_train.data.clip_cache.ClipCache` (dataset.cache_dir) that keeps decoded
        clips on disk, so a second epoch or run does not decode them again, or a
        `cosmos_train.data.frame_memo.FrameMemo` (memory, one run); None decodes every time.
    A bare tokenizer works for text-only chats and for vision in Qwen2.5-VL's layout; a processor gives
    its family's layout (`cosmos_train.vision.processor.vision_layout_of`).
    """
    if truncation not in ("error", "right"):
        raise ValueError(f"truncation must be 'error' or 'right', got {truncation!r}")
    where = _where(origin)
    _validate(messages, where)
    tokenizer = get_tokenizer(processor_or_tokenizer)
    layout = vision_layout_of(processor_or_tokenizer)
    merge = layout.merge_size

    try:
        template = _chat_template(processor_or_tokenizer, tokenizer)
    except ValueError as err:
        raise ValueError(f"{where}{err}") from None
    if _has_media(messages) and not _MEDIA_IN_TEMPLATE.search(template):
        raise DataError(
            f"{where}the chat has image / video parts, but the model's chat template has no place for "
            "them: a text-only language model (a tokenizer, no processor) takes text rows only; use a "
            "vision-language model, or rows without media"
        )
    items = _load_vision(messages, where, vision_defaults, clip_cache, layout)
    try:
        chunks = _render_chunks(tokenizer, template, messages, add_generation_prompt)
    except ValueError as err:
        raise ValueError(f"{where}{err}") from None
    if layout.frame_timestamps:
        chunks = _timestamp_videos(chunks, items, layout.keep_video_wrapper)
    ids: list[int] = []
    labels: list[int] = []
    for text, labelled in chunks:
        toks = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += toks
        labels += toks if labelled else [IGNORE_INDEX] * len(toks)
    ids, labels, types = _expand_pads(ids, labels, items, tokenizer, merge, where)

    if max_length is not None and len(ids) > max_length:
        if truncation == "error":
            raise ChatTooLongError(
                f"{where}sample is {len(ids)} tokens, longer than max_length {max_length}",
                len(ids),
                max_length,
            )
        cut = max_length
        for item in items:
            if item.start < cut < item.end:
                cut = item.start
                break
        had_labels = any(lab != IGNORE_INDEX for lab in labels)
        full_length = len(ids)
        ids, labels, types = ids[:cut], labels[:cut], types[:cut]
        items = [it for it in items if it.end <= cut]
        if had_labels and all(lab == IGNORE_INDEX for lab in labels):
            raise ChatTooLongError(
                f"{where}sample is {full_length} tokens; cut to max_length {max_length} (at {cut} to keep vision "
                "blocks whole) it keeps no assistant token",
                full_length,
                max_length,
            )

    pv_videos, video_grid, spg = _stack(items, "video")
    pv_images, image_grid, _ = _stack(items, "image")
    return EncodedChat(
        input_ids=torch.tensor(ids, dtype=torch.long),
        labels=torch.tensor(labels, dtype=torch.long),
        attention_mask=torch.ones(len(ids), dtype=torch.long),
        mm_token_type_ids=torch.tensor(types, dtype=torch.int32),
        pixel_values_videos=pv_videos,
        video_grid_thw=video_grid,
        second_per_grid_ts=spg,
        pixel_values=pv_images,
        image_grid_thw=image_grid,
    )
