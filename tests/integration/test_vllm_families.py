"""The vLLM engine on the tiny Qwen3-VL model (vLLM 0.32 loads Cosmos3-Edge only from its Diffusers layout;
the engine refuses it, tests/unit/test_families.py): vLLM's prompt tokens for a video chat are
encode_chat's (timestamps, per-patch blocks, pad counts in the family's layout) and its first-token log-probs
equal transformers' on the same pixels. Runs where vllm is importable (`make test-vllm`); skipped elsewhere."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_vllm_engine import _assert_first_token_logprobs_match, _generation_config

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed"),
]


@pytest.fixture(scope="module")
def chats(synthetic_dir: Path) -> list[list[dict[str, Any]]]:
    from cosmos_train.evaluation.benchmark import load_benchmark
    from cosmos_train.evaluation.prompts import build_messages

    videos = load_benchmark(synthetic_dir, "synthetic")[:3]
    return [build_messages(v.questions[0], str(v.video_path), "letter", 1) for v in videos]


@pytest.mark.parametrize("family", ["qwen3_vl"])  # Qwen2.5-VL: test_vllm_engine; Cosmos3-Edge: refused
def test_prompt_ids_and_first_token_logprobs_match_transformers(family: str, family_model_dirs: dict[str, Path],
                                                                chats: list) -> None:
    import torch

    from cosmos_train.generation import create_engine
    from cosmos_train.models.load import load_model, load_processor

    folder = family_model_dirs[family]
    reference = (load_model(str(folder), dtype=torch.float32).eval(), load_processor(str(folder)))
    engine = create_engine(_generation_config(folder))
    try:
        _assert_first_token_logprobs_match(engine, reference, chats)
    finally:
        engine.close()
