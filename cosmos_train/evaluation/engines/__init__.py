"""Evaluation engines behind one interface (`Engine`), chosen by name from a registry.

"auto" picks vLLM when the package is importable and CUDA is present, else transformers ("hf").
A user may register another engine: `register_engine("mine")(lambda cfg, model_path: MyEngine(...))`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

from cosmos_train.evaluation.engines.base import Chat, Engine, Sampling, base_sampling, retry_sampling

EngineFactory = Callable[[Any, str], Engine]  # (EvalConfig, model path) -> Engine
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
    import torch

    return torch.cuda.is_available()


def resolve_engine_name(requested: str) -> str:
    if requested == "auto":
        return "vllm" if vllm_usable() else "hf"
    if requested not in ENGINES:
        raise ValueError(f"unknown engine {requested!r}; known: auto, {', '.join(sorted(ENGINES))}")
    return requested


@register_engine("hf")
def _make_hf(cfg: Any, model_path: str) -> Engine:
    from cosmos_train.evaluation.engines.hf import HFEngine, resolve_tokenizer_path

    max_length = cfg.model.max_length
    return HFEngine(
        model_path,
        tokenizer_path=resolve_tokenizer_path(model_path, cfg.model.tokenizer_model_name),
        dtype=cfg.model.dtype,
        device=cfg.device,
        max_length=max_length,
        workers=min(cfg.evaluation.num_processes, 8),
    )


@register_engine("vllm")
def _make_vllm(cfg: Any, model_path: str) -> Engine:
    from cosmos_train.evaluation.engines.hf import resolve_tokenizer_path
    from cosmos_train.evaluation.engines.vllm import VLLMEngine

    if importlib.util.find_spec("vllm") is None:
        raise RuntimeError("engine 'vllm' needs the vllm package: pip install 'cosmos-train[vllm]' (or use engine = 'hf')")
    return VLLMEngine(
        model_path,
        tokenizer_path=resolve_tokenizer_path(model_path, cfg.model.tokenizer_model_name),
        dtype=cfg.model.dtype,
        tp_size=cfg.model.tp_size,
        max_length=cfg.model.max_length,
        seed=cfg.evaluation.seed,
        workers=cfg.evaluation.num_processes,
        gpu_memory_utilization=cfg.model.gpu_memory_utilization,
    )


def create_engine(cfg: Any, model_path: str | None = None) -> Engine:
    """The engine `cfg.engine` names (resolving "auto") for `model_path` (default cfg.model.model_name)."""
    name = resolve_engine_name(cfg.engine)
    return ENGINES[name](cfg, model_path or cfg.model.model_name)


__all__ = [
    "ENGINES",
    "Chat",
    "Engine",
    "Sampling",
    "base_sampling",
    "create_engine",
    "register_engine",
    "resolve_engine_name",
    "retry_sampling",
    "vllm_usable",
]
