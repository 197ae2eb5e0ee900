"""Micro-batches from encoded chats: right-padded, or padding-free packed into one sequence.

Packing concatenates samples into a [1, sum(L_i)] row. Each sample keeps its own 3D RoPE positions
(computed per sample, exactly as unpacked) and a text position row that restarts at 0, from which
transformers builds a block-diagonal causal mask, or, with `cosmos_train.train.packed_attention` (what
train.sequence_packing switches on), the segment bounds from which each sample attends within itself without
a mask: samples never attend to each other, so the packed loss equals the unpacked loss
(tests/unit/test_batching.py shows it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import torch

from cosmos_train.data.chat import VISION_TENSOR_KEYS, EncodedChat
from cosmos_train.models.families import family_of
from cosmos_train.train import cp_language, packed_attention

IGNORE = -100


@dataclass
class MicroBatch:
    input_ids: torch.Tensor  # [B, L]
    labels: torch.Tensor  # [B, L]
    attention_mask: torch.Tensor | None  # [B, L]; None when packed
    mm_token_type_ids: torch.Tensor  # [B, L]: 0 text, 1 image, 2 video (encode_chat's, for get_rope_index)
    vision: dict[str, torch.Tensor] = field(default_factory=dict)
    packed_lengths: list[int] | None = None
    # per packed sample: how many images / videos it holds, to hand each its own grids
    packed_media: list[tuple[int, int]] | None = None
    n_samples: int = 0
    # Explicit layouts (GRPO's shared prompt): position ids [4, B, L] (text row, then 3D RoPE) with a 4D
    # additive attention mask [B, 1, L, L], and the positions whose logits the loss reads.
    position_ids: torch.Tensor | None = None
    logit_positions: torch.Tensor | None = None
    n_padding: int = 0  # explicit layouts: positions holding padding (each sees only itself)

    @property
    def n_label_tokens(self) -> int:
        # labels are shifted by one in the loss: the first position never counts
        return int((self.labels[:, 1:] != IGNORE).sum())

    @property
    def has_media(self) -> bool:
        return "pixel_values" in self.vision or "pixel_values_videos" in self.vision

    @property
    def n_tokens(self) -> int:
        if self.attention_mask is None or self.attention_mask.dim() == 4:
            return self.input_ids.numel() - self.n_padding
        return int(self.attention_mask.sum())

    def to(self, device: torch.device) -> MicroBatch:
        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device, non_blocking=True)

        return replace(
            self,
            input_ids=self.input_ids.to(device),
            labels=self.labels.to(device),
            attention_mask=move(self.attention_mask),
            mm_token_type_ids=self.mm_token_type_ids.to(device),
            vision={k: v.to(device, non_blocking=True) for k, v in self.vision.items()},
            position_ids=move(self.position_ids),
            logit_positions=move(self.logit_positions),
        )


def cat_vision(samples: list[EncodedChat]) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for key in VISION_TENSOR_KEYS:
        parts = [getattr(s, key) for s in samples if getattr(s, key) is not None]
        if parts:
            parts = [p.reshape(-1) if key == "second_per_grid_ts" else p for p in parts]
            out[key] = torch.cat([torch.as_tensor(p) for p in parts], dim=0)
    return out


def _media_counts(sample: EncodedChat) -> tuple[int, int]:
    img, vid = sample.image_grid_thw, sample.video_grid_thw
    return (0 if img is None else len(img), 0 if vid is None else len(vid))


def collate_padded(samples: list[EncodedChat], pad_id: int) -> MicroBatch:
    """Right-pad to the longest sample."""
    length = max(len(s.input_ids) for s in samples)
    ids = torch.full((len(samples), length), pad_id, dtype=torch.long)
    labels = torch.full((len(samples), length), IGNORE, dtype=torch.long)
    types = torch.zeros((len(samples), length), dtype=torch.long)
    mask = torch.zeros((len(samples), length), dtype=torch.long)
    for i, s in enumerate(samples):
        n = len(s.input_ids)
        ids[i, :n] = s.input_ids
        labels[i, :n] = s.labels
        types[i, :n] = s.mm_token_type_ids
        mask[i, :n] = 1
    return MicroBatch(ids, labels, mask, types, cat_vision(samples), n_samples=len(samples))


def collate_packed(samples: list[EncodedChat]) -> MicroBatch:
    """Concatenate all samples into one row with no padding."""
    ids = torch.cat([s.input_ids for s in samples])[None].long()
    labels = torch.cat([s.labels for s in samples])[None].long()
    types = torch.cat([s.mm_token_type_ids for s in samples])[None].long()
    return MicroBatch(
        ids,
        labels,
        None,
        types,
        cat_vision(samples),
        packed_lengths=[len(s.input_ids) for s in samples],
        packed_media=[_media_counts(s) for s in samples],
        n_samples=len(samples),
    )


def packed_position_ids(rope_index_fn: Any, mb: MicroBatch) -> torch.Tensor:
    """[4, 1, L]: row 0 the per-sample text positions (restarting at 0, which tells transformers to
    isolate samples), rows 1-3 the per-sample 3D RoPE positions from the model's own get_rope_index."""
    assert mb.packed_lengths is not None and mb.packed_media is not None
    rows, text_rows = [], []
    start = 0
    img_i = vid_i = 0
    v = mb.vision
    for length, (n_img, n_vid) in zip(mb.packed_lengths, mb.packed_media):
        seg = slice(start, start + length)
        kwargs: dict[str, Any] = {}
        if n_img:
            kwargs["image_grid_thw"] = v["image_grid_thw"][img_i : img_i + n_img]
        if n_vid:
            kwargs["video_grid_thw"] = v["video_grid_thw"][vid_i : vid_i + n_vid]
            if "second_per_grid_ts" in v:
                kwargs["second_per_grid_ts"] = v["second_per_grid_ts"][vid_i : vid_i + n_vid]
        img_i, vid_i = img_i + n_img, vid_i + n_vid
        ids = mb.input_ids[:, seg]
        if n_img or n_vid:
            pos, _ = rope_index_fn(ids, mm_token_type_ids=mb.mm_token_type_ids[:, seg], **kwargs)
        else:
            pos = torch.arange(length, device=ids.device).view(1, 1, -1).expand(3, 1, -1)
        rows.append(pos)
        text_rows.append(torch.arange(length, device=ids.device).view(1, 1, -1))
        start += length
    return torch.cat([torch.cat(text_rows, dim=-1), torch.cat(rows, dim=-1)], dim=0)


def model_inputs(model: Any, mb: MicroBatch) -> dict[str, Any]:
    """Keyword arguments for the model's forward. A text-only model (`FamilySpec.text_only`) takes the text
    position row alone ([1, L] of the [4, 1, L] rows) and no mm_token_type_ids: it has 1D RoPE."""
    kw = _model_inputs(model, mb)
    if family_of(model).text_only:
        kw.pop("mm_token_type_ids", None)
        if "position_ids" in kw and kw["position_ids"].dim() == 3:
            kw["position_ids"] = kw["position_ids"][0]
    return kw


def _model_inputs(model: Any, mb: MicroBatch) -> dict[str, Any]:
    kw: dict[str, Any] = {"input_ids": mb.input_ids, **mb.vision}
    if mb.position_ids is not None:
        kw["position_ids"] = mb.position_ids
        mask = mb.attention_mask
        if mask is not None and mask.dtype == torch.bool and attention_of(model) == "eager":
            # eager attention adds the mask to the scores; sdpa takes the boolean one as it is
            mask = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device).masked_fill(
                ~mask, torch.finfo(torch.float32).min
            )
        kw["attention_mask"] = mask
    elif mb.packed_lengths is not None:
        core = model.model if hasattr(model, "model") else model
        # a text-only model has no get_rope_index; its packed rows have no media to call it for
        kw["position_ids"] = packed_position_ids(getattr(core, "get_rope_index", None), mb)
        if attention_of(model) in (packed_attention.NAME, cp_language.NAME):  # per-sample attention from the bounds
            kw.update(packed_attention.segment_bounds(mb.packed_lengths))
    else:
        kw["attention_mask"] = mb.attention_mask
        kw["mm_token_type_ids"] = mb.mm_token_type_ids
    return kw


def split_micro_batches(samples: list[Any], mini_batch: int) -> list[list[Any]]:
    return [samples[i : i + mini_batch] for i in range(0, len(samples), mini_batch)]


def attention_of(model: Any) -> str:
    """The language model's attention implementation."""
    config = getattr(model, "config", None)
    config = getattr(config, "text_config", None) or config
    return str(getattr(config, "_attn_implementation", None) or "sdpa")
