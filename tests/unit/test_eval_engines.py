"""Engine pieces that run without a model or vLLM: sampling, retries, batching, vLLM requests."""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace

import pytest
import torch

from cosmos_train.evaluation.config import GenerationSection
from cosmos_train.evaluation.engines import (
    ENGINES,
    base_sampling,
    create_engine,
    resolve_engine_name,
    retry_sampling,
)
from cosmos_train.evaluation.engines.hf import PresenceFrequencyPenalty, collate_left, resolve_tokenizer_path
from cosmos_train.evaluation.engines.vllm import (
    build_request,
    frames_metadata,
    llm_kwargs,
    sampling_kwargs,
    video_parts,
)


def test_letter_mode_is_greedy_and_short() -> None:
    s = base_sampling("letter", GenerationSection(), seed=3)
    assert s.greedy and s.max_tokens == 10 and s.top_k == 1 and s.seed == 3
    r = base_sampling("reasoning", GenerationSection(temperature=0.6, max_tokens=1024), seed=1)
    assert not r.greedy and r.temperature == 0.6 and r.top_p == 0.95 and r.max_tokens == 1024


def test_retry_schedule_follows_reference() -> None:
    base = base_sampling("reasoning", GenerationSection(temperature=0.6, max_tokens=1024), seed=1)
    r0, r1, r9 = (retry_sampling(base, i) for i in (0, 1, 9))
    assert (r0.max_tokens, r1.max_tokens, r9.max_tokens) == (1280, 1536, 1024 + 2560)
    assert r0.temperature == pytest.approx(0.65) and r1.temperature == pytest.approx(0.7)
    assert r9.temperature == pytest.approx(0.9)  # capped
    assert {r0.seed, r1.seed, base.seed} == {2, 3, 1}
    hot = base_sampling("reasoning", GenerationSection(temperature=1.0), seed=1)
    assert retry_sampling(hot, 0).temperature == 1.0  # the cap never lowers a configured temperature
    letter = retry_sampling(base_sampling("letter", GenerationSection(), seed=1), 0)
    assert not letter.greedy and letter.top_k is None and letter.max_tokens == 10 + 256


class _Enc:
    def __init__(self, n: int, patches: int, fill: int):
        self.input_ids = torch.full((n,), fill)
        self.mm_token_type_ids = torch.zeros(n, dtype=torch.int32)
        self.pixel_values_videos = torch.full((patches, 4), float(fill))
        self.video_grid_thw = torch.tensor([[1, 2, patches // 2]])
        self.second_per_grid_ts = torch.tensor([0.5 * fill])
        self.pixel_values = None
        self.image_grid_thw = None

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])


def test_collate_left_pads_and_concatenates() -> None:
    batch = collate_left([_Enc(3, 4, 1), _Enc(5, 2, 2)], pad_id=0)
    assert batch["input_ids"].tolist() == [[0, 0, 1, 1, 1], [2, 2, 2, 2, 2]]
    assert batch["attention_mask"].tolist() == [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]
    assert batch["pixel_values_videos"].shape == (6, 4) and batch["pixel_values_videos"][4, 0] == 2.0
    assert batch["video_grid_thw"].tolist() == [[1, 2, 2], [1, 2, 1]]
    assert batch["second_per_grid_ts"].tolist() == [0.5, 1.0]
    assert "pixel_values" not in batch


def test_presence_frequency_penalty() -> None:
    proc = PresenceFrequencyPenalty(prompt_length=2, presence=0.5, frequency=1.0)
    ids = torch.tensor([[3, 3, 1, 1, 2]])  # prompt [3, 3]; generated 1, 1, 2
    out = proc(ids, torch.zeros(1, 5))
    assert out.tolist() == [[0.0, -2.5, -1.5, 0.0, 0.0]]  # prompt tokens are not penalised


def test_vllm_request_building() -> None:
    chat = [
        {"role": "system", "content": "Answer the questions."},
        {"role": "user", "content": [{"type": "video", "video": "/c/v.mp4", "fps": 4}, {"type": "text", "text": "Q"}]},
    ]
    assert video_parts(chat) == [chat[1]["content"][0]]
    seen = []

    def fake_loader(part: dict) -> tuple[torch.Tensor, float]:
        seen.append(part["video"])
        return torch.zeros(4, 3, 28, 28), 2.0

    req = build_request(chat, lambda c: "<prompt>", fake_loader)
    assert req["prompt"] == "<prompt>" and seen == ["/c/v.mp4"]
    frames, metadata = req["multi_modal_data"]["video"]
    assert frames.shape == (4, 3, 28, 28) and metadata["do_sample_frames"] is False
    assert req["mm_processor_kwargs"] == {"do_resize": False, "fps": 2.0}
    assert build_request([{"role": "user", "content": "hi"}], lambda c: "p") == {"prompt": "p"}


def test_vllm_frames_metadata_gives_the_sampled_rate() -> None:
    """transformers turns the metadata into the model's temporal step (second_per_grid_ts =
    temporal_patch_size / sampled_fps): it must read back the rate our frames were sampled at."""
    from transformers.video_utils import VideoMetadata

    for num_frames, sample_fps in [(4, 2.0), (6, 1.0), (16, 29.97 * 16 / 300)]:
        meta = frames_metadata(num_frames, sample_fps)
        fields = {k: v for k, v in meta.items() if k != "do_sample_frames"}  # vLLM strips this one too
        assert VideoMetadata(**fields).sampled_fps == pytest.approx(sample_fps)
        assert meta["frames_indices"] == list(range(num_frames))


def test_vllm_sampling_kwargs() -> None:
    greedy = sampling_kwargs(base_sampling("letter", GenerationSection(), seed=1), [7])
    assert greedy["temperature"] == 0.0 and greedy["top_k"] == 1 and greedy["max_tokens"] == 10
    assert greedy["stop_token_ids"] == [7] and "top_p" not in greedy
    g = GenerationSection(temperature=0.6, repetition_penalty=1.05, presence_penalty=0.1, frequency_penalty=0.2)
    s = sampling_kwargs(base_sampling("reasoning", g, seed=5), [7])
    assert s["top_p"] == 0.95 and s["temperature"] == 0.6 and s["seed"] == 5
    assert (s["repetition_penalty"], s["presence_penalty"], s["frequency_penalty"]) == (1.05, 0.1, 0.2)
    kw = llm_kwargs("m", "t", dtype="bfloat16", tp_size=4, max_length=128000, seed=1)
    assert kw["tensor_parallel_size"] == 4 and kw["limit_mm_per_prompt"] == {"video": 1, "image": 0}
    assert kw["gpu_memory_utilization"] == 0.9


def test_engine_registry() -> None:
    assert set(ENGINES) >= {"hf", "vllm"}
    assert resolve_engine_name("hf") == "hf"
    with pytest.raises(ValueError, match="unknown engine 'trt'"):
        resolve_engine_name("trt")
    if not torch.cuda.is_available():
        assert resolve_engine_name("auto") == "hf"
    if importlib.util.find_spec("vllm") is None:
        cfg = SimpleNamespace(engine="vllm", model=SimpleNamespace(model_name="m", tokenizer_model_name=None))
        with pytest.raises(RuntimeError, match="needs the vllm package"):
            create_engine(cfg)


def test_tokenizer_path(tmp_path) -> None:
    assert resolve_tokenizer_path("/ckpt", "qwen2.5-vl-7b") == "/ckpt"  # reference short name
    assert resolve_tokenizer_path("/ckpt", None) == "/ckpt"
    assert resolve_tokenizer_path("/ckpt", "Qwen/Qwen2.5-VL-7B-Instruct") == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert resolve_tokenizer_path("/ckpt", str(tmp_path)) == str(tmp_path)
