"""The world-model RL job config: cosmos-rl's `configs/wfm/*.toml` layout ([model], [model.rl], [model_parallel],
[trainer], [optimizer], [scheduler], [dataloader_train], [job], [checkpoint]) plus our [reward], [evaluation] and
[launch], as typed pydantic models.

    cosmos-train config check configs/tiny-wfm-flow-grpo.toml --set model.rl.sample_steps=8
    cosmos-train wfm-rl --config configs/tiny-wfm-flow-grpo.toml

cosmos-rl's recipes also carry tables of its imaginaire trainer ([[model.conditioner]], [[trainer.callbacks]],
[dataloader_val], [model.net], ...): they load, and each is listed as accepted with no effect, with why. The
callbacks' grad_clip clip_norm is honoured (it is the gradient clip). Settings that would change the result and
are not implemented (context parallelism, video2world conditioning frames, webdataset) are refused by name.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from cosmos_train.config import (
    JobSection,
    LaunchConfig,
    LoggingConfig,
    MinusOneOrPositive,
    ParallelismConfig,
    Section,
    _looks_local,
    apply_overrides,
    explain_errors,
    read_toml,
    unknown_keys,
)
from cosmos_train.config_compat import NoEffect
from cosmos_train.errors import ConfigError


class RLConfig(Section):
    """[model.rl]: the RL algorithm and its sampler."""

    algorithm: Literal["flow_grpo", "ddrl"] = Field(
        "flow_grpo", description="flow_grpo: clipped policy term + optional KL to the reference; ddrl: the same "
        "policy term + data_beta x the flow-matching loss on dataset videos (forward KL to the data).")
    sample_steps: int = Field(10, ge=1, le=1000, description="Denoising steps of a training rollout (SDE sampler).")
    eval_sample_steps: int | None = Field(
        None, ge=1, le=1000, description="Denoising steps of evaluation samples (ODE; default sample_steps).")
    num_generations: int = Field(4, ge=2, le=1024, description="Samples per prompt, sharing one initial noise "
                                 "(the GRPO group).")
    timestep_fraction: float = Field(0.6, gt=0, le=1, description="Fraction of a trajectory's denoising steps "
                                     "trained on per iteration (a random subset each time).")
    noise_level: float = Field(0.7, gt=0, le=2, description="SDE noise scale a: step std a*sqrt(sigma/(1-sigma)).")
    shift: float = Field(3.0, gt=0, le=100, description="Flow shift of the sigma schedule (1: uniform).")
    clip_range: float = Field(1e-4, gt=0, le=1, description="PPO ratio clip of a step's log-prob ratio "
                              "(ratios of mean per-element log-probs: ~1e-4).")
    adv_clip_max: float = Field(5.0, gt=0, le=100, description="Advantages are clipped to [-this, this].")
    kl_beta: float = Field(0.0, ge=0, description="Weight of the KL to the frozen reference model's step "
                           "(on the predicted velocity); 0: no reference model is loaded.")
    data_beta: float = Field(0.01, ge=0, description="DDRL: weight of the flow-matching loss on dataset videos.")
    guidance: float = Field(0.0, ge=0, le=50, description="Classifier-free guidance scale of evaluation samples "
                            "(0: none). Training rollouts never use guidance.")
    update_ref_every_iter: int = Field(0, ge=0, description="Copy the policy into the reference every N "
                                       "iterations (0: never).")
    min_num_conditional_frames: int = Field(0, ge=0, description="Video2world conditioning frames; only 0 "
                                            "(text2world) is implemented.")
    mu_iterations: int = Field(1, ge=1, le=64, description="Optimizer passes over each rollout batch.")
    train_micro_batch: int = Field(8, ge=1, le=4096, description="Samples per forward/backward while training (at most a rank's batch_size x "
                                   "num_generations are used).")


class WfmModelConfig(Section):
    """[model]: the diffusers folder trained and how it is sharded."""

    model_name_or_path: str = Field("", description="A diffusers folder (model_index.json, transformer/, vae/, "
                                    "text_encoder/, tokenizer/): `cosmos-train make-tiny-wfm DIR` writes one.")
    model_revision: str | None = Field(None, description="Hub revision (Cosmos-Predict2.5's diffusers layout: "
                                       "\"diffusers/base/post-trained\").")
    fsdp_shard_size: MinusOneOrPositive = Field(-1, description="Ranks one FSDP2 group shards the DiT over "
                                                "(-1: all ranks of a replica).")
    dp_replicate_size: int = Field(1, ge=1, description="HSDP replicas (dp_replicate_size x fsdp_shard_size = "
                                   "world size).")
    param_dtype: Literal["float32", "bfloat16"] = Field("float32", description="DiT compute dtype (master "
                                                        "weights and optimizer state stay float32).")
    activation_checkpointing: bool = Field(False, description="Recompute each DiT block in backward.")
    max_prompt_length: int = Field(128, ge=1, le=4096, description="Text tokens per prompt embedding, the "
                                   "system prompt's included; longer chats are cut at the end, as Predict2.5's "
                                   "pipeline does (it uses 512).")
    rl: RLConfig = Field(default_factory=RLConfig, description="The RL algorithm.")
    # cosmos-rl / imaginaire tables: loaded, said to have no effect (see NO_EFFECT_TABLES)
    conditioner: list[dict[str, Any]] | None = Field(None, description="cosmos-rl conditioner list (no effect).")
    net: dict[str, Any] | None = Field(None, description="cosmos-rl network overrides (no effect).")
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
    grad_clip_norm: float = Field(1.0, ge=0, description="Clip the total gradient norm (0: off); cosmos-rl's "
                                  "grad_clip callback's clip_norm sets it too.")
    callbacks: list[dict[str, Any]] | None = Field(None, description="cosmos-rl trainer callbacks (grad_clip is "
                                                   "read; the others have no effect).")
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
    offline_text_embedding: bool = Field(False, description="Condition on text_embedding/<stem>.pickle instead "
                                         "of encoding captions (a pickle runs code: only datasets you trust).")
    on_bad_row: Literal["fail", "skip"] = Field("fail", description="A row that cannot be used: stop naming it, "
                                                "or leave it out (counted in the report).")
    mock_prompts: int = Field(64, ge=1, le=1_000_000, description="Mock type: how many built-in prompts.")
    heldout_videos: int = Field(4, ge=0, le=100_000, description="Dataset rows kept out of training for the "
                                "held-out diffusion loss (local type).")

    @property
    def scan_settings(self) -> dict[str, Any]:
        """`wfm.data.scan_dataset`'s keyword arguments for this dataset (short videos refused at the scan)."""
        return {"dataset_dir": self.dataset_dir, "offline_text_embedding": self.offline_text_embedding,
                "on_bad_row": self.on_bad_row, "min_frames": self.num_frames}


class DataloaderTrainConfig(Section):
    """[dataloader_train]."""

    type: Literal["local", "mock", "web"] = Field("mock", description="local: dataset_dir; mock: built-in "
                                                  "prompts, no videos; web: webdataset on S3 (not implemented).")
    video_dataloader: VideoDataloaderConfig = Field(default_factory=VideoDataloaderConfig,
                                                    description="The video dataset.")
    image_dataloader: dict[str, Any] | None = Field(None, description="cosmos-rl image loader (ratio must be 0).")


class JobConfig(Section):
    """[job]: names and where the run goes."""

    project: str = Field("cosmos_train_wfm", description="wandb project.")
    group: str | None = Field(None, description="wandb group.")
    name: str | None = Field(None, description="Run name (wandb); default: the run folder's name.")
    wandb_mode: Literal["online", "offline", "disabled"] = Field("disabled", description="wandb: online, "
                                                                 "offline (files only), disabled.")
    output_dir: str = Field("outputs/wfm", description="Run folders are <output_dir>/<timestamp>/.")


class CheckpointConfig(Section):
    """[checkpoint]: resumable DCP checkpoints and the diffusers export."""

    save_iter: int = Field(50, ge=1, description="Checkpoint every this many iterations (and at the end).")
    max_keep: MinusOneOrPositive = Field(2, description="Checkpoints kept (-1: all).")
    resume: bool | str = Field(False, description="true: newest checkpoint in the run folder; or a path.")
    export_diffusers: bool = Field(True, description="Write RUN/diffusers/final (and per save) as a diffusers "
                                   "folder.")
    type: str | None = Field(None, description="cosmos-rl checkpoint type (no effect).")
    load_path: str | None = Field(None, description="cosmos-rl's base model id; use model.model_name_or_path.")
    model_id: str | None = Field(None, description="cosmos-rl checkpoint file in load_path (no effect).")
    save_to_object_store: dict[str, Any] | None = Field(None, description="cosmos-rl S3 save (enabled must be "
                                                        "false; `cosmos-train upload` uploads a run).")
    load_from_object_store: dict[str, Any] | None = Field(None, description="cosmos-rl S3 load (enabled must "
                                                          "be false).")


class RewardConfig(Section):
    """[reward]: what scores a generated video."""

    fns: dict[str, float] = Field({"brightness": 1.0}, min_length=1, description="Reward name -> weight; the "
                                  "total is the weighted sum (local functions or the service's handlers).")
    backend: Literal["local", "service"] = Field("local", description="local: functions in the trainer; "
                                                 "service: the reward service over HTTP.")
    local_service: bool = Field(False, description="service: start one for the run (else reach the one that "
                                "WFM_REWARD_ENQUEUE_URL / WFM_REWARD_FETCH_URL / WFM_REWARD_TOKEN name).")
    payload: Literal["video", "latent"] = Field("video", description="service: send decoded pixels "
                                                "[B,3,T,H,W] uint8, or the latents [B,C,T,H,W].")
    batch_size: int = Field(16, ge=1, le=65536, description="service: videos per request.")
    timeout_s: float = Field(30.0, gt=0, le=3600, description="service: seconds one HTTP call may take.")
    result_timeout_s: float = Field(600.0, gt=0, le=86400, description="service: seconds to wait for scores.")


class EvaluationConfig(Section):
    """[evaluation]: fixed prompts and noise, scored before, during and after training."""

    every_iter: int = Field(0, ge=0, description="Evaluate every N iterations (0: before and after only).")
    num_prompts: int = Field(8, ge=1, le=4096, description="Evaluation prompts (first of the dataset/mock).")
    seed: int = Field(1234, ge=0, description="Seed of the evaluation noise (the same for every evaluation).")


# the no-effect tables, each with why
NO_EFFECT_TABLES: dict[str, str] = {
    "model.conditioner": "imaginaire's conditioner list: conditioning here is the prompt embedding (and no "
                         "conditioning frames)",
    "model.net": "network overrides: the DiT's architecture is its folder's transformer/config.json",
    "model.text_encoder_class": "the text encoder is the folder's text_encoder/",
    "model.text_encoder_config": "the text encoder is the folder's text_encoder/",
    "trainer.grad_scaler_args": "no fp16 loss scaling (float32 / bfloat16 only)",
    "dataloader_val": "evaluation uses [evaluation] (fixed prompts and noise) and held-out dataset rows",
    "dataloader_train.image_dataloader": "video only",
    "checkpoint.type": "checkpoints are torch.distributed.checkpoint folders",
    "checkpoint.model_id": "the model is a diffusers folder (model.model_name_or_path)",
}


class WfmConfig(JobSection):
    """A world-model RL job."""

    model: WfmModelConfig = Field(default_factory=WfmModelConfig, description="The model and its sharding.")
    model_parallel: ModelParallelConfig = Field(default_factory=ModelParallelConfig,
                                                description="Model parallelism (1s only).")
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="The loop.")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="AdamW.")
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig, description="Learning-rate factors.")
    dataloader_train: DataloaderTrainConfig = Field(default_factory=DataloaderTrainConfig,
                                                    description="Training prompts / videos.")
    dataloader_val: dict[str, Any] | None = Field(None, description="cosmos-rl validation loader (no effect).")
    job: JobConfig = Field(default_factory=JobConfig, description="Names, wandb, output folder.")
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig, description="Checkpoints, export.")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="The reward.")
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig, description="Before/after scoring.")
    launch: LaunchConfig = Field(default_factory=LaunchConfig, description="How the processes are started.")

    @property
    def video(self) -> VideoDataloaderConfig:
        return self.dataloader_train.video_dataloader

    @property
    def logging(self) -> LoggingConfig:
        """[job] as the metrics logger's settings (console always; wandb unless wandb_mode = "disabled")."""
        loggers: list[Any] = ["console"] + (["wandb"] if self.job.wandb_mode != "disabled" else [])
        return LoggingConfig(logger=loggers, project_name=self.job.project, experiment_name=self.job.name,
                             group_name=self.job.group, log_interval=self.trainer.logging_iter)

    @property
    def parallelism(self) -> ParallelismConfig:
        """[model] fsdp_shard_size / dp_replicate_size as the mesh's settings."""
        return ParallelismConfig(dp_shard_size=self.model.fsdp_shard_size,
                                 dp_replicate_size=self.model.dp_replicate_size)

    @property
    def run_root(self) -> str:
        return self.job.output_dir

    @property
    def policy_type(self) -> str:
        return "wfm_rl"

    def grad_clip(self) -> float:
        """trainer.grad_clip_norm, or the grad_clip callback's clip_norm when the recipe has one."""
        for cb in self.trainer.callbacks or []:
            if cb.get("name") == "grad_clip" and "clip_norm" in (cb.get("args") or {}):
                return float(cb["args"]["clip_norm"])
        return self.trainer.grad_clip_norm


def load_wfm_config(path: str | Path | None = None, overrides: Iterable[str] = (),
                    env: Mapping[str, str] | None = None, check_paths: bool = True) -> WfmConfig:
    """Parse, override (COSMOS_TRAIN__* env, then --set) and validate; every problem in one ConfigError."""
    raw, source = read_toml(path)
    return wfm_config_from_dict(raw, overrides, os.environ if env is None else env, source, check_paths)


def wfm_config_from_dict(raw: dict[str, Any], overrides: Iterable[str] = (), env: Mapping[str, str] | None = None,
                         source: str | None = None, check_paths: bool = False) -> WfmConfig:
    raw = copy.deepcopy(raw)
    apply_overrides(raw, overrides, env or {})
    problems = unknown_keys(raw, WfmConfig)
    if problems:
        raise ConfigError(problems, source)
    try:
        cfg = WfmConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(explain_errors(e, WfmConfig), source) from None
    cfg._no_effect = _no_effect(cfg)
    problems = wfm_problems(cfg, check_paths)
    if problems:
        raise ConfigError(problems, source)
    return cfg


def _no_effect(cfg: WfmConfig) -> list[NoEffect]:
    out = []
    for key, why in NO_EFFECT_TABLES.items():
        node: Any = cfg
        for part in key.split("."):
            node = getattr(node, part, None)
        if node is not None:
            out.append(NoEffect(key, node, why))
    for cb in cfg.trainer.callbacks or []:
        if cb.get("name") != "grad_clip":
            out.append(NoEffect(f"trainer.callbacks[{cb.get('name')}]", cb.get("args", {}),
                                "imaginaire trainer callback: metrics go to metrics.jsonl / wandb, samples to the "
                                "run's artifacts"))
    v = cfg.video
    if v.num_workers or v.pin_memory:
        out.append(NoEffect("dataloader_train.video_dataloader.num_workers / pin_memory",
                            (v.num_workers, v.pin_memory), "clips are decoded once and kept in memory"))
    return out


def wfm_problems(cfg: WfmConfig, check_paths: bool) -> list[str]:
    """Combinations that type-check but cannot run, each with what to change."""
    out = []
    mp, rl, v = cfg.model_parallel, cfg.model.rl, cfg.video
    if mp.context_parallel_size > 1:
        out.append(f"model_parallel.context_parallel_size = {mp.context_parallel_size}: context parallelism is not "
                   "implemented for the DiT here; set it to 1 and shard with model.fsdp_shard_size / "
                   "model.dp_replicate_size (each rank then holds whole videos: lower num_frames or video_size if "
                   "memory is short)")
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "pipeline_parallel_size"):
        if getattr(mp, key) > 1:
            out.append(f"model_parallel.{key} = {getattr(mp, key)}: only data parallelism (FSDP / HSDP) is "
                       "implemented for the DiT; set it to 1")
    if rl.min_num_conditional_frames:
        out.append("model.rl.min_num_conditional_frames: video2world conditioning frames are not implemented; set "
                   "it to 0 (text2world)")
    dl = cfg.dataloader_train
    if dl.type == "web":
        out.append("dataloader_train.type = \"web\": webdataset shards on S3 are not read here; download them into "
                   "the local layout (videos/*.mp4, metas/*.txt) and set type = \"local\" with "
                   "dataloader_train.video_dataloader.dataset_dir, or use type = \"mock\"")
    if dl.type == "local" and not v.dataset_dir:
        out.append("dataloader_train.video_dataloader.dataset_dir: required with type = \"local\" (a folder with "
                   "videos/*.mp4 and metas/*.txt)")
    if rl.algorithm == "ddrl" and rl.data_beta > 0 and dl.type != "local":
        out.append("model.rl.algorithm = \"ddrl\" trains on dataset videos (data_beta > 0): set "
                   "dataloader_train.type = \"local\" with a dataset_dir, or data_beta = 0")
    if v.offline_text_embedding and dl.type != "local":
        out.append("dataloader_train.video_dataloader.offline_text_embedding needs type = \"local\" (the "
                   "embeddings are the dataset's text_embedding/*.pickle)")
    if v.offline_text_embedding and rl.guidance > 0:
        out.append("model.rl.guidance: classifier-free guidance needs the empty prompt's embedding, which "
                   "offline_text_embedding datasets do not have; set guidance = 0 or offline_text_embedding = false")
    if (v.num_frames - 1) % 4:
        out.append(f"dataloader_train.video_dataloader.num_frames = {v.num_frames}: must be 1 + 4k (the VAE "
                   "compresses time 4x after the first frame), e.g. 5, 9, 93")
    if any(s % 16 for s in v.video_size):
        out.append(f"dataloader_train.video_dataloader.video_size = {list(v.video_size)}: width and height must "
                   "be multiples of 16 (VAE 8x, DiT patch 2)")
    if (dl.image_dataloader or {}).get("ratio", 0):
        out.append("dataloader_train.image_dataloader.ratio: image batches are not implemented; set it to 0")
    for key in ("save_to_object_store", "load_from_object_store"):
        if (getattr(cfg.checkpoint, key) or {}).get("enabled"):
            out.append(f"checkpoint.{key}.enabled: checkpoints are written to the run folder; upload a run with "
                       "`cosmos-train upload RUN --to s3://bucket/prefix` (or the wfm_rl flow's upload)")
    if cfg.checkpoint.load_path and cfg.checkpoint.load_path != cfg.model.model_name_or_path:
        out.append("checkpoint.load_path: the model here is the diffusers folder model.model_name_or_path; set that "
                   "instead (cosmos-rl's .pt checkpoints are not read)")
    if cfg.reward.backend == "local":
        from cosmos_train.wfm.rewards import LOCAL_REWARDS

        unknown = sorted(set(cfg.reward.fns) - set(LOCAL_REWARDS))
        if unknown:
            out.append(f"reward.fns: {', '.join(unknown)} not a local reward function (known: "
                       f"{', '.join(sorted(LOCAL_REWARDS))}); or set reward.backend = \"service\"")
    elif cfg.reward.local_service:
        from cosmos_train.reward_service.handlers import HANDLERS, handler_names

        unknown = sorted(set(cfg.reward.fns) - set(handler_names()))
        if unknown:
            out.append(f"reward.fns: {', '.join(unknown)} not a reward-service handler (known: "
                       f"{', '.join(handler_names())})")
        wrong = sorted(n for n in set(cfg.reward.fns) & set(HANDLERS) if cfg.reward.payload not in HANDLERS[n].media_types)
        if wrong:
            out.append(f"reward.payload = \"{cfg.reward.payload}\": the run's service scores {', '.join(wrong)} from "
                       f"{' / '.join(HANDLERS[wrong[0]].media_types)} only; send payload = \"video\"")
    if not cfg.model.model_name_or_path:
        out.append("model.model_name_or_path: required (a diffusers folder; `cosmos-train make-tiny-wfm DIR` writes "
                   "a tiny one)")
    elif check_paths and _looks_local(cfg.model.model_name_or_path) and \
            not Path(cfg.model.model_name_or_path).expanduser().exists():
        out.append(f"model.model_name_or_path: {cfg.model.model_name_or_path} does not exist")
    if check_paths and dl.type == "local" and v.dataset_dir and not Path(v.dataset_dir).expanduser().is_dir():
        out.append(f"dataloader_train.video_dataloader.dataset_dir: {v.dataset_dir} is not a folder")
    return out
