"""transformers engine: batched `model.generate` on CPU or one GPU, for any Qwen2.5-VL checkpoint.

Each chat is encoded with `cosmos_train.data.chat.encode_chat` (which decodes the video and expands
the video pads); a batch is left-padded so every prompt ends where generation starts, and the vision
tensors of the batch are concatenated in order (pixel_values_videos, video_grid_thw,
second_per_grid_ts), as the Qwen2.5-VL processor would batch them. Videos are decoded in a thread
pool ahead of the model. presence/frequency penalties (vLLM/OpenAI semantics, which
transformers lacks) are a logits processor over the generated tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from cosmos_train.data.frame_memo import FrameMemo
from cosmos_train.evaluation.engines.base import Chat, Sampling

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return DTYPES[dtype]


def resolve_tokenizer_path(model_path: str, tokenizer_model_name: str | None) -> str:
    """The reference names tokenizers by short names ('qwen2.5-vl-7b') it downloads next to the
    model; a checkpoint folder ships its own, so only a real folder or hub id 'org/name' is used."""
    if tokenizer_model_name and (Path(tokenizer_model_name).is_dir() or tokenizer_model_name.count("/") == 1):
        return tokenizer_model_name
    return model_path


class PresenceFrequencyPenalty(LogitsProcessor):
    """logits[t] -= frequency * count(t) + presence * (count(t) > 0), over generated tokens only."""

    def __init__(self, prompt_length: int, presence: float, frequency: float):
        self.prompt_length = prompt_length
        self.presence = presence
        self.frequency = frequency

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        generated = input_ids[:, self.prompt_length :]
        if generated.shape[1] == 0:
            return scores
        counts = torch.zeros_like(scores)
        counts.scatter_add_(1, generated, torch.ones_like(generated, dtype=scores.dtype))
        return scores - self.frequency * counts - self.presence * (counts > 0).to(scores.dtype)


def collate_left(encoded: Sequence[Any], pad_id: int) -> dict[str, torch.Tensor]:
    """Left-pad EncodedChats into one generate batch, vision tensors concatenated in order."""
    longest = max(len(e) for e in encoded)
    batch = len(encoded)
    input_ids = torch.full((batch, longest), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((batch, longest), dtype=torch.long)
    type_ids = torch.zeros((batch, longest), dtype=encoded[0].mm_token_type_ids.dtype)
    for i, e in enumerate(encoded):
        n = len(e)
        input_ids[i, longest - n :] = e.input_ids
        attention_mask[i, longest - n :] = 1
        type_ids[i, longest - n :] = e.mm_token_type_ids
    out: dict[str, torch.Tensor] = {"input_ids": input_ids, "attention_mask": attention_mask, "mm_token_type_ids": type_ids}
    for key in ("pixel_values_videos", "video_grid_thw", "second_per_grid_ts", "pixel_values", "image_grid_thw"):
        parts = [getattr(e, key) for e in encoded if getattr(e, key) is not None]
        if parts:
            out[key] = torch.cat(parts, dim=0)
    return out


class HFEngine:
    """Generate with a transformers model. Load once, call `generate` per batch."""

    name = "hf"

    def __init__(
        self,
        model_path: str,
        tokenizer_path: str | None = None,
        dtype: str = "auto",
        device: str = "auto",
        max_length: int | None = None,
        workers: int = 4,
        model: Any = None,
        processor: Any = None,
        frame_memo_bytes: int = 2 << 30,
    ):
        from cosmos_train.models.load import get_tokenizer, load_model, load_processor

        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        self.processor = processor if processor is not None else load_processor(tokenizer_path or model_path)
        self.model = model if model is not None else load_model(model_path, dtype=self.dtype, device=self.device)
        self.model.eval()
        self.tokenizer = get_tokenizer(self.processor)
        self.max_length = max_length
        self.workers = max(1, workers)
        # Several questions about one clip decode it once (see FrameMemo).
        self.frames = FrameMemo(max_bytes=frame_memo_bytes)
        eos = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.eos_ids = [i for i in {eos, self.tokenizer.eos_token_id} if isinstance(i, int) and i >= 0]
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.eos_ids[0]

    def encode(self, chat: Chat) -> Any:
        from cosmos_train.data.chat import encode_chat

        return encode_chat(
            self.processor, chat, add_generation_prompt=True, max_length=self.max_length, clip_cache=self.frames
        )

    def generation_kwargs(self, sampling: Sampling, prompt_length: int) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "max_new_tokens": sampling.max_tokens,
            "eos_token_id": self.eos_ids,
            "pad_token_id": self.pad_id,
            "repetition_penalty": sampling.repetition_penalty,
        }
        if sampling.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k or 0)
        if sampling.presence_penalty or sampling.frequency_penalty:
            kwargs["logits_processor"] = LogitsProcessorList(
                [PresenceFrequencyPenalty(prompt_length, sampling.presence_penalty, sampling.frequency_penalty)]
            )
        return kwargs

    @torch.inference_mode()
    def generate(self, chats: Sequence[Chat], sampling: Sampling) -> list[str]:
        if not chats:
            return []
        if len(chats) == 1 or self.workers == 1:
            encoded = [self.encode(c) for c in chats]
        else:
            with ThreadPoolExecutor(max_workers=min(self.workers, len(chats))) as pool:
                encoded = list(pool.map(self.encode, chats))
        batch = collate_left(encoded, self.pad_id)
        float_keys = ("pixel_values_videos", "pixel_values")
        batch = {
            k: v.to(self.device, dtype=self.dtype) if k in float_keys else v.to(self.device) for k, v in batch.items()
        }
        prompt_length = batch["input_ids"].shape[1]
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        out = self.model.generate(**batch, **self.generation_kwargs(sampling, prompt_length))
        new_tokens = out[:, prompt_length:].cpu()
        return [self.tokenizer.decode(row, skip_special_tokens=True) for row in new_tokens]

    def close(self) -> None:
        self.model = None
        self.frames = FrameMemo(max_bytes=self.frames.max_bytes)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
