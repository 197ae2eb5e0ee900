"""[rollout] and [validation]: how GRPO's completions are generated and sampled, and how validation answers are."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cosmos_train.config.base import MinusOneOrPositive, Section
from cosmos_train.config.schema_policy import DatasetConfig


class SamplingConfig(Section):
    """[rollout.sampling_config]: how rollouts are sampled."""

    temperature: float = Field(1.0, ge=0, description="Sampling temperature (0: greedy).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling: keep the smallest set of this mass (1: off).")
    top_k: MinusOneOrPositive = Field(-1, description="Sample from the k likeliest tokens (-1: off).")
    repetition_penalty: float = Field(1.0, gt=0, description="Divides logits of tokens already present (1: off).")


class RolloutParallelismConfig(Section):
    """[rollout.parallelism]: each policy rank (or tensor-parallel group of tp_size ranks) runs one engine;
    cosmos-rl's other keys here are accepted with no effect (`config.compat`)."""

    tp_size: int = Field(1, ge=1, description="Tensor parallel size of one rollout engine.")


class RolloutConfig(Section):
    """[rollout]: the GRPO generation engine."""

    backend: Literal["vllm", "hf"] = Field("vllm", description="vllm on GPU; hf (transformers) anywhere.")
    n_generation: int = Field(16, ge=1, description="Completions per prompt (the GRPO group size).")
    batch_size: int = Field(
        1,
        ge=1,
        description="cosmos-rl's engine prompt batch; no effect here: a step samples train_batch_per_replica "
        "/ n_generation prompts per replica and gives a rank's share to its engine at once.",
    )
    max_response_length: int = Field(2048, ge=1, description="Max new tokens per completion.")
    gpu_memory_utilization: float = Field(
        0.8, gt=0, le=1, description="vLLM: fraction of device memory for weights and KV cache."
    )
    quantization: Literal["none", "fp8"] = Field("none", description="Rollout weight quantization.")
    enable_chunked_prefill: bool = Field(False, description="vLLM chunked prefill of long prompts.")
    enforce_eager: bool = Field(
        True,
        description="vLLM: run the model eagerly, no CUDA graphs (faster start, less memory; false "
        "captures graphs for faster decoding).",
    )
    sampling_config: SamplingConfig = Field(default_factory=SamplingConfig, description="Sampling parameters.")
    seed: int | None = Field(None, ge=0, description="Sampling seed (unset: random).")
    parallelism: RolloutParallelismConfig = Field(
        default_factory=lambda: RolloutParallelismConfig(), description="How the rollout engine is split."
    )


class ValidationConfig(Section):
    """[validation]: periodic evaluation during training."""

    enable: bool = Field(False, description="Validate during training (alias: train.enable_validation).")
    freq: int = Field(20, ge=1, description="Validate every this many steps (alias: train.validation_step).")
    val_before_train: bool = Field(
        False,
        description="Also validate the starting weights before the first step (GRPO always does: the "
        "best export must beat them).",
    )
    batch_size: int = Field(
        8, ge=1, description="Samples per validation batch (alias: train.validation_batch_per_replica)."
    )
    dataset: DatasetConfig | None = Field(None, description="Default: the train dataset's held-out split.")
    temperature: float = Field(0.0, ge=0, description="Sampling temperature of validation answers (0: greedy).")
    n_generation: int = Field(1, ge=1, description="Completions per validation prompt.")
    max_response_length: int | None = Field(
        None, ge=1, description="Max new tokens per validation answer (unset: rollout.max_response_length)."
    )
    top_p: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Nucleus sampling of validation answers (1: off; unset: rollout.sampling_config.top_p, as "
        "cosmos-rl).",
    )
    top_k: MinusOneOrPositive = Field(
        1,
        description="Sample validation answers from the k likeliest tokens: 1 (the default, as cosmos-rl) is "
        "greedy whatever the temperature; -1: off.",
    )
    repetition_penalty: float = Field(
        1.0, gt=0, description="Divides logits of tokens already present in validation answers (1: off)."
    )
    reward_function: str | list[str] | dict[str, float] = Field(
        default_factory=list,
        description="Reward name(s) scoring answers, or {name = weight} (empty: train.train_policy.reward_function).",
    )
    use_remote_reward: bool | None = Field(
        None,
        description="Score validation answers with the training's remote reward service as well "
        "(train.train_policy.remote_reward); unset: as train.train_policy.use_remote_reward (cosmos-rl's default).",
    )
