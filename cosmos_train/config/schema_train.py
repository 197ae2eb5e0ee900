"""[train]: the optimizer, schedule, precision, batch and run length, with its [train.ckpt] table (checkpoints and
exports); its [train.run_health] table is in schema_run_health, its [train.train_policy] tables in schema_policy."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from cosmos_train.config.base import MinusOneOrPositive, Section
from cosmos_train.config.schema_policy import SFTPolicyConfig, TrainPolicy
from cosmos_train.config.schema_run_health import RunHealthConfig


class CheckpointConfig(Section):
    """[train.ckpt]: resumable checkpoints and safetensors exports."""

    enable_checkpoint: bool = Field(True, description="Save resumable checkpoints.")
    save_freq: int = Field(100, ge=1, description="Save every this many optimizer steps.")
    save_mode: Literal["async", "sync"] = Field("async", description="async overlaps the write with training.")
    max_keep: MinusOneOrPositive = Field(2, description="Checkpoints kept, oldest removed first (-1 keeps all).")
    export_safetensors: bool = Field(True, description="Export HF safetensors at each save and at the end.")
    upload_hf: bool = Field(
        False, description="Upload the final safetensors export to the Hub (repo hf_repo_name, token HF_TOKEN)."
    )
    hf_repo_name: str | None = Field(
        None, description="Hub repo the upload goes to, org/name (a bare name goes under the token's user)."
    )
    hf_private: bool = Field(True, description="Create the Hub repo private when it does not exist yet.")
    hf_token_secret: str | None = Field(
        None, description="Name of a Prefect Secret block holding the Hub token (unset: HF_TOKEN)."
    )
    # `true` in the seed guides means the final one; "all" uploads every export and checkpoint.
    upload_s3: Literal[False, "final", "all"] | bool = Field(
        False,
        description="Upload to S3: final = the final export after training; all = every export and "
        "checkpoint as it is written (in the background), then the final one.",
    )
    s3_bucket: str | None = Field(None, description="S3 bucket the upload goes to.")
    s3_prefix: str = Field(
        "outputs", description="Key prefix inside s3_bucket; a run's files go under <s3_prefix>/<run folder name>/."
    )
    s3_endpoint_url: str | None = Field(
        None,
        description="Endpoint of an S3-compatible store (unset: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, "
        "PROD_S3_CHECKPOINT_ENDPOINT_URL or AWS).",
    )
    s3_credentials_secret: str | None = Field(
        None,
        description="Name of a Prefect Secret block holding JSON {access_key_id, secret_access_key, "
        "[session_token, endpoint_url, region]} (unset: PROD_S3_CHECKPOINT_* or the AWS_* environment).",
    )
    upload_part_size_mb: int = Field(
        64, ge=5, le=5120, description="S3 multipart part size in MiB (S3's own bounds: 5 MiB to 5 GiB)."
    )
    upload_concurrency: int = Field(4, ge=1, le=64, description="S3 parts sent at once per file.")

    @field_validator("upload_s3", mode="after")
    @classmethod
    def _true_means_final(cls, v: Any) -> Any:
        return "final" if v is True else v


# Adam's betas are decay rates of moving averages: 1 never forgets, and torch refuses it.
Beta = Annotated[float, Field(ge=0, lt=1)]


class TrainConfig(Section):
    """[train]: the optimizer, schedule, precision, batch and run length."""

    optm_name: Literal["AdamW", "Adam"] = Field(
        "AdamW", description="Optimizer: torch.optim.AdamW (decoupled decay) or torch.optim.Adam (decay as L2)."
    )
    optm_lr: float = Field(1e-6, gt=0, description="Peak learning rate.")
    optm_impl: Literal["fused", "foreach", "for-loop"] = Field(
        "fused", description="AdamW implementation: one fused kernel (CUDA and CPU), foreach, or a plain loop."
    )
    optm_weight_decay: float = Field(
        0.01,
        ge=0,
        description="Weight decay of every trainable parameter, as cosmos-rl: decoupled with AdamW, an L2 term with "
        "Adam (0: none). decay_matrices_only spares biases and norms.",
    )
    decay_matrices_only: bool = Field(
        False,
        description="Ours: optm_weight_decay on weight matrices only, none on biases and norm gains (1-D "
        "parameters), as most LLM trainers do; off: cosmos-rl's, every parameter decays.",
    )
    optm_betas: tuple[Beta, Beta] = Field((0.9, 0.999), description="Adam (beta1, beta2), each in [0, 1).")
    optm_warmup_steps: int | float = Field(
        20,
        ge=0,
        description="Linear warmup in trainer steps (an integer), or a fraction of the run's steps (a "
        "float <= 1.0, rounded down); at most the run (0: none).",
    )
    optm_warmup_start_factor: float = Field(
        0.0,
        ge=0,
        le=1,
        description="Warmup ramps the factor from this to 1: step s of w gets f + (1 - f) * s / (w - 1), so the "
        "first step trains at f * optm_lr (cosmos-rl's schedule).",
    )
    optm_decay_ratio: float | None = Field(
        None,
        ge=0,
        le=1,
        description="Decay over only this fraction of the run's steps (rounded) at the end, the steps between "
        "warmup and decay at the peak (warmup-stable-decay); unset: decay over every step after warmup.",
    )
    optm_decay_type: Literal["none", "linear", "cosine", "sqrt"] = Field(
        "none", description="Learning-rate decay after warmup, down to optm_min_lr_factor."
    )
    optm_min_lr_factor: float = Field(0.0, ge=0, le=1, description="Decay floor as a fraction of optm_lr.")
    optm_grad_norm_clip: float = Field(1.0, ge=0, description="Clip total grad norm (0 disables).")
    epsilon: float = Field(1e-6, gt=0, description="Optimizer eps (not the PPO clip).")
    master_dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="Dtype the weights (and Adam's moments) are held and updated in; bfloat16 halves "
        "their memory at the cost of update precision. Exports keep it.",
    )
    param_dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "bfloat16", description="Compute dtype of FSDP params (float32 is used on CPU)."
    )
    fsdp_reduce_dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="Dtype gradients are reduced in across ranks."
    )
    fsdp_offload: bool = Field(False, description="Keep parameters and optimizer state in CPU memory.")
    fsdp_reshard_after_forward: Literal["default", "always", "never"] = Field(
        "default", description="Free gathered params after forward: always saves memory, never saves traffic."
    )
    logprob_dtype: Literal["float32", "bfloat16"] = Field("float32", description="Dtype of GRPO log-probs.")
    train_batch_per_replica: int = Field(
        8,
        ge=1,
        description="SFT: samples per model replica per step (its dp_shard ranks split them). GRPO: completions per "
        "replica per step (cosmos-rl's meaning: train_batch_per_replica / rollout.n_generation prompts), a multiple "
        "or a divisor of n_generation; below it a group trains as n_generation / train_batch_per_replica steps.",
    )
    epoch: int = Field(1, ge=1, description="Passes over the training dataset.")
    max_num_steps: int | None = Field(None, ge=1, description="Stop after this many optimizer steps.")
    output_dir: str = Field(
        "./outputs",
        min_length=1,
        description="A timestamp sub-folder is appended per run. s3://bucket/prefix: the run is written to a "
        "local working copy ($COSMOS_RUN_CACHE, default $COSMOS_CACHE/runs) and mirrored to the bucket.",
    )
    resume: bool | str = Field(
        False, description="true: newest complete checkpoint in output_dir (on S3 too); or a path or s3:// URL."
    )
    seed: int = Field(0, ge=0, description="Seed of torch, numpy and random (the rank is added).")
    deterministic: bool = Field(False, description="Deterministic kernels: reproducible and slower.")
    compile: bool = Field(
        False,
        description="torch.compile each transformer block (language and vision) before FSDP2: faster steps "
        "after a compile of about a minute at start and one recompile for varying lengths.",
    )
    async_tp_enabled: bool = Field(
        False, description="Async tensor parallel (accepted; not implemented yet: said by config check)."
    )
    sequence_packing: bool = Field(False, description="Pack samples padding-free into one sequence.")
    fused_linear_ce: bool = Field(
        False,
        description="SFT: the LM head and the cross entropy run fused, fused_linear_ce_chunk label tokens at "
        "a time with their gradients (train/linear_ce.py): the [label tokens x vocabulary] logits are never held "
        "whole, for the same loss and gradients. Refused for GRPO (its loss reads per-token log-probs) and with a "
        "LoRA adapter on lm_head.",
    )
    fused_linear_ce_chunk: int = Field(
        2048,
        ge=1,
        le=1_048_576,
        description="Label tokens per chunk of the fused head + loss; its peak is one chunk x vocabulary fp32 "
        "buffer (2048 x 151,936 = 1.2 GiB for Qwen2.5-VL) plus the head's fp32 gradient.",
    )
    save_ckpt_at_exit: bool = Field(True, description="Checkpoint on SIGTERM/SIGUSR1 before exiting.")
    sync_weight_interval: int = Field(1, ge=1, description="GRPO: steps between weight syncs to rollout.")
    skip_nonfinite_steps: int = Field(
        0,
        ge=0,
        description="Steps whose loss or gradient norm is NaN/inf that may be skipped (no update) before the "
        "run stops naming the step; 0 stops at the first.",
    )
    ckpt: CheckpointConfig = Field(default_factory=CheckpointConfig, description="Checkpoints and exports.")
    stop_when_stuck: bool = Field(
        False,
        description="GRPO: end the run early (checkpoint and exports saved as at a normal end, exit code 3, not "
        "retried) when a [train.run_health] verdict holds at the latest step: RL cannot learn in that state.",
    )
    run_health: RunHealthConfig = Field(
        default_factory=RunHealthConfig,
        description="Thresholds of the run-health verdicts (zero-variance groups, entropy collapse, flat reward "
        "and validation, pinned clip fraction).",
    )
    train_policy: TrainPolicy = Field(
        default_factory=SFTPolicyConfig, description="SFT or GRPO (by its type), and its dataset."
    )
