"""A model folder or hub id that cannot be loaded fails as a ModelError naming it and what is missing."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from cosmos_train.errors import ModelError
from cosmos_train.models.load import load_model, load_processor


def copy_without(src: Path, dst: Path, *names: str) -> Path:
    shutil.copytree(src, dst)
    for name in names:
        (dst / name).unlink()
    return dst


def test_folder_without_tokenizer_files_names_them(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = copy_without(tiny_model_dir, tmp_path / "export", "tokenizer.json", "tokenizer_config.json")
    with pytest.raises(ModelError) as info:
        load_processor(folder)
    text = str(info.value)
    assert str(folder) in text and "tokenizer.json" in text and "tokenizer_config.json" in text
    assert "preprocessor_config.json" not in text  # present: not named
    assert "Copy them from the base model" in text


def test_folder_without_preprocessor_config(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = copy_without(tiny_model_dir, tmp_path / "m", "preprocessor_config.json")
    with pytest.raises(
        ModelError,
        match=r"missing image preprocessor config \(preprocessor_config\.json or "
        r"processor_config\.json\)",
    ):
        load_processor(folder)


def test_model_folder_without_weights_or_config(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = copy_without(tiny_model_dir, tmp_path / "m", "model.safetensors", "config.json")
    with pytest.raises(
        ModelError,
        match=rf"{folder} lacks the model files: missing model config \(config\.json\); "
        r"weights \(model\.safetensors or ",
    ):
        load_model(folder)


def test_truncated_weights_name_the_file(tiny_model_dir: Path, tmp_path: Path) -> None:
    folder = copy_without(tiny_model_dir, tmp_path / "m")
    weights = folder / "model.safetensors"
    os.truncate(weights, weights.stat().st_size - 1000)
    with pytest.raises(ModelError, match=rf"{weights}: truncated or damaged safetensors file"):
        load_model(folder)


def test_missing_folder_and_unreachable_hub_id(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match=rf"model {tmp_path / 'nope'}: no such folder"):
        load_processor(tmp_path / "nope")
    # HF_HUB_OFFLINE=1 (tests/conftest.py): a hub id not in the cache cannot be fetched.
    with pytest.raises(ModelError, match=r"(?s)'nobody-xyz/not-a-model'.*could not be fetched.*hf download"):
        load_processor("nobody-xyz/not-a-model")
    with pytest.raises(ModelError, match=r"(?s)'nobody-xyz/not-a-model'.*config and weights"):
        load_model("nobody-xyz/not-a-model")


def test_model_family_spec_finds_the_blocks_and_refuses_other_types(tiny_model_dir: Path, tmp_path: Path) -> None:
    """One spec per family: the tiny Qwen2.5-VL's decoder layers and vision blocks are found (FSDP2's units);
    a model type without a spec is refused naming the supported ones, before its weights are read."""
    import json

    from cosmos_train.models.families import family_of
    from cosmos_train.preflight import check_model_family

    model = load_model(tiny_model_dir)
    spec = family_of(model)
    assert spec.name == "qwen2_5_vl" and all(
        n.startswith(spec.vision_prefixes) for n, _ in model.named_parameters() if ".visual." in f".{n}"
    )
    assert len(spec.language_layers(model)) == model.config.text_config.num_hidden_layers
    assert len(spec.vision_blocks(model)) == model.config.vision_config.depth
    other = tmp_path / "falcon"
    shutil.copytree(tiny_model_dir, other)
    cfg = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**cfg, "model_type": "falcon"}))
    with pytest.raises(ModelError, match=r"model type 'falcon' is not supported: .*qwen2_5_vl \(Qwen2.5-VL"):
        load_model(other)
    with pytest.raises(ModelError, match=r"is a 'falcon' model, which no family here loads: .*qwen2_5_vl, qwen3_vl"):
        check_model_family(str(other))
