"""What a model's processor (or a bare tokenizer) gives the chat encoder and the engines: its tokenizer and the
vision layout it produces. Here, below models/ and data/, so that both read a processor the same way."""

from __future__ import annotations

import dataclasses
from typing import Any

from transformers import PreTrainedTokenizerBase

from cosmos_train.vision.layout import PROCESSOR_LAYOUTS, QWEN2_VL_LAYOUT, VisionLayout


def get_tokenizer(processor_or_tokenizer: Any) -> PreTrainedTokenizerBase:
    """The tokenizer inside a processor, or the argument itself when it already is one."""
    if isinstance(processor_or_tokenizer, PreTrainedTokenizerBase):
        return processor_or_tokenizer
    tokenizer = getattr(processor_or_tokenizer, "tokenizer", None)
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise TypeError(f"expected a processor or tokenizer, got {type(processor_or_tokenizer).__name__}")
    return tokenizer


def family_layout(processor: Any) -> VisionLayout | None:
    """The layout of the family whose processor class `processor` is (or subclasses); None for a bare tokenizer
    or another processor."""
    for cls in type(processor).__mro__:
        if cls.__name__ in PROCESSOR_LAYOUTS:
            return PROCESSOR_LAYOUTS[cls.__name__]
    return None


def vision_layout_of(processor: Any) -> VisionLayout:
    """The layout `processor` produces: its family's (Qwen2.5-VL's for a bare tokenizer or an unknown processor,
    which a text-only chat never reads), with the sizes and statistics of its image processor config where it
    has them (a checkpoint's own preprocessor_config.json wins over the family default)."""
    layout = family_layout(processor) or QWEN2_VL_LAYOUT
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is None:
        return layout
    found: dict[str, Any] = {}
    for key in ("patch_size", "merge_size", "temporal_patch_size"):
        value = getattr(image_processor, key, None)
        if isinstance(value, int) and not isinstance(value, bool):
            found[key] = value
    for key in ("image_mean", "image_std"):
        value = getattr(image_processor, key, None)
        if isinstance(value, (list, tuple)) and len(value) == 3:
            found[key] = tuple(float(v) for v in value)
    return dataclasses.replace(layout, **found)
