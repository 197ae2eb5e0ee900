"""The job config: the cosmos-rl TOML schema users already write, as typed pydantic models. `Config()` alone is
valid: the reference framework's defaults. Its tables by topic: schema_train ([train], [train.ckpt]),
schema_run_health ([train.run_health]), schema_policy ([train.train_policy]), schema_model ([policy]),
schema_rollout ([rollout], [validation]), schema_launch ([logging], [launch])."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from cosmos_train.config.base import JobSettings
from cosmos_train.config.paths import run_cache_root
from cosmos_train.config.schema_launch import LaunchConfig, LoggingConfig
from cosmos_train.config.schema_model import ParallelismConfig, PolicyConfig
from cosmos_train.config.schema_rollout import RolloutConfig, ValidationConfig
from cosmos_train.config.schema_train import TrainConfig


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
