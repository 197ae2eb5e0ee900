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
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cosmos_train.errors import ConfigError

ENV_PREFIX = "COSMOS_TRAIN__"


class Section(BaseModel):
    """Base of every TOML table: unknown keys are errors, assignment is validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)


# ----------------------------------------------------------------------------------------- data
class VisionConfig(Section):
    """Per-media vision settings (qwen-vl-utils names), applied to every video/image of the dataset
    unless the row itself sets them."""

    fps: float | None = Field(None, description="Frames sampled per second of video (default 2.0).")
    nframes: int | None = Field(None, description="Exact frame count to sample; overrides fps.")
    min_frames: int | None = Field(None, description="Lower bound on sampled frames (default 4).")
    max_frames: int | None = Field(None, description="Upper bound on sampled frames (default 768).")
    max_pixels: int | None = Field(None, description="Max pixels per frame after resize.")
    min_pixels: int | None = Field(None, description="Min pixels per frame after resize.")
    total_pixels: int | None = Field(None, description="Pixel budget over all frames of a clip.")
    resized_height: int | None = Field(None, description="Fixed height (rounded to 28).")
    resized_width: int | None = Field(None, description="Fixed width (rounded to 28).")
    video_start: float | None = Field(None, description="Clip start, seconds.")
    video_end: float | None = Field(None, description="Clip end, seconds.")

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
        None, description="Hold out this fraction (<1) or count (>=1) of rows as the validation split."
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
    vision: VisionConfig = Field(default_factory=VisionConfig)
    allow_media_outside_root: bool = Field(
        False,
        description="Read media whose path (symlinks followed) lies outside the dataset's media roots: media_path, "
        "the annotation / data file's folder, local_dir, the video folder or extracted clips. Off: such a row "
        "is a bad row (media_outside_root), so a row like ../../etc/x.mp4 reads nothing it should not.",
    )


class OverlongPenaltyConfig(Section):
    enable_overlong_penalty: bool = Field(False, description="Soft linear penalty near max length (DAPO).")
    buffer_length: int = Field(4096, description="Tokens before max_response_length where the penalty ramps.")
    penalty_factor: float = Field(1.0, description="Penalty at max_response_length.")


class RemoteRewardFn(Section):
    name: str
    weight: float = 1.0
    score_key: str | None = None
    clip_min: float | None = None
    clip_max: float | None = None


class RemoteRewardConfig(Section):
    scale: float = Field(1.0, description="Multiplier on the service's scores.")
    reward_fns: list[RemoteRewardFn] = Field(default_factory=list)
    batch_size: int = Field(8, description="Items per request to the reward service.")


class TrainPolicyConfig(Section):
    """[train.train_policy]: SFT or GRPO, and the dataset it trains on."""

    type: Literal["sft", "grpo"] | None = Field(
        None, description="sft | grpo; inferred as grpo when a GRPO-only key is present, else sft."
    )
    dataset: DatasetConfig = Field(default_factory=DatasetConfig)
    # --- SFT
    mini_batch: int = Field(2, description="Samples per micro-batch (gradient accumulation splits the batch).")
    conversation_column_name: str = Field("conversations", description="Column holding the chat.")
    system_prompt: str | None = Field(None, description="System turn prepended to rows that have none.")
    dataloader_shuffle: bool = Field(True, description="Shuffle rows every epoch.")
    dataloader_seed: int = Field(0, description="Seed of the shuffle (the epoch is added).")
    dataloader_num_workers: int = Field(0, description="DataLoader workers decoding video.")
    dataloader_prefetch_factor: int | None = Field(None, description="Batches prefetched per worker.")
    dataloader_drop_last: bool = Field(True, description="Drop the last incomplete batch of an epoch.")
    overlength: Literal["error", "truncate", "skip"] = Field(
        "error",
        description="A sample longer than model_max_length: stop naming it, cut its text end, or skip it.",
    )
    # --- GRPO
    variant: Literal["grpo", "gspo", "dapo"] = Field("grpo", description="Policy-gradient variant.")
    prompt_column_name: str | None = Field(None, description="Column holding the prompt.")
    reward_function: str | list[str] | dict[str, float] = Field(
        default_factory=lambda: ["single_choice"], description="Reward name(s), or {name = weight}."
    )
    temperature: float = Field(1.0, description="Rollout sampling temperature.")
    epsilon_low: float = Field(0.2, description="PPO clip below 1.")
    epsilon_high: float = Field(0.2, description="PPO clip above 1 (DAPO clip-higher: 0.28).")
    lower_bound_ratio: float = Field(3.0, description="Dual-clip bound c for negative advantages.")
    loss_type: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    kl_beta: float = Field(0.0, description="k3 KL to the frozen reference (0.1 held Cosmos-Reason1-7B).")
    mu_iterations: int = Field(1, description="Optimizer passes over each rollout batch.")
    entropy_coeff: float = 0.0
    allowed_outdated_steps: int = Field(4, description="Drop rollouts older than this many weight versions.")
    on_policy: bool = Field(False, description="Fully synchronous rollout/training.")
    max_inflight_steps: int | None = None
    overlong_reward: OverlongPenaltyConfig = Field(default_factory=OverlongPenaltyConfig)
    use_remote_reward: bool = False
    remote_reward: RemoteRewardConfig = Field(default_factory=RemoteRewardConfig)
    behav_imp_weight_cap: float | None = Field(None, description="Truncated IS cap on sampler/trainer ratio.")
    use_decoupled_loss: bool = False


_GRPO_ONLY_KEYS = ("temperature", "epsilon_low", "epsilon_high", "kl_beta", "use_remote_reward")


class CheckpointConfig(Section):
    enable_checkpoint: bool = Field(True, description="Save resumable checkpoints.")
    save_freq: int = Field(100, description="Save every this many steps.")
    save_mode: Literal["async", "sync"] = Field("async", description="async overlaps the write with training.")
    max_keep: int = Field(2, description="Checkpoints kept (-1 keeps all).")
    export_safetensors: bool = Field(True, description="Export HF safetensors at each save and at the end.")
    upload_hf: bool = False
    hf_repo_name: str | None = None
    # `true` in the seed guides means the final one; "all" uploads every export.
    upload_s3: Literal[False, "final", "all"] | bool = False
    s3_bucket: str | None = None
    s3_prefix: str = "outputs"

    @field_validator("upload_s3", mode="after")
    @classmethod
    def _true_means_final(cls, v: Any) -> Any:
        return "final" if v is True else v


class TrainConfig(Section):
    optm_name: Literal["AdamW", "Adam"] = "AdamW"
    optm_lr: float = 1e-6
    optm_impl: Literal["fused", "foreach", "for-loop"] = Field(
        "fused", description="AdamW implementation: one fused kernel (CUDA and CPU), foreach, or a plain loop."
    )
    optm_weight_decay: float = 0.01
    optm_betas: tuple[float, float] = (0.9, 0.999)
    optm_warmup_steps: float = Field(20, description="Warmup steps, or a fraction (<1) of total steps.")
    optm_decay_type: Literal["none", "linear", "cosine", "sqrt"] = "none"
    optm_min_lr_factor: float = Field(0.0, description="Decay floor as a fraction of optm_lr.")
    optm_grad_norm_clip: float = Field(1.0, description="Clip total grad norm (0 disables).")
    epsilon: float = Field(1e-6, description="Optimizer eps (not the PPO clip).")
    master_dtype: Literal["float32", "bfloat16"] = "float32"
    param_dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "bfloat16", description="Compute dtype of FSDP params (float32 is used on CPU)."
    )
    fsdp_reduce_dtype: Literal["float32", "bfloat16"] = "float32"
    fsdp_offload: bool = False
    fsdp_reshard_after_forward: Literal["default", "always", "never"] = "default"
    logprob_dtype: Literal["float32", "bfloat16"] = "float32"
    train_batch_per_replica: int = Field(
        8, description="SFT: samples per model replica per step (its dp_shard ranks split them). GRPO: rollouts."
    )
    epoch: int = 1
    max_num_steps: int | None = Field(None, description="Stop after this many optimizer steps.")
    output_dir: str = Field("./outputs", description="A timestamp sub-folder is appended per run.")
    resume: bool | str = Field(False, description="true: newest checkpoint in output_dir; or a path.")
    seed: int = 0
    deterministic: bool = False
    compile: bool = False
    async_tp_enabled: bool = False
    sequence_packing: bool = Field(False, description="Pack samples padding-free into one sequence.")
    save_ckpt_at_exit: bool = Field(True, description="Checkpoint on SIGTERM/SIGUSR1 before exiting.")
    sync_weight_interval: int = Field(1, description="GRPO: steps between weight syncs to rollout.")
    ckpt: CheckpointConfig = Field(default_factory=CheckpointConfig)
    train_policy: TrainPolicyConfig = Field(default_factory=TrainPolicyConfig)

    @field_validator("optm_warmup_steps")
    @classmethod
    def _warmup_nonneg(cls, v: float) -> float:
        if v < 0:
            raise ValueError("must be >= 0 (a step count, or a fraction < 1 of total steps)")
        return v


class ParallelismConfig(Section):
    dp_shard_size: int = Field(-1, description="FSDP shard group size; -1 = all remaining ranks.")
    dp_replicate_size: int = Field(1, description="HSDP replicas (1 for GRPO).")
    tp_size: int = 1
    cp_size: int = 1
    pp_size: int = 1
    n_init_replicas: int = 1

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
    r: int = 8
    lora_alpha: int = 8
    lora_dropout: float = 0.0
    target_modules: str | list[str] = "all-linear"


class PolicyConfig(Section):
    model_name_or_path: str = Field(
        "nvidia/Cosmos-Reason1-7B", description="Hub id or local folder (from_pretrained layout)."
    )
    model_revision: str | None = None
    model_max_length: int = Field(4096, description="Max tokens per sample, vision tokens included.")
    model_gradient_checkpointing: bool = True
    freeze_pattern: list[str] | str | None = Field(None, description="Regexes of parameter names to freeze.")
    trainable_pattern: list[str] | str | None = Field(None, description="Regexes: train only these.")
    parallelism: ParallelismConfig = Field(default_factory=ParallelismConfig)
    lora: LoraConfig | None = None

    @model_validator(mode="after")
    def _patterns_exclusive(self) -> PolicyConfig:
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
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    repetition_penalty: float = 1.0


class RolloutConfig(Section):
    backend: Literal["vllm", "hf"] = Field("vllm", description="vllm on GPU; hf (transformers) anywhere.")
    n_generation: int = Field(16, description="Completions per prompt (the GRPO group size).")
    batch_size: int = Field(1, description="Prompts per rollout batch.")
    max_response_length: int = 2048
    gpu_memory_utilization: float = 0.8
    quantization: Literal["none", "fp8"] = "none"
    enable_chunked_prefill: bool = False
    sampling_config: SamplingConfig = Field(default_factory=SamplingConfig)
    seed: int | None = None
    parallelism: ParallelismConfig = Field(default_factory=lambda: ParallelismConfig(dp_shard_size=1))


class ValidationConfig(Section):
    enable: bool = False
    freq: int = Field(20, description="Validate every this many steps.")
    batch_size: int = 8
    dataset: DatasetConfig | None = Field(None, description="Default: the train dataset's held-out split.")
    temperature: float = 0.0
    n_generation: int = 1
    max_response_length: int = 256
    reward_function: str | list[str] | dict[str, float] = Field(default_factory=lambda: ["single_choice"])


class LoggingConfig(Section):
    logger: list[Literal["console", "wandb"]] = Field(default_factory=lambda: ["console"])
    project_name: str = "cosmos_train"
    experiment_name: str | None = None
    log_interval: int = 1


class LaunchConfig(Section):
    """How torchrun starts the policy processes (cosmos-rl infers this from the GPUs it finds)."""

    nnodes: int = 1
    nproc_per_node: int | Literal["auto"] = Field(
        "auto", description="'auto': every GPU, or the parallelism product on CPU (2 when dp_shard_size=-1)."
    )
    node_rank: int = 0
    rdzv_endpoint: str | None = Field(None, description="host:port of node 0 for multi-node runs.")
    max_restarts: int = 0


class Config(Section):
    """The whole job. `Config()` alone is valid: the reference framework's defaults."""

    redis: str | None = Field(None, description="cosmos-rl's controller port; accepted, unused (no Redis here).")
    train: TrainConfig = Field(default_factory=TrainConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    launch: LaunchConfig = Field(default_factory=LaunchConfig)
    custom: dict[str, Any] = Field(default_factory=dict, description="Free-form, for users' dataset scripts.")

    @property
    def policy_type(self) -> Literal["sft", "grpo"]:
        return self.train.train_policy.type or "sft"

    def to_toml(self) -> str:
        """The resolved config as TOML (None values, which TOML cannot hold, are left out)."""
        return tomli_w.dumps(_drop_none(self.model_dump(mode="json")))

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(self.to_toml())
        tmp.replace(path)
        return path


# ------------------------------------------------------------------------------------- aliases
# (alias path, canonical path): keys that appear only in the seed guides.
ALIASES: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    (("grpo", "num_samples_per_prompt"), ("rollout", "n_generation")),
    (("grpo", "kl_penalty"), ("train", "train_policy", "kl_beta")),
    (("train", "train_policy", "kl_penalty"), ("train", "train_policy", "kl_beta")),
    (("train", "train_policy", "rollout_batch_size"), ("rollout", "batch_size")),
    # cosmos-rl's world-model (--wfm-mode) recipes name the policy parallelism this way.
    (("model", "fsdp_shard_size"), ("policy", "parallelism", "dp_shard_size")),
    (("model", "dp_replicate_size"), ("policy", "parallelism", "dp_replicate_size")),
    (("model_parallel", "context_parallel_size"), ("policy", "parallelism", "cp_size")),
    (("model_parallel", "tensor_parallel_size"), ("policy", "parallelism", "tp_size")),
]


def _apply_aliases(raw: dict[str, Any], problems: list[str]) -> None:
    for alias, canonical in ALIASES:
        parent = _get_parent(raw, alias)
        if parent is None or alias[-1] not in parent:
            continue
        value = parent.pop(alias[-1])
        target = _ensure_parent(raw, canonical)
        if canonical[-1] in target and target[canonical[-1]] != value:
            problems.append(
                f"{'.'.join(alias)} = {value!r} conflicts with {'.'.join(canonical)} = "
                f"{target[canonical[-1]]!r}: they are the same setting, keep one"
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
    source = str(path) if path is not None else None
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError([f"config file {p} does not exist"], source)
        try:
            raw = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError([f"TOML syntax: {e}"], source) from e
    return config_from_dict(raw, overrides, os.environ if env is None else env, source, check_paths)


def config_from_dict(
    raw: dict[str, Any],
    overrides: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    source: str | None = None,
    check_paths: bool = False,
) -> Config:
    problems: list[str] = []
    raw = copy.deepcopy(raw)
    # The seed guides' RL recipe says GRPO only through these aliases (no `type`).
    tp_raw = raw.get("train", {}).get("train_policy", {})
    rl_alias = "grpo" in raw or (isinstance(tp_raw, dict) and "rollout_batch_size" in tp_raw)
    _apply_aliases(raw, problems)
    for key_path, value in env_overrides(env or {}):
        set_path(raw, key_path, value)
    for text in overrides:
        key_path, value = parse_override(text)
        set_path(raw, key_path, value)
    _apply_aliases(raw, problems)  # an override may use an alias name too
    _infer_policy_type(raw, rl_alias)
    problems += unknown_keys(raw, Config)
    if problems:
        raise ConfigError(problems, source)
    try:
        cfg = Config.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(_explain(e), source) from None
    # Resolve the type now: the written config.toml holds every GRPO default, which would
    # otherwise re-infer "grpo" when a process reads it back.
    cfg.train.train_policy.type = cfg.policy_type
    problems += semantic_problems(cfg, check_paths)
    if problems:
        raise ConfigError(problems, source)
    return cfg


def unknown_keys(raw: Any, model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every key not in the schema, with the closest valid key suggested."""
    if not isinstance(raw, dict):
        return []
    problems = []
    fields = model.model_fields
    for key, value in raw.items():
        where = f"{prefix}{key}"
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1, cutoff=0.6)
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
    """The Section class inside an annotation like `DatasetConfig | None` or `list[RemoteRewardFn]`."""
    if isinstance(annotation, type) and issubclass(annotation, Section):
        return annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        found = _section_model(arg)
        if found is not None:
            return found
    return None


def _explain(e: ValidationError) -> list[str]:
    out = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith(("function-", "literal[")))
        # pydantic reports union members separately; keep the first message per key.
        msg = err["msg"].removeprefix("Value error, ")
        line = f"{loc or 'config'}: {msg} (got {err.get('input')!r})"
        if not any(o.startswith(f"{loc}:") for o in out):
            out.append(line)
    return out


def semantic_problems(cfg: Config, check_paths: bool) -> list[str]:
    """Combinations that type-check but cannot run, each with what to change."""
    out = []
    t, ck = cfg.train, cfg.train.ckpt
    if ck.upload_hf and not ck.hf_repo_name:
        out.append("train.ckpt.hf_repo_name: required when upload_hf = true")
    if ck.upload_s3 and not ck.s3_bucket:
        out.append("train.ckpt.s3_bucket: required when upload_s3 is set")
    if ck.save_freq < 1:
        out.append("train.ckpt.save_freq: must be >= 1")
    mb = t.train_policy.mini_batch
    if cfg.policy_type == "sft" and (mb < 1 or t.train_batch_per_replica % mb):
        out.append(
            f"train.train_policy.mini_batch: {mb} must divide train.train_batch_per_replica "
            f"({t.train_batch_per_replica}) (micro-batches of equal size)"
        )
    for sec, par in (("policy.parallelism", cfg.policy.parallelism), ("rollout.parallelism", cfg.rollout.parallelism)):
        for key in ("dp_replicate_size", "tp_size", "cp_size", "pp_size"):
            if getattr(par, key) < 1:
                out.append(f"{sec}.{key}: must be >= 1")
        if par.dp_shard_size == 0 or par.dp_shard_size < -1:
            out.append(f"{sec}.dp_shard_size: must be >= 1, or -1 for all remaining ranks")
    if cfg.policy_type == "grpo" and cfg.policy.parallelism.dp_replicate_size != 1:
        out.append("policy.parallelism.dp_replicate_size: GRPO runs one replica; set it to 1")
    if t.max_num_steps is not None and t.max_num_steps < 1:
        out.append("train.max_num_steps: must be >= 1")
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


