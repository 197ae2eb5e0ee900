"""The sections of the world-model RL job config (cosmos_train/wfm/config_schema.py's `WfmConfig`): cosmos-rl's
[model] / [model.rl] / [model_parallel] / [trainer] / [optimizer] / [scheduler] / [dataloader_train] / [job] /
[checkpoint] tables and our [reward] and [evaluation], each a typed `Section` with its bounds."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from cosmos_train.config.base import MinusOneOrPositive, Section
from cosmos_train.config.schema_policy import ServiceRetries
from cosmos_train.config.schema_run_health import RunHealthConfig
from cosmos_train.wfm.mock_data import MockVideo, mock_dataset


class RLConfig(Section):
    """[model.rl]: the RL algorithm and its sampler."""

    algorithm: Literal["flow_grpo", "ddrl"] = Field(
        "flow_grpo",
        description="flow_grpo: clipped policy term + optional KL to the reference; ddrl: the same "
        "policy term + data_beta x the flow-matching loss on dataset videos (forward KL to the data).",
    )
    sample_steps: int = Field(10, ge=1, le=1000, description="Denoising steps of a training rollout (SDE sampler).")
    eval_sample_steps: int | None = Field(
        None, ge=1, le=1000, description="Denoising steps of evaluation samples (ODE; default sample_steps)."
    )
    num_generations: int = Field(
        4, ge=2, le=1024, description="Samples per prompt, sharing one initial noise (the GRPO group)."
    )
    timestep_fraction: float = Field(
        0.6,
        gt=0,
        le=1,
        description="Fraction of a trajectory's denoising steps trained on per iteration (a random subset each time).",
    )
    noise_level: float = Field(0.7, gt=0, le=2, description="SDE noise scale a: step std a*sqrt(sigma/(1-sigma)).")
    shift: float = Field(3.0, gt=0, le=100, description="Flow shift of the sigma schedule (1: uniform).")
    clip_range: float = Field(
        1e-4,
        gt=0,
        le=1,
        description="PPO ratio clip of a step's log-prob ratio (ratios of mean per-element log-probs: ~1e-4).",
    )
    adv_clip_max: float = Field(5.0, gt=0, le=100, description="Advantages are clipped to [-this, this].")
    kl_beta: float = Field(
        0.0,
        ge=0,
        description="Weight of the KL to the frozen reference model's step "
        "(on the predicted velocity); 0: no reference model is loaded.",
    )
    data_beta: float = Field(0.01, ge=0, description="DDRL: weight of the flow-matching loss on dataset videos.")
    guidance: float = Field(
        0.0,
        ge=0,
        le=50,
        description="Classifier-free guidance scale of evaluation samples "
        "(0: none). Training rollouts never use guidance.",
    )
    update_ref_every_iter: int = Field(
        0, ge=0, description="Copy the policy into the reference every N iterations (0: never)."
    )
    min_num_conditional_frames: int = Field(
        0,
        ge=0,
        le=64,
        description="Video2world: fewest latent frames of the dataset clip given per rollout group (0: text2world).",
    )
    max_num_conditional_frames: int = Field(
        0,
        ge=0,
        le=64,
        description="Video2world: most latent frames given per rollout group (cosmos-rl draws k uniformly in "
        "[min, max] per group; 0: text2world).",
    )
    train_on: list[int] | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="cosmos-rl's trained "
        "steps: these denoising-step indices (0 .. sample_steps-1) every iteration, "
        "each -1 a random other step; unset: a random timestep_fraction of them.",
    )
    use_same_seed: bool = Field(
        True,
        description="true: a prompt's num_generations samples share one initial "
        "noise (cosmos-rl's rollout-group seed); false: each sample draws its own.",
    )
    mu_iterations: int = Field(1, ge=1, le=64, description="Optimizer passes over each rollout batch.")
    train_micro_batch: int = Field(
        8,
        ge=1,
        le=4096,
        description="Samples per forward/backward while training (at most a rank's batch_size x "
        "num_generations are used).",
    )


class ConditionerEntry(Section):
    """One [[model.conditioner]] entry of cosmos-rl (imaginaire's conditioner)."""

    name: str = Field(max_length=128, description="The entry's name (text, fps, padding_mask, use_video_condition).")
    type: Literal["remap_key", "text_attr", "boolean_flag"] = Field(
        "remap_key",
        description="remap_key: a batch key into the condition; text_attr: the prompt embedding; "
        "boolean_flag: a flag (use_video_condition).",
    )
    output_key: str | None = Field(None, max_length=128, description="The condition's key (default: the name).")
    input_key: str | list[str] | None = Field(None, description="The batch key(s) read.")
    dropout_rate: float = Field(
        0.0,
        ge=0,
        le=1,
        description="text_attr: share of samples whose prompt embedding "
        "is zeroed in DDRL's data term (classifier-free-guidance training).",
    )

    @property
    def key(self) -> str:
        return self.output_key or self.name


class WfmModelConfig(Section):
    """[model]: the diffusers folder trained and how it is sharded."""

    model_name_or_path: str = Field(
        "",
        description="A diffusers folder (model_index.json, transformer/, vae/, "
        "text_encoder/, tokenizer/): `cosmos-train make-tiny-wfm DIR` writes one.",
    )
    model_revision: str | None = Field(
        None, description='Hub revision (Cosmos-Predict2.5\'s diffusers layout: "diffusers/base/post-trained").'
    )
    fsdp_shard_size: MinusOneOrPositive = Field(
        -1, description="Ranks one FSDP2 group shards the DiT over (-1: all ranks of a replica)."
    )
    dp_replicate_size: int = Field(
        1, ge=1, description="HSDP replicas (dp_replicate_size x fsdp_shard_size = world size)."
    )
    param_dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="DiT compute dtype (master weights and optimizer state stay float32)."
    )
    activation_checkpointing: bool = Field(False, description="Recompute each DiT block in backward.")
    max_prompt_length: int = Field(
        128,
        ge=1,
        le=4096,
        description="Text tokens per prompt embedding, the "
        "system prompt's included; longer chats are cut at the end, as Predict2.5's "
        "pipeline does (it uses 512).",
    )
    rl: RLConfig = Field(default_factory=RLConfig, description="The RL algorithm.")
    # cosmos-rl / imaginaire tables: loaded, said to have no effect (see NO_EFFECT_TABLES)
    conditioner: list[ConditionerEntry] | None = Field(
        None,
        max_length=64,
        description="cosmos-rl conditioner list (text_attr dropout_rate is honoured; see conditioner_states).",
    )
    net: dict[str, Any] | None = Field(None, description="cosmos-rl network overrides (no effect).")
    resolution: str | None = Field(
        None,
        max_length=16,
        description="cosmos-rl resolution name (no effect: the size is dataloader_train.video_dataloader.video_size).",
    )
    use_rf_ckpts: bool | None = Field(
        None, description="cosmos-rl: its .pt checkpoint is rectified flow (no effect: a diffusers folder is)."
    )
    tokenizer: dict[str, Any] | None = Field(None, description="cosmos-rl VAE chunking (no effect).")
    ema: dict[str, Any] | None = Field(
        None, description="cosmos-rl EMA weights (kept only by the ema_model callback, which is refused)."
    )
    text_encoder_class: str | None = Field(None, description="cosmos-rl text encoder name (no effect).")
    text_encoder_config: dict[str, Any] | None = Field(None, description="cosmos-rl text encoder (no effect).")


class ModelParallelConfig(Section):
    """[model_parallel]: context parallelism and data parallelism (FSDP / HSDP) are implemented for the DiT."""

    context_parallel_size: int = Field(
        1,
        ge=1,
        description="Context parallel ranks: each holds 1/N of a video's DiT tokens (Ulysses all-to-all "
        "attention); the DiT's heads and a video's tokens must divide by it. Its ranks share data and "
        "shard the DiT with FSDP too (world = dp_replicate_size x fsdp_shard_size x N).",
    )
    tensor_model_parallel_size: int = Field(1, ge=1, description="Tensor parallel ranks (only 1).")
    pipeline_model_parallel_size: int = Field(1, ge=1, description="Pipeline stages (only 1).")
    pipeline_parallel_size: int = Field(1, ge=1, description="Pipeline stages, older name (only 1).")


class TrainerConfig(Section):
    """[trainer]: the loop."""

    max_iter: int = Field(100, ge=1, description="RL iterations (one rollout batch + its updates each).")
    seed: int = Field(0, ge=0, description="Seed of the noise and the timestep choice (the rank is added).")
    logging_iter: int = Field(1, ge=1, description="Log every this many iterations.")
    grad_clip_norm: float = Field(
        1.0,
        ge=0,
        le=1e6,
        description="Clip the total gradient norm (0: off); cosmos-rl's grad_clip callback's clip_norm sets it too.",
    )
    grad_force_finite: bool = Field(
        False,
        description="Zero NaN / inf gradient elements before clipping (cosmos-rl's "
        "grad_clip force_finite sets it); false: a non-finite norm stops the run.",
    )
    callbacks: list[dict[str, Any]] | None = Field(
        None,
        max_length=256,
        description="cosmos-rl trainer callbacks ({name, args}; each in the state CALLBACK_STATES gives).",
    )
    grad_scaler_args: dict[str, Any] | None = Field(None, description="cosmos-rl fp16 scaler (no effect).")
    stop_when_stuck: bool = Field(
        False,
        description="End the run early (checkpoint and export saved as at a normal end, exit code 3, not retried) "
        "when a [trainer.run_health] verdict of its stop_on holds at the latest iteration: RL cannot learn in that "
        "state (the job config's train.stop_when_stuck).",
    )
    run_health: RunHealthConfig = Field(
        default_factory=RunHealthConfig,
        description="Thresholds of the run-health verdicts (zero-variance groups, flat reward and evaluation, "
        "pinned clip fraction, late collapse), in iterations.",
    )


class OptimizerConfig(Section):
    """[optimizer]: AdamW on the DiT."""

    lr: float = Field(1e-5, gt=0, le=1, description="Peak learning rate.")
    weight_decay: float = Field(1e-4, ge=0, le=1, description="Decoupled weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="Adam betas, each in [0, 1).")
    eps: float = Field(1e-8, gt=0, le=1, description="Adam epsilon.")


class SchedulerConfig(Section):
    """[scheduler]: cosmos-rl's LambdaLinear (lists of one value each): warm up from f_start to f_max over
    warm_up_steps, then linearly to f_min over the rest of cycle_lengths; factors of optimizer.lr."""

    f_start: list[float] = Field([1.0], min_length=1, max_length=1, description="Factor at step 0.")
    f_max: list[float] = Field([1.0], min_length=1, max_length=1, description="Factor after warm-up.")
    f_min: list[float] = Field([1.0], min_length=1, max_length=1, description="Factor at the cycle's end.")
    warm_up_steps: list[int] = Field([0], min_length=1, max_length=1, description="Warm-up iterations.")
    cycle_lengths: list[int] = Field([1_000_000], min_length=1, max_length=1, description="Cycle length.")

    def factor(self, step: int) -> float:
        warm, cycle = self.warm_up_steps[0], max(self.cycle_lengths[0], 1)
        if step < warm:
            return self.f_start[0] + (self.f_max[0] - self.f_start[0]) * step / warm
        frac = min(1.0, (step - warm) / max(cycle - warm, 1))
        return self.f_max[0] + (self.f_min[0] - self.f_max[0]) * frac


class VideoDataloaderConfig(Section):
    """[dataloader_train.video_dataloader]: the local dataset (videos/, metas/, text_embedding/), S3 shards, mock
    prompts, or cosmos-rl's mock video dataset (wfm/mock_data.py)."""

    ratio: float = Field(1.0, ge=0, le=1, description="Share of video batches (cosmos-rl; only video here).")
    dataset_dir: str = Field(
        "",
        description="local type: datasets/<name>/ with videos/*.mp4 and metas/*.txt; web type: s3://bucket/prefix/ "
        "or s3://bucket/shard-{000..099}.tar (tar shards of <key>.mp4 + <key>.txt / .json).",
    )
    batch_size: int = Field(
        2,
        ge=1,
        le=1024,
        description="Prompts per rank per iteration (cosmos-rl's mock dataset: its dataloader.batch_size).",
    )
    num_workers: int = Field(
        0, ge=0, le=64, description="web type: shard-reading workers per rank (local type: no effect, clips cached)."
    )
    pin_memory: bool = Field(False, description="cosmos-rl loader pinning (no effect on CPU).")
    num_frames: int = Field(
        5,
        ge=1,
        le=1024,
        description="Frames generated and read per video (1 + 4k); cosmos-rl's mock dataset: its "
        "dataloader.dataset.num_video_frames.",
    )
    video_size: tuple[int, int] = Field(
        (32, 32),
        description="(width, height) in pixels, multiples of 16; cosmos-rl's mock dataset: the clip size of its "
        'dataloader.dataset.resolution (e.g. "480": 768 x 432).',
    )
    offline_text_embedding: bool = Field(
        False,
        description="Condition on text_embedding/<stem>.pickle instead "
        "of encoding captions (a pickle runs code: only datasets you trust).",
    )
    on_bad_row: Literal["fail", "skip"] = Field(
        "fail", description="A row that cannot be used: stop naming it, or leave it out (counted in the report)."
    )
    mock_prompts: int = Field(64, ge=1, le=1_000_000, description="Mock type: how many built-in prompts.")
    heldout_videos: int = Field(
        4,
        ge=0,
        le=100_000,
        description="Dataset rows kept out of training for the held-out diffusion loss (local type).",
    )
    dataloader: dict[str, Any] | None = Field(
        None,
        description="cosmos-rl's loader settings. With type = \"web\" and dataset.len_t5 set: cosmos-rl's mock "
        "video dataset (random clips and prompt embeddings; dataset.resolution, num_video_frames, len_t5, t5_dim "
        "and batch_size are read, the rest has no effect); otherwise no effect (the shards are dataset_dir).",
    )

    @property
    def scan_settings(self) -> dict[str, Any]:
        """`wfm.data.scan_dataset`'s keyword arguments for this dataset (short videos refused at the scan)."""
        return {
            "dataset_dir": self.dataset_dir,
            "offline_text_embedding": self.offline_text_embedding,
            "on_bad_row": self.on_bad_row,
            "min_frames": self.num_frames,
        }


class DataloaderTrainConfig(Section):
    """[dataloader_train]."""

    type: Literal["local", "mock", "web"] = Field(
        "mock",
        description="local: dataset_dir; mock: built-in prompts, no videos (ours); web: webdataset shards streamed "
        "from S3, or with video_dataloader.dataloader.dataset.len_t5 set cosmos-rl's mock video dataset.",
    )
    video_dataloader: VideoDataloaderConfig = Field(
        default_factory=VideoDataloaderConfig, description="The video dataset."
    )
    image_dataloader: dict[str, Any] | None = Field(None, description="cosmos-rl image loader (ratio must be 0).")

    @property
    def mock_video(self) -> MockVideo | None:
        """The shapes of cosmos-rl's mock video rows when this loader reads them (type "web" with
        video_dataloader.dataloader.dataset.len_t5 set; the config filled num_frames / video_size from its keys)."""
        v = self.video_dataloader
        dataset = mock_dataset(self.type, v.dataloader)
        if dataset is None:
            return None
        w, h = v.video_size
        return MockVideo(v.num_frames, w, h, int(dataset["len_t5"]), int(dataset["t5_dim"]))


class JobConfig(Section):
    """[job]: names and where the run goes."""

    project: str = Field("cosmos_train_wfm", description="wandb project.")
    group: str | None = Field(None, description="wandb group.")
    name: str | None = Field(None, description="Run name (wandb); default: the run folder's name.")
    wandb_mode: Literal["online", "offline", "disabled"] = Field(
        "disabled", description="wandb: online, offline (files only), disabled."
    )
    output_dir: str = Field(
        "outputs/wfm",
        description="Run folders are <output_dir>/<timestamp>/. s3://bucket/prefix: written to a local working "
        "copy ($COSMOS_RUN_CACHE, default $COSMOS_CACHE/runs) and mirrored to the bucket.",
    )


class WfmCheckpointConfig(Section):
    """[checkpoint]: resumable DCP checkpoints and the diffusers export."""

    save_iter: int = Field(50, ge=1, description="Checkpoint every this many iterations (and at the end).")
    max_keep: MinusOneOrPositive = Field(2, description="Checkpoints kept (-1: all).")
    resume: bool | str = Field(
        False, description="true: newest complete checkpoint under job.output_dir (on S3 too); or a path or s3:// URL."
    )
    export_diffusers: bool = Field(True, description="Write RUN/diffusers/final (and per save) as a diffusers folder.")
    type: str | None = Field(None, max_length=64, description="cosmos-rl checkpoint type (no effect).")
    load_path: str | None = Field(
        None,
        max_length=4096,
        description="cosmos-rl's model: a diffusers folder or "
        "Hub id (the model trained when model.model_name_or_path is unset).",
    )
    model_id: str | None = Field(
        None,
        max_length=4096,
        description="cosmos-rl's .pt checkpoint inside load_path: "
        "refused, with the command that converts it to a diffusers folder.",
    )
    save_to_object_store: dict[str, Any] | None = Field(
        None,
        description="cosmos-rl S3 save: enabled needs job.output_dir = s3://<bucket>/... (the run is mirrored there).",
    )
    load_from_object_store: dict[str, Any] | None = Field(
        None,
        description="cosmos-rl S3 load: enabled needs job.output_dir = s3://<bucket>/... (resume reads the bucket).",
    )


class RewardConfig(ServiceRetries):
    """[reward]: what scores a generated video."""

    fns: dict[str, float] = Field(
        {"brightness": 1.0},
        min_length=1,
        description="Reward name -> weight; the total is the weighted sum (local functions or the service's handlers).",
    )
    backend: Literal["local", "service"] = Field(
        "local", description="local: functions in the trainer; service: the reward service over HTTP."
    )
    local_service: bool = Field(
        False,
        description="service: start one for the run (else reach the one that "
        "WFM_REWARD_ENQUEUE_URL / WFM_REWARD_FETCH_URL / WFM_REWARD_TOKEN name).",
    )
    payload: Literal["video", "latent"] = Field(
        "video", description="service: send decoded pixels [B,3,T,H,W] uint8, or the latents [B,C,T,H,W]."
    )
    batch_size: int = Field(16, ge=1, le=65536, description="service: videos per request.")
    timeout_s: float = Field(30.0, gt=0, le=3600, description="service: seconds one HTTP call may take.")
    result_timeout_s: float = Field(600.0, gt=0, le=86400, description="service: seconds to wait for scores.")


class WfmEvaluationConfig(Section):
    """[evaluation]: fixed prompts and noise, scored before, during and after training."""

    every_iter: int = Field(0, ge=0, description="Evaluate every N iterations (0: before and after only).")
    num_prompts: int = Field(8, ge=1, le=4096, description="Evaluation prompts (first of the dataset/mock).")
    seed: int = Field(1234, ge=0, description="Seed of the evaluation noise (the same for every evaluation).")
