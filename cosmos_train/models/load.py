"""Load a Qwen2.5-VL family model and its processor from a folder or hub id (tiny model or Cosmos-Reason1-7B).

Nothing here knows about the tiny model: the same calls load `make_tiny_model`'s folder and
nvidia/Cosmos-Reason1-7B.

torchvision: transformers' Qwen2-VL video processor imports it, so `AutoProcessor.from_pretrained`
raises ImportError on any Qwen2.5-VL folder where torchvision is missing (as on CPU-only machines
with the local torch wheel). `load_processor` then builds `Qwen25VLProcessorWithoutVideo`: the real
Qwen2_5_VLProcessor code with the folder's tokenizer, image processor (transformers' PIL backend) and
chat template, and no video processor. Videos are decoded and patchified by
`cosmos_train.data.video` and tokenised by `cosmos_train.data.chat.encode_chat`, which work with
either processor; calling that processor with `videos=` raises rather than leaving pads unexpanded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoImageProcessor,
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2_5_VLProcessor,
)
from transformers.processing_utils import ProcessorMixin
from transformers.utils import cached_file, is_torchvision_available

_REAL_PROCESSOR_CLASS = "Qwen2_5_VLProcessor"


class Qwen25VLProcessorWithoutVideo(Qwen2_5_VLProcessor):
    """Qwen2_5_VLProcessor without its torchvision-only video processor (text, chat template, images)."""

    def __init__(
        self, image_processor: Any = None, tokenizer: Any = None, chat_template: str | None = None, **kwargs
    ):
        # Same token attributes Qwen2_5_VLProcessor.__init__ sets; its own __init__ insists on a video processor.
        self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
        self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
        self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
        self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    def __call__(self, *args: Any, videos: Any = None, **kwargs: Any):
        if videos is not None:
            raise RuntimeError(
                "this processor has no video processor (transformers' needs torchvision); encode videos with "
                "cosmos_train.data.chat.encode_chat, which preprocesses them with cosmos_train.data.video"
            )
        return super().__call__(*args, **kwargs)

    def save_pretrained(self, save_directory: str | Path, **kwargs: Any) -> list[str]:
        """Save like Qwen2_5_VLProcessor so the folder loads with AutoProcessor where torchvision exists."""
        files = super().save_pretrained(save_directory, **kwargs)
        out = Path(save_directory)
        for name in ("processor_config.json", "tokenizer_config.json"):
            path = out / name
            if path.exists():
                cfg = json.loads(path.read_text())
                if "processor_class" in cfg:
                    cfg["processor_class"] = _REAL_PROCESSOR_CLASS
                    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        # The video processor of Qwen2.5-VL shares the image processor's settings.
        video_cfg = self.image_processor.to_dict()
        video_cfg.pop("image_processor_type", None)
        video_cfg["video_processor_type"] = "Qwen2VLVideoProcessor"
        video_cfg["processor_class"] = _REAL_PROCESSOR_CLASS
        (out / "video_preprocessor_config.json").write_text(
            json.dumps(video_cfg, indent=2, sort_keys=True) + "\n"
        )
        return files


def load_processor(path: str | Path, **kwargs: Any) -> ProcessorMixin:
    """The processor of the model at `path` (folder or hub id); see the module docstring for torchvision."""
    if is_torchvision_available():
        return AutoProcessor.from_pretrained(str(path), **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(str(path), **kwargs)
    image_processor = AutoImageProcessor.from_pretrained(str(path), backend="pil", **kwargs)
    chat_template = getattr(tokenizer, "chat_template", None) or _processor_chat_template(path, **kwargs)
    if chat_template is None:
        raise ValueError(
            f"{path}: no chat template found (chat_template.jinja, chat_template.json or tokenizer_config)"
        )
    return Qwen25VLProcessorWithoutVideo(image_processor, tokenizer, chat_template=chat_template)


def _processor_chat_template(path: str | Path, **kwargs: Any) -> str | None:
    """The template a processor file holds: older hub checkpoints keep it only in chat_template.json."""
    for name in ("chat_template.jinja", "chat_template.json"):
        resolved = cached_file(
            str(path),
            name,
            _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False,
            **{
                k: v for k, v in kwargs.items() if k in ("revision", "cache_dir", "token", "local_files_only")
            },
        )
        if resolved is None:
            continue
        text = Path(resolved).read_text()
        return json.loads(text)["chat_template"] if name.endswith(".json") else text
    return None


def get_tokenizer(processor_or_tokenizer: Any) -> PreTrainedTokenizerBase:
    """The tokenizer inside a processor, or the argument itself when it already is one."""
    if isinstance(processor_or_tokenizer, PreTrainedTokenizerBase):
        return processor_or_tokenizer
    tokenizer = getattr(processor_or_tokenizer, "tokenizer", None)
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise TypeError(f"expected a processor or tokenizer, got {type(processor_or_tokenizer).__name__}")
    return tokenizer


def load_model(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    attn_implementation: str | None = None,
    **kwargs: Any,
) -> PreTrainedModel:
    """Load the vision-language model at `path` in `dtype` onto `device`.

    attn_implementation: None lets transformers choose (sdpa where available); "flash_attention_2" on GPUs.
    """
    model = AutoModelForImageTextToText.from_pretrained(
        str(path), dtype=dtype, attn_implementation=attn_implementation, **kwargs
    )
    return model.to(device)
