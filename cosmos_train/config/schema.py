"""The job config: the cosmos-rl TOML schema users already write, as typed pydantic models (the tables of
[train.train_policy] are in schema_policy). `Config()` alone is valid: the reference framework's defaults."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from cosmos_train.config.base import JobSettings, MinusOneOrPositive, Section
from cosmos_train.config.paths import run_cache_root
from cosmos_train.config.schema_policy import DatasetConfig, SFTPolicyConfig, TrainPolicy
from cosmos_train.errors import ConfigError


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


# the run-health verdicts (cosmos_train/train/run_health.py), and those stop_when_stuck ends a run on by default.
# Not by default: entropy_collapse (a run can still improve while its entropy falls) and late_collapse (stopping
# does not bring the best weights back, which the best export keeps anyway, and a noisy validation's dip can
# recover; what helps is named in its remedy: a lower or decaying learning rate, a KL anchor, fewer steps).
VerdictName = Literal[
    "zero_variance_groups", "entropy_collapse", "reward_flat", "validation_flat", "clip_pinned", "late_collapse"
]
STOP_ON: tuple[VerdictName, ...] = ("zero_variance_groups", "reward_flat", "validation_flat", "clip_pinned")


class RunHealthConfig(Section):
    """[train.run_health] (the world model's job: [trainer.run_health]): when an RL run is in a state where it cannot
    learn, or lost what it learnt (cosmos_train/train/run_health.py): the verdicts of the `run-health` artifact,
    RUN/result.json's "health" and the CLI's last lines, and where stop_when_stuck ends the run."""

    zero_std_fraction: float = Field(
        0.8,
        ge=0,
        le=1,
        description="A step has (almost) no learning signal when at least this share of its sampled groups has "
        "all rewards equal (the zero_std_fraction metric: their advantages are 0).",
    )
    patience: int = Field(
        20,
        ge=1,
        description="Consecutive steps a state must hold (zero-variance groups, pinned clip fraction) before it is "
        "a verdict; also the steps averaged for the entropy at the start and now.",
    )
    entropy_drop: float = Field(
        5.0,
        gt=1,
        description="Entropy collapse: the mean token entropy of the last `patience` steps is this many times "
        "lower than that of the first `patience` steps.",
    )
    entropy_floor: float = Field(
        0.01,
        ge=0,
        description="Entropy collapse too: the mean token entropy of the last `patience` steps is below this "
        "(nats; 0: only the drop counts).",
    )
    flat_steps: int = Field(
        50,
        ge=2,
        description="Train steps over which the train reward and the validation score must move: flat when the "
        "reward's change between the window's halves is within noise (2 standard errors, at least "
        "flat_tolerance) and the validations in the window all lie within flat_tolerance; a plateau the run "
        "climbed to (the window above the run's first steps, or its first validation, by more than that) and a "
        "validation accuracy at 1 are not flat.",
    )
    flat_tolerance: float = Field(
        0.01, ge=0, le=1, description="The smallest change of reward or validation score that is not flat."
    )
    clip_near_zero: float = Field(
        0.001,
        ge=0,
        le=1,
        description="Clip fraction pinned low: below this on `patience` consecutive steps that had advantages, "
        "where the ratio can move (mu_iterations > 1 or old_logprobs = engine): the policy barely moves.",
    )
    clip_near_one: float = Field(
        0.9,
        ge=0,
        le=1,
        description="Clip fraction pinned high: at least this on `patience` consecutive steps: almost every "
        "token's gradient is clipped away.",
    )
    late_drop: float = Field(
        0.10,
        gt=0,
        le=100,
        description="Late collapse: the last validation score (accuracy, else reward_mean; the world model's "
        "evaluation reward) at least this much below the best one (absolute: 0.10 is 10 accuracy points; a reward "
        "in its own units), and beyond 2 standard errors where the validation logs its size.",
    )
    stop_on: list[VerdictName] = Field(
        default_factory=lambda: list(STOP_ON),
        description="The verdicts stop_when_stuck ends a run on (all are reported either way); left out by "
        "default: entropy_collapse (a run can still improve while its entropy falls) and late_collapse (stopping "
        "does not bring the best weights back; the best export keeps them).",
    )


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


class ParallelismConfig(Section):
    """[policy.parallelism]: one replica is dp_replicate*dp_shard*tp*cp*pp ranks. cp_size > 1 splits each sequence
    over that many ranks (Ulysses context parallel: `cosmos_train.context_parallel`); pp_size > 1 (cosmos-rl's
    pipeline parallelism) runs as that many times more FSDP shards: the same result, said by `config check`
    (`fold_pipeline`)."""

    dp_shard_size: MinusOneOrPositive = Field(-1, description="FSDP shard group size; -1 = all remaining ranks.")
    dp_replicate_size: int = Field(1, ge=1, description="HSDP replicas (1 for GRPO).")
    tp_size: int = Field(1, ge=1, description="Tensor parallel size.")
    cp_size: int = Field(
        1,
        ge=1,
        description="Context (sequence) parallel size: each sequence is split over cp_size ranks (Ulysses: the "
        "language model's attention heads must divide by tp_size x cp_size), which hold the same rows, so the "
        "data-parallel ranks are world size / (tp_size x cp_size); parameters are FSDP-sharded over them too.",
    )
    pp_size: int = Field(1, ge=1, description="Pipeline parallel size; > 1 runs as pp_size x more FSDP shards here.")

    def product(self, shard: int) -> int:
        """Ranks the sizes need with `shard` ranks per FSDP group."""
        return self.dp_replicate_size * shard * self.tp_size * self.cp_size * self.pp_size

    def smallest_world_size(self) -> int:
        """The fewest ranks that fit: dp_shard_size = -1 counts as one shard rank."""
        return self.product(max(self.dp_shard_size, 1))

    def resolved_shard(self, world_size: int) -> int:
        if self.dp_shard_size != -1:
            return self.dp_shard_size
        rest = self.product(1)
        if world_size % rest:
            raise ConfigError(
                [f"policy.parallelism: world size {world_size} is not divisible by dp_replicate*tp*cp*pp = {rest}"]
            )
        return world_size // rest

    def check_world_size(self, world_size: int, section: str = "policy.parallelism") -> None:
        """Raise naming the keys when the product of sizes does not equal the launched world size."""
        shard = self.resolved_shard(world_size)
        product = self.product(shard)
        if product != world_size:
            raise ConfigError(
                [
                    f"{section}: dp_replicate_size*dp_shard_size*tp_size*cp_size*pp_size = "
                    f"{self.dp_replicate_size}*{shard}*{self.tp_size}*{self.cp_size}*{self.pp_size} = {product}, "
                    f"but {world_size} processes were launched (set dp_shard_size = -1 to use them all, "
                    f"or change launch.nproc_per_node)"
                ]
            )


class LoraConfig(Section):
    """[policy.lora]: low-rank adapters instead of full fine-tuning."""

    r: int = Field(8, ge=1, description="Adapter rank.")
    lora_alpha: float = Field(
        8.0, gt=0, description="Adapter scale numerator (the update is scaled by lora_alpha / r)."
    )
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="Dropout probability on the adapter input.")
    target_modules: str | list[str] | None = Field(
        None,
        description="Modules that get adapters: a list of names (e.g. ['q_proj', 'v_proj']), a regex over "
        "module paths, or 'all-linear' (every linear layer but lm_head, the vision tower's too); unset: the "
        "language model's attention and MLP projections.",
    )
    modules_to_save: list[str] | None = Field(
        None, description="Modules trained in full beside the adapters (e.g. ['lm_head']); saved with the adapter."
    )
    use_rslora: bool = Field(False, description="Scale updates by lora_alpha / sqrt(r) instead of lora_alpha / r.")
    init_lora_weights: bool | Literal["gaussian"] = Field(
        True,
        description="A's initialisation (B starts at zero, so training starts from the base model): true is "
        "Kaiming-uniform, 'gaussian' normal(0, 1/r); false also draws B (for tests: the start is not the base).",
    )
    r_pattern: dict[str, Annotated[int, Field(ge=1)]] | None = Field(
        None, description="Per-module rank: {regex of module paths = rank} (peft's rank_pattern)."
    )
    alpha_pattern: dict[str, Annotated[float, Field(gt=0)]] | None = Field(
        None, description="Per-module lora_alpha: {regex of module paths = alpha}."
    )


class PolicyConfig(Section):
    """[policy]: the model trained, its length limit and what of it is trained."""

    model_name_or_path: str = Field(
        "nvidia/Cosmos-Reason1-7B", description="Hub id or local folder (from_pretrained layout)."
    )
    model_revision: str | None = Field(None, description="Hub revision of the model.")
    model_max_length: int = Field(4096, ge=1, description="Max tokens per sample, vision tokens included.")
    model_gradient_checkpointing: bool = Field(
        True, description="Recompute activations in backward: less memory, about a third more compute."
    )
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2", "flash_attention_3"] = Field(
        "auto",
        description="Attention kernel of the trained model. auto: flash_attention_2 for SFT on a GPU where "
        "the flash-attn package is installed and the compute dtype is 16-bit (padded and packed rows run varlen), "
        "else sdpa (packed rows then attend per sample, train/packed_attention.py). flash_attention_2 / 3 named "
        "here are refused where flash-attn (flash_attn_interface for 3) is not installed, on a CPU, and for GRPO "
        "(its shared-prompt rows need a 4D mask flash attention cannot take).",
    )
    freeze_pattern: list[str] | str | None = Field(None, description="Regexes of parameter names to freeze.")
    trainable_pattern: list[str] | str | None = Field(None, description="Regexes: train only these.")
    parallelism: ParallelismConfig = Field(
        default_factory=ParallelismConfig, description="How the policy is split over ranks."
    )
    lora: LoraConfig | None = Field(None, description="LoRA adapters (unset: full fine-tuning).")

    @model_validator(mode="after")
    def _patterns_exclusive(self) -> PolicyConfig:
        if self.lora is not None and (self.freeze_pattern or self.trainable_pattern):
            raise ValueError(
                "[policy.lora] trains the adapters (and lora.modules_to_save) only; remove "
                "freeze_pattern / trainable_pattern, or [policy.lora] for full fine-tuning"
            )
        if self.freeze_pattern and self.trainable_pattern:
            raise ValueError(
                "freeze_pattern and trainable_pattern are exclusive: keep one "
                "(trainable_pattern trains only the matching parameters)"
            )
        for key in ("freeze_pattern", "trainable_pattern"):
            for pat in pattern_list(getattr(self, key)):
                try:
                    re.compile(pat)
                except re.error as e:
                    raise ValueError(f"{key}: {pat!r} is not a valid regex ({e})") from e
        return self


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


def _console_only() -> list[Literal["console", "wandb"]]:
    # a typed factory: a lambda's ["console"] is inferred as list[str]
    return ["console"]


class LoggingConfig(Section):
    """[logging]: where metrics go."""

    logger: list[Literal["console", "wandb"]] = Field(
        default_factory=_console_only, description="Metric sinks (metrics.jsonl is always written)."
    )
    project_name: str = Field("cosmos_train", description="wandb project.")
    experiment_name: str | None = Field(None, description="wandb run name (default: the run folder's name).")
    group_name: str | None = Field(None, description="wandb run group (unset: none).")
    log_interval: int = Field(1, ge=1, description="Log every this many steps.")
    completion_sample_freq: int = Field(
        10, ge=0, description="GRPO: write sampled completions with their rewards every this many steps (0: never)."
    )
    completion_sample_count: int = Field(
        4, ge=1, le=256, description="GRPO: completions written per sample (from the first groups of rank 0)."
    )


class LaunchConfig(Section):
    """How torchrun starts the policy processes (cosmos-rl infers this from the GPUs it finds)."""

    nnodes: int = Field(1, ge=1, description="Machines in the job.")
    nproc_per_node: Annotated[int, Field(ge=1)] | Literal["auto"] = Field(
        "auto", description="'auto': every GPU, or the parallelism product on CPU (2 when dp_shard_size=-1)."
    )
    node_rank: int = Field(
        0,
        ge=0,
        description="This machine's index, 0 to nnodes - 1 (e.g. COSMOS_TRAIN__LAUNCH__NODE_RANK="
        "$SLURM_NODEID, or a Kubernetes indexed Job's $JOB_COMPLETION_INDEX).",
    )
    rdzv_endpoint: str | None = Field(
        None, description="host:port where the nodes meet (torchrun's c10d rendezvous; node 0's address)."
    )
    rdzv_id: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
        description="Name of one multi-node job, the same on every node: the run folder is "
        "<output_dir>/<rdzv_id> on storage all nodes share (required when nnodes > 1).",
    )
    socket_ifname: str | None = Field(
        None,
        description="Network interface the ranks' gloo / NCCL sockets use (sets GLOO_SOCKET_IFNAME and "
        "NCCL_SOCKET_IFNAME unless already set; e.g. eth0, ib0; unset: their own choice).",
    )
    gpu_concurrency_limit: str | None = Field(
        "gpu",
        description="Prefect global concurrency limit a training run on GPUs takes one slot of per GPU "
        "it uses (`prefect gcl create gpu --limit 8`); unset or no GPU: no limit taken.",
    )
    max_restarts: int = Field(
        0,
        ge=0,
        description="torchrun restarts of failed workers before the run fails (0: a crash ends the launch and the "
        "flow's retry relaunches it, resuming from the newest checkpoint; docs/MULTINODE.md says why).",
    )
    rdzv_timeout_s: int = Field(
        300,
        ge=10,
        le=86400,
        description="Multi-node: how long a node waits for the rendezvous endpoint to answer and for all nnodes "
        "to join (torchrun's read_timeout and join_timeout); past it the node stops with a paragraph naming the "
        "endpoint, the rdzv_id and this bound.",
    )
    collective_timeout_s: int = Field(
        600,
        ge=10,
        le=86400,
        description="How long a rank waits in one collective (all-reduce, barrier, checkpoint save) for its peers "
        "before it fails (the process group's timeout): a host lost without a word (power, cable) is noticed "
        "within this; raise it when rank 0 alone takes longer (a large export to slow storage).",
    )

    @field_validator("rdzv_id", mode="before")
    @classmethod
    def _id_as_text(cls, v: Any) -> Any:
        """A number (a Slurm job id through COSMOS_TRAIN__LAUNCH__RDZV_ID=12345, read as TOML) is the name it spells."""
        return str(v) if isinstance(v, int) and not isinstance(v, bool) else v


class Config(JobSettings):
    """The whole job. `Config()` alone is valid: the reference framework's defaults."""

    train: TrainConfig = Field(default_factory=TrainConfig, description="Optimizer, schedule, batches, run length.")
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="The model trained.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="GRPO generation.")
    validation: ValidationConfig = Field(default_factory=ValidationConfig, description="Validation during training.")
    logging: LoggingConfig = Field(default_factory=LoggingConfig, description="Metric sinks.")
    launch: LaunchConfig = Field(default_factory=LaunchConfig, description="How the processes are started.")
    custom: dict[str, Any] = Field(default_factory=dict, description="Free-form, for users' dataset scripts.")

    @property
    def policy_type(self) -> Literal["sft", "grpo"]:
        """Which trainer runs the job: train.train_policy's type."""
        return self.train.train_policy.type

    @property
    def parallelism(self) -> ParallelismConfig:
        """The trained model's mesh settings (the launcher reads this name from every job config)."""
        return self.policy.parallelism

    @property
    def run_root(self) -> str:
        """Where run folders go (<run_root>/<timestamp>/): output_dir, or its local working copy when it is
        s3:// (`paths.run_cache_root`)."""
        return str(run_cache_root(self.train.output_dir))

    @property
    def prompts_per_step(self) -> int:
        """GRPO: prompts one step samples over every replica: train_batch_per_replica / n_generation per replica
        (cosmos-rl's meaning: a step trains on train_batch_per_replica completions per replica; rollout.batch_size
        is only its engine's prompt batch). At least 1; config check refuses a remainder."""
        replicas = max(1, self.policy.parallelism.dp_replicate_size)
        return max(1, self.train.train_batch_per_replica // self.rollout.n_generation) * replicas

    @property
    def rl_steps_per_step(self) -> int:
        """GRPO: cosmos-rl's steps one step here makes: 1, or n_generation / train_batch_per_replica when a group
        is more completions than cosmos-rl's step takes (each part then makes mu_iterations optimizer updates and
        one schedule tick, in order, as cosmos-rl's consecutive steps would)."""
        return max(1, self.rollout.n_generation // self.train.train_batch_per_replica)


def pattern_list(v: str | list[str] | None) -> list[str]:
    """freeze_pattern / trainable_pattern as a list of regexes."""
    if v is None:
        return []
    return [v] if isinstance(v, str) else list(v)
