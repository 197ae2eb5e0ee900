"""LoRA SFT under torchrun with 2 processes (FSDP2 shards the adapters with their blocks): only the adapted
modules change, the export is base + scaling * B @ A and loads with plain from_pretrained, the adapter folder
holds the adapters alone, a resume is bit-exact, and the offline export of a checkpoint equals the live one. One
4-step run (`lora_run`) serves both cases; the resumed run has a launch of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import write_tiny_sft_config
from tests.integration.distributed.test_sft_dist import exported, metrics
from tests.torchrun import sft

pytestmark = pytest.mark.slow

LORA = "[policy.lora]\nr = 8\nlora_alpha = 16\n"


def _config(run: Path, tiny_model_dir: Path, synthetic_dir: Path, out: Path, **train: object) -> Path:
    cfg = write_tiny_sft_config(run / "config.toml", tiny_model_dir, synthetic_dir, out, **train)
    cfg.write_text(cfg.read_text() + LORA)
    return cfg


@pytest.fixture(scope="module")
def lora_run(tiny_model_dir: Path, synthetic_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny job with LoRA, 4 steps on 2 processes: its run folder."""
    tmp = tmp_path_factory.mktemp("lora")
    cfg = _config(tmp / "run", tiny_model_dir, synthetic_dir, tmp / "out", max_num_steps=4)
    sft(cfg, 2)
    return cfg.parent


def test_lora_trains_only_adapters_and_exports_merged(lora_run: Path, tiny_model_dir: Path, tmp_path: Path) -> None:
    run = lora_run
    rows = [m for m in metrics(run) if m["kind"] == "train"]
    assert [m["step"] for m in rows] == [1, 2, 3, 4] and rows[-1]["loss"] < rows[0]["loss"]

    base = load_file(tiny_model_dir / "model.safetensors")
    merged = exported(run)
    assert merged.keys() == base.keys()  # the base model's names: no adapter or base_layer left
    changed = sorted(k for k in base if not torch.equal(base[k], merged[k]))
    assert changed and all(k.startswith("model.layers.") and k.endswith("_proj.weight") for k in changed), changed

    adapter = run / "safetensors" / "final" / "adapter"
    lora = load_file(adapter / "adapter_model.safetensors")
    assert all(".lora_A.weight" in k or ".lora_B.weight" in k for k in lora)
    a = lora["base_model.model.model.language_model.layers.1.mlp.down_proj.lora_A.weight"]
    b = lora["base_model.model.model.language_model.layers.1.mlp.down_proj.lora_B.weight"]
    name = "model.layers.1.mlp.down_proj.weight"
    torch.testing.assert_close(merged[name], base[name] + 2.0 * (b @ a), rtol=0, atol=1e-6)  # alpha 16 / r 8

    from transformers import AutoModelForImageTextToText

    AutoModelForImageTextToText.from_pretrained(run / "safetensors" / "final")  # plain transformers loads it

    # the offline export of the step-4 checkpoint (one process, no torchrun) equals the live export
    from cosmos_train.export import export_checkpoint

    offline = export_checkpoint(run / "checkpoints" / "step_4", tmp_path / "offline")
    again = load_file(offline / "model.safetensors")
    assert again.keys() == merged.keys() and all(torch.equal(again[k], merged[k]) for k in merged)
    assert (offline / "adapter" / "adapter_model.safetensors").is_file()


def test_lora_resume_is_bit_exact(lora_run: Path, tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    straight = lora_run
    resumed = tmp_path / "resumed"
    cfg = _config(
        resumed,
        tiny_model_dir,
        synthetic_dir,
        tmp_path / "o2",
        max_num_steps=4,
        resume=str(straight / "checkpoints" / "step_2"),
    )
    out = sft(cfg, 2)
    assert "at step 2" in out
    a, b = exported(straight), exported(resumed)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    adapter_a = load_file(straight / "safetensors" / "final" / "adapter" / "adapter_model.safetensors")
    adapter_b = load_file(resumed / "safetensors" / "final" / "adapter" / "adapter_model.safetensors")
    assert all(torch.equal(adapter_a[k], adapter_b[k]) for k in adapter_a)
