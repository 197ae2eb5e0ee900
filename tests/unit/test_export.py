"""Safetensors export of the tiny Qwen2.5-VL: from_pretrained round-trip, hub names, shards, tied weights,
wrappers, atomicity, and the offline conversion of a DCP checkpoint (export_checkpoint)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForImageTextToText

import cosmos_train.export as export_mod
import cosmos_train.models.hf_folder as hf_folder_mod
from cosmos_train.checkpoint import CheckpointManager
from cosmos_train.config import CheckpointConfig, Config
from cosmos_train.errors import CheckpointError, DiskFullError, TrainingDiverged
from cosmos_train.export import export_checkpoint
from cosmos_train.models.hf_folder import (
    SAFE_INDEX,
    SAFE_WEIGHTS,
    export_safetensors,
    verify_hf_folder,
    write_hf_folder,
)


@pytest.fixture
def tiny(tiny_model_dir):
    return tiny_model_dir  # the session's tiny model (tests/conftest.py); read-only here


def trained(path, seed: int = 1):
    """The base model with every tensor moved, as training would (so a copy of the base cannot pass)."""
    model = AutoModelForImageTextToText.from_pretrained(path)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.01)
    return model


def tensor_names(folder) -> set[str]:
    names: set[str] = set()
    for f in folder.glob("*.safetensors"):
        with safe_open(str(f), "pt") as h:
            names |= set(h.keys())
    return names


def assert_loads_equal(folder, model, dtype=None) -> None:
    loaded = AutoModelForImageTextToText.from_pretrained(folder)
    want, got = model.state_dict(), loaded.state_dict()
    assert want.keys() == got.keys()
    for k, v in want.items():
        v = v.to(dtype) if dtype is not None else v
        assert got[k].dtype == v.dtype and torch.equal(got[k], v), k


def test_roundtrip_equal_with_hub_names_and_side_files(pg, tiny, tmp_path):
    model = trained(tiny)
    out = export_safetensors(model, tmp_path / "safetensors" / "final", tiny)
    assert out == tmp_path / "safetensors" / "final"
    assert_loads_equal(out, model)
    # The names a hub checkpoint uses (model.layers.*, visual.*), exactly what save_pretrained wrote.
    assert tensor_names(out) == tensor_names(tiny)
    base_files = {p.name for p in tiny.iterdir()}
    assert {p.name for p in out.iterdir()} == base_files  # config, tokenizer, templates, processors
    for name in ("tokenizer.json", "chat_template.jinja", "video_preprocessor_config.json"):
        assert (out / name).read_bytes() == (tiny / name).read_bytes()
    assert not list(out.parent.glob("final.tmp-*"))


def test_sharded_and_bfloat16(tiny, tmp_path):
    model = trained(tiny, seed=2)
    out = export_safetensors(model, tmp_path / "sharded", tiny, max_shard_bytes=1_000_000)
    shards = sorted(p.name for p in out.glob("*.safetensors"))
    assert len(shards) > 2 and all(s.startswith("model-") and f"-of-{len(shards):05d}" in s for s in shards)
    index = json.loads((out / SAFE_INDEX).read_text())
    assert set(index["weight_map"].values()) == set(shards)
    assert set(index["weight_map"]) == tensor_names(tiny)
    assert index["metadata"]["total_size"] == sum(p.numel() * 4 for p in model.state_dict().values())
    assert not (out / SAFE_WEIGHTS).exists()
    assert_loads_equal(out, model)

    bf16 = export_safetensors(model, tmp_path / "bf16", tiny, dtype=torch.bfloat16)
    assert json.loads((bf16 / "config.json").read_text())["dtype"] == "bfloat16"
    assert not (bf16 / SAFE_INDEX).exists()  # one file: no index, as save_pretrained does
    assert_loads_equal(bf16, model, dtype=torch.bfloat16)


def test_tied_embeddings_stored_once_like_save_pretrained(tiny, tmp_path):
    config = AutoConfig.from_pretrained(tiny)
    config.tie_word_embeddings = True
    config.text_config.tie_word_embeddings = True
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config)
    assert model.lm_head.weight is model.model.language_model.embed_tokens.weight
    reference = tmp_path / "save_pretrained"
    model.save_pretrained(reference)
    out = export_safetensors(model, tmp_path / "tied", reference)
    assert tensor_names(out) == tensor_names(reference)
    assert "lm_head.weight" not in tensor_names(out)
    assert_loads_equal(out, model)


def test_wrapper_prefixes_are_stripped(tiny, tmp_path):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLDecoderLayer

    model = trained(tiny, seed=3)
    apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, Qwen2_5_VLDecoderLayer))
    wrapped = torch.compile(model)  # never run: only its `_orig_mod.` naming matters here
    assert any("_checkpoint_wrapped_module" in k for k, _ in wrapped.named_parameters())
    assert all(k.startswith("_orig_mod.") for k in wrapped.state_dict())
    out = export_safetensors(wrapped, tmp_path / "wrapped", tiny)
    assert tensor_names(out) == tensor_names(tiny)
    reference = trained(tiny, seed=3)
    assert_loads_equal(out, reference)


def test_failed_export_keeps_previous_one(tiny, tmp_path, monkeypatch):
    model = trained(tiny)
    out = export_safetensors(model, tmp_path / "final", tiny)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def broken(*args, **kwargs):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(hf_folder_mod, "save_file", broken)
    with pytest.raises(OSError, match="disk full"):
        export_safetensors(trained(tiny, seed=9), out, tiny)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]


def test_export_checkpoint_offline(tiny, tmp_path):
    run = tmp_path / "outputs" / "20250101-000000"
    config = Config()
    config.policy.model_name_or_path = str(tiny)
    config.write(run / "config.toml")
    model = trained(tiny, seed=4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ckpt = CheckpointManager(run, CheckpointConfig(save_mode="sync")).save(7, model, opt, None, {})

    out = export_checkpoint(ckpt, run / "safetensors" / "step_7")
    assert_loads_equal(out, model)
    assert tensor_names(out) == tensor_names(tiny)
    assert (out / "chat_template.jinja").exists()

    # The CLI entry point does the same, here with a dtype cast.
    assert export_mod.main([str(ckpt), str(tmp_path / "cli"), "--dtype", "bfloat16"]) == 0
    assert_loads_equal(tmp_path / "cli", model, dtype=torch.bfloat16)

    orphan = tmp_path / "orphan" / "checkpoints" / "step_7"
    shutil.copytree(ckpt, orphan)
    with pytest.raises(CheckpointError, match="config.toml is missing"):
        export_checkpoint(orphan, tmp_path / "never")
    with pytest.raises(CheckpointError, match=rf"not a complete checkpoint.*complete ones under .*{ckpt}"):
        export_checkpoint(run / "checkpoints" / "step_8", tmp_path / "never")


def test_export_checkpoint_rejects_other_architecture(tiny, tmp_path):
    run = tmp_path / "run"
    config = Config()
    config.policy.model_name_or_path = str(tiny)
    config.write(run / "config.toml")
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    ckpt = CheckpointManager(run, CheckpointConfig(save_mode="sync")).save(1, model, None, None, {})
    with pytest.raises(CheckpointError, match=r"do not match .*missing \['lm_head.weight'.*unexpected \['0.bias'"):
        export_checkpoint(ckpt, tmp_path / "never")


def test_non_finite_weight_is_refused_and_nothing_written(tiny, tmp_path):
    model = trained(tiny)
    with torch.no_grad():
        model.model.language_model.layers[0].mlp.up_proj.weight[3, 1] = float("nan")
    with pytest.raises(TrainingDiverged, match=r"layers\.0\.mlp\.up_proj\.weight.*NaN/inf.*nothing was exported"):
        export_safetensors(model, tmp_path / "final", tiny)
    assert list(tmp_path.iterdir()) == []
    # A cast that overflows is refused the same way: 1e6 is inf in float16.
    state = {"w": torch.tensor([1.0, 1e6])}
    with pytest.raises(TrainingDiverged, match="'w'"):
        write_hf_folder(state, tmp_path / "fp16", None, dtype=torch.float16)
    assert list(tmp_path.iterdir()) == []


def test_file_damaged_while_written_is_caught_and_previous_export_kept(tiny, tmp_path, monkeypatch):
    model = trained(tiny)
    out = export_safetensors(model, tmp_path / "final", tiny)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real_save = hf_folder_mod.save_file

    def flips_a_byte(tensors, filename, metadata=None):
        real_save(tensors, filename, metadata=metadata)
        data = bytearray(open(filename, "rb").read())
        data[-3] ^= 0xFF  # a value changed on the way to disk
        open(filename, "wb").write(bytes(data))

    monkeypatch.setattr(hf_folder_mod, "save_file", flips_a_byte)
    with pytest.raises(CheckpointError, match=r"final\.tmp-[0-9a-f]+/model\.safetensors: tensor .* other values"):
        export_safetensors(trained(tiny, seed=9), out, tiny)

    def truncates(tensors, filename, metadata=None):
        real_save(tensors, filename, metadata=metadata)
        os.truncate(filename, os.path.getsize(filename) - 100)

    monkeypatch.setattr(hf_folder_mod, "save_file", truncates)
    with pytest.raises(CheckpointError, match=r"model\.safetensors: truncated or damaged safetensors file"):
        export_safetensors(trained(tiny, seed=9), out, tiny)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]


def test_verify_names_a_truncated_or_missing_export_file(tiny, tmp_path):
    out = export_safetensors(trained(tiny), tmp_path / "sharded", tiny, max_shard_bytes=1_000_000)
    files = verify_hf_folder(out)
    assert len(files) > 2
    os.truncate(files[1], files[1].stat().st_size // 2)  # a copy cut short
    with pytest.raises(CheckpointError, match=rf"{files[1]}: truncated or damaged"):
        verify_hf_folder(out)
    files[1].unlink()
    with pytest.raises(CheckpointError, match=rf"{files[1]}: weight file missing"):
        verify_hf_folder(out)


def test_export_on_a_full_disk_raises_disk_full_and_leaves_no_partial_folder(tiny, small_disk, fill_disk):
    model = trained(tiny)
    out = small_disk / "safetensors" / "final"
    out.parent.mkdir()
    fill_disk(small_disk, leave_bytes=64 * 1024)  # the tiny model's weights take more than that
    with pytest.raises(DiskFullError, match=rf"no space left on {out}"):
        export_safetensors(model, out, tiny)
    assert list(out.parent.iterdir()) == []
