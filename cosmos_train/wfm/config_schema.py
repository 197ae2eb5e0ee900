"""The world-model RL job config as one typed model, `WfmConfig`: its tables (wfm/config_sections.py) and what the
shared trainer loop, the launcher and the run folder read of it under the names the vision-language `Config` has
(parallelism, logging, ckpt, run_root, policy_type). wfm/config.py loads it."""

from __future__ import annotations

from typing import Any

from pydantic import Field, PrivateAttr

from cosmos_train.config.base import JobSettings
from cosmos_train.config.paths import run_cache_root
from cosmos_train.config.schema_launch import LaunchConfig, LoggingConfig
from cosmos_train.config.schema_model import ParallelismConfig
from cosmos_train.config.schema_train import CheckpointConfig
from cosmos_train.wfm.config_sections import (
    DataloaderTrainConfig,
    JobConfig,
    ModelParallelConfig,
    OptimizerConfig,
    RewardConfig,
    SchedulerConfig,
    TrainerConfig,
    VideoDataloaderConfig,
    WfmCheckpointConfig,
    WfmEvaluationConfig,
    WfmModelConfig,
)


class WfmConfig(JobSettings):
    """A world-model RL job."""

    model: WfmModelConfig = Field(default_factory=WfmModelConfig, description="The model and its sharding.")
    model_parallel: ModelParallelConfig = Field(
        default_factory=ModelParallelConfig, description="Model parallelism (context parallel; the rest 1s only)."
    )
    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="The loop.")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig, description="AdamW.")
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig, description="Learning-rate factors.")
    dataloader_train: DataloaderTrainConfig = Field(
        default_factory=DataloaderTrainConfig, description="Training prompts / videos."
    )
    dataloader_val: dict[str, Any] | None = Field(None, description="cosmos-rl validation loader (no effect).")
    job: JobConfig = Field(default_factory=JobConfig, description="Names, wandb, output folder.")
    checkpoint: WfmCheckpointConfig = Field(default_factory=WfmCheckpointConfig, description="Checkpoints, export.")
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
        """[model] fsdp_shard_size / dp_replicate_size and [model_parallel] context_parallel_size as the mesh's
        settings."""
        return ParallelismConfig(
            dp_shard_size=self.model.fsdp_shard_size,
            dp_replicate_size=self.model.dp_replicate_size,
            cp_size=self.model_parallel.context_parallel_size,
        )

    @property
    def ckpt(self) -> CheckpointConfig:
        """[checkpoint] as the checkpoint settings every trainer reads (a job's [train.ckpt]): a synchronous
        checkpoint every save_iter iterations and at the end, max_keep kept. The export is the diffusers folder
        (export_diffusers, after the last iteration), never safetensors."""
        ck = self.checkpoint
        return CheckpointConfig(
            save_freq=ck.save_iter, save_mode="sync", max_keep=ck.max_keep, export_safetensors=False
        )

    @property
    def run_root(self) -> str:
        """Where run folders go: job.output_dir, or its local working copy when it is s3://."""
        return str(run_cache_root(self.job.output_dir))

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
