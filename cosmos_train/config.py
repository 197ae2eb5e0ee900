"""The job config: the cosmos-rl TOML schema users already write, as typed pydantic models.

    cosmos-train config check configs/tiny-sft.toml --set train.epoch=2

`load_config(path, overrides)` is the one way in: it reads the TOML, maps the seed guides' aliases
onto their canonical keys, applies `COSMOS_TRAIN__SECTION__KEY=value` environment variables and then
`--set key.path=value` overrides (in that order, later wins), and validates. Every problem is
collected into one `ConfigError` that names the full key path (and the closest valid key for a typo).
The resolved config is written into each run folder as `config.toml`; every process reads that file.
"""

from __future__ import annotations

import copy
import difflib
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import annotated_types
import tomli_w
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from cosmos_train.atomic import write_atomic
from cosmos_train.config_compat import INERT, NoEffect, rule_names_under, take_foreign_keys
from cosmos_train.data.vision_settings import VisionSettings
from cosmos_train.errors import ConfigError

ENV_PREFIX = "COSMOS_TRAIN__"


class Section(BaseModel):
    """Base of every TOML table: unknown keys are errors, assignment is validated, floats are finite."""

    # nan and inf parse from TOML (`optm_lr = nan`) and pass every range check; no key means them.
    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, populate_by_name=True, allow_inf_nan=False
    )


# -1 is the reference framework's "all" / "off" for these counts; 0 has no meaning.
MinusOneOrPositive = Literal[-1] | Annotated[int, Field(ge=1)]


# ----------------------------------------------------------------------------------------- data
class VisionConfig(Section):
    """Per-media vision settings (qwen-vl-utils names), applied to every video/image of the dataset
    unless the row itself sets them."""

    fps: float | None = Field(None, gt=0, description="Frames sampled per second of video (default 2.0).")
    nframes: int | None = Field(None, ge=1, description="Exact frame count to sample; exclusive with fps.")
    min_frames: int | None = Field(None, ge=1, description="Lower bound on fps-sampled frames (default 4).")
    max_frames: int | None = Field(None, ge=1, description="Upper bound on fps-sampled frames (default 768).")
    max_pixels: int | None = Field(None, ge=1, description="Max pixels per frame after resize.")
    min_pixels: int | None = Field(None, ge=1, description="Min pixels per frame after resize.")
    total_pixels: int | None = Field(None, ge=1, description="Pixel budget over all frames of a clip.")
    resized_height: int | None = Field(None, ge=1, description="Fixed height in pixels (rounded to 28).")
    resized_width: int | None = Field(None, ge=1, description="Fixed width in pixels (rounded to 28).")
    video_start: float | None = Field(None, ge=0, description="Clip start, seconds.")
    video_end: float | None = Field(None, gt=0, description="Clip end, seconds (after video_start).")

    @model_validator(mode="after")
    def _consistent(self) -> VisionConfig:
        # The rules the data pipeline applies to every media part (fps xor nframes, min <= max,
        # start < end ...), checked here so a bad default fails at `config check`, not on row 1.
        VisionSettings(**self.as_part_defaults())
        return self

    def as_part_defaults(self) -> dict[str, Any]:
        """The settings that are set, as keys of a message part."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class DatasetConfig(Section):
    """Where the rows come from. `source = "auto"` picks by what `name` points at."""

    name: str = Field("", description="Hub id, or a local folder/file (load_from_disk, json, parquet, ours).")
    subset: str | None = Field(None, description="Dataset config/subset (e.g. robovqa).")
    revision: str | None = Field(None, description="Hub revision.")
    split: str | list[str] = Field("train", description="Split name, or a list concatenated in order.")
    test_size: float | int | None = Field(
        None, gt=0, description="Hold out this fraction (<1) or count (>=1) of rows as the validation split."
    )
    local_dir: str | None = Field(None, description="Where hub files are downloaded/extracted to.")
    source: Literal["auto", "hf", "cosmos", "llava", "video_folder", "synthetic", "script"] = Field(
        "auto", description="Which dataset source reads this dataset."
    )
    annotation_path: str | None = Field(None, description="LLaVA json annotation file.")
    media_path: str = Field("", description="LLaVA media root ('' when paths are absolute).")
    video_suffix: str = Field("", description="Video folder: file suffix after the id, e.g. '.camera_front_wide_120fov'.")
    caption_prompt: str = Field(
        "Describe what you see in this video.", description="Video folder: the user prompt for captions."
    )
    on_bad_row: Literal["fail", "skip"] = Field(
        "fail", description="A row that does not validate: stop with its file/row named, or skip and count it."
    )
    cache_dir: str | None = Field(
        None,
        description="Folder for a disk cache of decoded, resized clips keyed by file content and vision "
        "settings, so later epochs and runs do not decode again (unset: off). Shared safely by ranks and runs. "
        "Images held inside dataset rows are written under <cache_dir>/embedded_media (unset: $COSMOS_CACHE).",
    )
    vision: VisionConfig = Field(
        default_factory=VisionConfig, description="Vision settings for every video/image of this dataset."
    )
    allow_media_outside_root: bool = Field(
        False,
        description="Read media whose path (symlinks followed) lies outside the dataset's media roots: media_path, "
        "the annotation / data file's folder, local_dir, the video folder or extracted clips. Off: such a row "
        "is a bad row (media_outside_root), so a row like ../../etc/x.mp4 reads nothing it should not.",
    )


class OverlongPenaltyConfig(Section):
    """[train.train_policy.overlong_reward]: DAPO's soft penalty on responses near the length limit."""

    enable_overlong_penalty: bool = Field(False, description="Soft linear penalty near max length (DAPO).")
    buffer_length: int = Field(
        4096, ge=1, description="Tokens before rollout.max_response_length where the penalty ramps up."
    )
    penalty_factor: float = Field(1.0, ge=0, description="Penalty subtracted at max_response_length.")


class RemoteRewardFn(Section):
    """One reward the remote service computes, and how its score is combined."""

    name: str = Field(description="Reward name as the service knows it.")
    weight: float = Field(1.0, description="Multiplier on this reward's score (negative makes it a penalty).")
    score_key: str | None = Field(
        None, description="Key of the score in the service's reply (default: name); 'a+b' sums two scores."
    )
    clip_min: float | None = Field(-5.0, description="Scores below this are raised to it (unset: no floor).")
    clip_max: float | None = Field(5.0, description="Scores above this are lowered to it (unset: no ceiling).")

    @model_validator(mode="after")
    def _clip_order(self) -> RemoteRewardFn:
        if self.clip_min is not None and self.clip_max is not None and self.clip_min > self.clip_max:
            raise ValueError(f"clip_min ({self.clip_min}) must be <= clip_max ({self.clip_max})")
        return self


class RemoteRewardConfig(Section):
    """[train.train_policy.remote_reward]: rewards scored by an HTTP service."""

    scale: float = Field(
        1.0, gt=0, description="Multiplier on the service's total: scale x clip(sum of weight x score, "
        "reward_clip_min, reward_clip_max)."
    )
    reward_fns: list[RemoteRewardFn] = Field(default_factory=list, description="The rewards to ask for.")
    reward_clip_min: float | None = Field(
        -5.0, description="The weighted sum of the service's scores is raised to this (unset: no floor)."
    )
    reward_clip_max: float | None = Field(
        5.0, description="The weighted sum of the service's scores is lowered to this (unset: no ceiling)."
    )

    @model_validator(mode="after")
    def _total_clip_order(self) -> RemoteRewardConfig:
        lo, hi = self.reward_clip_min, self.reward_clip_max
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"reward_clip_min ({lo}) must be <= reward_clip_max ({hi})")
        return self
    batch_size: int = Field(8, ge=1, le=65536, description="Items per request to the reward service.")
    local_service: bool = Field(
        False,
        description="The grpo flow starts `cosmos-train reward-service` on loopback for this run (a fresh token, "
        "a free port, RUN/logs/reward_service.log), points the trainer at it and stops it at the end; "
        "leave enqueue_url / fetch_url unset.")
    enqueue_url: str | None = Field(
        None, description="The service's enqueue URL, e.g. http://127.0.0.1:8080/api/reward/enqueue "
        "(unset: env REMOTE_REWARD_ENQUEUE_URL).")
    fetch_url: str | None = Field(
        None, description="The service's pull URL, e.g. http://127.0.0.1:8080/api/reward/pull "
        "(unset: env REMOTE_REWARD_FETCH_URL).")
    token_secret: str | None = Field(
        None, min_length=1,
        description="Name of a Prefect Secret block holding the service's token: the flow reads it and hands "
        "it to the ranks as token_env (unset: token_env comes from the environment as it is).")
    token_env: str = Field(
        "REMOTE_REWARD_TOKEN", min_length=1,
        description="Name of the environment variable holding the service's token (the token itself never "
        "goes in the TOML; unset variable: no Authorization header).")
    timeout_s: float = Field(30.0, gt=0, le=3600, description="Seconds one HTTP call may take.")
    max_retries: int = Field(
        8, ge=0, le=100,
        description="Retries of a call that failed to connect, timed out, or got 429 / 502 / 503 / 504 "
        "(exponential backoff with jitter, Retry-After honoured).")
    backoff_s: float = Field(0.5, gt=0, le=600, description="First retry delay; doubles each retry.")
    backoff_max_s: float = Field(30.0, gt=0, le=3600, description="Longest delay between two retries.")
    poll_interval_s: float = Field(0.2, gt=0, le=600, description="Seconds between pulls of a result not ready.")
    result_timeout_s: float = Field(
        600.0, gt=0, le=86400, description="Seconds to wait for one request's scores before failing the step.")


class TrainPolicyConfig(Section):
    """[train.train_policy]: SFT or GRPO, and the dataset it trains on."""

    type: Literal["sft", "grpo"] | None = Field(
        None, description="sft | grpo; inferred as grpo when a GRPO-only key is present, else sft."
    )
    dataset: DatasetConfig = Field(default_factory=DatasetConfig, description="The training dataset.")
    # --- SFT
    micro_batch: int = Field(
        2, ge=1,
        description="Samples (GRPO: completions) per micro-batch: gradient accumulation splits each "
        "optimizer step's batch into these (GRPO: each normalised by its own tokens, as cosmos-rl's mini-batches; "
        "see loss_denominator). Alias: mini_batch (cosmos-rl's name).",
    )
    conversation_column_name: str = Field("conversations", description="Column holding the chat.")
    system_prompt: str | None = Field(None, description="System turn prepended to rows that have none.")
    dataloader_shuffle: bool = Field(True, description="Shuffle rows every epoch.")
    dataloader_seed: int = Field(0, ge=0, description="Seed of the shuffle (the epoch is added).")
    dataloader_num_workers: int = Field(
        0, ge=0, description="DataLoader worker processes decoding video (0: inline)."
    )
    dataloader_prefetch_factor: int | None = Field(
        None, ge=1, description="Batches prefetched per worker (default 2; needs dataloader_num_workers > 0)."
    )
    dataloader_drop_last: bool = Field(True, description="Drop the last incomplete batch of an epoch.")
    enable_dataset_cache: bool = Field(
        False,
        description="Keep decoded, resized clips in a disk cache so later epochs and runs do not decode again: "
        "dataset.cache_dir when set, else $COSMOS_CACHE/clip_cache (cosmos-rl's key; dataset.cache_dir alone "
        "also turns it on).",
    )
    overlength: Literal["error", "truncate", "skip"] = Field(
        "error",
        description="A sample longer than model_max_length: stop naming it, cut its text end, or skip it.",
    )
    # --- GRPO
    variant: Literal["grpo", "gspo", "dapo"] = Field("grpo", description="Policy-gradient variant.")
    prompt_column_name: str | None = Field(None, description="Column holding the prompt.")
    response_column_name: str | None = Field(
        None, description="Column holding each row's reference answer, which rewards score against (unset or "
        "'': the first of reference, answer, correct_answer that the row has)."
    )
    reward_function: str | list[str] | dict[str, float] = Field(
        default_factory=lambda: ["single_choice"], description="Reward name(s), or {name = weight}."
    )
    temperature: float = Field(1.0, ge=0, description="Rollout sampling temperature (0: greedy).")
    epsilon_low: float = Field(
        0.2, ge=0, lt=1, description="PPO clip below 1: the ratio is kept >= 1 - epsilon_low."
    )
    epsilon_high: float = Field(0.2, ge=0, description="PPO clip above 1 (DAPO clip-higher: 0.28).")
    lower_bound_ratio: float = Field(
        3.0, gt=1, description="Dual-clip bound c (> 1) for negative advantages."
    )
    loss_type: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-sum"] = Field(
        "token-mean", description="Loss aggregation over each micro-batch (cosmos-rl's mini-batch): the mean over "
        "its completion tokens, the mean over its completions of each one's token mean or token sum, or the sum."
    )
    unbiased_loss_max_tokens: int | None = Field(
        None, ge=1, description="Dr.GRPO: with loss_type = 'seq-mean-token-mean', divide each completion's token "
        "sum by this constant instead of its length (unset: its length)."
    )
    loss_denominator: Literal["micro_batch", "update"] = Field(
        "micro_batch",
        description="micro_batch (cosmos-rl's): each micro-batch's loss is normalised by its own tokens (or "
        "completions), weighted by its share of the rank's completions, and ranks are averaged. update (ours): "
        "one denominator for the whole optimizer update on every rank, so every token (token-mean) or "
        "completion weighs the same whichever micro-batch or rank holds it (DAPO's token-level loss); for "
        "seq-mean-token-sum the denominator is completions x rollout.max_response_length.",
    )
    balance_dp_token: bool | None = Field(
        None,
        description="GRPO with loss_type = 'token-mean': normalise each micro-batch by its tokens summed over every "
        "data-parallel rank, so every rank's tokens weigh the same (cosmos-rl's key; unset: false for GRPO, true "
        "for SFT, cosmos-rl's defaults). SFT always normalises over the step's tokens on all ranks.",
    )
    kl_beta: float = Field(
        0.0, ge=0, description="Weight of the k3 KL to the frozen reference, each token's term clamped to "
        "[-10, 10] (0.1 held Cosmos-Reason1-7B)."
    )
    unbiased_kl_estimate: bool = Field(
        False, description="Weight each token's k3 KL by the ratio exp(logp - old logp) (an unbiased estimate "
        "when the policy has moved from the sampler's)."
    )
    mu_iterations: int = Field(
        1, ge=1, description="Optimizer updates per step, each a pass over the step's completions (old log-probs "
        "from the first pass).")
    entropy_coeff: float = Field(
        0.0, ge=0, description="Weight of the entropy bonus: the loss minus this times the mean entropy of each "
        "micro-batch's completion tokens (with gradient; 0: logged only)."
    )
    allowed_outdated_steps: int = Field(
        4, ge=0,
        description="Drop rollouts older than this many weight versions (0: only the current weights)."
    )
    on_policy: bool = Field(
        False,
        description="true: fully synchronous, each step sampled in the trainer's process with the newest "
        "weights (colocated engine). false: a rollout worker process per rank samples ahead of training "
        "(max_inflight_steps), its batches at most allowed_outdated_steps weight versions old; with "
        "rollout.parallelism.tp_size > 1 the colocated tensor-parallel engine is used, synchronously.")
    max_inflight_steps: int | None = Field(
        None, ge=0,
        description="Asynchronous rollout: batches sampled ahead of the one being trained (unset: 1; "
        "0: none ahead, each batch sampled after the previous step's weights arrive)."
    )
    overlong_reward: OverlongPenaltyConfig = Field(
        default_factory=OverlongPenaltyConfig, description="Soft penalty on overlong responses."
    )
    use_remote_reward: bool = Field(False, description="Score with the [remote_reward] service.")
    remote_reward: RemoteRewardConfig = Field(
        default_factory=RemoteRewardConfig, description="The remote reward service."
    )
    old_logprobs: Literal["recompute", "engine"] = Field(
        "recompute",
        description="Log-probs the PPO ratio is measured against: recomputed by the trainer before the "
        "first update (engine log-probs then only feed behav_imp_weight_cap), or the engine's as sampled. "
        "With mu_iterations = 1 and one mini-batch per rollout the trainer's own forward gives them for free.",
    )
    scale_rewards: bool = Field(
        True, description="Divide each group's advantages by its reward std (GRPO); false: r - mean (Dr.GRPO). "
        "cosmos-rl's unbiased_advantage = true is scale_rewards = false."
    )
    advantage_std: Literal["population", "sample"] = Field(
        "population",
        description="The group std advantages are divided by: population (numpy's np.std, cosmos-rl's) or sample "
        "(torch.std, TRL's: sqrt(n / (n - 1)) larger, so advantages are that much smaller).",
    )
    clip_advantages: bool = Field(
        False, description="Clip advantages to [advantage_low, advantage_high] (ours; cosmos-rl's language-model "
        "GRPO trainer does not clip, its diffusion trainers do). A group of n can reach sqrt(n - 1).",
    )
    advantage_low: float = Field(
        -5.0, le=0, description="With clip_advantages: advantages below this are raised to it.")
    advantage_high: float = Field(
        5.0, ge=0, description="With clip_advantages: advantages above this are lowered to it.")
    min_filter_prefix_tokens: int | None = Field(
        None, ge=1,
        description="Within a group, completions that share a longest common prefix of at least this many "
        "tokens but got different rewards leave that prefix out of the loss (it cannot be credited or "
        "blamed); a completion that is all prefix keeps its tokens (unset: off).",
    )
    filter_reward_metric: str | list[str] = Field(
        default_factory=list,
        description="variant = 'dapo': the reward part(s) whose equality across a group drops it in dynamic "
        "sampling (empty: the total reward).",
    )
    dynamic_sampling_max_rounds: int = Field(
        2, ge=0,
        description="variant = 'dapo': groups whose rewards are all equal are dropped and new prompts "
        "sampled, at most this many extra rounds per step (what stays short is logged). cosmos-rl's "
        "max_retry_for_on_policy sets it (<= 0: until the batch is full).",
    )
    mask_truncated_completions: bool = Field(
        False, description="Leave completions cut at rollout.max_response_length out of the loss (DAPO)."
    )
    behav_imp_weight_cap: float | None = Field(
        None, gt=0,
        description="With use_decoupled_loss: tokens whose trainer/sampler probability ratio exceeds this cap are "
        "left out of the loss (weight 0; e.g. 2-3; unset: no cap). No effect without use_decoupled_loss."
    )
    use_decoupled_loss: bool = Field(
        False,
        description="Decoupled PPO loss: the ratio is against the trainer's old log-probs and each token is "
        "weighted by exp(old - sampler log-prob), the engine/trainer importance ratio."
    )


_GRPO_ONLY_KEYS = ("temperature", "epsilon_low", "epsilon_high", "kl_beta", "use_remote_reward")


class CheckpointConfig(Section):
    """[train.ckpt]: resumable checkpoints and safetensors exports."""

    enable_checkpoint: bool = Field(True, description="Save resumable checkpoints.")
    save_freq: int = Field(100, ge=1, description="Save every this many optimizer steps.")
    save_mode: Literal["async", "sync"] = Field("async", description="async overlaps the write with training.")
    max_keep: MinusOneOrPositive = Field(
        2, description="Checkpoints kept, oldest removed first (-1 keeps all)."
    )
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
        False, description="Upload to S3: final = the final export after training; all = every export and "
        "checkpoint as it is written (in the background), then the final one."
    )
    s3_bucket: str | None = Field(None, description="S3 bucket the upload goes to.")
    s3_prefix: str = Field(
        "outputs", description="Key prefix inside s3_bucket; a run's files go under <s3_prefix>/<run folder name>/."
    )
    s3_endpoint_url: str | None = Field(
        None, description="Endpoint of an S3-compatible store (unset: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, "
        "PROD_S3_CHECKPOINT_ENDPOINT_URL or AWS)."
    )
    s3_credentials_secret: str | None = Field(
        None, description="Name of a Prefect Secret block holding JSON {access_key_id, secret_access_key, "
        "[session_token, endpoint_url, region]} (unset: PROD_S3_CHECKPOINT_* or the AWS_* environment)."
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

    optm_name: Literal["AdamW", "Adam"] = Field("AdamW", description="Optimizer.")
    optm_lr: float = Field(1e-6, gt=0, description="Peak learning rate.")
    optm_impl: Literal["fused", "foreach", "for-loop"] = Field(
        "fused", description="AdamW implementation: one fused kernel (CUDA and CPU), foreach, or a plain loop."
    )
    optm_weight_decay: float = Field(0.01, ge=0, description="Decoupled weight decay (0: none).")
    optm_betas: tuple[Beta, Beta] = Field((0.9, 0.999), description="Adam (beta1, beta2), each in [0, 1).")
    optm_warmup_steps: int | float = Field(
        20, ge=0, description="Linear warmup in trainer steps (an integer), or a fraction of the run's steps (a "
        "float <= 1.0, rounded down); at most the run (0: none)."
    )
    optm_warmup_start_factor: float = Field(
        0.0, ge=0, le=1,
        description="Warmup ramps the factor from this to 1: step s of w gets f + (1 - f) * s / (w - 1), so the "
        "first step trains at f * optm_lr (cosmos-rl's schedule).",
    )
    optm_decay_ratio: float | None = Field(
        None, ge=0, le=1,
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
        "float32", description="Dtype the weights (and Adam's moments) are held and updated in; bfloat16 halves "
        "their memory at the cost of update precision. Exports keep it."
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
        8, ge=1,
        description="SFT: samples per model replica per step (its dp_shard ranks split them). GRPO: completions per "
        "replica per step (cosmos-rl's meaning: train_batch_per_replica / rollout.n_generation prompts), a multiple "
        "or a divisor of n_generation; below it a group trains as n_generation / train_batch_per_replica steps."
    )
    epoch: int = Field(1, ge=1, description="Passes over the training dataset.")
    max_num_steps: int | None = Field(None, ge=1, description="Stop after this many optimizer steps.")
    output_dir: str = Field(
        "./outputs", min_length=1, description="A timestamp sub-folder is appended per run."
    )
    resume: bool | str = Field(False, description="true: newest checkpoint in output_dir; or a path.")
    seed: int = Field(0, ge=0, description="Seed of torch, numpy and random (the rank is added).")
    deterministic: bool = Field(False, description="Deterministic kernels: reproducible and slower.")
    compile: bool = Field(
        False, description="torch.compile each transformer block (language and vision) before FSDP2: faster steps "
        "after a compile of about a minute at start and one recompile for varying lengths."
    )
    async_tp_enabled: bool = Field(
        False, description="Async tensor parallel (accepted; not implemented yet: said by config check)."
    )
    sequence_packing: bool = Field(False, description="Pack samples padding-free into one sequence.")
    fused_linear_ce: bool = Field(
        False, description="SFT: the LM head and the cross entropy run fused, fused_linear_ce_chunk label tokens at "
        "a time with their gradients (train/linear_ce.py): the [label tokens x vocabulary] logits are never held "
        "whole, for the same loss and gradients. Refused for GRPO (its loss reads per-token log-probs) and with a "
        "LoRA adapter on lm_head."
    )
    fused_linear_ce_chunk: int = Field(
        2048, ge=1, le=1_048_576,
        description="Label tokens per chunk of the fused head + loss; its peak is one chunk x vocabulary fp32 "
        "buffer (2048 x 151,936 = 1.2 GiB for Qwen2.5-VL) plus the head's fp32 gradient.",
    )
    save_ckpt_at_exit: bool = Field(True, description="Checkpoint on SIGTERM/SIGUSR1 before exiting.")
    sync_weight_interval: int = Field(1, ge=1, description="GRPO: steps between weight syncs to rollout.")
    skip_nonfinite_steps: int = Field(
        0, ge=0,
        description="Steps whose loss or gradient norm is NaN/inf that may be skipped (no update) before the "
        "run stops naming the step; 0 stops at the first.",
    )
    ckpt: CheckpointConfig = Field(default_factory=CheckpointConfig, description="Checkpoints and exports.")
    train_policy: TrainPolicyConfig = Field(
        default_factory=TrainPolicyConfig, description="SFT or GRPO, and its dataset."
    )


class ParallelismConfig(Section):
    """[policy.parallelism]: one replica is dp_replicate*dp_shard*tp*cp*pp ranks. cp_size and pp_size > 1
    (cosmos-rl's context and pipeline parallelism) run as that many times more FSDP shards: the same
    result, said by `config check` (`fold_context_and_pipeline`)."""

    dp_shard_size: MinusOneOrPositive = Field(
        -1, description="FSDP shard group size; -1 = all remaining ranks."
    )
    dp_replicate_size: int = Field(1, ge=1, description="HSDP replicas (1 for GRPO).")
    tp_size: int = Field(1, ge=1, description="Tensor parallel size.")
    cp_size: int = Field(
        1, ge=1, description="Context (sequence) parallel size; > 1 runs as cp_size x more FSDP shards here."
    )
    pp_size: int = Field(
        1, ge=1, description="Pipeline parallel size; > 1 runs as pp_size x more FSDP shards here."
    )

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
                [f"policy.parallelism: world size {world_size} is not divisible by "
                 f"dp_replicate*tp*cp*pp = {rest}"]
            )
        return world_size // rest

    def check_world_size(self, world_size: int, section: str = "policy.parallelism") -> None:
        """Raise naming the keys when the product of sizes does not equal the launched world size."""
        shard = self.resolved_shard(world_size)
        product = self.product(shard)
        if product != world_size:
            raise ConfigError(
                [f"{section}: dp_replicate_size*dp_shard_size*tp_size*cp_size*pp_size = "
                 f"{self.dp_replicate_size}*{shard}*{self.tp_size}*{self.cp_size}*{self.pp_size} = {product}, "
                 f"but {world_size} processes were launched (set dp_shard_size = -1 to use them all, "
                 f"or change launch.nproc_per_node)"]
            )


class LoraConfig(Section):
    """[policy.lora]: low-rank adapters instead of full fine-tuning."""

    r: int = Field(8, ge=1, description="Adapter rank.")
    lora_alpha: float = Field(
        8.0, gt=0, description="Adapter scale numerator (the update is scaled by lora_alpha / r)."
    )
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="Dropout probability on the adapter input.")
    target_modules: str | list[str] | None = Field(
        None, description="Modules that get adapters: a list of names (e.g. ['q_proj', 'v_proj']), a regex over "
        "module paths, or 'all-linear' (every linear layer but lm_head, the vision tower's too); unset: the "
        "language model's attention and MLP projections."
    )
    modules_to_save: list[str] | None = Field(
        None, description="Modules trained in full beside the adapters (e.g. ['lm_head']); saved with the adapter."
    )
    use_rslora: bool = Field(False, description="Scale updates by lora_alpha / sqrt(r) instead of lora_alpha / r.")
    init_lora_weights: bool | Literal["gaussian"] = Field(
        True, description="A's initialisation (B starts at zero, so training starts from the base model): true is "
        "Kaiming-uniform, 'gaussian' normal(0, 1/r); false also draws B (for tests: the start is not the base)."
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
        "auto", description="Attention kernel of the trained model. auto: flash_attention_2 for SFT on a GPU where "
        "the flash-attn package is installed and the compute dtype is 16-bit (padded and packed rows run varlen), "
        "else sdpa (packed rows then attend per sample, train/packed_attention.py). flash_attention_2 / 3 named "
        "here are refused where flash-attn (flash_attn_interface for 3) is not installed, on a CPU, and for GRPO "
        "(its shared-prompt rows need a 4D mask flash attention cannot take)."
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
            raise ValueError("[policy.lora] trains the adapters (and lora.modules_to_save) only; remove "
                             "freeze_pattern / trainable_pattern, or [policy.lora] for full fine-tuning")
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
    top_p: float = Field(
        1.0, gt=0, le=1, description="Nucleus sampling: keep the smallest set of this mass (1: off)."
    )
    top_k: MinusOneOrPositive = Field(-1, description="Sample from the k likeliest tokens (-1: off).")
    repetition_penalty: float = Field(
        1.0, gt=0, description="Divides logits of tokens already present (1: off)."
    )


class RolloutParallelismConfig(Section):
    """[rollout.parallelism]: each policy rank (or tensor-parallel group of tp_size ranks) runs one engine;
    cosmos-rl's other keys here are accepted with no effect (`config_compat`)."""

    tp_size: int = Field(1, ge=1, description="Tensor parallel size of one rollout engine.")


class RolloutConfig(Section):
    """[rollout]: the GRPO generation engine."""

    backend: Literal["vllm", "hf"] = Field("vllm", description="vllm on GPU; hf (transformers) anywhere.")
    n_generation: int = Field(16, ge=1, description="Completions per prompt (the GRPO group size).")
    batch_size: int = Field(
        1, ge=1, description="cosmos-rl's engine prompt batch; no effect here: a step samples train_batch_per_replica "
        "/ n_generation prompts per replica and gives a rank's share to its engine at once."
    )
    max_response_length: int = Field(2048, ge=1, description="Max new tokens per completion.")
    gpu_memory_utilization: float = Field(
        0.8, gt=0, le=1, description="vLLM: fraction of device memory for weights and KV cache."
    )
    quantization: Literal["none", "fp8"] = Field("none", description="Rollout weight quantization.")
    enable_chunked_prefill: bool = Field(False, description="vLLM chunked prefill of long prompts.")
    enforce_eager: bool = Field(
        True, description="vLLM: run the model eagerly, no CUDA graphs (faster start, less memory; false "
        "captures graphs for faster decoding)."
    )
    sampling_config: SamplingConfig = Field(
        default_factory=SamplingConfig, description="Sampling parameters."
    )
    seed: int | None = Field(None, ge=0, description="Sampling seed (unset: random).")
    parallelism: RolloutParallelismConfig = Field(
        default_factory=lambda: RolloutParallelismConfig(), description="How the rollout engine is split."
    )


class ValidationConfig(Section):
    """[validation]: periodic evaluation during training."""

    enable: bool = Field(False, description="Validate during training (alias: train.enable_validation).")
    freq: int = Field(20, ge=1, description="Validate every this many steps (alias: train.validation_step).")
    val_before_train: bool = Field(
        False, description="Also validate the starting weights before the first step (GRPO always does: the "
        "best export must beat them)."
    )
    batch_size: int = Field(
        8, ge=1, description="Samples per validation batch (alias: train.validation_batch_per_replica)."
    )
    dataset: DatasetConfig | None = Field(None, description="Default: the train dataset's held-out split.")
    temperature: float = Field(
        0.0, ge=0, description="Sampling temperature of validation answers (0: greedy)."
    )
    n_generation: int = Field(1, ge=1, description="Completions per validation prompt.")
    max_response_length: int | None = Field(
        None, ge=1, description="Max new tokens per validation answer (unset: rollout.max_response_length)."
    )
    top_p: float = Field(
        1.0, gt=0, le=1, description="Nucleus sampling of validation answers (1: off)."
    )
    top_k: MinusOneOrPositive = Field(
        1, description="Sample validation answers from the k likeliest tokens: 1 (the default, as cosmos-rl) is "
        "greedy whatever the temperature; -1: off."
    )
    repetition_penalty: float = Field(
        1.0, gt=0, description="Divides logits of tokens already present in validation answers (1: off)."
    )
    reward_function: str | list[str] | dict[str, float] = Field(
        default_factory=list,
        description="Reward name(s) scoring answers, or {name = weight} (empty: train.train_policy.reward_function)."
    )
    use_remote_reward: bool | None = Field(
        None, description="Score validation answers with the training's remote reward service as well "
        "(train.train_policy.remote_reward); unset: as train.train_policy.use_remote_reward (cosmos-rl's default)."
    )


class LoggingConfig(Section):
    """[logging]: where metrics go."""

    logger: list[Literal["console", "wandb"]] = Field(
        default_factory=lambda: ["console"], description="Metric sinks (metrics.jsonl is always written)."
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
        0, ge=0, description="This machine's index, 0 to nnodes - 1 (e.g. COSMOS_TRAIN__LAUNCH__NODE_RANK="
        "$SLURM_NODEID, or a Kubernetes indexed Job's $JOB_COMPLETION_INDEX)."
    )
    rdzv_endpoint: str | None = Field(
        None, description="host:port where the nodes meet (torchrun's c10d rendezvous; node 0's address).")
    rdzv_id: str | None = Field(
        None, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$",
        description="Name of one multi-node job, the same on every node: the run folder is "
        "<output_dir>/<rdzv_id> on storage all nodes share (required when nnodes > 1).")
    socket_ifname: str | None = Field(
        None, description="Network interface the ranks' gloo / NCCL sockets use (sets GLOO_SOCKET_IFNAME and "
        "NCCL_SOCKET_IFNAME unless already set; e.g. eth0, ib0; unset: their own choice).")
    gpu_concurrency_limit: str | None = Field(
        "gpu", description="Prefect global concurrency limit a training run on GPUs takes one slot of per GPU "
        "it uses (`prefect gcl create gpu --limit 8`); unset or no GPU: no limit taken."
    )
    max_restarts: int = Field(
        0, ge=0, description="torchrun restarts of failed workers before the run fails."
    )


NO_EFFECT_HEADER = "# accepted with no effect here (cosmos-rl keys / settings), with why:"


class JobSection(Section):
    """A whole job file (the VLM job, the world-model job): the keys it set that had no effect here (said, never
    dropped), and its resolved form written into the run folder."""

    _no_effect: list[NoEffect] = PrivateAttr(default_factory=list)

    @property
    def no_effect(self) -> list[NoEffect]:
        """The keys the config set that were accepted with no effect here, with why."""
        return self._no_effect

    def to_toml(self) -> str:
        """The resolved config as TOML (None values, which TOML cannot hold, are left out)."""
        return tomli_w.dumps(_drop_none(self.model_dump(mode="json")))

    def write(self, path: str | Path) -> Path:
        """The run folder's config.toml: the resolved config, then the keys accepted with no effect (comments,
        so the record of what the user asked for is whole and the file still loads)."""
        notes = "".join(f"# {n.line()}\n" for n in self._no_effect)
        return write_atomic(path, self.to_toml() + (f"\n{NO_EFFECT_HEADER}\n{notes}" if notes else ""))


class Config(JobSection):
    """The whole job. `Config()` alone is valid: the reference framework's defaults."""

    train: TrainConfig = Field(
        default_factory=TrainConfig, description="Optimizer, schedule, batches, run length."
    )
    policy: PolicyConfig = Field(default_factory=PolicyConfig, description="The model trained.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="GRPO generation.")
    validation: ValidationConfig = Field(
        default_factory=ValidationConfig, description="Validation during training."
    )
    logging: LoggingConfig = Field(default_factory=LoggingConfig, description="Metric sinks.")
    launch: LaunchConfig = Field(default_factory=LaunchConfig, description="How the processes are started.")
    custom: dict[str, Any] = Field(default_factory=dict, description="Free-form, for users' dataset scripts.")

    @property
    def policy_type(self) -> Literal["sft", "grpo"]:
        return self.train.train_policy.type or "sft"

    @property
    def parallelism(self) -> ParallelismConfig:
        """The trained model's mesh settings (the launcher reads this name from every job config)."""
        return self.policy.parallelism

    @property
    def run_root(self) -> str:
        """Where run folders go (<run_root>/<timestamp>/)."""
        return self.train.output_dir

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



# ------------------------------------------------------------------------------------- aliases
# (alias path, canonical path): keys that appear only in the seed guides.
ALIASES: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    # cosmos-rl's older names, still in the Cosmos-Reason1 guide's configs.
    (("train", "enable_validation"), ("validation", "enable")),
    (("train", "validation_step"), ("validation", "freq")),
    (("train", "validation_batch_per_replica"), ("validation", "batch_size")),
    (("grpo", "num_samples_per_prompt"), ("rollout", "n_generation")),
    (("grpo", "kl_penalty"), ("train", "train_policy", "kl_beta")),
    (("train", "train_policy", "kl_penalty"), ("train", "train_policy", "kl_beta")),
    (("train", "train_policy", "rollout_batch_size"), ("rollout", "batch_size")),
    # cosmos-rl calls the micro-batch a mini_batch; in GRPO a mini-batch is an optimizer step's share.
    (("train", "train_policy", "mini_batch"), ("train", "train_policy", "micro_batch")),
    # cosmos-rl's world-model (--wfm-mode) recipes name the policy parallelism this way.
    (("model", "fsdp_shard_size"), ("policy", "parallelism", "dp_shard_size")),
    (("model", "dp_replicate_size"), ("policy", "parallelism", "dp_replicate_size")),
    (("model_parallel", "context_parallel_size"), ("policy", "parallelism", "cp_size")),
    (("model_parallel", "tensor_parallel_size"), ("policy", "parallelism", "tp_size")),
]


# dynamic_sampling_max_rounds for cosmos-rl's "retry until the batch is full"
UNTIL_FULL = 1_000_000

# (cosmos-rl key, our key, our value for its value): the same setting, said the other way round.
CONVERTED: list[tuple[tuple[str, ...], tuple[str, ...], Callable[[Any], Any]]] = [
    (("train", "train_policy", "unbiased_advantage"), ("train", "train_policy", "scale_rewards"),
     lambda v: not v if isinstance(v, bool) else v),
    (("train", "train_policy", "use_rollout_logprobs_for_loss"), ("train", "train_policy", "old_logprobs"),
     lambda v: ("engine" if v else "recompute") if isinstance(v, bool) else v),
    # cosmos-rl: > 0 refill rounds at most, <= 0 refill until the batch is full (here: a bound no run reaches)
    (("train", "train_policy", "max_retry_for_on_policy"), ("train", "train_policy", "dynamic_sampling_max_rounds"),
     lambda v: (v if v > 0 else UNTIL_FULL) if isinstance(v, int) and not isinstance(v, bool) else v),
]


def _apply_aliases(raw: dict[str, Any], problems: list[str]) -> None:
    for alias, canonical, convert in [(a, c, None) for a, c in ALIASES] + CONVERTED:
        parent = _get_parent(raw, alias)
        if parent is None or alias[-1] not in parent:
            continue
        given = parent.pop(alias[-1])
        value = convert(given) if convert is not None else given
        target = _ensure_parent(raw, canonical)
        if canonical[-1] in target and target[canonical[-1]] != value:
            problems.append(
                f"{'.'.join(alias)} = {given!r} conflicts with {'.'.join(canonical)} = "
                f"{target[canonical[-1]]!r}: they are the same setting"
                + (f" ({'.'.join(alias)} = {given!r} means {canonical[-1]} = {value!r})" if convert else "")
                + ", keep one"
            )
            continue
        target[canonical[-1]] = value
    for section in ("grpo", "model", "model_parallel"):
        if isinstance(raw.get(section), dict) and not raw[section]:
            raw.pop(section)


def _infer_policy_type(raw: dict[str, Any], rl_alias: bool) -> None:
    tp = raw.setdefault("train", {}).setdefault("train_policy", {})
    if isinstance(tp, dict) and "type" not in tp and (rl_alias or any(k in tp for k in _GRPO_ONLY_KEYS)):
        tp["type"] = "grpo"


# ----------------------------------------------------------------------------------- overrides
def parse_override(text: str) -> tuple[list[str], Any]:
    """'train.optm_lr=1e-5' -> (['train', 'optm_lr'], 1e-5); the value is read as TOML, else a string."""
    if "=" not in text:
        raise ConfigError([f"--set {text!r}: expected key.path=value"])
    key, value = text.split("=", 1)
    path = [p for p in key.strip().split(".") if p]
    if not path:
        raise ConfigError([f"--set {text!r}: empty key"])
    return path, _parse_value(value.strip())


def _parse_value(value: str) -> Any:
    try:
        return tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        return value


def env_overrides(env: Mapping[str, str]) -> list[tuple[list[str], Any]]:
    """COSMOS_TRAIN__TRAIN__OPTM_LR=1e-5 -> (['train', 'optm_lr'], 1e-5)."""
    out = []
    for name, value in sorted(env.items()):
        if name.startswith(ENV_PREFIX) and len(name) > len(ENV_PREFIX):
            path = [p.lower() for p in name[len(ENV_PREFIX):].split("__") if p]
            out.append((path, _parse_value(value)))
    return out


def apply_overrides(
    raw: dict[str, Any], overrides: Iterable[str], env: Mapping[str, str], *, canonical_names: bool = False
) -> None:
    """COSMOS_TRAIN__* variables of `env`, then `--set key.path=value` texts (later wins), into `raw`.

    canonical_names: an override naming a key by its other name (ALIASES, CONVERTED: cosmos-rl's
    `mini_batch` for our `micro_batch`) is set under ours, so it replaces the file's value whichever of the
    two names the file used, as every override does (job configs; the world-model schema has its own names).
    """
    pairs = [*env_overrides(env), *(parse_override(text) for text in overrides)]
    for key_path, value in pairs:
        if canonical_names:
            key_path, value = _canonical_key(key_path, value)
        set_path(raw, key_path, value)


def _canonical_key(path: list[str], value: Any) -> tuple[list[str], Any]:
    """(our key path, our value) for a key path given under its alias name; other paths as they are."""
    for alias, canonical, convert in [(a, c, None) for a, c in ALIASES] + CONVERTED:
        if tuple(path) == alias:
            return list(canonical), convert(value) if convert is not None else value
    return path, value


def set_path(raw: dict[str, Any], path: list[str], value: Any) -> None:
    node = raw
    for part in path[:-1]:
        nxt = node.setdefault(part, {})
        if not isinstance(nxt, dict):
            raise ConfigError([f"{'.'.join(path)}: {part!r} holds a value, not a table"])
        node = nxt
    node[path[-1]] = value


# ------------------------------------------------------------------------------------- loading
def load_config(
    path: str | Path | None = None,
    overrides: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    check_paths: bool = True,
) -> Config:
    """Parse, alias, override and validate a job config. Raises ConfigError listing every problem."""
    raw, source = read_toml(path)
    return config_from_dict(raw, overrides, os.environ if env is None else env, source, check_paths)


def read_toml(path: str | Path | None) -> tuple[dict[str, Any], str | None]:
    """(the file's tables, its name for messages); ({}, None) for no file; ConfigError for a missing file or bad
    TOML (every job config loader reads its file here)."""
    if path is None:
        return {}, None
    p, source = Path(path), str(path)
    if not p.is_file():
        raise ConfigError([f"config file {p} does not exist"], source)
    try:
        return tomllib.loads(p.read_text()), source
    except tomllib.TOMLDecodeError as e:
        raise ConfigError([f"TOML syntax: {e}"], source) from e


def config_from_dict(
    raw: dict[str, Any],
    overrides: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    source: str | None = None,
    check_paths: bool = False,
) -> Config:
    problems: list[str] = []
    if world_model := world_model_sections(raw):
        raise ConfigError([world_model_refusal(world_model)], source)
    policy_raw = raw.get("policy")
    if isinstance(policy_raw, dict) and policy_raw.get("is_diffusers"):
        tp_any = raw.get("train", {}).get("train_policy", {}) if isinstance(raw.get("train"), dict) else {}
        trainer_type = tp_any.get("trainer_type") if isinstance(tp_any, dict) else None
        raise ConfigError([world_model_refusal(["policy.is_diffusers = true"], trainer_type)], source)
    raw = copy.deepcopy(raw)
    # The seed guides' RL recipe says GRPO only through these aliases (no `type`).
    tp_raw = raw.get("train", {}).get("train_policy", {})
    rl_alias = "grpo" in raw or (isinstance(tp_raw, dict) and "rollout_batch_size" in tp_raw)
    _apply_aliases(raw, problems)
    apply_overrides(raw, overrides, env or {}, canonical_names=True)
    _apply_aliases(raw, problems)  # an override may set a table holding an alias name
    _infer_policy_type(raw, rl_alias)
    no_effect: list[NoEffect] = []
    problems += take_foreign_keys(raw, no_effect)
    problems += unknown_keys(raw, Config)
    if problems:
        raise ConfigError(problems, source)
    try:
        cfg = Config.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(explain_errors(e, Config), source) from None
    cfg._no_effect = no_effect
    _resolve_dataset_cache(cfg)
    no_effect += fold_context_and_pipeline(cfg.policy.parallelism) + speed_only_settings(cfg)
    # Resolve the type now: the written config.toml holds every GRPO default, which would
    # otherwise re-infer "grpo" when a process reads it back.
    cfg.train.train_policy.type = cfg.policy_type
    problems += semantic_problems(cfg, check_paths)
    if problems:
        raise ConfigError(problems, source)
    return cfg


def fold_context_and_pipeline(par: ParallelismConfig) -> list[NoEffect]:
    """cp_size / pp_size > 1 as more FSDP shards (the same ranks, the same global batch and loss, so the same
    result; the memory per rank differs: whole sequences and all layers' activations per rank)."""
    factor = par.cp_size * par.pp_size
    if factor == 1:
        return []
    shard = par.dp_shard_size
    notes = [NoEffect(f"policy.parallelism.{key}", getattr(par, key),
                      f"no {what} parallelism here: its ranks shard the model with FSDP instead "
                      f"(dp_shard_size {'-1, all ranks' if shard == -1 else f'{shard} -> {shard * factor}'}); the "
                      "same result, but each rank holds whole sequences (gradient checkpointing keeps activations "
                      "small)")
             for key, what in (("cp_size", "context"), ("pp_size", "pipeline")) if getattr(par, key) > 1]
    if shard != -1:
        par.dp_shard_size = shard * factor
    par.cp_size = par.pp_size = 1
    return notes


def speed_only_settings(cfg: Config) -> list[NoEffect]:
    """Keys of ours set to a value that would only change speed, which the trainers do not act on yet, or that
    another key's value leaves without effect (as in cosmos-rl)."""
    out = []
    if cfg.train.async_tp_enabled:
        out.append(NoEffect("train.async_tp_enabled", True, "tensor-parallel communication is not overlapped "
                            "yet: the same math, in sequence"))
    if cfg.policy_type == "grpo" and "batch_size" in cfg.rollout.model_fields_set:
        out.append(NoEffect("rollout.batch_size", cfg.rollout.batch_size, INERT["rollout.batch_size"]))
    tp = cfg.train.train_policy
    if tp.behav_imp_weight_cap is not None and not tp.use_decoupled_loss:
        out.append(NoEffect("train.train_policy.behav_imp_weight_cap", tp.behav_imp_weight_cap,
                            "caps the decoupled loss's importance weights; use_decoupled_loss is false (as in "
                            "cosmos-rl, the cap then does nothing)"))
    for key, default in (("advantage_low", -5.0), ("advantage_high", 5.0)):
        if not tp.clip_advantages and getattr(tp, key) != default:
            out.append(NoEffect(f"train.train_policy.{key}", getattr(tp, key),
                                "cosmos-rl's language-model GRPO trainer does not clip advantages; set "
                                "train.train_policy.clip_advantages = true to clip them here"))
    return out


def _resolve_dataset_cache(cfg: Config) -> None:
    """enable_dataset_cache without a dataset.cache_dir: the shared cache folder (written into the resolved
    config, so every process and a resumed run use the same one)."""
    if not cfg.train.train_policy.enable_dataset_cache:
        return
    from cosmos_train.data.sources.common import cosmos_cache  # the data package imports this module

    for ds in (cfg.train.train_policy.dataset, cfg.validation.dataset):
        if ds is not None and ds.cache_dir is None:
            ds.cache_dir = str(cosmos_cache() / "clip_cache")


# The top-level sections of world-model (Cosmos-Predict) recipes (cosmos-rl's, and cosmos_train/wfm/config.py's),
# none of which a vision-language job has.
WORLD_MODEL_SECTIONS = ("model", "model_parallel", "trainer", "dataloader_train", "dataloader_val", "optimizer",
                        "scheduler", "checkpoint", "job")


def world_model_sections(raw: dict[str, Any]) -> list[str]:
    """The world-model sections of a config that has at least two of them (one could be a typo of ours), one
    beyond [model] / [model_parallel]: those two alone carry the seed guide's parallelism keys, which load
    as aliases of [policy.parallelism] (ALIASES)."""
    found = [k for k in WORLD_MODEL_SECTIONS if isinstance(raw.get(k), dict | list)]
    beyond = [k for k in found if k not in ("model", "model_parallel")]
    return found if len(found) >= 2 and beyond else []


def is_world_model_recipe(path: str | Path) -> bool:
    """True for a TOML file in the world-model layout (cosmos-rl's configs/wfm/, ours configs/tiny-wfm-*.toml);
    False for anything else, a file that does not parse included (its own loader says why)."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return bool(world_model_sections(raw))


def world_model_refusal(sections: list[str], trainer_type: str | None = None) -> str:
    """One paragraph for a world-model recipe: its own layout (sections) or cosmos-rl's diffusers trainer
    (['policy.is_diffusers = true'], with its train.train_policy.trainer_type: "diffusion_nft" is named)."""
    if any(s.startswith("policy.") for s in sections):
        nft = (f'; its train.train_policy.trainer_type = "{trainer_type}" (DiffusionNFT: LoRA adapters, no '
               "per-step likelihood) is not implemented here" if trainer_type == "diffusion_nft" else
               f'; its train.train_policy.trainer_type = "{trainer_type}" is not a trainer here' if trainer_type
               else "")
        return (f"this is a recipe of cosmos-rl's diffusers trainer ({', '.join(sections)}), not a vision-language "
                f"job ([train], [policy], [rollout], [validation]){nft}; world-model RL (Flow-GRPO / DDRL on a "
                "Cosmos-Predict DiT, the same diffusers model: model.model_name_or_path = policy.model_name_or_path, "
                "model.model_revision = policy.model_revision) runs here from the world-model layout ([model], "
                "[model.rl], [trainer], [dataloader_train], ...: configs/wfm/*.toml, configs/tiny-wfm-*.toml) with "
                "`cosmos-train wfm-rl --config FILE`. See docs/MIGRATING_FROM_COSMOS_RL.md")
    return (f"this is a world-model (Cosmos-Predict) recipe ({', '.join(f'[{k}]' for k in sections)}), not a "
            "vision-language job: run it with `cosmos-train wfm-rl --config FILE` (or cosmos-rl's form "
            "`cosmos-train --config FILE`); `cosmos-train config check FILE` checks it")


def unknown_keys(raw: Any, model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every key not in the schema, with the closest valid key suggested."""
    if not isinstance(raw, dict):
        return []
    problems = []
    fields = model.model_fields
    for key, value in raw.items():
        where = f"{prefix}{key}"
        if key not in fields:
            # cosmos-rl's keys accepted here count as known names too: `profilr` suggests `profiler`
            names = [*fields, *rule_names_under(prefix[:-1])]
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
            section = prefix[:-1] or "top level"
            hint = f"did you mean {prefix}{close[0]}?" if close else f"valid keys: {', '.join(sorted(fields))}"
            problems.append(f"{where}: unknown key in [{section}] ({hint})")
            continue
        sub = _section_model(fields[key].annotation)
        if sub is not None:
            items = value if isinstance(value, list) else [value]
            for item in items:
                problems += unknown_keys(item, sub, where + ".")
    return problems


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The model class inside an annotation like `DatasetConfig | None` or `list[RemoteRewardFn]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _section_model(arg)
        if found is not None:
            return found
    return None


_BOUND_OPS = ((annotated_types.Gt, "gt", ">"), (annotated_types.Ge, "ge", ">="),
              (annotated_types.Lt, "lt", "<"), (annotated_types.Le, "le", "<="))
_COMPARISON_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")
# How pydantic names the members of a union in an error's location ('int', "literal['auto']",
# 'function-after[...]'): never a key, so left out of the key path.
_TYPE_TAG = re.compile(r"[a-z-]+\[.*\]|constrained-\w+|int|float|str|bool|bytes|none", re.S)


def field_bounds(field: FieldInfo) -> str:
    """A field's numeric bounds in words, '> 0 and <= 1'; '' when it has none. Bounds of union members
    and tuple items (`tuple[Beta, Beta]`, `Literal[-1] | Annotated[int, Field(ge=1)]`) count too."""
    words: list[str] = []

    def collect(metadata: Iterable[Any]) -> None:
        for m in metadata:
            if isinstance(m, FieldInfo):
                collect(m.metadata)
            for cls, attr, op in _BOUND_OPS:
                if isinstance(m, cls) and f"{op} {getattr(m, attr)}" not in words:
                    words.append(f"{op} {getattr(m, attr)}")

    def walk(annotation: Any) -> None:
        args = get_args(annotation)
        if getattr(annotation, "__metadata__", None) is not None:  # Annotated[T, ...]
            collect(annotation.__metadata__)
            walk(args[0])
            return
        for arg in args:
            walk(arg)

    collect(field.metadata)
    walk(field.annotation)
    return " and ".join(words)


def check_name(what: str, name: str, known: Iterable[str]) -> str:
    """`name` when it is one of `known` (a plug-in registry), else a validation error that
    `explain_errors` shows with the valid names and the closest one."""
    names = sorted(known)
    if name not in names:
        valid = ", ".join(repr(n) for n in names)
        raise PydanticCustomError(
            "unknown_name", "must be a registered {what}: {valid}", {"what": what, "valid": valid}
        )
    return name


def explain_errors(e: ValidationError, root: type[BaseModel]) -> list[str]:
    """One line per key: 'key.path: what is wrong (got value); did you mean ...?', constraints in words.

    pydantic reports each member of a union separately (`max_keep = 0` fails both `-1` and `>= 1`);
    their messages are joined into one line.
    """
    lines: dict[str, list[str]] = {}
    hints: dict[str, str] = {}
    inputs: dict[str, Any] = {}
    for err in e.errors():
        key, section, field = _locate(err["loc"], root)
        msg, hint = _message(err, section, field)
        if msg not in lines.setdefault(key, []):
            lines[key].append(msg)
        if err["type"] != "extra_forbidden":  # the value of a key that should not be there says nothing
            inputs.setdefault(key, err.get("input"))
        if hint:
            hints.setdefault(key, hint)
    out = []
    for key, msgs in lines.items():
        # A value that matched one union member deeper down (`reward_function = {a = nan}`) makes
        # the other members' type mismatches noise: the deeper key says what is wrong.
        if any(k.startswith((f"{key}.", f"{key}[")) for k in lines if key):
            continue
        text = msgs[0] + "".join(
            f" or {m.removeprefix('must be ')}" if m.startswith("must be ") else f"; {m}" for m in msgs[1:]
        )
        # A section-level rule reports the whole table as its input.
        if key in inputs and not isinstance(inputs[key], dict):
            text += f" (got {inputs[key]!r})"
        if key in hints:
            text += f"; {hints[key]}"
        out.append(f"{key or 'config'}: {text}")
    return out


def _locate(
    loc: tuple[Any, ...], root: type[BaseModel]
) -> tuple[str, type[BaseModel] | None, FieldInfo | None]:
    """The key path of an error location ('train.optm_betas[1]'), the section it ends in and its field."""
    path = ""
    section: type[BaseModel] | None = root
    field: FieldInfo | None = None
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif section is not None and part in section.model_fields:
            field = section.model_fields[part]
            path += f".{part}" if path else part
            section = _section_model(field.annotation)
        elif not _TYPE_TAG.fullmatch(str(part)):  # an unknown key, or a key of a free-form table
            path += f".{part}" if path else str(part)
            field = None
    return path, section, field


def _message(err: Any, section: type[BaseModel] | None, field: FieldInfo | None) -> tuple[str, str]:
    """(what is wrong, a hint such as 'did you mean ...?' or '')."""
    kind, ctx, given = err["type"], err.get("ctx") or {}, err.get("input")
    bounds = field_bounds(field) if field is not None else ""
    if kind in _COMPARISON_ERRORS:
        if bounds:
            return f"must be {bounds}", ""
        return next(f"must be {op} {ctx[attr]}" for _, attr, op in _BOUND_OPS if attr in ctx), ""
    if kind == "finite_number":
        return f"must be a finite number {bounds}".rstrip(), ""
    if kind in ("literal_error", "unknown_name"):
        expected = ctx.get("expected") or ctx.get("valid", "")
        names = re.findall(r"'([^']*)'", expected)
        close = difflib.get_close_matches(given, names, n=1, cutoff=0.6) if isinstance(given, str) else []
        hint = f"did you mean {close[0]!r}?" if close else ""
        if kind == "unknown_name":
            return err["msg"], hint
        return f"must be {'one of ' if len(names) > 1 else ''}{expected}", hint
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        return "must not be empty", ""
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s)", ""
    if kind == "extra_forbidden":
        fields = list(section.model_fields) if section is not None else []
        close = difflib.get_close_matches(str(err["loc"][-1]), fields, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(fields)}"
        return f"unknown key ({hint})", ""
    msg = err["msg"].removeprefix("Value error, ").replace("Input should be ", "must be ", 1)
    if kind.endswith(("_parsing", "_type")) or kind == "int_from_float":
        msg = msg.split(", ")[0]  # "must be a valid integer, unable to parse string ...": the value is shown
    return msg, ""


def semantic_problems(cfg: Config, check_paths: bool) -> list[str]:
    """Combinations that type-check but cannot run, each with what to change. Single-key ranges are
    the schema's (`Field(ge=...)`)."""
    out = []
    t, ck = cfg.train, cfg.train.ckpt
    if ck.upload_hf and not ck.hf_repo_name:
        out.append("train.ckpt.hf_repo_name: required with upload_hf = true (the Hub repo, org/name)")
    if ck.upload_s3 and not ck.s3_bucket:
        out.append(f"train.ckpt.s3_bucket: required with upload_s3 = {ck.upload_s3!r} (the bucket to upload to)")
    if (ck.upload_hf or ck.upload_s3) and not ck.export_safetensors:
        out.append("train.ckpt.export_safetensors: must stay true when uploading (the upload sends the export)")
    mb = t.train_policy.micro_batch
    if cfg.policy_type == "sft" and t.train_batch_per_replica % mb:
        out.append(
            f"train.train_policy.micro_batch: {mb} must divide train.train_batch_per_replica "
            f"({t.train_batch_per_replica}) (micro-batches of equal size)"
        )
    if cfg.policy_type == "sft" and t.train_policy.balance_dp_token is False:
        out.append("train.train_policy.balance_dp_token = false: SFT here always normalises the loss over the step's "
                   "label tokens on every rank (cosmos-rl's SFT default, true); a per-rank mean is not implemented "
                   "for SFT: remove the key or set it true")
    if cfg.policy_type == "grpo":
        out += _grpo_problems(cfg)
    if cfg.policy_type == "grpo" and cfg.policy.parallelism.dp_replicate_size != 1:
        out.append("policy.parallelism.dp_replicate_size: GRPO runs one replica; set it to 1")
    if cfg.launch.node_rank >= cfg.launch.nnodes:
        out.append(f"launch.node_rank: {cfg.launch.node_rank} must be < launch.nnodes ({cfg.launch.nnodes})")
    if cfg.launch.nnodes > 1:
        if not cfg.launch.rdzv_endpoint:
            out.append("launch.rdzv_endpoint: required when launch.nnodes > 1 (host:port of node 0, the same on "
                       "every node)")
        if not cfg.launch.rdzv_id:
            out.append("launch.rdzv_id: required when launch.nnodes > 1 (a name for this job, the same on every "
                       "node; the run folder is <output_dir>/<rdzv_id> on shared storage)")
    if check_paths:
        model = cfg.policy.model_name_or_path
        if _looks_local(model) and not Path(model).expanduser().exists():
            out.append(f"policy.model_name_or_path: local path {model} does not exist")
    if cfg.launch.nproc_per_node != "auto":
        nproc = int(cfg.launch.nproc_per_node) * cfg.launch.nnodes
        try:
            cfg.policy.parallelism.check_world_size(nproc)
        except ConfigError as e:
            out += e.problems
    return out


def _grpo_problems(cfg: Config) -> list[str]:
    t, r = cfg.train, cfg.rollout
    out = []
    rr = t.train_policy.remote_reward
    if rr.local_service and (rr.enqueue_url or rr.fetch_url):
        out.append("train.train_policy.remote_reward: local_service = true starts a service for the run and "
                   "points the trainer at it; remove enqueue_url / fetch_url, or set local_service = false "
                   "to use the service they name")
    tbpr, n = t.train_batch_per_replica, r.n_generation
    if (tbpr % n if tbpr >= n else n % tbpr):
        out.append(
            f"train.train_batch_per_replica: a step trains on {tbpr} completions per replica; with "
            f"rollout.n_generation = {n} that splits a group unevenly (each rank samples whole groups here): set it "
            "to a multiple or a divisor of n_generation"
        )
    tp = t.train_policy
    if tp.use_decoupled_loss and tp.old_logprobs == "engine":
        out.append("train.train_policy.use_decoupled_loss weights each token by the trainer/sampler ratio, which "
                   "is 1 when the old log-probs are the sampler's (use_rollout_logprobs_for_loss / old_logprobs = "
                   "\"engine\"); set one of them (cosmos-rl refuses both too)")
    if tp.unbiased_loss_max_tokens is not None and tp.loss_type != "seq-mean-token-mean":
        out.append(f"train.train_policy.unbiased_loss_max_tokens applies to loss_type = \"seq-mean-token-mean\" "
                   f"only (it is {tp.loss_type!r}); remove it or change loss_type")
    engine_logprobs = [k for k, on in (("old_logprobs = \"engine\"", tp.old_logprobs == "engine"),
                                       ("use_decoupled_loss", tp.use_decoupled_loss)) if on]
    if tp.temperature != r.sampling_config.temperature and engine_logprobs:
        out.append(
            f"train.train_policy.temperature ({tp.temperature}) and rollout.sampling_config.temperature "
            f"({r.sampling_config.temperature}) differ while the loss uses the engine's log-probs "
            f"({', '.join(engine_logprobs)}): those are of the engine's distribution, the trainer's of its own; "
            "set the temperatures equal"
        )
    stale = t.sync_weight_interval - 1  # versions behind the policy the engine's weights get, at most
    if tp.on_policy and stale:
        out.append(f"train.sync_weight_interval ({t.sync_weight_interval}) > 1 with train.train_policy.on_policy = "
                   "true: on-policy rollouts need the newest weights every step; set sync_weight_interval = 1")
    elif stale > tp.allowed_outdated_steps:
        out.append(f"train.sync_weight_interval ({t.sync_weight_interval}) samples rollouts up to {stale} weight "
                   f"versions old, more than train.train_policy.allowed_outdated_steps ({tp.allowed_outdated_steps}) "
                   "allows: lower the interval or raise the bound")
    if r.n_generation < 2:
        out.append("rollout.n_generation: GRPO compares completions within a group; set it to 2 or more")
    rr = tp.remote_reward
    if tp.use_remote_reward and not rr.reward_fns:
        out.append("train.train_policy.remote_reward.reward_fns: use_remote_reward = true asks the service for "
                   "nothing; list the rewards ([[train.train_policy.remote_reward.reward_fns]] name = ...)")
    remote_names = [f.name for f in rr.reward_fns] if tp.use_remote_reward else []
    if len(set(remote_names)) != len(remote_names):
        out.append("train.train_policy.remote_reward.reward_fns: a name is listed twice")
    # max_response_length may reach or pass model_max_length (cosmos-rl's recipes do both): the engines stop a
    # completion where prompt and completion fill model_max_length (vLLM's max_model_len, the HF engine's budget)
    ol = t.train_policy.overlong_reward
    if ol.enable_overlong_penalty and ol.buffer_length > r.max_response_length:
        out.append(
            f"train.train_policy.overlong_reward.buffer_length ({ol.buffer_length}) must be <= "
            f"rollout.max_response_length ({r.max_response_length})"
        )
    return out


def unsupported_settings(cfg: Config) -> list[str]:
    """Keys the schema accepts (the reference framework's) that the trainers do not implement yet: refused
    up front, before any process starts, never silently ignored."""
    out = []
    if cfg.policy_type == "grpo":
        if cfg.rollout.backend == "hf" and cfg.rollout.parallelism.tp_size > 1:
            out.append("rollout.parallelism.tp_size: the hf rollout engine runs one model copy per rank; "
                       "set tp_size = 1 or rollout.backend = \"vllm\"")
    if cfg.policy_type == "grpo" and cfg.train.fused_linear_ce:
        out.append("train.fused_linear_ce: the fused LM head + cross entropy serves SFT's loss; GRPO's loss reads "
                   "per-token log-probs from the logits: set fused_linear_ce = false")
    if cfg.policy_type == "grpo" and cfg.policy.attn_implementation.startswith("flash"):
        out.append(f"policy.attn_implementation: {cfg.policy.attn_implementation} cannot take the 4D attention mask "
                   "of GRPO's shared-prompt rows (a group's completions after one copy of its prompt); set it to "
                   "\"auto\" or \"sdpa\"")
    if cfg.train.fused_linear_ce and cfg.policy.lora is not None and _lora_adapts_lm_head(cfg.policy.lora):
        out.append("train.fused_linear_ce: policy.lora.target_modules gives lm_head an adapter, whose low-rank "
                   "branch the fused head + loss (one plain weight) would leave out; drop lm_head from "
                   "target_modules (modules_to_save = [\"lm_head\"] trains it whole) or set fused_linear_ce = false")
    if cfg.policy.lora is not None and cfg.policy.parallelism.tp_size > 1:
        out.append("policy.lora: LoRA with tensor parallelism (policy.parallelism.tp_size > 1) is not supported; "
                   "shard with FSDP (dp_shard_size) instead, adapters are small")
    return out


def _lora_adapts_lm_head(lora: LoraConfig) -> bool:
    """target_modules matches the LM head as peft matches it: a name list by the module path's last part, a regex
    by re.fullmatch of the whole path (lm_head's is "lm_head"); unset and 'all-linear' leave lm_head out."""
    targets = lora.target_modules
    if targets is None or targets == "all-linear":
        return False
    if isinstance(targets, str):
        return re.fullmatch(targets, "lm_head") is not None
    return "lm_head" in targets


def _looks_local(name: str) -> bool:
    # A hub id is 'org/name' (one slash, no leading dot or slash); anything else is a path.
    return name.startswith((".", "/", "~")) or name.count("/") != 1 or Path(name).exists()


def pattern_list(v: str | list[str] | None) -> list[str]:
    """freeze_pattern / trainable_pattern as a list of regexes."""
    if v is None:
        return []
    return [v] if isinstance(v, str) else list(v)


def _get_parent(raw: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    node: Any = raw
    for part in path[:-1]:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node if isinstance(node, dict) else None


def _ensure_parent(raw: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    node = raw
    for part in path[:-1]:
        node = node.setdefault(part, {})
    return node


def _drop_none(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _drop_none(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [_drop_none(x) for x in v if x is not None]
    return v


