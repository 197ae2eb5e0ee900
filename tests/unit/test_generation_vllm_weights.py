"""Weight pushes into vLLM, the parts without vllm: accepted names, whole layers, the wire format."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pytest
import torch

from cosmos_train.errors import ModelError
from cosmos_train.generation.vllm_weights import (
    NameMap,
    PushPlan,
    decode_tensor,
    encode_chunk,
    encode_tensor,
    layer_of,
)


@pytest.fixture(scope="module")
def names(tiny_model_dir: Path) -> NameMap:
    return NameMap.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def state(tiny_model_dir: Path) -> dict[str, torch.Tensor]:
    from cosmos_train.models.load import load_model

    return load_model(str(tiny_model_dir), dtype=torch.float32, device=torch.device("cpu")).state_dict()


def test_layer_of_follows_vllm_fusion() -> None:
    assert layer_of("model.layers.3.self_attn.k_proj.bias") == "model.layers.3.self_attn.qkv_proj"
    assert layer_of("model.layers.3.mlp.up_proj.weight") == "model.layers.3.mlp.gate_up_proj"
    assert layer_of("visual.blocks.0.mlp.gate_proj.bias") == "visual.blocks.0.mlp.gate_up_proj"
    assert layer_of("visual.blocks.0.attn.qkv.weight") == "visual.blocks.0.attn.qkv"
    assert layer_of("model.layers.3.self_attn.o_proj.weight") == "model.layers.3.self_attn.o_proj"


def test_own_and_hub_names_resolve_to_the_checkpoint_name(names: NameMap, state: dict[str, torch.Tensor]) -> None:
    assert (
        names.resolve("model.language_model.layers.0.self_attn.q_proj.weight")
        == "model.layers.0.self_attn.q_proj.weight"
    )
    assert names.resolve("model.layers.0.self_attn.q_proj.weight") == "model.layers.0.self_attn.q_proj.weight"
    assert names.resolve("model.visual.blocks.0.attn.qkv.weight") == "visual.blocks.0.attn.qkv.weight"
    assert names.resolve("_orig_mod.model.language_model.norm.weight") == "model.norm.weight"
    assert names.resolve("lm_head.weight") == "lm_head.weight"
    assert names.resolve("no_such.weight") is None
    assert all(names.resolve(k) is not None for k in state)
    assert len(names.layers["model.layers.0.self_attn.qkv_proj"]) == 6  # q, k, v weights and biases


def test_tied_embeddings_keep_hub_names(tiny_model_dir: Path) -> None:
    """Qwen2.5-VL-3B ties lm_head to the embeddings: the meta model cannot compare the pair, and
    the hub names must still resolve (they are what an exported folder holds)."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    config = AutoConfig.from_pretrained(tiny_model_dir)
    config.tie_word_embeddings = True
    config.text_config.tie_word_embeddings = True
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    tied = NameMap.from_model(model)
    assert tied.resolve("model.layers.0.mlp.up_proj.weight") == "model.layers.0.mlp.up_proj.weight"
    assert tied.resolve("model.embed_tokens.weight") == "model.embed_tokens.weight"
    assert tied.resolve("lm_head.weight") == "lm_head.weight"  # accepted; vLLM skips it when tied


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "llama", "mistral"])
def test_text_family_names_are_the_hub_names(family: str, text_model_dirs: dict[str, Path]) -> None:
    """A causal LM's state-dict names are its checkpoint names (model.layers.N..., no language_model part) and
    vLLM's Qwen2/Qwen3/Llama/MistralForCausalLM load them: each resolves to itself, in whole fused layers."""
    from cosmos_train.models.load import load_model

    folder = text_model_dirs[family]
    names = NameMap.from_pretrained(folder)
    state = load_model(str(folder), dtype=torch.float32, device=torch.device("cpu")).state_dict()
    assert all(names.resolve(k) == k for k in state) and set(names.canonical.values()) == set(state)
    assert not any("language_model" in k or "visual" in k for k in state)
    assert names.resolve("_orig_mod.model.norm.weight") == "model.norm.weight"
    assert names.resolve("model.language_model.norm.weight") is None  # a VL name is not this model's
    qkv = names.layers["model.layers.0.self_attn.qkv_proj"]
    assert {n.split(".")[-2] for n in qkv} == {"q_proj", "k_proj", "v_proj"}
    assert names.layers["model.layers.0.mlp.gate_up_proj"] == {
        "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.up_proj.weight",
    }
    plan = PushPlan(names, chunk_bytes=64 << 10)
    assert sorted(n for c in plan.chunks(iter(state.items())) for n, _ in c) == sorted(state) and plan.error() is None
    if family == "qwen3":  # q_norm / k_norm: layers of their own, outside the fused qkv_proj
        assert names.layers["model.layers.0.self_attn.q_norm"] == {"model.layers.0.self_attn.q_norm.weight"}


def test_a_state_dict_goes_in_chunks_of_whole_layers(names: NameMap, state: dict[str, torch.Tensor]) -> None:
    plan = PushPlan(names, chunk_bytes=64 << 10)
    chunks = list(plan.chunks(iter(state.items())))
    assert len(chunks) > 3 and plan.error() is None and plan.sent == len(state)
    seen = [n for chunk in chunks for n, _ in chunk]
    assert sorted(seen) == sorted(names.resolve(k) for k in state)
    for chunk in chunks:  # a layer is never split over two chunks
        layers = {layer_of(n) for n, _ in chunk}
        for layer in layers:
            assert names.layers[layer] <= {n for n, _ in chunk}


def test_a_layer_waits_for_all_its_tensors(names: NameMap, state: dict[str, torch.Tensor]) -> None:
    prefix = "model.language_model.layers.0.self_attn."
    qkv = [(k, v) for k, v in state.items() if k.startswith(prefix) and "o_proj" not in k]
    norm = ("model.language_model.norm.weight", state["model.language_model.norm.weight"])
    plan = PushPlan(names)
    sent = [n for chunk in plan.chunks([qkv[0], norm, *qkv[1:]]) for n, _ in chunk]
    assert sent[0] == "model.norm.weight" and len(sent) == 7 and plan.error() is None

    partial = PushPlan(names)
    assert [[n for n, _ in c] for c in partial.chunks([qkv[0], norm])] == [["model.norm.weight"]]
    assert list(partial.incomplete()) == ["model.layers.0.self_attn.qkv_proj"]
    error = partial.error()
    assert isinstance(error, ModelError) and "push whole layers" in str(error) and "k_proj.weight" in str(error)


def test_unknown_names_are_collected(names: NameMap) -> None:
    plan = PushPlan(names)
    plan.check_names(["model.norm.weight", "module.no_such.weight"])
    error = plan.error()
    assert isinstance(error, ModelError) and "module.no_such.weight" in str(error) and plan.sent == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool])
def test_bytes_wire_round_trip(dtype: torch.dtype) -> None:
    tensor = (torch.randn(6, 4) * 10).to(dtype).t()  # non-contiguous
    wire, _ = encode_tensor(tensor, None, None)
    assert wire[0] == "bytes" and all(isinstance(x, (str, list, bytes)) for x in wire)
    back = decode_tensor(wire, torch.device("cpu"))
    assert back.dtype == dtype and torch.equal(back, tensor)
    scalar, _ = encode_tensor(torch.tensor(3.5), None, None)
    assert decode_tensor(scalar, torch.device("cpu")).item() == 3.5


def test_floating_tensors_are_cast_to_the_engine_dtype() -> None:
    payload, _ = encode_chunk([("w", torch.ones(2, 2)), ("i", torch.arange(3))], torch.bfloat16, None)
    assert payload[0][1][1] == "bfloat16" and payload[1][1][1] == "int64"


def _rebuild_in_child(wire: list, queue: mp.Queue) -> None:
    tensor = decode_tensor(wire, torch.device("cuda", 0))
    queue.put(tensor.sum().item())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA IPC needs a GPU")
def test_cuda_ipc_wire_reaches_another_process() -> None:
    """What a colocated vLLM worker does with a trainer's GPU tensor: map it, copy it, no host trip."""
    from cosmos_train.generation.vllm_weights import device_uuid

    tensor = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)[:, 1:]  # a view into a larger block
    wire, keep = encode_tensor(tensor, torch.bfloat16, device_uuid(0))
    assert wire[0] == "ipc" and all(isinstance(a, (dict, list, int, bool, bytes, type(None))) for a in wire[2])
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    child = ctx.Process(target=_rebuild_in_child, args=(wire, queue))
    child.start()
    total = queue.get(timeout=120)
    child.join(60)
    assert child.exitcode == 0 and total == tensor.sum().item()
    other, _ = encode_tensor(tensor, None, "GPU-not-this-one")
    assert other[0] == "bytes"  # a GPU the worker is not on: through host memory
    with pytest.raises(RuntimeError, match="reached a worker on cpu"):
        decode_tensor(wire, torch.device("cpu"))
    del keep
