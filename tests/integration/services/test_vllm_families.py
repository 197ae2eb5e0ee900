"""The vLLM engine on the tiny Qwen3-VL model (vLLM 0.32 loads Cosmos3-Edge only from its Diffusers layout;
the engine refuses it, tests/unit/test_families.py): vLLM's prompt tokens for a video chat are
encode_chat's (timestamps, per-patch blocks, pad counts in the family's layout) and its first-token log-probs
equal transformers' on the same pixels. On each text-only family's tiny model (qwen2, qwen3, llama, mistral): the
same two checks on text chats, then a weight push without a restart (a (name, tensor) stream under the trainer's
state-dict names) gives transformers' greedy tokens under the pushed weights. Runs where vllm is importable
(`make test-vllm`); skipped elsewhere."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import TEXT_FAMILIES
from tests.generation_reference import greedy_reference, perturbed
from tests.integration.services.test_vllm_engine import _assert_first_token_logprobs_match, _generation_config, _greedy

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
def test_prompt_ids_and_first_token_logprobs_match_transformers(
    family: str, family_model_dirs: dict[str, Path], chats: list
) -> None:
    import torch

    from cosmos_train.generation import create_engine
    from cosmos_train.models.load import load_model, load_processor

    folder = family_model_dirs[family]
    reference = (load_model(str(folder), dtype=torch.float32).eval(), load_processor(str(folder)))
    engine = create_engine(_generation_config(folder, eager=True))  # compiled: test_vllm_engine's Qwen2.5-VL engine
    try:
        _assert_first_token_logprobs_match(engine, reference, chats)
    finally:
        engine.close()


TEXT_CHATS = [[{"role": "user", "content": f"What is {i} + 1?"}] for i in range(3)] + [
    [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Which way do things fall?"}],
]


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_text_family_prompt_ids_logprobs_and_weight_push(
    family: str, text_model_dirs: dict[str, Path], tmp_path: Path
) -> None:
    """One engine per family (a start costs about a minute on a CPU): the requests carry encode_chat's prompt ids
    and no multimodal data, the first token's log-probs are transformers', and a pushed state dict (no restart)
    moves the greedy tokens to transformers' under the pushed weights, as does an exported folder; a chat with a video
    is refused."""
    import torch

    from cosmos_train.errors import DataError
    from cosmos_train.generation import SamplingParams, create_engine
    from cosmos_train.models.hf_folder import write_hf_folder
    from cosmos_train.models.load import load_model, load_processor

    folder = text_model_dirs[family]
    original = load_model(str(folder), dtype=torch.float32, device=torch.device("cpu")).eval()
    processor = load_processor(str(folder))
    engine = create_engine(_generation_config(folder, eager=True))  # no torch.compile: see _generation_config
    try:
        assert engine.text_only and all(set(engine.request(c)) == {"prompt_token_ids"} for c in TEXT_CHATS)
        _assert_first_token_logprobs_match(engine, (original, processor), TEXT_CHATS)
        before = _greedy(engine, TEXT_CHATS)
        assert before == [greedy_reference(original, processor, c, 8) for c in TEXT_CHATS]

        pushed = perturbed(folder, 11)
        assert engine.update_weights(iter(pushed.state_dict().items()), version=3) == 3
        after = engine.generate(TEXT_CHATS, SamplingParams(temperature=0, max_new_tokens=8))
        assert [g[0].token_ids for g in after] == [greedy_reference(pushed, processor, c, 8) for c in TEXT_CHATS]
        assert [g[0].token_ids for g in after] != before and all(g[0].weight_version == 3 for g in after)
        _assert_first_token_logprobs_match(engine, (pushed, processor), TEXT_CHATS[:2])
        # an exported folder (hub names, as a run's safetensors/step_N), read by vLLM's own reload
        exported = perturbed(folder, 12)
        write_hf_folder(exported.state_dict(), tmp_path / "exported", folder, hf_model=exported)
        assert engine.update_weights(tmp_path / "exported") == 4
        assert _greedy(engine, TEXT_CHATS) == [greedy_reference(exported, processor, c, 8) for c in TEXT_CHATS]

        with pytest.raises(DataError, match="text-only language model"):
            engine.generate(
                [
                    [
                        {
                            "role": "user",
                            "content": [
                                {"type": "video", "video": "clip.mp4"},
                                {"type": "text", "text": "What moves?"},
                            ],
                        }
                    ]
                ],
                SamplingParams(max_new_tokens=2),
            )
    finally:
        engine.close()
