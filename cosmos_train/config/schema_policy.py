"""[train.train_policy]: the dataset and what of the run is SFT or GRPO. `type` picks the table: SFT's and GRPO's
are a discriminated union (as cosmos-rl's `Union[SFTDataConfig, GrpoConfig]`), so a GRPO setting in an SFT table is an
error naming it, never silently another kind of run."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, model_validator

from cosmos_train.config.base import Section
from cosmos_train.vision.settings import VisionSettings


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
        None,
        gt=0,
        description="Rows held out of the training rows for validation, as cosmos-rl's split_train_n_val_dataset "
        "does: a float is the fraction, an int the count. Read when validation is on and neither a "
        "[validation.dataset] nor a dataset script's get_val_dataset gives validation rows (validation off: "
        "every row trains). An hf dataset (read with the datasets library) holds out its LAST rows, as "
        "train_test_split(shuffle=False) does: ceil(fraction x rows), a fraction in (0, 1), a count below the "
        "rows; unset: 0.25. Any other source holds out its FIRST rows: int(fraction x rows), at least 1, at most "
        "rows - 1; unset: 0.1. Unset, a local folder's or synthetic dataset's own validation split is read "
        "instead where it has one. In [validation.dataset] (ours; cosmos-rl never reads it): validation reads "
        "the part it holds out of that dataset's split. Held-out rows never train.",
    )
    test_split_shuffle: bool = Field(
        False,
        description="Ours: hold out as many rows as test_size does, drawn at random with a fixed seed (the same "
        "rows every run), instead of cosmos-rl's first / last rows: a validation set from every part of a "
        "dataset whose rows come in an order (by subset, class, date or file). Off: cosmos-rl's rows.",
    )
    local_dir: str | None = Field(None, description="Where hub files are downloaded/extracted to.")
    source: Literal["auto", "hf", "cosmos", "llava", "video_folder", "synthetic", "script", "webdataset"] = Field(
        "auto", description="Which dataset source reads this dataset (webdataset: s3:// tar shards; auto for s3://)."
    )
    annotation_path: str | None = Field(None, description="LLaVA json annotation file.")
    media_path: str = Field("", description="LLaVA media root ('' when paths are absolute).")
    video_suffix: str = Field(
        "", description="Video folder: file suffix after the id, e.g. '.camera_front_wide_120fov'."
    )
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
    """[train.train_policy.overlong_reward]: the `overlong` reward's settings (DAPO's soft penalty on responses
    near the length limit), used when reward_function names `overlong`."""

    enable_overlong_penalty: bool = Field(
        False,
        description="No effect: cosmos-rl 0.4.7 defines this flag and never reads it. The penalty applies when "
        "train.train_policy.reward_function names `overlong` (config check lists this key when set).",
    )
    buffer_length: int = Field(
        4096,
        ge=1,
        description="The `overlong` reward: tokens before rollout.max_response_length where the penalty ramps up "
        "(tokens counted by re-encoding the completion's text, as cosmos-rl).",
    )
    penalty_factor: float = Field(
        1.0, ge=0, description="The `overlong` reward: the penalty reached at rollout.max_response_length."
    )


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


class ServiceRetries(Section):
    """How a reward-service client retries (the VLM's [train.train_policy.remote_reward], the world model's
    [reward]): one set of keys, one meaning."""

    max_retries: int = Field(
        8,
        ge=0,
        le=100,
        description="Retries of a call that failed to connect, timed out, or got 429 / 502 / 503 / 504 "
        "(exponential backoff with jitter, Retry-After honoured); past them the run stops saved (exit 75).",
    )
    backoff_s: float = Field(0.5, gt=0, le=600, description="First retry delay; doubles each retry.")
    backoff_max_s: float = Field(30.0, gt=0, le=3600, description="Longest delay between two retries.")


class RemoteRewardConfig(ServiceRetries):
    """[train.train_policy.remote_reward]: rewards scored by an HTTP service."""

    scale: float = Field(
        1.0,
        gt=0,
        description="Multiplier on the service's total: scale x clip(sum of weight x score, "
        "reward_clip_min, reward_clip_max).",
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
        "leave enqueue_url / fetch_url unset.",
    )
    enqueue_url: str | None = Field(
        None,
        description="The service's enqueue URL, e.g. http://127.0.0.1:8080/api/reward/enqueue "
        "(unset: env REMOTE_REWARD_ENQUEUE_URL).",
    )
    fetch_url: str | None = Field(
        None,
        description="The service's pull URL, e.g. http://127.0.0.1:8080/api/reward/pull "
        "(unset: env REMOTE_REWARD_FETCH_URL).",
    )
    token_secret: str | None = Field(
        None,
        min_length=1,
        description="Name of a Prefect Secret block holding the service's token: the flow reads it and hands "
        "it to the ranks as token_env (unset: token_env comes from the environment as it is).",
    )
    token_env: str = Field(
        "REMOTE_REWARD_TOKEN",
        min_length=1,
        description="Name of the environment variable holding the service's token (the token itself never "
        "goes in the TOML; unset variable: no Authorization header).",
    )
    timeout_s: float = Field(30.0, gt=0, le=3600, description="Seconds one HTTP call may take.")
    poll_interval_s: float = Field(0.2, gt=0, le=600, description="Seconds between pulls of a result not ready.")
    result_timeout_s: float = Field(
        600.0, gt=0, le=86400, description="Seconds to wait for one request's scores before failing the step."
    )


class TrainPolicyConfig(Section):
    """[train.train_policy]: the dataset and the settings SFT and GRPO share (the data sources read these)."""

    dataset: DatasetConfig = Field(default_factory=DatasetConfig, description="The training dataset.")
    micro_batch: int = Field(
        2,
        ge=1,
        description="Samples (GRPO: completions) per micro-batch: gradient accumulation splits each "
        "optimizer step's batch into these, each normalised by its own tokens as cosmos-rl's mini-batches (see "
        "loss_denominator). Alias: mini_batch (cosmos-rl's name).",
    )
    conversation_column_name: str = Field("conversations", description="Column holding the chat.")
    system_prompt: str | None = Field(None, description="System turn prepended to rows that have none.")
    dataloader_shuffle: bool = Field(True, description="Shuffle rows every epoch.")
    dataloader_seed: int = Field(0, ge=0, description="Seed of the shuffle (the epoch is added).")
    dataloader_num_workers: int = Field(0, ge=0, description="DataLoader worker processes decoding video (0: inline).")
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
    prompt_column_name: str | None = Field(None, description="Column holding the prompt.")
    response_column_name: str | None = Field(
        None,
        description="Column holding each row's reference answer, which rewards score against (unset or "
        "'': the first of reference, answer, correct_answer that the row has).",
    )
    reward_function: str | list[str] | dict[str, float] = Field(
        default_factory=lambda: ["single_choice"], description="Reward name(s), or {name = weight}."
    )
    balance_dp_token: bool | None = Field(
        None,
        description="GRPO with loss_type = 'token-mean', and SFT: normalise each micro-batch by its tokens summed "
        "over the data-parallel ranks, so every rank's tokens weigh the same; false: each rank's own tokens, ranks "
        "averaged (cosmos-rl's key; unset: false for GRPO, true for SFT, cosmos-rl's defaults).",
    )


class SFTPolicyConfig(TrainPolicyConfig):
    """[train.train_policy] with type = "sft": supervised fine-tuning on the dataset's conversations."""

    type: Literal["sft"] = Field(
        "sft", description="sft: supervised fine-tuning (the default when no GRPO-only key is set)."
    )
    loss_denominator: Literal["micro_batch", "update"] = Field(
        "micro_batch",
        description="micro_batch (cosmos-rl's): each micro-batch's (cosmos-rl: mini-batch's) summed token cross "
        "entropy is divided by its label tokens, summed over the replica's data-parallel shard ranks "
        "(balance_dp_token), and the step's loss is the mean of these over its micro-batches, so how rows are "
        "split into micro-batches and ranks changes the weights of their tokens. update (ours): one token mean "
        "over the step's label tokens on every rank: micro_batch and the number of GPUs change only memory and "
        "speed (a resume on another number of GPUs trains the same). With context parallel the tokens are the "
        "whole sequence's either way (cosmos-rl 0.4.7 there falls back to each rank's own mean).",
    )


class GRPOPolicyConfig(TrainPolicyConfig):
    """[train.train_policy] with type = "grpo": GRPO (and its DAPO / GSPO variants) on the dataset's prompts."""

    type: Literal["grpo"] = Field(
        "grpo", description="grpo: RL from rewards (inferred when a GRPO-only key or a cosmos-rl RL alias is present)."
    )
    variant: Literal["grpo", "gspo", "dapo"] = Field("grpo", description="Policy-gradient variant.")
    temperature: float = Field(1.0, ge=0, description="Rollout sampling temperature (0: greedy).")
    epsilon_low: float = Field(0.2, ge=0, lt=1, description="PPO clip below 1: the ratio is kept >= 1 - epsilon_low.")
    epsilon_high: float = Field(0.2, ge=0, description="PPO clip above 1 (DAPO clip-higher: 0.28).")
    lower_bound_ratio: float = Field(3.0, gt=1, description="Dual-clip bound c (> 1) for negative advantages.")
    loss_type: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-sum"] = Field(
        "token-mean",
        description="Loss aggregation over each micro-batch (cosmos-rl's mini-batch): the mean over "
        "its completion tokens, the mean over its completions of each one's token mean or token sum, or the sum.",
    )
    unbiased_loss_max_tokens: int | None = Field(
        None,
        ge=1,
        description="Dr.GRPO: with loss_type = 'seq-mean-token-mean', divide each completion's token "
        "sum by this constant instead of its length (unset: its length).",
    )
    loss_denominator: Literal["micro_batch", "update"] = Field(
        "micro_batch",
        description="micro_batch (cosmos-rl's): each micro-batch's loss is normalised by its own tokens (or "
        "completions), weighted by its share of the rank's completions, and ranks are averaged. update (ours): "
        "one denominator for the whole optimizer update on every rank, so every token (token-mean) or "
        "completion weighs the same whichever micro-batch or rank holds it (DAPO's token-level loss); for "
        "seq-mean-token-sum the denominator is completions x rollout.max_response_length.",
    )
    kl_beta: float = Field(
        0.0,
        ge=0,
        description="Weight of the k3 KL to the frozen reference, each token's term clamped to "
        "[-10, 10] (0.1 held Cosmos-Reason1-7B).",
    )
    unbiased_kl_estimate: bool = Field(
        False,
        description="Weight each token's k3 KL by the ratio exp(logp - old logp) (an unbiased estimate "
        "when the policy has moved from the sampler's).",
    )
    mu_iterations: int = Field(
        1,
        ge=1,
        description="Optimizer updates per step, each a pass over the step's completions (old log-probs "
        "from the first pass).",
    )
    entropy_coeff: float = Field(
        0.0,
        ge=0,
        description="Weight of the entropy bonus: the loss minus this times the mean entropy of each "
        "micro-batch's completion tokens (with gradient; 0: logged only).",
    )
    allowed_outdated_steps: int = Field(
        4, ge=0, description="Drop rollouts older than this many weight versions (0: only the current weights)."
    )
    on_policy: bool | None = Field(
        None,
        description="true: fully synchronous, each step sampled in the trainer's process with the newest "
        "weights (colocated engine). false: a rollout worker process per rank samples ahead of training "
        "(max_inflight_steps), its batches at most allowed_outdated_steps weight versions old (on the CPU the "
        "trainer and its worker each take their share of the cores). Unset: synchronous on the CPU, where the "
        "worker would share the trainer's cores and only the rollout's time could overlap, asynchronous on a "
        "GPU. With rollout.parallelism.tp_size > 1 the colocated tensor-parallel engine is "
        "used, synchronously.",
    )
    max_inflight_steps: int | None = Field(
        None,
        ge=0,
        description="Asynchronous rollout: batches sampled ahead of the one being trained (unset: 1; "
        "0: none ahead, each batch sampled after the previous step's weights arrive).",
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
        True,
        description="Divide each group's advantages by its reward std (GRPO); false: r - mean (Dr.GRPO). "
        "cosmos-rl's unbiased_advantage = true is scale_rewards = false.",
    )
    advantage_std: Literal["population", "sample"] = Field(
        "population",
        description="The group std advantages are divided by: population (numpy's np.std, cosmos-rl's) or sample "
        "(torch.std, TRL's: sqrt(n / (n - 1)) larger, so advantages are that much smaller).",
    )
    clip_advantages: bool = Field(
        False,
        description="Clip advantages to [advantage_low, advantage_high] (ours; cosmos-rl's language-model "
        "GRPO trainer does not clip, its diffusion trainers do). A group of n can reach sqrt(n - 1).",
    )
    advantage_low: float = Field(
        -5.0, le=0, description="With clip_advantages: advantages below this are raised to it."
    )
    advantage_high: float = Field(
        5.0, ge=0, description="With clip_advantages: advantages above this are lowered to it."
    )
    min_filter_prefix_tokens: int | None = Field(
        None,
        ge=1,
        description="Within a group, completions that share a longest common prefix of at least this many "
        "tokens but got different rewards leave that prefix out of the loss (it cannot be credited or "
        "blamed); a completion that is the whole prefix, stop token aside, keeps its tokens (unset: off).",
    )
    filter_reward_metric: str | list[str] = Field(
        default_factory=list,
        description="variant = 'dapo': the reward(s) whose sum, equal across a group, drops it in dynamic "
        "sampling; a name reward_function does not list is scored too, weight 0 in the total (empty: the total "
        "reward). Any variant: a group whose filter values are all equal masks no shared prefix.",
    )
    dynamic_sampling_max_rounds: int = Field(
        2,
        ge=0,
        description="variant = 'dapo': groups whose rewards are all equal are dropped and new prompts "
        "sampled, at most this many extra rounds per step (what stays short is logged). cosmos-rl's "
        "max_retry_for_on_policy sets it (<= 0: until the batch is full).",
    )
    mask_truncated_completions: bool = Field(
        False, description="Leave completions cut at rollout.max_response_length out of the loss (DAPO)."
    )
    behav_imp_weight_cap: float | None = Field(
        None,
        gt=0,
        description="With use_decoupled_loss: tokens whose trainer/sampler probability ratio exceeds this cap are "
        "left out of the loss (weight 0; e.g. 2-3; unset: no cap). No effect without use_decoupled_loss.",
    )
    use_decoupled_loss: bool = Field(
        False,
        description="Decoupled PPO loss: the ratio is against the trainer's old log-probs and each token is "
        "weighted by exp(old - sampler log-prob), the engine/trainer importance ratio.",
    )


# The keys only the GRPO table has: one of them in a table naming no type makes it GRPO (aliases.resolve_policy_type).
GRPO_ONLY_KEYS: tuple[str, ...] = tuple(
    k for k in GRPOPolicyConfig.model_fields if k not in SFTPolicyConfig.model_fields
)


def _policy_tag(value: Any) -> Any:
    """The union member a train_policy table is read as: its `type`, "sft" when it names none (loaded configs always
    name one; a table built in code may not)."""
    return value.get("type", "sft") if isinstance(value, dict) else getattr(value, "type", "sft")


# train.train_policy: SFT's or GRPO's table, picked by `type`.
TrainPolicy = Annotated[
    Annotated[SFTPolicyConfig, Tag("sft")] | Annotated[GRPOPolicyConfig, Tag("grpo")], Discriminator(_policy_tag)
]
