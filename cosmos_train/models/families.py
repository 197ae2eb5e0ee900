"""Model families: what the trainer needs to know of one architecture, in one spec per family.

    from cosmos_train.models.families import family_of
    spec = family_of(model)              # or family_of(model.config), family_of("qwen2_5_vl")
    spec.language_layers(model), spec.vision_blocks(model), spec.tp_plan

A spec is keyed by `config.model_type`. It says which modules are transformer blocks (FSDP2 wraps each one,
`cosmos_train.models.parallelize`), the tensor-parallel plan of a language block, where the vision tower
lives (for freeze_pattern / trainable_pattern). The vision patch layout is Qwen2.5-VL's, in
`cosmos_train.data.video` (14 px patches, 2 x 2 merged, 2 frames each); it moves onto the spec with the
first family that lays video out otherwise (Qwen3-VL: 16 px patches and timestamps in the prompt).
A model whose type has no spec is refused with the supported types listed (`ModelError`), before any
process shards it: FSDP2 on a model whose blocks it cannot find would shard only the root module, silently.

Adding a family: a `FamilySpec` below (and its tiny offline model in `cosmos_train.models.tiny`), then the
parametrised SFT / export / evaluation tests pick it up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from cosmos_train.errors import ModelError


def _core(model: nn.Module) -> nn.Module:
    return model.model if hasattr(model, "model") else model


def _qwen_vl_language_layers(model: nn.Module) -> list[nn.Module]:
    core = _core(model)
    lm = core.language_model if hasattr(core, "language_model") else core
    return list(getattr(lm, "layers", []))


def _qwen_vl_vision_blocks(model: nn.Module) -> list[nn.Module]:
    visual = getattr(_core(model), "visual", None)
    return list(getattr(visual, "blocks", [])) if visual is not None else []


@dataclass(frozen=True)
class FamilySpec:
    """One architecture family.

    model_types: `config.model_type` values it covers. language_layers / vision_blocks: the transformer
    blocks (FSDP2 units, activation-checkpointing units). tp_plan: module path inside a language block ->
    "colwise" | "rowwise". vision_prefixes: parameter-name prefixes of the vision tower and its merger.
    lora_targets: the regex of module paths LoRA adapts when [policy.lora] target_modules is unset."""

    name: str
    description: str
    model_types: tuple[str, ...]
    language_layers: Callable[[nn.Module], list[nn.Module]]
    vision_blocks: Callable[[nn.Module], list[nn.Module]]
    tp_plan: dict[str, str]
    vision_prefixes: tuple[str, ...]
    lora_targets: str


_QWEN_TP_PLAN = {
    "self_attn.q_proj": "colwise", "self_attn.k_proj": "colwise", "self_attn.v_proj": "colwise",
    "self_attn.o_proj": "rowwise", "mlp.gate_proj": "colwise", "mlp.up_proj": "colwise", "mlp.down_proj": "rowwise",
}

FAMILIES: tuple[FamilySpec, ...] = (
    FamilySpec(
        name="qwen2_5_vl", description="Qwen2.5-VL (Cosmos-Reason1)", model_types=("qwen2_5_vl",),
        language_layers=_qwen_vl_language_layers, vision_blocks=_qwen_vl_vision_blocks, tp_plan=_QWEN_TP_PLAN,
        vision_prefixes=("model.visual.",),
        # the language model's attention and MLP projections (the vision tower and lm_head stay as they are)
        lora_targets=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)",
    ),
)


def supported() -> str:
    return ", ".join(f"{t} ({f.description})" for f in FAMILIES for t in f.model_types)


def family_of(model_or_config: Any) -> FamilySpec:
    """The spec of a model, its config, or a model_type string; ModelError naming the supported types."""
    if isinstance(model_or_config, str):
        model_type = model_or_config
    else:
        config = getattr(model_or_config, "config", model_or_config)
        model_type = getattr(config, "model_type", None)
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    raise ModelError(f"model type {model_type!r} is not supported: the trainer knows the blocks, tensor-parallel "
                     f"plan and vision layout of {supported()}. Use a model of one of these families, or add its "
                     "spec (cosmos_train/models/families.py)")
