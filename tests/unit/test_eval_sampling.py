"""Evaluation's sampling settings and retry schedule, as generation SamplingParams."""

from __future__ import annotations

import pytest

from cosmos_train.evaluation.config import GenerationSection, eval_config_from_dict
from cosmos_train.evaluation.sampling import base_sampling, retry_sampling
from cosmos_train.generation.hf import resolve_tokenizer_path


def test_letter_mode_is_greedy_and_short() -> None:
    s = base_sampling("letter", GenerationSection(), seed=3)
    assert s.greedy and s.n == 1 and s.max_new_tokens == 10 and s.seed == 3
    r = base_sampling("reasoning", GenerationSection(temperature=0.6, max_tokens=1024), seed=1)
    assert not r.greedy and r.temperature == 0.6 and r.top_p == 0.95 and r.max_new_tokens == 1024


def test_retry_schedule_follows_reference() -> None:
    base = base_sampling("reasoning", GenerationSection(temperature=0.6, max_tokens=1024), seed=1)
    r0, r1, r9 = (retry_sampling(base, i) for i in (0, 1, 9))
    assert (r0.max_new_tokens, r1.max_new_tokens, r9.max_new_tokens) == (1280, 1536, 1024 + 2560)
    assert r0.temperature == pytest.approx(0.65) and r1.temperature == pytest.approx(0.7)
    assert r9.temperature == pytest.approx(0.9)  # capped
    assert {r0.seed, r1.seed, base.seed} == {2, 3, 1}
    hot = base_sampling("reasoning", GenerationSection(temperature=1.0), seed=1)
    assert retry_sampling(hot, 0).temperature == 1.0  # the cap never lowers a configured temperature
    letter = retry_sampling(base_sampling("letter", GenerationSection(), seed=1), 0)
    assert not letter.greedy and letter.top_k is None and letter.max_new_tokens == 10 + 256


def test_penalties_reach_the_sampling() -> None:
    g = GenerationSection(temperature=0.6, repetition_penalty=1.05, presence_penalty=0.1, frequency_penalty=0.2)
    s = base_sampling("reasoning", g, seed=5)
    assert (s.repetition_penalty, s.presence_penalty, s.frequency_penalty, s.seed) == (1.05, 0.1, 0.2, 5)


def test_generation_config_comes_from_the_eval_config() -> None:
    cfg = eval_config_from_dict(
        {
            "datasets": ["a"],
            "engine": "hf",
            "device": "cpu",
            "model": {
                "model_name": "/ckpt/m",
                "tokenizer_model_name": "qwen2.5-vl-7b",
                "dtype": "float32",
                "max_length": 4096,
                "tp_size": 2,
                "gpu_memory_utilization": 0.3,
            },
            "evaluation": {"num_processes": 3, "seed": 7},
        }
    )
    gen = cfg.generation_config()
    assert (gen.model_path, gen.tokenizer_path, gen.engine, gen.dtype, gen.device) == (
        "/ckpt/m",
        "/ckpt/m",
        "hf",
        "float32",
        "cpu",
    )
    assert (gen.max_length, gen.tp_size, gen.gpu_memory_utilization, gen.seed, gen.decode_workers) == (
        4096,
        2,
        0.3,
        7,
        3,
    )


def test_tokenizer_path(tmp_path) -> None:
    assert resolve_tokenizer_path("/ckpt", "qwen2.5-vl-7b") == "/ckpt"  # reference short name
    assert resolve_tokenizer_path("/ckpt", None) == "/ckpt"
    assert resolve_tokenizer_path("/ckpt", "Qwen/Qwen2.5-VL-7B-Instruct") == "Qwen/Qwen2.5-VL-7B-Instruct"
    assert resolve_tokenizer_path("/ckpt", str(tmp_path)) == str(tmp_path)
