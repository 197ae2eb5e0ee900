"""Apply tensor parallelism, activation checkpointing, torch.compile and FSDP2 to a loaded HF VLM, from the config.

One small module, torchtitan style: TP on the language model's attention/MLP projections over the
"tp" mesh dimension, then `fully_shard` on each transformer block (language and vision) and on the
root over the data-parallel mesh (2D "dp_replicate" x "dp_shard" = HSDP when dp_replicate_size > 1; with
context parallel the shard dimension is "dp_shard" x "cp" flattened, and the CP ranks' gradients are summed).
Which modules are blocks and the TP plan come from the model's family spec (`models.families`).
Nothing here is model-size specific: the tiny model and Cosmos-Reason1-7B take the same path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from cosmos_train.config import Config
from cosmos_train.distributed import DistInfo, set_data_parallel_average
from cosmos_train.errors import ConfigError, ModelError
from cosmos_train.models.families import family_of

if TYPE_CHECKING:
    from transformers import PreTrainedModel

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def compute_dtype(cfg: Config, device: torch.device) -> torch.dtype:
    """The dtype the policy's forward and backward run in: train.param_dtype on a GPU (FSDP2's mixed precision);
    float32 on a CPU, whose kernels are slow and imprecise in bf16 (the TOML stays the GPU recipe)."""
    return _DTYPES[cfg.train.param_dtype] if device.type == "cuda" else torch.float32


def _blocks(model: nn.Module) -> tuple[list[nn.Module], list[nn.Module]]:
    """(language decoder layers, vision blocks) as the model's family spec finds them; a model whose blocks
    are not found is refused rather than sharded as one root module."""
    spec = family_of(model)
    layers, vision = spec.language_layers(model), spec.vision_blocks(model)
    if not layers:
        raise ModelError(
            f"{type(model).__name__}: the {spec.description} spec finds no language decoder layers; "
            "FSDP2 would shard the whole model as one unit (fix the spec in models/families.py)"
        )
    return layers, vision


def apply_tensor_parallel(model: nn.Module, dist: DistInfo) -> None:
    tp_mesh = dist.tp_mesh
    assert tp_mesh is not None
    text_cfg = getattr(model.config, "text_config", model.config)
    for key in ("num_attention_heads", "num_key_value_heads"):
        if getattr(text_cfg, key) % dist.tp:
            raise ValueError(
                f"policy.parallelism.tp_size {dist.tp} must divide the model's {key} ({getattr(text_cfg, key)})"
            )
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    plan = {module: styles[style]() for module, style in family_of(model).tp_plan.items()}
    layers, _ = _blocks(model)
    for layer in layers:
        parallelize_module(layer, tp_mesh, plan)


def check_context_parallel(model: nn.Module, dist: DistInfo) -> None:
    """Ulysses context parallel splits each TP rank's attention heads over the CP ranks: they must divide."""
    text_cfg: Any = getattr(model.config, "text_config", model.config)
    heads = int(text_cfg.num_attention_heads)
    if heads % (dist.tp * dist.cp):
        raise ConfigError(
            [
                f"policy.parallelism.cp_size = {dist.cp}: context parallel splits the language model's "
                f"{heads} attention heads over tp_size x cp_size = {dist.tp * dist.cp} ranks, which must divide "
                "them; choose a cp_size (and tp_size) whose product divides the head count"
            ]
        )


def parallelize(model: PreTrainedModel, dist: DistInfo, cfg: Config) -> PreTrainedModel:
    if dist.cp > 1:
        check_context_parallel(model, dist)
    if dist.tp > 1:
        apply_tensor_parallel(model, dist)
    if cfg.policy.model_gradient_checkpointing:
        # non-reentrant: composes with FSDP2 and frozen inputs
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
    t = cfg.train
    if t.compile:
        # Per block, as torchtitan does: every language layer (and vision block) shares one compiled graph, so
        # compiling costs a block's worth; in place (Module.compile), so parameter names and checkpoints are the
        # eager model's. Before FSDP2: its hooks run around the compiled forward.
        layers, vision_blocks = _blocks(model)
        for block in vision_blocks + layers:
            block.compile()
    if dist.device.type == "cuda":
        mp = MixedPrecisionPolicy(
            param_dtype=compute_dtype(cfg, dist.device), reduce_dtype=_DTYPES[t.fsdp_reduce_dtype]
        )
    else:
        mp = MixedPrecisionPolicy(param_dtype=torch.float32, reduce_dtype=torch.float32)
    if dist.world_size == 1 and dist.device.type == "cpu" and not t.fsdp_offload:
        # One CPU rank: nothing to shard and no mixed precision to apply, and FSDP2's DTensor
        # parameters cost time every step (bench/sft_throughput.py; bench/RESULTS.md). Checkpoints hold the same names
        # and load on any world size. (One GPU keeps FSDP2 for its bf16 mixed-precision policy.)
        return model
    reshard = {"default": True, "always": True, "never": False}[t.fsdp_reshard_after_forward]
    offload = CPUOffloadPolicy() if t.fsdp_offload else OffloadPolicy()  # OffloadPolicy(): fully_shard's default
    layers, vision_blocks = _blocks(model)
    for block in vision_blocks + layers:
        fully_shard(block, mesh=dist.dp_mesh, reshard_after_forward=reshard, mp_policy=mp, offload_policy=offload)
    # the root keeps embeddings, merger and lm_head; no reshard after forward: backward needs it at once
    fully_shard(model, mesh=dist.dp_mesh, reshard_after_forward=False, mp_policy=mp, offload_policy=offload)
    # context parallel: the mesh spans the CP ranks too, whose gradients are shares of one sequence's: summed
    set_data_parallel_average(model, dist)
    return model
