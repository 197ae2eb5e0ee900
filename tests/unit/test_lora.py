"""LoRA ([policy.lora]): only the adapters train; the export's merged weights are base + scaling * B @ A and
load with plain from_pretrained to the adapted model's outputs; the adapter folder loads with peft to the same."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cosmos_train.config import ConfigError, LoraConfig, config_from_dict
from cosmos_train.models.load import load_model


@pytest.fixture
def base(tiny_model_dir: Path) -> torch.nn.Module:
    return load_model(str(tiny_model_dir), dtype=torch.float32, device="cpu").eval()


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits


def test_only_adapters_train_and_start_from_the_base(base: torch.nn.Module) -> None:
    from cosmos_train.models.families import family_of
    from cosmos_train.models.lora import apply_lora

    ids = torch.randint(10, 500, (2, 12), generator=torch.Generator().manual_seed(0))
    before = _logits(base, ids)
    trainable, total = apply_lora(base, LoraConfig(r=4, lora_alpha=8))
    names = [n for n, p in base.named_parameters() if p.requires_grad]
    assert names and all(".lora_A.default." in n or ".lora_B.default." in n for n in names)
    assert all(".language_model." in n for n in names)  # the default targets: the language model's projections
    assert trainable == sum(p.numel() for n, p in base.named_parameters() if n in names) and trainable < total / 5
    assert torch.equal(_logits(base, ids), before)  # B = 0 at the start: exactly the base model
    from cosmos_train.train.optim import build_optimizer

    opt = build_optimizer(base, config_from_dict({}).train, torch.device("cpu"))
    assert sum(p.numel() for g in opt.param_groups for p in g["params"]) == trainable  # Adam holds adapters only
    assert family_of(base).lora_targets.endswith("down_proj)")  # the default targets come from the family spec


def test_merged_export_and_adapter_load_to_the_adapted_model(
    base: torch.nn.Module, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from peft import PeftModel
    from safetensors.torch import load_file

    from cosmos_train.models.hf_folder import export_safetensors
    from cosmos_train.models.lora import apply_lora

    original = {n: p.detach().clone() for n, p in base.named_parameters()}
    # init_lora_weights = false draws B too, so the adapted model differs from the base
    apply_lora(base, LoraConfig(r=4, lora_alpha=12, init_lora_weights=False, modules_to_save=["lm_head"]))
    with torch.no_grad():
        base.lm_head.weight.add_(0.01)  # a module trained in full rides along
    ids = torch.randint(10, 500, (2, 12), generator=torch.Generator().manual_seed(1))
    adapted = _logits(base, ids)
    out = export_safetensors(base, tmp_path / "final", tiny_model_dir)
    assert out is not None

    # by hand: q_proj of layer 0 is W + (12 / 4) * B @ A
    q = base.model.language_model.layers[0].self_attn.q_proj
    merged = load_file(out / "model.safetensors")
    hub_name = "model.layers.0.self_attn.q_proj.weight"  # the hub checkpoint's name of language_model.layers.0
    expected = original["model.language_model.layers.0.self_attn.q_proj.weight"] + 3.0 * (
        q.lora_B.default.weight @ q.lora_A.default.weight
    )
    assert torch.allclose(merged[hub_name], expected, atol=1e-6)
    assert not any("lora_" in k or "base_layer" in k for k in merged)

    reloaded = load_model(str(out), dtype=torch.float32, device="cpu").eval()
    assert torch.allclose(_logits(reloaded, ids), adapted, atol=1e-4)
    # the adapter alone, on the base model, through peft
    fresh = load_model(str(tiny_model_dir), dtype=torch.float32, device="cpu")
    with_adapter = PeftModel.from_pretrained(fresh, str(out / "adapter")).eval()
    assert torch.allclose(_logits(with_adapter, ids), adapted, atol=1e-4)


def test_targets_resolve_or_say_what_matched_nothing(base: torch.nn.Module) -> None:
    from cosmos_train.models.lora import apply_lora, target_modules

    names = target_modules(LoraConfig(target_modules="all-linear"), base)
    assert "q_proj" in names and "lm_head" not in names and "qkv" in names  # the vision tower's too
    with pytest.raises(ConfigError, match="policy.lora.target_modules: .*matches no module"):
        apply_lora(base, LoraConfig(target_modules=["no_such_proj"]))
    with pytest.raises(ConfigError, match="policy.lora.modules_to_save: 'head_of_nothing'"):
        apply_lora(load_model_like(base), LoraConfig(modules_to_save=["head_of_nothing"]))


def load_model_like(model: torch.nn.Module) -> torch.nn.Module:
    import copy

    return copy.deepcopy(model)


def test_lora_config_rules() -> None:
    cfg = config_from_dict({"policy": {"lora": {"r": 8, "lora_alpha": 16.0, "use_rslora": True}}})
    assert cfg.policy.lora is not None and cfg.policy.lora.use_rslora
    with pytest.raises(ConfigError, match="trains the adapters"):
        config_from_dict({"policy": {"lora": {}, "freeze_pattern": "visual"}})
    with pytest.raises(ConfigError, match="lora_path"):
        config_from_dict({"policy": {"lora": {"lora_path": "/adapters/x"}}})
    from cosmos_train.config import unsupported_settings

    tp = config_from_dict({"policy": {"lora": {}, "parallelism": {"tp_size": 2}}})
    assert "LoRA with tensor parallelism" in " ".join(unsupported_settings(tp))
