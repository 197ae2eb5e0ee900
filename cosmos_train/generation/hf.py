"""transformers engine: sampling with a KV cache on CPU or one GPU, any Qwen2.5-VL checkpoint.

    python -m bench.generation            # prefix sharing vs per-sample generation, and vs vLLM

Why our own decode loop rather than `model.generate(num_return_sequences=n)`: generate copies each
prompt n times before the prefill, so the vision tower and the prompt run n times. Here the batch's
prompts (left-padded, vision tensors concatenated in order) are run once, their KV cache is
repeated n times (prefix sharing), and only the new tokens of the B * n samples are computed
(bench/generation.py measures it against per-sample generation and vLLM; the figures are in
bench/RESULTS.md, "Generation"). The loop also gives what generate does not: the log-prob of each token under the
distribution it was drawn from (penalties, temperature, top-k, top-p applied, as vLLM's
processed_logprobs), per-sample stop strings, and samples that finish leave the batch.

Positions: Qwen2.5-VL's 3D RoPE positions come from `get_rope_index` at the prefill, and each new
token's position is its text position plus the prompt's rope delta, as transformers' generate
computes them, but passed explicitly rather than through the model's cached `rope_deltas`. A text-only model
(qwen2, qwen3, llama, mistral) takes its 1D text positions [B, L], and no images or videos.
Greedy decoding gives the same tokens as `model.generate` (tests/unit/test_generation_hf.py).

update_weights copies tensors into the loaded parameters in place (no reload from disk); names may
be the model's own (`model.language_model.*`) or the hub's (`model.*`, as cosmos_train.models.hf_folder
writes them).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cosmos_train.data.chat import VISION_TENSOR_KEYS
from cosmos_train.data.frame_memo import FrameMemo
from cosmos_train.errors import DataError, ModelError
from cosmos_train.generation.base import Chat, Completion, FinishReason, SamplingParams, WeightSource
from cosmos_train.generation.config import GenerationConfig
from cosmos_train.generation.weights import iter_weights, unknown_names_error
from cosmos_train.models.families import family_of
from cosmos_train.models.hf_folder import hf_state_dict
from cosmos_train.models.load import load_model, load_processor
from cosmos_train.models.wrappers import strip_wrappers
from cosmos_train.vision.processor import get_tokenizer
from cosmos_train.vision.settings import VisionSettings

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
FLOAT_KEYS = ("pixel_values_videos", "pixel_values")


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


def collate_left(encoded: Sequence[Any], pad_id: int) -> dict[str, torch.Tensor]:
    """Left-pad EncodedChats into one batch (prompts end where generation starts), vision tensors
    concatenated in order, as the Qwen2.5-VL processor batches them."""
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
    out: dict[str, torch.Tensor] = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "mm_token_type_ids": type_ids,
    }
    for key in VISION_TENSOR_KEYS:
        parts = [getattr(e, key) for e in encoded if getattr(e, key) is not None]
        if parts:
            out[key] = torch.cat(parts, dim=0)
    return out


def process_logits(
    logits: torch.Tensor,
    sampling: SamplingParams,
    seen_any: torch.Tensor | None = None,
    generated_counts: torch.Tensor | None = None,
) -> torch.Tensor:
    """The logits a token is drawn from, float32 [rows, vocab]: penalties, then (when sampling)
    temperature, top-k and top-p, in the order transformers and vLLM apply them. Tokens outside the
    kept set get -inf.

    seen_any: bool [rows, vocab], tokens in the prompt or generated so far (repetition penalty);
    generated_counts: float [rows, vocab], occurrences in the completion so far (presence/frequency).
    """
    logits = logits.float()
    if sampling.repetition_penalty != 1.0 and seen_any is not None:
        p = sampling.repetition_penalty
        logits = torch.where(seen_any, torch.where(logits < 0, logits * p, logits / p), logits)
    if generated_counts is not None and (sampling.presence_penalty or sampling.frequency_penalty):
        logits = logits - sampling.frequency_penalty * generated_counts
        logits = logits - sampling.presence_penalty * (generated_counts > 0).float()
    if sampling.greedy:
        return logits
    logits = logits / sampling.temperature
    top_k = sampling.top_k_or_none
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1)  # ascending
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative <= 1 - sampling.top_p
        drop_sorted[..., -1] = False  # always keep the likeliest token
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


@dataclass
class _Sample:
    """One sample being generated."""

    request: int
    tokens: list[int]
    logprobs: list[float]
    finish_reason: FinishReason | None = None
    stop_at: int | None = None  # character offset of the stop string that ended it


class HFEngine:
    """Generate with a transformers model. Load once; `generate` per batch of requests."""

    name = "hf"

    def __init__(
        self, cfg: GenerationConfig, model: Any = None, processor: Any = None, frame_memo_bytes: int = 2 << 30
    ):
        self.cfg = cfg
        self.device = resolve_device(cfg.device)
        self.dtype = resolve_dtype(cfg.dtype, self.device)
        if self.device.type == "cpu":
            # Oversubscribed cores (2 threads in each of 2 busy processes on 2 cores) ran many times slower.
            torch.set_num_threads(cfg.threads())
        self.processor = processor if processor is not None else load_processor(cfg.tokenizer_path or cfg.model_path)
        self.model = model if model is not None else load_model(cfg.model_path, dtype=self.dtype, device=self.device)
        self.model.eval()
        # a text-only model (1D RoPE): positions [B, L], no mm_token_type_ids
        self.text_only = family_of(self.model).text_only
        self.tokenizer = get_tokenizer(self.processor)
        self.vision_defaults = VisionSettings(**cfg.vision_defaults) if cfg.vision_defaults else None
        self.frames = FrameMemo(max_bytes=frame_memo_bytes)  # several questions about one clip decode it once
        im_end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.eos_ids = sorted(i for i in {im_end, self.tokenizer.eos_token_id} if isinstance(i, int) and i >= 0)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else self.eos_ids[0]
        self.weight_version = 0
        self._targets: dict[str, torch.Tensor] | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------- encoding
    def encode(self, chat: Chat) -> Any:
        # kept in the memo: a colocated GRPO trainer encodes the same prompts with the same settings next
        return self.frames.encode_chat(
            self.processor,
            chat,
            add_generation_prompt=True,
            max_length=self.cfg.max_length,
            vision_defaults=self.vision_defaults,
        )

    def _encode_all(self, requests: Sequence[Chat]) -> list[Any]:
        workers = min(self.cfg.decode_workers, len(requests))
        if workers <= 1:
            return [self.encode(c) for c in requests]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            return list(pool.map(self.encode, requests))

    # ------------------------------------------------------------------------------ generation
    def _positions(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(3D RoPE positions [3, B, L] of the prompts, rope delta [B, 1] of each): what a new
        token's position adds to its text position."""
        mask = batch["attention_mask"]
        if "video_grid_thw" in batch or "image_grid_thw" in batch:
            return self.model.model.get_rope_index(
                batch["input_ids"],
                image_grid_thw=batch.get("image_grid_thw"),
                video_grid_thw=batch.get("video_grid_thw"),
                attention_mask=mask,
                second_per_grid_ts=batch.get("second_per_grid_ts"),
                mm_token_type_ids=batch["mm_token_type_ids"],
            )
        text = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
        zero = torch.zeros(mask.shape[0], 1, dtype=torch.long, device=mask.device)
        return (text if self.text_only else text.unsqueeze(0).expand(3, -1, -1)), zero

    @torch.inference_mode()
    def generate(self, requests: Sequence[Chat], sampling: SamplingParams) -> list[list[Completion]]:
        if not requests:
            return []
        if self.model is None:
            raise RuntimeError("this engine was closed")
        encoded = self._encode_all(requests)
        with self._lock:  # one generation at a time on one model (threads may share an engine)
            return self._generate(encoded, sampling)

    def _generate(self, encoded: list[Any], sampling: SamplingParams) -> list[list[Completion]]:
        version = self.weight_version
        n = sampling.n
        # prompt + completion stay within max_length (vLLM's max_model_len rule): a long prompt
        # gets fewer new tokens and ends with "length"
        budget = [
            min(sampling.max_new_tokens, self.cfg.max_length - len(encoded[r // n])) for r in range(len(encoded) * n)
        ]
        if min(budget) < 1:
            longest = max(len(e) for e in encoded)
            raise DataError(
                f"a prompt is {longest} tokens, which leaves no room for a completion within "
                f"max_length {self.cfg.max_length}; raise the model length or shorten the prompt "
                "(fewer frames or pixels)"
            )
        batch = collate_left(encoded, self.pad_id)
        if self.text_only:
            batch.pop("mm_token_type_ids")
        batch = {
            k: v.to(self.device, dtype=self.dtype) if k in FLOAT_KEYS else v.to(self.device) for k, v in batch.items()
        }
        mask = batch["attention_mask"]
        positions, deltas = self._positions(batch)
        out = self.model(**batch, position_ids=positions, use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        logits = out.logits[:, -1]
        # prefix sharing: every request's prompt and vision cache serve its n samples
        if n > 1:
            cache.batch_repeat_interleave(n)
            logits = logits.repeat_interleave(n, dim=0)
            mask = mask.repeat_interleave(n, dim=0)
            deltas = deltas.repeat_interleave(n, dim=0)
        text_pos = mask.sum(-1, keepdim=True) - 1  # text position of each row's last prompt token

        rows = len(encoded) * n
        samples = [_Sample(request=r // n, tokens=[], logprobs=[]) for r in range(rows)]
        active = torch.arange(rows, device=self.device)  # sample index of each row still generating
        stop_ids = torch.tensor(sorted({*self.eos_ids, *sampling.stop_token_ids}), device=self.device)
        penalties = sampling.repetition_penalty != 1.0 or sampling.presence_penalty or sampling.frequency_penalty
        vocab = logits.shape[-1]
        seen_any = generated_counts = None
        if penalties:
            seen_any = torch.zeros(rows, vocab, dtype=torch.bool, device=self.device)
            for r in range(rows):
                ids = encoded[r // n].input_ids.to(self.device)
                seen_any[r, ids[ids < vocab]] = True
            generated_counts = torch.zeros(rows, vocab, dtype=torch.float32, device=self.device)
        generator = torch.Generator(device=self.device)
        generator.manual_seed(sampling.seed if sampling.seed is not None else int(torch.randint(0, 2**62, ()).item()))

        for _ in range(sampling.max_new_tokens):
            processed = process_logits(logits, sampling, seen_any, generated_counts)
            logprobs_all = torch.log_softmax(processed, dim=-1)
            if sampling.greedy:
                tokens = processed.argmax(dim=-1)
            else:
                tokens = torch.multinomial(logprobs_all.exp(), 1, generator=generator).squeeze(-1)
            chosen = logprobs_all.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
            if seen_any is not None and generated_counts is not None:  # set when penalties apply
                seen_any[torch.arange(len(tokens)), tokens] = True
                generated_counts[torch.arange(len(tokens)), tokens] += 1
            finished = torch.isin(tokens, stop_ids)
            for row, (sample_index, token, logprob) in enumerate(
                zip(active.tolist(), tokens.tolist(), chosen.tolist())
            ):
                sample = samples[sample_index]
                sample.tokens.append(token)
                sample.logprobs.append(logprob)
                if finished[row]:
                    sample.finish_reason = "stop"
                elif sampling.stop and self._hit_stop_string(sample, sampling.stop):
                    finished[row] = True
                elif len(sample.tokens) >= budget[sample_index]:
                    sample.finish_reason = "length"
                    finished[row] = True
            keep = ~finished
            if not keep.any():
                break
            if not keep.all():
                index = keep.nonzero().squeeze(-1)
                cache.batch_select_indices(index)
                active, tokens, mask, deltas, text_pos = (
                    active[index],
                    tokens[index],
                    mask[index],
                    deltas[index],
                    text_pos[index],
                )
                if seen_any is not None and generated_counts is not None:
                    seen_any, generated_counts = seen_any[index], generated_counts[index]
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
            text_pos = text_pos + 1
            position = text_pos + deltas
            if not self.text_only:
                position = position.unsqueeze(0).expand(3, -1, -1)
            out = self.model(
                input_ids=tokens.unsqueeze(-1),
                attention_mask=mask,
                position_ids=position,
                past_key_values=cache,
                use_cache=True,
            )
            cache, logits = out.past_key_values, out.logits[:, -1]
        del cache

        groups: list[list[Completion]] = [[] for _ in encoded]
        for sample in samples:
            text = self._decode(sample.tokens)
            if sample.stop_at is not None:
                text = text[: sample.stop_at]
            groups[sample.request].append(
                Completion(
                    text=text,
                    token_ids=sample.tokens,
                    logprobs=sample.logprobs,
                    finish_reason=sample.finish_reason or "length",
                    prompt_token_ids=encoded[sample.request].input_ids.tolist(),
                    weight_version=version,
                )
            )
        return groups

    def _decode(self, tokens: list[int]) -> str:
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        assert isinstance(text, str)  # one id list decodes to one string (decode is typed str | list[str])
        return text

    def _hit_stop_string(self, sample: _Sample, stops: Sequence[str]) -> bool:
        text = self._decode(sample.tokens)
        hits = [i for i in (text.find(s) for s in stops) if i >= 0]
        if not hits:
            return False
        sample.finish_reason, sample.stop_at = "stop", min(hits)
        return True

    # --------------------------------------------------------------------------------- weights
    def _target_tensors(self) -> dict[str, torch.Tensor]:
        """Every name update_weights accepts -> the loaded tensor it writes into: the model's own
        state-dict names and the hub checkpoint names (the ones cosmos_train.models.hf_folder writes)."""
        if self._targets is None:
            own = {strip_wrappers(k): v for k, v in self.model.state_dict().items()}
            targets = dict(own)
            by_storage = {id(v): k for k, v in own.items()}
            # hf_state_dict renames without copying, so each hub name maps back to its tensor
            for hub_name, tensor in hf_state_dict(dict(own), self.model).items():
                if id(tensor) in by_storage:
                    targets.setdefault(hub_name, own[by_storage[id(tensor)]])
            self._targets = targets
        return self._targets

    @torch.inference_mode()
    def update_weights(self, weights: WeightSource, version: int | None = None) -> int:
        """Copy `weights` into the loaded parameters (see module docstring); returns the new version."""
        if self.model is None:
            raise RuntimeError("this engine was closed")
        targets = self._target_tensors()
        unknown: list[str] = []
        with self._lock:
            for name, tensor in iter_weights(weights):
                target = targets.get(strip_wrappers(name))
                if target is None:
                    unknown.append(name)
                    continue
                if tuple(target.shape) != tuple(tensor.shape):
                    raise ModelError(
                        f"update_weights (hf engine): {name} has shape {tuple(tensor.shape)}, the "
                        f"loaded model's is {tuple(target.shape)}"
                    )
                target.copy_(tensor.to(device=target.device, dtype=target.dtype))
            if unknown:
                raise unknown_names_error(unknown, len(targets), self.name)
            self.weight_version = self.weight_version + 1 if version is None else version
        return self.weight_version

    def sleep(self) -> None:
        """Nothing to free between calls: the KV cache lives only inside `generate`."""
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def wake(self) -> None:
        return None

    def close(self) -> None:
        self.model = None
        self._targets = None
        self.frames = FrameMemo(max_bytes=self.frames.max_bytes)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
