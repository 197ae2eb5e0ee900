"""The generation layer's pieces and the transformers engine on the tiny model (CPU, float32).

The engine-independent behaviour (shapes, log-probs, stops, seeds, weight pushes) is pinned for every
engine in tests/integration/services/test_generation_contract.py; here are the HF engine's own parts: the
logits processing by hand, batching, greedy equal to transformers' `generate`, prefix sharing.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from PIL import Image

from cosmos_train.errors import ConfigError, DataError
from cosmos_train.generation import (
    ENGINES,
    GenerationConfig,
    SamplingParams,
    create_engine,
    resolve_engine_name,
)
from cosmos_train.generation.hf import HFEngine, collate_left, process_logits


# ------------------------------------------------------------------------ no model needed
def test_sampling_params_checked() -> None:
    with pytest.raises(ValueError, match="n must be >= 1.*top_p must be in"):
        SamplingParams(n=0, top_p=0)
    s = SamplingParams(stop=["x"], stop_token_ids=[3], top_k=-1)  # type: ignore[arg-type]
    assert s.stop == ("x",) and s.stop_token_ids == (3,) and s.top_k_or_none is None
    assert SamplingParams(temperature=0).greedy and not SamplingParams(temperature=0.1).greedy


def test_registry_and_vllm_without_the_package() -> None:
    import importlib.util

    assert set(ENGINES) >= {"hf", "vllm"}
    assert resolve_engine_name("hf") == "hf"
    with pytest.raises(ConfigError, match="engine 'trt' is not registered"):
        resolve_engine_name("trt")
    if not torch.cuda.is_available():
        assert resolve_engine_name("auto") == "hf"
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(ConfigError, match="needs the vllm package"):
            create_engine(GenerationConfig(model_path="m", engine="vllm"))


def test_threads_split_the_cores_between_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.sched_getaffinity", lambda _: set(range(8)), raising=False)
    assert GenerationConfig(model_path="m").threads() == 8
    assert GenerationConfig(model_path="m", processes_per_host=2).threads() == 4
    assert GenerationConfig(model_path="m", processes_per_host=16).threads() == 1
    assert GenerationConfig(model_path="m", torch_threads=3, processes_per_host=16).threads() == 3


def test_process_logits_by_hand() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    # repetition penalty divides positive and multiplies negative logits of seen tokens
    seen = torch.tensor([[True, False, False, True]])
    out = process_logits(logits, SamplingParams(temperature=0, repetition_penalty=2.0), seen_any=seen)
    assert out.tolist() == [[1.0, 1.0, 0.0, -2.0]]
    # presence / frequency over generated counts
    counts = torch.tensor([[0.0, 2.0, 1.0, 0.0]])
    out = process_logits(
        logits, SamplingParams(temperature=0, presence_penalty=0.5, frequency_penalty=1.0), generated_counts=counts
    )
    assert out.tolist() == [[2.0, -1.5, -1.5, -1.0]]
    # temperature, then top-k
    out = process_logits(logits, SamplingParams(temperature=2.0, top_k=2))
    assert out[0, :2].tolist() == [1.0, 0.5] and math.isinf(out[0, 2]) and math.isinf(out[0, 3])
    # top-p keeps the smallest set whose mass reaches p: probs of [2, 1, 0, -1] are .64 .24 .09 .03
    out = process_logits(logits, SamplingParams(temperature=1.0, top_p=0.8))
    assert torch.isfinite(out).tolist() == [[True, True, False, False]]
    out = process_logits(logits, SamplingParams(temperature=1.0, top_p=0.5))
    assert torch.isfinite(out).tolist() == [[True, False, False, False]]  # the likeliest always stays
    # greedy ignores temperature / top-k / top-p
    assert process_logits(logits, SamplingParams(temperature=0, top_k=1, top_p=0.1)).tolist() == logits.tolist()


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


# ------------------------------------------------------------------------ the tiny model
@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> HFEngine:
    eng = HFEngine(
        GenerationConfig(
            model_path=str(tiny_model_dir),
            engine="hf",
            dtype="float32",
            device="cpu",
            decode_workers=2,
            vision_defaults={"min_pixels": 3136, "max_pixels": 3136},
        )
    )
    yield eng
    eng.close()


def _chats(synthetic_dir: Path, count: int = 4) -> list[list[dict]]:
    from cosmos_train.evaluation.benchmark import load_benchmark
    from cosmos_train.evaluation.prompts import build_messages

    videos = load_benchmark(synthetic_dir, "synthetic")[:count]
    chats = [build_messages(v.questions[0], str(v.video_path), "letter", 1) for v in videos]
    # prompts of different lengths (left padding) and one without video in the same batch
    chats[1][1]["content"][1]["text"] += " Think about where it was at the start, then answer."
    chats.append([{"role": "user", "content": "Name a colour."}])
    return chats


def test_greedy_equals_transformers_generate(engine: HFEngine, synthetic_dir: Path) -> None:
    """The decode loop (explicit 3D positions, cache, finished rows leaving the batch) gives the tokens
    `model.generate` gives: the evaluation's results did not change when it moved onto this engine."""
    chats = _chats(synthetic_dir)
    groups = engine.generate(chats, SamplingParams(temperature=0, max_new_tokens=12))
    encoded = [engine.encode(c) for c in chats]
    batch = collate_left(encoded, engine.pad_id)
    with torch.inference_mode():
        ref = engine.model.generate(
            **batch, max_new_tokens=12, do_sample=False, eos_token_id=engine.eos_ids, pad_token_id=engine.pad_id
        )
    prompt_len = batch["input_ids"].shape[1]
    for group, row, enc in zip(groups, ref[:, prompt_len:].tolist(), encoded):
        (c,) = group
        stop = next((i + 1 for i, t in enumerate(row) if t in engine.eos_ids), len(row))
        assert c.token_ids == row[:stop]
        assert c.finish_reason == ("stop" if stop < len(row) or row[-1] in engine.eos_ids else "length")
        assert c.prompt_token_ids == enc.input_ids.tolist()
        assert c.text == engine.tokenizer.decode(row[:stop], skip_special_tokens=True)


def test_prefix_sharing_serves_n_samples_from_one_prefill(
    engine: HFEngine, synthetic_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """n samples of a request run its prompt and video once: the vision tower sees each clip once per
    call whatever n is, and greedy samples of one group are identical to n = 1."""
    chats = _chats(synthetic_dir, 2)[:2]
    calls = []
    visual = engine.model.model.visual
    original = visual.forward
    monkeypatch.setattr(visual, "forward", lambda *a, **k: calls.append(1) or original(*a, **k))
    one = engine.generate(chats, SamplingParams(temperature=0, max_new_tokens=5))
    assert len(calls) == 1  # the batch's two videos in one vision call
    many = engine.generate(chats, SamplingParams(n=6, temperature=0, max_new_tokens=5))
    assert len(calls) == 2
    for single, group in zip(one, many):
        assert len(group) == 6 and all(c.token_ids == single[0].token_ids for c in group)


def test_rollout_engine_comes_from_the_job_config() -> None:
    from cosmos_train.config import Config
    from cosmos_train.generation import from_rollout

    cfg = Config.model_validate(
        {
            "policy": {"model_name_or_path": "/m", "model_max_length": 2048},
            "rollout": {"backend": "hf", "seed": 5, "gpu_memory_utilization": 0.5, "parallelism": {"tp_size": 2}},
            "train": {"train_policy": {"dataset": {"vision": {"fps": 1, "max_pixels": 3136}}}},
        }
    )
    gen = from_rollout(cfg, processes_per_host=2)
    assert (gen.model_path, gen.engine, gen.max_length, gen.tp_size, gen.seed) == ("/m", "hf", 2048, 2, 5)
    assert gen.gpu_memory_utilization == 0.5 and gen.processes_per_host == 2
    assert gen.vision_defaults == {"fps": 1, "max_pixels": 3136}
    assert from_rollout(cfg, model_path="/run/safetensors/step_3").model_path == "/run/safetensors/step_3"


def test_weights_stream_from_an_fsdp2_model(
    engine: HFEngine, tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    """A trainer pushes its FSDP2 state dict (DTensor shards) as it is: each tensor is gathered as
    it streams, and the engine then answers as the trainer's model does."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    from cosmos_train.models.load import load_model

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    try:
        trained = load_model(str(tiny_model_dir), dtype=torch.float32, device=torch.device("cpu")).eval()
        with torch.no_grad():
            for p in trained.parameters():
                p.mul_(1.1)
        fully_shard(trained)
        state = trained.state_dict()
        assert any(hasattr(t, "full_tensor") for t in state.values())
        chats = _chats(synthetic_dir, 2)
        s = SamplingParams(temperature=0, max_new_tokens=6)
        before = [g[0].token_ids for g in engine.generate(chats, s)]
        version = engine.update_weights(state.items())
        after = engine.generate(chats, s)
        assert all(g[0].weight_version == version for g in after)
        plain = {k: t.full_tensor() for k, t in state.items()}
        reference = HFEngine(engine.cfg)
        reference.update_weights(plain)
        assert [g[0].token_ids for g in after] == [g[0].token_ids for g in reference.generate(chats, s)] != before
    finally:
        original = load_model(str(tiny_model_dir), dtype=torch.float32, device=torch.device("cpu"))
        engine.update_weights(original.state_dict())
        dist.destroy_process_group()


def test_completions_stay_within_max_length(engine: HFEngine, synthetic_dir: Path) -> None:
    import dataclasses

    from cosmos_train.errors import DataError

    chats = _chats(synthetic_dir, 2)[:2]
    prompt = len(engine.encode(chats[0]))
    short = HFEngine(
        dataclasses.replace(engine.cfg, max_length=prompt + 3), model=engine.model, processor=engine.processor
    )
    (c,) = short.generate(chats[:1], SamplingParams(temperature=0, max_new_tokens=10))[0]
    assert len(c.token_ids) == 3 and c.finish_reason == "length"
    with pytest.raises(DataError, match="leaves no room for a completion within max_length"):
        HFEngine(
            dataclasses.replace(engine.cfg, max_length=prompt), model=engine.model, processor=engine.processor
        ).generate(chats[:1], SamplingParams(max_new_tokens=2))


def test_validation_sampling_keys_reach_the_engine(engine: HFEngine, synthetic_dir: Path) -> None:
    """[validation] top_k / top_p / repetition_penalty (cosmos-rl's keys) shape the answers: top_k = 1, the
    default, is greedy at any temperature; top_k = -1 samples."""
    from cosmos_train.config import config_from_dict
    from cosmos_train.train.rollout.groups import validation_sampling

    cfg = config_from_dict(
        {
            "validation": {"temperature": 1.0, "top_p": 0.9, "repetition_penalty": 1.1},
            "rollout": {"max_response_length": 8},
        }
    )
    sampling = validation_sampling(cfg, seed=5)
    assert (sampling.top_k, sampling.top_p, sampling.repetition_penalty, sampling.max_new_tokens) == (1, 0.9, 1.1, 8)
    chats = _chats(synthetic_dir, 2)
    greedy = engine.generate(chats, SamplingParams(temperature=0, max_new_tokens=8, repetition_penalty=1.1))
    top1 = engine.generate(chats, sampling)
    assert [c.token_ids for g in top1 for c in g] == [c.token_ids for g in greedy for c in g]
    free = config_from_dict(
        {"validation": {"temperature": 1.0, "top_k": -1, "n_generation": 4}, "rollout": {"max_response_length": 8}}
    )
    sampled = engine.generate(chats, validation_sampling(free, seed=5))
    assert any(len({tuple(c.token_ids) for c in g}) > 1 for g in sampled)  # a random tiny model varies


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_greedy_equals_transformers_generate_on_a_text_only_model(
    family: str, text_model_dirs: dict[str, Path]
) -> None:
    """A text-only model (1D positions, no mm_token_type_ids): the decode loop gives `model.generate`'s tokens, over
    left-padded prompts of different lengths."""
    eng = HFEngine(
        GenerationConfig(model_path=str(text_model_dirs[family]), engine="hf", dtype="float32", device="cpu")
    )
    chats = [
        [{"role": "user", "content": "What is 2 + 2?"}],
        [{"role": "user", "content": "Name a colour, then say why you like it."}],
    ]
    groups = eng.generate(chats, SamplingParams(temperature=0, max_new_tokens=10))
    batch = collate_left([eng.encode(c) for c in chats], eng.pad_id)
    batch.pop("mm_token_type_ids")
    with torch.inference_mode():
        ref = eng.model.generate(
            **batch, max_new_tokens=10, do_sample=False, eos_token_id=eng.eos_ids, pad_token_id=eng.pad_id
        )
    for (c,), row in zip(groups, ref[:, batch["input_ids"].shape[1] :].tolist()):
        stop = next((i + 1 for i, t in enumerate(row) if t in eng.eos_ids), len(row))
        assert c.token_ids == row[:stop] and len(c.token_ids) > 1
    with pytest.raises(DataError, match="text-only language model"):
        eng.generate(
            [
                [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image", "image": Image.new("RGB", (28, 28))},
                            {"type": "text", "text": "What is it?"},
                        ],
                    }
                ]
            ],
            SamplingParams(max_new_tokens=2),
        )
    eng.close()
