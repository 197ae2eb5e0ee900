"""How to build a generation engine: `GenerationConfig`, a small, plain settings object.

Engines are built from this, never from a job or evaluation config: `from_rollout` reads a job's
[rollout] (and [policy]) section, evaluation builds its own from its [model] / [evaluation] keys, so
the generation layer does not depend on either schema.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cosmos_train.config import Config


@dataclass(frozen=True)
class GenerationConfig:
    """Settings of one engine.

    engine: a registered name ("hf", "vllm") or "auto" (vllm when importable with CUDA, else hf).
    model_path / tokenizer_path: a from_pretrained folder or hub id (tokenizer: default the model's).
    dtype: bfloat16 | float16 | float32 | auto (bfloat16 on GPU, float32 on CPU).
    device: HF engine device: auto | cpu | cuda | cuda:N.
    max_length: prompt + completion tokens (vLLM max_model_len; the HF engine refuses longer prompts).
    tp_size: vLLM tensor parallel size. gpu_memory_utilization: vLLM's share of device memory.
    seed: engine seed (vLLM's; each call's SamplingParams.seed decides sampling).
    decode_workers: threads decoding videos ahead of the model.
    vision_defaults: qwen-vl-utils keys (fps, max_pixels, ...) for media parts that do not set them.
    torch_threads: intra-op threads of the HF engine; None: cores / processes_per_host.
    processes_per_host: processes computing on this host at once (trainer ranks + engines); used to
        pin torch threads, since oversubscribed cores ran many times slower.
    enforce_eager: vLLM runs the model eagerly (no CUDA graphs: faster start, less memory).
    external_launcher: vLLM joins the process group of the torchrun ranks it is colocated with (vLLM's
        "external_launcher": one engine per rank on the rank's own device, `tp_size` consecutive ranks
        forming one tensor-parallel engine, the rest data parallel). Every rank then calls `generate`
        and `update_weights` together (`generation.grouped` keeps a TP group's requests together).
    """

    model_path: str
    engine: str = "auto"
    tokenizer_path: str | None = None
    dtype: str = "auto"
    device: str = "auto"
    max_length: int = 32768
    tp_size: int = 1
    gpu_memory_utilization: float = 0.8
    seed: int = 0
    decode_workers: int = 4
    vision_defaults: dict[str, Any] = field(default_factory=dict)
    torch_threads: int | None = None
    processes_per_host: int = 1
    enable_sleep_mode: bool = False
    external_launcher: bool = False
    enforce_eager: bool = False

    def threads(self) -> int:
        """Intra-op torch threads for a process of this engine."""
        if self.torch_threads is not None:
            return max(1, self.torch_threads)
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return max(1, cores // max(1, self.processes_per_host))


def from_rollout(cfg: Config, model_path: str | None = None, processes_per_host: int = 1) -> GenerationConfig:
    """The rollout engine of a job config: [rollout] for the engine, [policy] for the model and
    its length, the train dataset's vision settings for media parts that set none."""
    rollout = cfg.rollout
    return GenerationConfig(
        model_path=model_path or cfg.policy.model_name_or_path,
        engine=rollout.backend,
        dtype="auto",
        max_length=cfg.policy.model_max_length,
        tp_size=rollout.parallelism.tp_size,
        gpu_memory_utilization=rollout.gpu_memory_utilization,
        enforce_eager=rollout.enforce_eager,
        seed=rollout.seed or 0,
        vision_defaults=cfg.train.train_policy.dataset.vision.as_part_defaults(),
        processes_per_host=processes_per_host,
        # colocated with the policy: the engine gives its memory back while the policy trains (GPU only)
        enable_sleep_mode=True,
        # under torchrun (WORLD_SIZE > 1) a vLLM engine must join the ranks' group to find its device
        external_launcher=int(os.environ.get("WORLD_SIZE", "1")) > 1,
    )
