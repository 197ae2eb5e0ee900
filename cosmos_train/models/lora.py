"""LoRA adapters ([policy.lora]): injected into the loaded model in place, merged for exports and rollouts.

    [policy.lora]
    r = 16
    lora_alpha = 32
    # target_modules unset: the language model's attention and MLP projections

`apply_lora` puts peft's LoRA layers into the model's own modules (`peft.inject_adapter_in_model`): the model
keeps its class, forward and parameter paths, a wrapped linear's weight becomes `<module>.base_layer.weight`
and its adapters `<module>.lora_A.default.weight` / `lora_B`. Only the adapters (and `modules_to_save`) train,
so the optimizer holds those alone; FSDP2 shards them with their transformer blocks; checkpoints hold
everything, so a resume continues the adapters.

A model leaves as full weights: `merged_items` turns the (name, tensor) stream of a state dict into the
base model's names with W + scaling * B @ A in place of each adapted weight (scaling = lora_alpha / r, or
/ sqrt(r) with use_rslora), one module at a time. Exports (`cosmos_train.export`) write those, so a folder
loads with plain `from_pretrained` and vLLM; the adapters alone go beside them in `<export>/adapter/`
(`adapter_model.safetensors` + `adapter_config.json`, loadable with `peft.PeftModel.from_pretrained`).
The GRPO engine gets the merged stream too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from safetensors.torch import save_file
from torch import nn

from cosmos_train.config import ConfigError, LoraConfig
from cosmos_train.models.families import family_of
from cosmos_train.models.wrappers import strip_wrappers

if TYPE_CHECKING:
    from peft import LoraConfig as PeftLoraConfig

ADAPTER = "default"  # peft's name of the one adapter
ADAPTER_DIR = "adapter"
_LORA_PART = re.compile(r"\.(lora_A|lora_B)\." + ADAPTER + r"\.weight$")


def target_modules(lora: LoraConfig, model: nn.Module | None) -> str | list[str]:
    """What peft is given: unset -> the family spec's `lora_targets` (the language model's attention and MLP
    projections); 'all-linear' -> the names of every nn.Linear but lm_head in `model` (cosmos-rl's meaning);
    else as written."""
    if lora.target_modules is None:
        if model is None:
            raise ValueError("target_modules unset: the model is needed to find its family's default targets")
        return family_of(model).lora_targets
    if lora.target_modules == "all-linear" and model is not None:
        return sorted(
            {
                n.rsplit(".", 1)[-1]
                for n, m in model.named_modules()
                if isinstance(m, nn.Linear) and n.rsplit(".", 1)[-1] != "lm_head"
            }
        )
    return lora.target_modules


def peft_config(lora: LoraConfig, model: nn.Module | None = None, base_model: str | None = None) -> Any:
    """peft's LoraConfig for `[policy.lora]` (target_modules resolved against `model`)."""
    # peft is imported here, not at the top: every rank and command imports this module, and only a LoRA job
    # needs peft (its import is a visible part of each process's start)
    from peft import LoraConfig as PeftLoraConfig

    targets = target_modules(lora, model)
    return PeftLoraConfig(
        # peft annotates lora_alpha as int but computes scaling = lora_alpha / r, so a float alpha works
        lora_alpha=lora.lora_alpha,  # type: ignore[arg-type]
        r=lora.r,
        lora_dropout=lora.lora_dropout,
        target_modules=targets,
        use_rslora=lora.use_rslora,
        init_lora_weights=lora.init_lora_weights,
        rank_pattern=dict(lora.r_pattern or {}),
        alpha_pattern=dict(lora.alpha_pattern or {}),
        modules_to_save=list(lora.modules_to_save or []) or None,
        base_model_name_or_path=base_model,
    )


def apply_lora(model: nn.Module, lora: LoraConfig) -> tuple[int, int]:
    """Inject the adapters; only they (and modules_to_save) train. Returns (trainable, total) parameter counts.
    Raises ConfigError when target_modules or modules_to_save match no module."""
    from peft import inject_adapter_in_model

    cfg = peft_config(lora, model)
    save = cfg.modules_to_save or []
    cfg.modules_to_save = None  # trained in place below: the module keeps its name, no peft wrapper copy
    try:
        inject_adapter_in_model(cfg, model, adapter_name=ADAPTER)
    except ValueError as e:
        if "not found in the base model" not in str(e) and "Target modules" not in str(e):
            raise
        raise ConfigError(
            [
                f"policy.lora.target_modules: {lora.target_modules!r} matches no module of the model "
                f"({str(e).splitlines()[0][:200]}); name modules as they appear in "
                "model.named_modules(), e.g. 'q_proj', or a regex"
            ]
        ) from None
    model.requires_grad_(False)
    for name, p in model.named_parameters():
        if ".lora_A." in name or ".lora_B." in name:
            p.requires_grad_(True)
    modules = dict(model.named_modules())
    paths: list[str] = []
    for wanted in save:
        hits = [n for n in modules if n == wanted or n.endswith(f".{wanted}")]
        if not hits:
            raise ConfigError([f"policy.lora.modules_to_save: {wanted!r} is no module of the model (e.g. lm_head)"])
        for n in hits:
            modules[n].requires_grad_(True)
        paths += hits
    # what the adapter export carries beside the adapters (lora_parts); nn.Module.__setattr__ is typed for
    # tensors and modules only, and stores any other value as a plain attribute
    model._lora_save_paths = paths  # type: ignore[assignment]
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def lora_scalings(model: nn.Module) -> dict[str, float]:
    """{module path: scaling} of every adapted module (per-module rank / alpha patterns included)."""
    return {
        strip_wrappers(name): float(m.scaling[ADAPTER])
        for name, m in model.named_modules()
        if hasattr(m, "lora_A") and ADAPTER in getattr(m, "scaling", {})
    }


def merged_items(
    items: Iterable[tuple[str, torch.Tensor]], scalings: Mapping[str, float]
) -> Iterator[tuple[str, torch.Tensor]]:
    """The base model's (name, tensor) stream of an adapted model's stream: `<m>.base_layer.<p>` -> `<m>.<p>`,
    with `<m>.weight` = base + scaling * B @ A once the module's three tensors have passed; the adapters
    themselves are not yielded. Tensors must be full (gathered) ones; at most one module is held."""
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in items:
        match = _LORA_PART.search(name)
        if match is not None:
            module = name[: match.start()]
            pending.setdefault(module, {})[match.group(1)] = tensor
        elif ".base_layer." in name:
            module, param = name.rsplit(".base_layer.", 1)
            if param != "weight":
                yield f"{module}.{param}", tensor
                continue
            pending.setdefault(module, {})["base"] = tensor
        else:
            yield name, tensor
            continue
        parts = pending[module]
        if {"base", "lora_A", "lora_B"} <= set(parts):
            del pending[module]
            yield (
                f"{module}.weight",
                merge_weight(parts["base"], parts["lora_A"], parts["lora_B"], _scaling(scalings, module)),
            )
    if pending:
        raise ValueError(f"LoRA merge: modules without all of base, lora_A and lora_B: {sorted(pending)[:5]}")


def merge_weight(base: torch.Tensor, a: torch.Tensor, b: torch.Tensor, scaling: float) -> torch.Tensor:
    """W + scaling * B @ A, computed in float32 and returned in W's dtype."""
    return (base.float() + scaling * (b.float() @ a.float())).to(base.dtype)


def _scaling(scalings: Mapping[str, float], module: str) -> float:
    key = strip_wrappers(module)
    if key not in scalings:
        raise ValueError(f"LoRA merge: no scaling known for {key}")
    return scalings[key]


@dataclass
class LoraParts:
    """What an adapted model's exports need: each module's scaling, peft's config of the adapter, and the
    paths of the modules trained in full (modules_to_save)."""

    scalings: dict[str, float]
    peft_config: Any
    save_paths: list[str]


def lora_parts(model: nn.Module) -> LoraParts | None:
    """The LoRA of `model` (as `apply_lora` left it), or None for a model without adapters."""
    scalings = lora_scalings(model)
    if not scalings:
        return None
    # set by peft's inject_adapter_in_model (nn.Module's attribute access is typed Tensor | Module)
    cfg = cast("dict[str, PeftLoraConfig]", model.peft_config)[ADAPTER]
    return LoraParts(scalings, cfg, list(getattr(model, "_lora_save_paths", [])))


def adapter_state(state: Mapping[str, torch.Tensor], parts: LoraParts) -> dict[str, torch.Tensor]:
    """The adapters (and modules_to_save) of a full state dict, named as peft saves them:
    `base_model.model.<module>.lora_A.weight`, `base_model.model.<module>.<param>`."""
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        name = strip_wrappers(name)
        if (m := _LORA_PART.search(name)) is not None:
            out[f"base_model.model.{name[: m.start()]}.{m.group(1)}.weight"] = tensor.contiguous()
        elif any(name.startswith(f"{p}.") for p in parts.save_paths):
            out[f"base_model.model.{name}"] = tensor.contiguous()
    return out


def write_adapter(folder: Path, adapters: Mapping[str, torch.Tensor], parts: LoraParts, base_model: str | None) -> Path:
    """adapter_model.safetensors + adapter_config.json in `folder`: `peft.PeftModel.from_pretrained(base,
    folder)` loads them."""
    folder.mkdir(parents=True, exist_ok=True)
    save_file(dict(adapters), str(folder / "adapter_model.safetensors"), metadata={"format": "pt"})
    cfg = parts.peft_config.to_dict()
    cfg = {k: (sorted(v) if isinstance(v, set) else v) for k, v in cfg.items()}
    cfg.update(
        peft_type="LORA",
        base_model_name_or_path=base_model,
        modules_to_save=sorted({p.rsplit(".", 1)[-1] for p in parts.save_paths}) or None,
    )
    (folder / "adapter_config.json").write_text(json.dumps(cfg, indent=2, default=str) + "\n")
    return folder
