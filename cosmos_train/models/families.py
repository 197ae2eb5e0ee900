"""Model families: what the trainer needs to know of one architecture, in one spec per family.

    from cosmos_train.models.families import family_of
    spec = family_of(model)              # or family_of(model.config), family_of("qwen2_5_vl")
    spec.language_layers(model), spec.vision_blocks(model), spec.tp_plan

A spec is keyed by `config.model_type`. It says which modules are transformer blocks (FSDP2 wraps each one,
`cosmos_train.models.parallelize`), the tensor-parallel plan of a language block, where the vision tower
lives (for freeze_pattern / trainable_pattern), how pixels are laid out and video time is written in the
prompt (`vision_layout`, one of `cosmos_train.vision.layout`'s, which `cosmos_train.data.media` and
`cosmos_train.data.chat.encode_chat` apply) and which processor classes belong to it (a processor alone tells
its layout: `cosmos_train.vision.processor.vision_layout_of`, through `vision.layout.PROCESSOR_LAYOUTS`).
A model whose type has no spec is refused with the supported types listed (`ModelError`), before any
process shards it: FSDP2 on a model whose blocks it cannot find would shard only the root module, silently.
Text-only families (qwen2, qwen3, llama, mistral: `FamilySpec.text_only`) load as causal LMs with a tokenizer and
no processor; types cosmos-rl's configs name that are known not to load here (MoE, Gemma-3, Phi) are listed in
UNSUPPORTED_TYPES with the reason, which `config check` and preflight name before anything starts.

Adding a family: a `FamilySpec` below, its layout in `cosmos_train.vision.layout` (and its processor class in
PROCESSOR_LAYOUTS there), its tiny offline model (`cosmos_train.models.tiny`: a config builder
in TINY_CONFIGS and, if its processor needs torchvision, a video-less processor class in
`cosmos_train.models.load`); the parametrised SFT / export / evaluation tests (tests/*/test_families*.py)
then run it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from torch import nn

from cosmos_train.errors import ModelError
from cosmos_train.vision.layout import COSMOS3_EDGE_LAYOUT, QWEN2_VL_LAYOUT, QWEN3_VL_LAYOUT, VisionLayout


def _core(model: nn.Module) -> nn.Module:
    # nn.Module.__getattr__ is typed Tensor | Module; `.model` of an HF VLM is its core module
    return cast(nn.Module, model.model) if hasattr(model, "model") else model


def _qwen_vl_language_layers(model: nn.Module) -> list[nn.Module]:
    core = _core(model)
    lm = core.language_model if hasattr(core, "language_model") else core
    return list(getattr(lm, "layers", []))


def _qwen_vl_vision_blocks(model: nn.Module) -> list[nn.Module]:
    visual = getattr(_core(model), "visual", None)
    return list(getattr(visual, "blocks", [])) if visual is not None else []


def _no_vision_blocks(model: nn.Module) -> list[nn.Module]:
    return []


def _cosmos3_vision_blocks(model: nn.Module) -> list[nn.Module]:
    visual = getattr(_core(model), "visual", None)
    encoder = getattr(visual, "encoder", None)
    return list(getattr(encoder, "layers", [])) if encoder is not None else []


@dataclass(frozen=True)
class FamilySpec:
    """One architecture family.

    model_types: `config.model_type` values it covers. language_layers / vision_blocks: the transformer
    blocks (FSDP2 units, activation-checkpointing units). tp_plan: module path inside a language block ->
    "colwise" | "rowwise". vision_prefixes: parameter-name prefixes of the vision tower and its merger.
    lora_targets: the regex of module paths LoRA adapts when [policy.lora] target_modules is unset.
    vision_layout: patch / merge / temporal patch sizes, normalisation, timestamps in the prompt.
    processor_classes: names of transformers processor classes of this family (ours subclass them)."""

    name: str
    description: str
    model_types: tuple[str, ...]
    language_layers: Callable[[nn.Module], list[nn.Module]]
    vision_blocks: Callable[[nn.Module], list[nn.Module]]
    tp_plan: dict[str, str]
    vision_prefixes: tuple[str, ...]
    lora_targets: str
    vision_layout: VisionLayout
    processor_classes: tuple[str, ...]

    @property
    def text_only(self) -> bool:
        """A language model without a vision tower (a causal LM class, a tokenizer and no processor)."""
        return not self.vision_prefixes


_QWEN_TP_PLAN = {
    "self_attn.q_proj": "colwise",
    "self_attn.k_proj": "colwise",
    "self_attn.v_proj": "colwise",
    "self_attn.o_proj": "rowwise",
    "mlp.gate_proj": "colwise",
    "mlp.up_proj": "colwise",
    "mlp.down_proj": "rowwise",
}

_QWEN_LORA = r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
# a causal LM's blocks are model.layers.N (no language_model part in the path)
_TEXT_LORA = r"(.*\.)?model\.layers\.\d+\.(self_attn|mlp)\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)"
FAMILIES: tuple[FamilySpec, ...] = (
    FamilySpec(
        name="qwen2_5_vl",
        description="Qwen2.5-VL (Cosmos-Reason1)",
        model_types=("qwen2_5_vl",),
        language_layers=_qwen_vl_language_layers,
        vision_blocks=_qwen_vl_vision_blocks,
        tp_plan=_QWEN_TP_PLAN,
        vision_prefixes=("model.visual.",),
        # the language model's attention and MLP projections (the vision tower and lm_head stay as they are)
        lora_targets=_QWEN_LORA,
        vision_layout=QWEN2_VL_LAYOUT,
        processor_classes=("Qwen2_5_VLProcessor",),
    ),
    FamilySpec(
        name="qwen3_vl",
        description="Qwen3-VL (Cosmos-Reason2)",
        model_types=("qwen3_vl",),
        # q_norm / k_norm normalise each head's head_dim: replicated, they work on column-sharded heads
        language_layers=_qwen_vl_language_layers,
        vision_blocks=_qwen_vl_vision_blocks,
        tp_plan=_QWEN_TP_PLAN,
        vision_prefixes=("model.visual.",),  # blocks, merger and the deepstack mergers
        lora_targets=_QWEN_LORA,
        vision_layout=QWEN3_VL_LAYOUT,
        processor_classes=("Qwen3VLProcessor",),
    ),
    FamilySpec(
        name="cosmos3_edge",
        description="Cosmos3-Edge",
        model_types=("cosmos3_edge",),
        language_layers=_qwen_vl_language_layers,
        vision_blocks=_cosmos3_vision_blocks,
        tp_plan={
            "self_attn.q_proj": "colwise",
            "self_attn.k_proj": "colwise",
            "self_attn.v_proj": "colwise",
            "self_attn.o_proj": "rowwise",
            "mlp.fc1": "colwise",
            "mlp.fc2": "rowwise",
        },
        vision_prefixes=("model.visual.", "model.projector."),
        lora_targets=r".*language_model.*\.(q_proj|k_proj|v_proj|o_proj|fc1|fc2)",
        vision_layout=COSMOS3_EDGE_LAYOUT,
        processor_classes=("Cosmos3EdgeProcessor",),
    ),
    # Text-only language models (cosmos-rl's text recipes): the causal LM class, `model.layers` as blocks, no
    # vision tower, a tokenizer in place of a processor; rows with images or videos are refused for them.
    *(
        FamilySpec(
            name=name,
            description=description,
            model_types=(name,),
            language_layers=_qwen_vl_language_layers,
            vision_blocks=_no_vision_blocks,
            tp_plan=_QWEN_TP_PLAN,
            vision_prefixes=(),
            lora_targets=_TEXT_LORA,
            vision_layout=QWEN2_VL_LAYOUT,
            processor_classes=(),
        )
        for name, description in (
            ("qwen2", "Qwen2 / Qwen2.5, text only"),
            ("qwen3", "Qwen3 dense, text only"),
            ("llama", "Llama 2 / 3, text only"),
            ("mistral", "Mistral, text only"),
        )
    ),
)

# Model types cosmos-rl's public configs name that no spec here covers: refused by name before anything starts
# (`cosmos_train.preflight.check_model_family`), with the reason.
UNSUPPORTED_TYPES: dict[str, str] = {
    "qwen3_moe": "mixture-of-experts blocks (expert parallelism) are not implemented",
    "qwen2_moe": "mixture-of-experts blocks (expert parallelism) are not implemented",
    "mixtral": "mixture-of-experts blocks (expert parallelism) are not implemented",
    "deepseek_v3": "mixture-of-experts blocks (expert parallelism) are not implemented",
    "gpt_oss": "mixture-of-experts blocks (expert parallelism) are not implemented",
    "gemma3": "Gemma-3 has no family spec here (its vision tower and blocks are not mapped)",
    "phi3": "Phi-3 / Phi-4 fuse q, k, v (qkv_proj) and gate, up (gate_up_proj): no tensor-parallel plan or "
    "LoRA targets are written for that layout",
}


def supported() -> str:
    return ", ".join(f"{t} ({f.description})" for f in FAMILIES for t in f.model_types)


def family_of_processor(processor: Any) -> FamilySpec | None:
    """The spec whose processor class `processor` is (or subclasses); None for a bare tokenizer or another
    processor (callers then use Qwen2.5-VL's layout, which a text-only chat never reads)."""
    names = {cls.__name__ for cls in type(processor).__mro__}
    for family in FAMILIES:
        if names.intersection(family.processor_classes):
            return family
    return None


def family_of(model_or_config: Any) -> FamilySpec:
    """The spec of a model, its config, or a model_type string; ModelError naming the supported types."""
    model_type: str | None
    if isinstance(model_or_config, str):
        model_type = model_or_config
    else:
        config = getattr(model_or_config, "config", model_or_config)
        model_type = getattr(config, "model_type", None)
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    why = f" ({UNSUPPORTED_TYPES[model_type]})" if model_type in UNSUPPORTED_TYPES else ""
    raise ModelError(
        f"model type {model_type!r} is not supported{why}: the trainer knows the blocks, tensor-parallel "
        f"plan and vision layout of {supported()}. Use a model of one of these families, or add its "
        "spec (cosmos_train/models/families.py)"
    )
