"""The world-model RL job config: cosmos-rl's `configs/wfm/*.toml` layout ([model], [model.rl], [model_parallel],
[trainer], [optimizer], [scheduler], [dataloader_train], [job], [checkpoint]) plus our [reward], [evaluation] and
[launch], as typed pydantic models.

    cosmos-train config check configs/tiny-wfm-flow-grpo.toml --set model.rl.sample_steps=8
    cosmos-train wfm-rl --config configs/tiny-wfm-flow-grpo.toml

cosmos-rl's own recipes (configs/cosmos-predict2-5/*.toml) load as they are. A recipe that names no
model.model_name_or_path is read in cosmos-rl's form: its model is [checkpoint] load_path, and every result-changing
key it leaves out takes cosmos-rl's default (COSMOS_RL_DEFAULTS: e.g. kl_beta 0.01, num_rollout 8, train_on 0..7,
one conditioning frame), so the run is the one cosmos-rl would make or is refused. Each entry of the imaginaire
tables is in one stated state (CALLBACK_STATES, conditioner_states): implemented (grad_clip's clip_norm and
force_finite, the text conditioner's dropout_rate), accepted with no effect and listed with why (logging callbacks,
the fps / padding-mask remaps), or refused by name with what to do (ema_model, conditioning frames, context
parallelism, webdataset, cosmos-rl's .pt checkpoints: convert them to a diffusers folder).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, PrivateAttr, ValidationError

from cosmos_train.config.base import JobSettings, MinusOneOrPositive, Section, read_toml
from cosmos_train.config.compat import NoEffect
from cosmos_train.config.explain import explain_errors, unknown_keys
from cosmos_train.config.overrides import apply_overrides
from cosmos_train.config.paths import looks_local
from cosmos_train.config.schema import CheckpointConfig as JobCheckpointConfig
from cosmos_train.config.schema import LaunchConfig, LoggingConfig, ParallelismConfig
from cosmos_train.errors import ConfigError
from cosmos_train.reward_service.handlers import HANDLERS, handler_names
from cosmos_train.wfm.cosmos_rl_form import (
    CALLBACK_IMPLEMENTED,
    CALLBACK_NO_EFFECT,
    CALLBACK_REFUSED,
    CALLBACK_STATES,
    GRAD_CLIP_ARGS,
    NO_EFFECT_TABLES,
    apply_cosmos_rl_defaults,
    is_cosmos_rl_form,
    rename_rl_aliases,
)
from cosmos_train.wfm.rewards import LOCAL_REWARDS


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
        description="Video2world conditioning frames (fewest per rollout); only 0 (text2world) is implemented.",
    )
    max_num_conditional_frames: int = Field(
        0,
        ge=0,
        le=64,
        description="Video2world conditioning frames (most per "
        "rollout; cosmos-rl draws between min and max); only 0 is implemented.",
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
    """[model_parallel]: only data parallelism (FSDP / HSDP) is implemented for the DiT."""

    context_parallel_size: int = Field(1, ge=1, description="Context parallel ranks (only 1).")
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
    """[dataloader_train.video_dataloader]: the local dataset (videos/, metas/, text_embedding/) or mock prompts."""

    ratio: float = Field(1.0, ge=0, le=1, description="Share of video batches (cosmos-rl; only video here).")
    dataset_dir: str = Field("", description="datasets/<name>/ with videos/*.mp4 and metas/*.txt (local type).")
    batch_size: int = Field(2, ge=1, le=1024, description="Prompts per rank per iteration.")
    num_workers: int = Field(0, ge=0, le=64, description="cosmos-rl loader workers (clips are cached here).")
    pin_memory: bool = Field(False, description="cosmos-rl loader pinning (no effect on CPU).")
    num_frames: int = Field(5, ge=1, le=1024, description="Frames generated and read per video (1 + 4k).")
    video_size: tuple[int, int] = Field((32, 32), description="(width, height) in pixels, multiples of 16.")
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
        None, description='cosmos-rl\'s webdataset loader (type = "web", refused: not read here).'
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
        description="local: dataset_dir; mock: built-in prompts, no videos; web: webdataset on S3 (not implemented).",
    )
    video_dataloader: VideoDataloaderConfig = Field(
        default_factory=VideoDataloaderConfig, description="The video dataset."
    )
    image_dataloader: dict[str, Any] | None = Field(None, description="cosmos-rl image loader (ratio must be 0).")


class JobConfig(Section):
    """[job]: names and where the run goes."""

    project: str = Field("cosmos_train_wfm", description="wandb project.")
    group: str | None = Field(None, description="wandb group.")
    name: str | None = Field(None, description="Run name (wandb); default: the run folder's name.")
    wandb_mode: Literal["online", "offline", "disabled"] = Field(
        "disabled", description="wandb: online, offline (files only), disabled."
    )
    output_dir: str = Field("outputs/wfm", description="Run folders are <output_dir>/<timestamp>/.")


class CheckpointConfig(Section):
    """[checkpoint]: resumable DCP checkpoints and the diffusers export."""

    save_iter: int = Field(50, ge=1, description="Checkpoint every this many iterations (and at the end).")
    max_keep: MinusOneOrPositive = Field(2, description="Checkpoints kept (-1: all).")
    resume: bool | str = Field(False, description="true: newest checkpoint in the run folder; or a path.")
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
        None, description="cosmos-rl S3 save (enabled must be false; `cosmos-train upload` uploads a run)."
    )
    load_from_object_store: dict[str, Any] | None = Field(
        None, description="cosmos-rl S3 load (enabled must be false)."
    )


class RewardConfig(Section):
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


class WfmConfig(JobSettings):
    """A world-model RL job."""

    model: WfmModelConfig = Field(default_factory=WfmModelConfig, description="The model and its sharding.")
    model_parallel: ModelParallelConfig = Field(
        default_factory=ModelParallelConfig, description="Model parallelism (1s only)."
    )
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="The loop.")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="AdamW.")
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig, description="Learning-rate factors.")
    dataloader_train: DataloaderTrainConfig = Field(
        default_factory=DataloaderTrainConfig, description="Training prompts / videos."
    )
    dataloader_val: dict[str, Any] | None = Field(None, description="cosmos-rl validation loader (no effect).")
    job: JobConfig = Field(default_factory=JobConfig, description="Names, wandb, output folder.")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description="Checkpoints, export.")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="The reward.")
    evaluation: WfmEvaluationConfig = Field(default_factory=WfmEvaluationConfig, description="Before/after scoring.")
    launch: LaunchConfig = Field(default_factory=LaunchConfig, description="How the processes are started.")

    # the keys a recipe in cosmos-rl's form left out and got cosmos-rl's default for (COSMOS_RL_DEFAULTS)
    _cosmos_rl_defaults: list[str] = PrivateAttr(default_factory=list)

    @property
    def cosmos_rl_defaults(self) -> list[str]:
        """The dotted keys that took cosmos-rl's default (the recipe is in cosmos-rl's form and left them out)."""
        return self._cosmos_rl_defaults

    @property
    def video(self) -> VideoDataloaderConfig:
        return self.dataloader_train.video_dataloader

    @property
    def logging(self) -> LoggingConfig:
        """[job] as the metrics logger's settings (console always; wandb unless wandb_mode = "disabled")."""
        loggers: list[Any] = ["console"] + (["wandb"] if self.job.wandb_mode != "disabled" else [])
        return LoggingConfig(
            logger=loggers,
            project_name=self.job.project,
            experiment_name=self.job.name,
            group_name=self.job.group,
            log_interval=self.trainer.logging_iter,
        )

    @property
    def parallelism(self) -> ParallelismConfig:
        """[model] fsdp_shard_size / dp_replicate_size as the mesh's settings."""
        return ParallelismConfig(
            dp_shard_size=self.model.fsdp_shard_size, dp_replicate_size=self.model.dp_replicate_size
        )

    @property
    def ckpt(self) -> JobCheckpointConfig:
        """[checkpoint] as the checkpoint settings every trainer reads (a job's [train.ckpt]): a synchronous
        checkpoint every save_iter iterations and at the end, max_keep kept. The export is the diffusers folder
        (export_diffusers, after the last iteration), never safetensors."""
        ck = self.checkpoint
        return JobCheckpointConfig(
            save_freq=ck.save_iter, save_mode="sync", max_keep=ck.max_keep, export_safetensors=False
        )

    @property
    def run_root(self) -> str:
        return self.job.output_dir

    @property
    def policy_type(self) -> str:
        return "wfm_rl"

    def _grad_clip_arg(self, key: str) -> Any:
        for cb in self.trainer.callbacks or []:
            if cb.get("name") == "grad_clip" and key in (cb.get("args") or {}):
                return cb["args"][key]
        return None

    def grad_clip(self) -> float:
        """trainer.grad_clip_norm, or the grad_clip callback's clip_norm when the recipe has one."""
        clip = self._grad_clip_arg("clip_norm")
        return self.trainer.grad_clip_norm if clip is None else float(clip)

    def grad_force_finite(self) -> bool:
        """trainer.grad_force_finite, or the grad_clip callback's force_finite (cosmos-rl's default: true)."""
        if any(cb.get("name") == "grad_clip" for cb in self.trainer.callbacks or []):
            flag = self._grad_clip_arg("force_finite")
            return True if flag is None else bool(flag)
        return self.trainer.grad_force_finite

    def text_dropout_rate(self) -> float:
        """The text_attr conditioner's dropout_rate (0 without one): the share of DDRL data-term samples trained
        with a zeroed prompt embedding, as cosmos-rl's conditioner drops the text in training."""
        return next((c.dropout_rate for c in self.model.conditioner or [] if c.type == "text_attr"), 0.0)


def load_wfm_config(
    path: str | Path | None = None,
    overrides: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    check_paths: bool = True,
) -> WfmConfig:
    """Parse, override (COSMOS_TRAIN__* env, then --set) and validate; every problem in one ConfigError."""
    raw, source = read_toml(path)
    return wfm_config_from_dict(raw, overrides, os.environ if env is None else env, source, check_paths)


def wfm_config_from_dict(
    raw: dict[str, Any],
    overrides: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    source: str | None = None,
    check_paths: bool = False,
) -> WfmConfig:
    """A world-model config from its tables: overrides, cosmos-rl's names and defaults, the schema, wfm_problems."""
    raw = copy.deepcopy(raw)
    cosmos_rl_form = is_cosmos_rl_form(raw)  # what the file says, before overrides
    apply_overrides(raw, overrides, env or {})
    problems = rename_rl_aliases(raw)
    defaulted = apply_cosmos_rl_defaults(raw) if cosmos_rl_form and not problems else []
    problems += unknown_keys(raw, WfmConfig)
    if problems:
        raise ConfigError(problems, source)
    try:
        cfg = WfmConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(explain_errors(e, WfmConfig), source) from None
    cfg._cosmos_rl_defaults = defaulted
    cfg._no_effect = _no_effect(cfg)
    problems = wfm_problems(cfg, check_paths)
    if problems:
        raise ConfigError(problems, source)
    return cfg


def conditioner_states(cfg: WfmConfig) -> list[tuple[str, str, str]]:
    """Each [[model.conditioner]] entry as (key, state, why): "implemented", "no effect" or "refused"."""
    out = []
    texts = [c for c in cfg.model.conditioner or [] if c.type == "text_attr"]
    for c in cfg.model.conditioner or []:
        key = f"model.conditioner[{c.name}]"
        if c.type == "text_attr":
            if len(texts) > 1:
                out.append((key, "refused", "one text_attr entry only: the prompt embedding is one condition"))
            elif c.dropout_rate and cfg.model.rl.algorithm != "ddrl":
                out.append(
                    (
                        key,
                        "no effect",
                        f"dropout_rate = {c.dropout_rate:g} zeroes prompts in DDRL's data "
                        "term only (as cosmos-rl: rollouts and the policy term always use the prompt); this "
                        "run has no data term",
                    )
                )
            else:
                out.append(
                    (
                        key,
                        "implemented",
                        "the prompt embedding (the text encoder's, or the dataset's "
                        f"text_embedding/ with offline_text_embedding); dropout_rate = {c.dropout_rate:g} of "
                        "DDRL's data-term samples get a zeroed embedding",
                    )
                )
        elif c.type == "remap_key" and c.key == "fps":
            out.append(
                (
                    key,
                    "no effect",
                    "fps only modulates the DiT's RoPE with net.rope_enable_fps_modulation, off in Cosmos-Predict2.5",
                )
            )
        elif c.type == "remap_key" and c.key == "padding_mask":
            out.append(
                (
                    key,
                    "no effect",
                    "the DiT gets the all-zero padding mask of unpadded clips, as cosmos-rl's local loader gives",
                )
            )
        elif c.type == "boolean_flag" and c.key == "use_video_condition":
            out.append(
                (
                    key,
                    "no effect",
                    "switches on the video2world conditioning frames that model.rl "
                    "min/max_num_conditional_frames ask for; only text2world (0 frames) runs here, and more "
                    "frames are refused there",
                )
            )
        else:
            out.append(
                (
                    key,
                    "refused",
                    f"a {c.type} condition '{c.key}' is not one this trainer builds (the "
                    "prompt embedding, fps, padding_mask, use_video_condition): remove the entry",
                )
            )
    if cfg.model.conditioner and not texts:
        out.append(
            (
                "model.conditioner",
                "refused",
                "no text_attr entry: cosmos-rl would generate without the "
                'prompt, and the prompt always conditions here; add {name = "text", type = "text_attr"}',
            )
        )
    return out


def callback_states(cfg: WfmConfig) -> list[tuple[str, str, str]]:
    """Each [[trainer.callbacks]] entry as (key, state, why), by CALLBACK_STATES."""
    out = []
    for cb in cfg.trainer.callbacks or []:
        name = str(cb.get("name"))
        key = f"trainer.callbacks[{name}]"
        extra = sorted(set(cb) - {"name", "args"})
        if name == "grad_clip":
            bad = sorted(set(cb.get("args") or {}) - set(GRAD_CLIP_ARGS)) + extra
            clip = (cb.get("args") or {}).get("clip_norm", 1.0)
            if bad:
                out.append((key, "refused", f"{', '.join(bad)}: not grad_clip arguments (clip_norm, force_finite)"))
            elif not isinstance(clip, int | float) or isinstance(clip, bool) or not 0 <= clip <= 1e6:
                out.append((key, "refused", f"args.clip_norm = {clip!r}: a number in [0, 1e6]"))
            else:
                out.append((key, "implemented", CALLBACK_IMPLEMENTED[name]))
        elif name in CALLBACK_NO_EFFECT:
            out.append((key, "no effect", CALLBACK_NO_EFFECT[name]))
        elif name in CALLBACK_REFUSED:
            out.append((key, "refused", CALLBACK_REFUSED[name]))
        else:
            out.append(
                (
                    key,
                    "refused",
                    f"not one of cosmos-rl's callbacks ({', '.join(sorted(CALLBACK_STATES))}); "
                    "remove it or fix the name",
                )
            )
    return out


def _no_effect(cfg: WfmConfig) -> list[NoEffect]:
    out = []
    for key, why in NO_EFFECT_TABLES.items():
        node: Any = cfg
        for part in key.split("."):
            node = getattr(node, part, None)
        if node is not None:
            out.append(NoEffect(key, node, why))
    entries = {f"model.conditioner[{c.name}]": c.model_dump(exclude_none=True) for c in cfg.model.conditioner or []}
    entries |= {f"trainer.callbacks[{cb.get('name')}]": cb.get("args", {}) for cb in cfg.trainer.callbacks or []}
    for key, state, why in conditioner_states(cfg) + callback_states(cfg):
        if state == "no effect":
            out.append(NoEffect(key, entries.get(key, {}), why))
    v = cfg.video
    if v.num_workers or v.pin_memory:
        out.append(
            NoEffect(
                "dataloader_train.video_dataloader.num_workers / pin_memory",
                (v.num_workers, v.pin_memory),
                "clips are decoded once and kept in memory",
            )
        )
    return out


def wfm_problems(cfg: WfmConfig, check_paths: bool) -> list[str]:
    """Combinations that type-check but cannot run, each with what to change."""
    out = []
    mp, rl, v = cfg.model_parallel, cfg.model.rl, cfg.video
    if mp.context_parallel_size > 1:
        out.append(
            f"model_parallel.context_parallel_size = {mp.context_parallel_size}: context parallelism is not "
            "implemented for the DiT here; set it to 1 and shard with model.fsdp_shard_size / "
            "model.dp_replicate_size (each rank then holds whole videos: lower num_frames or video_size if "
            "memory is short)"
        )
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "pipeline_parallel_size"):
        if getattr(mp, key) > 1:
            out.append(
                f"model_parallel.{key} = {getattr(mp, key)}: only data parallelism (FSDP / HSDP) is "
                "implemented for the DiT; set it to 1"
            )
    if rl.min_num_conditional_frames or rl.max_num_conditional_frames:
        lo, hi = rl.min_num_conditional_frames, rl.max_num_conditional_frames
        took = [
            k
            for k in ("min_num_conditional_frames", "max_num_conditional_frames")
            if f"model.rl.{k}" in cfg.cosmos_rl_defaults
        ]
        said = f" ({' and '.join(took)}: cosmos-rl's default, the recipe leaves it out)" if took else ""
        out.append(
            f"model.rl.min_num_conditional_frames / max_num_conditional_frames = {lo} / {hi}{said}: "
            "video2world conditioning frames (cosmos-rl's trainer conditions each rollout on that many of "
            "the dataset clip's first latent frames) are not implemented; only text2world runs here: set both "
            "to 0 (--set model.rl.min_num_conditional_frames=0 --set model.rl.max_num_conditional_frames=0)"
        )
    if rl.train_on is not None:
        fixed = [k for k in rl.train_on if k != -1]
        wrong = sorted({k for k in fixed if not 0 <= k < rl.sample_steps})
        if wrong:
            out.append(
                f"model.rl.train_on: {wrong} not denoising-step indices 0 .. {rl.sample_steps - 1} "
                f"(sample_steps = {rl.sample_steps}); -1 draws a random other step"
            )
        elif len(set(fixed)) != len(fixed):
            out.append("model.rl.train_on: a step is listed twice; list each step once")
        elif len(rl.train_on) > rl.sample_steps:
            out.append(f"model.rl.train_on: {len(rl.train_on)} entries, more than sample_steps = {rl.sample_steps}")
    out += [f"{key}: {why}" for key, state, why in conditioner_states(cfg) + callback_states(cfg) if state == "refused"]
    dl = cfg.dataloader_train
    if dl.type == "web":
        out.append(
            'dataloader_train.type = "web": webdataset shards on S3 are not read here; download them into '
            'the local layout (videos/*.mp4, metas/*.txt) and set type = "local" with '
            'dataloader_train.video_dataloader.dataset_dir, or use type = "mock"'
        )
    if dl.type == "local" and not v.dataset_dir:
        out.append(
            'dataloader_train.video_dataloader.dataset_dir: required with type = "local" (a folder with '
            "videos/*.mp4 and metas/*.txt)"
        )
    if rl.algorithm == "ddrl" and rl.data_beta > 0 and dl.type != "local":
        out.append(
            'model.rl.algorithm = "ddrl" trains on dataset videos (data_beta > 0): set '
            'dataloader_train.type = "local" with a dataset_dir, or data_beta = 0'
        )
    if v.offline_text_embedding and dl.type != "local":
        out.append(
            'dataloader_train.video_dataloader.offline_text_embedding needs type = "local" (the '
            "embeddings are the dataset's text_embedding/*.pickle)"
        )
    if v.offline_text_embedding and rl.guidance > 0:
        out.append(
            "model.rl.guidance: classifier-free guidance needs the empty prompt's embedding, which "
            "offline_text_embedding datasets do not have; set guidance = 0 or offline_text_embedding = false"
        )
    if (v.num_frames - 1) % 4:
        out.append(
            f"dataloader_train.video_dataloader.num_frames = {v.num_frames}: must be 1 + 4k (the VAE "
            "compresses time 4x after the first frame), e.g. 5, 9, 93"
        )
    if any(s % 16 for s in v.video_size):
        out.append(
            f"dataloader_train.video_dataloader.video_size = {list(v.video_size)}: width and height must "
            "be multiples of 16 (VAE 8x, DiT patch 2)"
        )
    if (dl.image_dataloader or {}).get("ratio", 0):
        out.append("dataloader_train.image_dataloader.ratio: image batches are not implemented; set it to 0")
    for key in ("save_to_object_store", "load_from_object_store"):
        if (getattr(cfg.checkpoint, key) or {}).get("enabled"):
            out.append(
                f"checkpoint.{key}.enabled: checkpoints are written to the run folder; upload a run with "
                "`cosmos-train upload RUN --to s3://bucket/prefix` (or the wfm_rl flow's upload)"
            )
    out += _checkpoint_problems(cfg)
    if cfg.reward.backend == "local":
        unknown = sorted(set(cfg.reward.fns) - set(LOCAL_REWARDS))
        if unknown:
            out.append(
                f"reward.fns: {', '.join(unknown)} not a local reward function (known: "
                f'{", ".join(sorted(LOCAL_REWARDS))}); or set reward.backend = "service"'
            )
    elif cfg.reward.local_service:
        unknown = sorted(set(cfg.reward.fns) - set(handler_names()))
        if unknown:
            out.append(
                f"reward.fns: {', '.join(unknown)} not a reward-service handler (known: {', '.join(handler_names())})"
            )
        # (a name of its own: `wrong` above holds step indices)
        off_payload = sorted(
            n for n in set(cfg.reward.fns) & set(HANDLERS) if cfg.reward.payload not in HANDLERS[n].media_types
        )
        if off_payload:
            out.append(
                f'reward.payload = "{cfg.reward.payload}": the run\'s service scores {", ".join(off_payload)} '
                f'from {" / ".join(HANDLERS[off_payload[0]].media_types)} only; send payload = "video"'
            )
    if not cfg.model.model_name_or_path:
        out.append(
            "model.model_name_or_path / checkpoint.load_path: the recipe names no model (cosmos-rl's form "
            "without load_path would start the DiT from random weights); set checkpoint.load_path (cosmos-rl's "
            "key) or model.model_name_or_path to a diffusers folder or Hub id (`cosmos-train make-tiny-wfm "
            "DIR` writes a tiny one), e.g. --set checkpoint.load_path=DIR"
        )
    elif (
        check_paths
        and looks_local(cfg.model.model_name_or_path)
        and not Path(cfg.model.model_name_or_path).expanduser().exists()
    ):
        out.append(f"model.model_name_or_path: {cfg.model.model_name_or_path} does not exist")
    if check_paths and dl.type == "local" and v.dataset_dir and not Path(v.dataset_dir).expanduser().is_dir():
        out.append(f"dataloader_train.video_dataloader.dataset_dir: {v.dataset_dir} is not a folder")
    return out


def _checkpoint_problems(cfg: WfmConfig) -> list[str]:
    """[checkpoint] load_path / model_id: a diffusers folder or Hub id is the model; cosmos-rl's imaginaire .pt
    checkpoints are not read, and the refusal gives the command that converts one."""
    ck, out = cfg.checkpoint, []
    load_path = ck.load_path or ""
    pt = ck.model_id or (load_path if load_path.endswith(".pt") else "")
    if pt:
        repo = load_path if ck.model_id else "the folder"
        size = next((s for s in ("14B", "2B") if s in load_path), "2B or 14B")
        where = (
            f"`hf download {load_path} {ck.model_id}` (the file's path under the download)"
            if ck.model_id and not looks_local(load_path)
            else pt
        )
        out.append(
            f"checkpoint.{'model_id' if ck.model_id else 'load_path'} = {pt!r}: cosmos-rl's imaginaire .pt "
            f"checkpoint in {repo}; it is not read here (the model trained is a diffusers folder). Convert it "
            "once with diffusers' scripts/convert_cosmos_to_diffusers.py --transformer_type "
            f"Cosmos-2.5-Predict-Base-{size} --transformer_ckpt_path {where} --vae_type wan2.1 "
            '--save_pipeline --output_path DIR, then set checkpoint.load_path = "DIR" and '
            'checkpoint.model_id = "" (or train the Hub\'s diffusers layout, a different starting point: '
            f'load_path = "{load_path if ck.model_id else "nvidia/Cosmos-Predict2.5-2B"}" with '
            'model.model_revision = "diffusers/base/post-trained" and no model_id)'
        )
    elif load_path and cfg.model.model_name_or_path and load_path != cfg.model.model_name_or_path:
        out.append(
            f"checkpoint.load_path = {load_path!r} and model.model_name_or_path = "
            f"{cfg.model.model_name_or_path!r}: two models; the model is one diffusers folder or Hub id: set "
            "one of them (cosmos-rl's recipes: checkpoint.load_path)"
        )
    return out
