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
the fps / padding-mask remaps), or refused by name with what to do (ema_model, conditioning frames on mock data,
a context-parallel size the DiT's heads or the launched ranks do not divide by, cosmos-rl's .pt checkpoints:
convert them to a diffusers folder).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, ValidationError

from cosmos_train.config.base import JobSettings, read_toml
from cosmos_train.config.compat import NoEffect
from cosmos_train.config.explain import explain_errors, unknown_keys
from cosmos_train.config.overrides import apply_overrides
from cosmos_train.config.paths import is_s3, looks_local, run_cache_root
from cosmos_train.config.schema import CheckpointConfig, LaunchConfig, LoggingConfig, ParallelismConfig
from cosmos_train.errors import ConfigError, not_a_folder
from cosmos_train.reward_service.handlers import HANDLERS, handler_names
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
from cosmos_train.wfm.mock_data import KEY as VIDEO_KEY
from cosmos_train.wfm.mock_data import mock_no_effect, read_mock_video, width_problem
from cosmos_train.wfm.rewards import LOCAL_REWARDS


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
    problems += read_mock_video(raw)  # cosmos-rl's mock video dataset: its keys fill ours (wfm/mock_data.py)
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
            out.append(_video_condition_state(cfg, key, c.dropout_rate))
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
    mock = cfg.dataloader_train.mock_video is not None
    for key, why in NO_EFFECT_TABLES.items():
        if mock and key == f"{VIDEO_KEY}.dataloader":  # cosmos-rl's mock dataset reads part of it: listed below
            out += [NoEffect(k, v, w) for k, v, w in mock_no_effect(cfg.video.dataloader or {})]
            continue
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
    if cfg.dataloader_train.type == "web" and v.pin_memory:
        why = "speed only: a clip is copied to the device once"
        out.append(NoEffect("dataloader_train.video_dataloader.pin_memory", v.pin_memory, why))
    elif cfg.dataloader_train.type != "web" and (v.num_workers or v.pin_memory):
        out.append(
            NoEffect(
                "dataloader_train.video_dataloader.num_workers / pin_memory",
                (v.num_workers, v.pin_memory),
                "clips are decoded once and kept in memory",
            )
        )
    return out


def _object_store_problems(cfg: WfmConfig) -> list[str]:
    """cosmos-rl's checkpoint.save_to_object_store / load_from_object_store ({enabled, bucket, credentials}): here
    a run on S3 is job.output_dir = "s3://bucket/prefix" (checkpoints uploaded as they complete, resume = true
    from the bucket), with the PROD_S3_CHECKPOINT_* credentials; enabled is accepted when output_dir says so."""
    out = []
    for key in ("save_to_object_store", "load_from_object_store"):
        store = getattr(cfg.checkpoint, key) or {}
        if not store.get("enabled"):
            continue
        bucket = store.get("bucket")
        on_s3 = is_s3(cfg.job.output_dir)
        if on_s3 and (not bucket or cfg.job.output_dir[len("s3://") :].split("/")[0] == bucket):
            continue
        want = f"s3://{bucket or 'BUCKET'}/PREFIX"
        out.append(
            f"checkpoint.{key}.enabled: a run's checkpoints go to S3 when job.output_dir is an s3:// URL; set "
            f'job.output_dir = "{want}" (credentials from PROD_S3_CHECKPOINT_ACCESS_KEY_ID / _SECRET_ACCESS_KEY / '
            "_ENDPOINT_URL / _REGION_NAME; checkpoint.resume = true finds the newest checkpoint there)"
            + (f", or set {key}.enabled = false" if on_s3 else "")
        )
    return out


def _web_problems(cfg: WfmConfig) -> list[str]:
    """type = "web": the shards are dataset_dir (s3://); cosmos-rl's own web keys name a dataset registered in
    its code (dataloader.dataset.dataset_name), which has no meaning here, and its batch keys must agree."""
    v, out = cfg.video, []
    if cfg.dataloader_train.mock_video is not None:  # cosmos-rl's mock video dataset: no shards (read_mock_video)
        return []
    if not v.dataset_dir.strip().startswith("s3://"):
        named = ((v.dataloader or {}).get("dataset") or {}).get("dataset_name")
        said = (
            f" (dataloader.dataset.dataset_name = {named!r} names a dataset registered in cosmos-rl's code; here "
            "the shards are named by URL)"
            if named
            else ""
        )
        out.append(
            f'dataloader_train.type = "web" reads webdataset shards from S3{said}: set '
            f"dataloader_train.video_dataloader.dataset_dir (now {v.dataset_dir!r}) to s3://bucket/prefix/ (every "
            '.tar under it) or a brace pattern s3://bucket/prefix/shard-{000000..000099}.tar; or type = "mock" '
            "for built-in prompts, or dataloader.dataset.len_t5 (and t5_dim, resolution, num_video_frames) for "
            "cosmos-rl's mock video dataset"
        )
        return out
    for key in ("batch_size", "num_workers"):
        theirs = (v.dataloader or {}).get(key)
        if theirs is not None and theirs != getattr(v, key):
            out.append(
                f"dataloader_train.video_dataloader.dataloader.{key} = {theirs}: cosmos-rl's web loader key; here "
                f"dataloader_train.video_dataloader.{key} (= {getattr(v, key)}) is read: set it to {theirs}"
            )
    return out


def _video_condition_state(cfg: WfmConfig, key: str, dropout_rate: float) -> tuple[str, str, str]:
    """The use_video_condition flag: the conditioning frames of model.rl min/max_num_conditional_frames."""
    rl = cfg.model.rl
    if dropout_rate > 0:
        return (
            key,
            "refused",
            f"dropout_rate = {dropout_rate:g} would blank the conditioning frames of that share of data-term "
            "samples; that dropout is not implemented: set it to 0",
        )
    if rl.max_num_conditional_frames == 0:
        return (key, "no effect", "model.rl.max_num_conditional_frames = 0: text2world, no conditioning frame")
    return (
        key,
        "implemented",
        f"video2world: each rollout group continues the first {rl.min_num_conditional_frames}.."
        f"{rl.max_num_conditional_frames} latent frames of its dataset clip (wfm/conditioning.py)",
    )


def _conditional_frame_problems(cfg: WfmConfig) -> list[str]:
    """Video2world settings that cannot run: min > max, no frame left to generate, no clips to condition on."""
    rl, v, out = cfg.model.rl, cfg.video, []
    lo, hi = rl.min_num_conditional_frames, rl.max_num_conditional_frames
    keys = "model.rl.min_num_conditional_frames / max_num_conditional_frames"
    if lo > hi:
        out.append(f"{keys} = {lo} / {hi}: min is above max; cosmos-rl draws k in [min, max]: swap them")
    latent_frames = 1 + (v.num_frames - 1) // 4
    if hi >= latent_frames and (v.num_frames - 1) % 4 == 0:
        out.append(
            f"model.rl.max_num_conditional_frames = {hi}: a {v.num_frames}-frame video has {latent_frames} latent "
            f"frames, so {hi} given would leave none to generate; set it to at most {latent_frames - 1} or raise "
            "dataloader_train.video_dataloader.num_frames (1 + 4k)"
        )
    if hi > 0 and cfg.dataloader_train.type == "mock":
        took = [
            k
            for k in ("min_num_conditional_frames", "max_num_conditional_frames")
            if f"model.rl.{k}" in cfg.cosmos_rl_defaults
        ]
        said = f" ({' and '.join(took)}: cosmos-rl's default, the recipe leaves it out)" if took else ""
        out.append(
            f"{keys} = {lo} / {hi}{said}: video2world continues the first frames of dataset clips, and "
            'dataloader_train.type = "mock" has no videos: set type = "local" with a dataset_dir (or "web"), or '
            "set both to 0 for text2world (--set model.rl.min_num_conditional_frames=0 "
            "--set model.rl.max_num_conditional_frames=0)"
        )
    return out


def wfm_problems(cfg: WfmConfig, check_paths: bool) -> list[str]:
    """Combinations that type-check but cannot run, each with what to change."""
    out = []
    mp, rl, v = cfg.model_parallel, cfg.model.rl, cfg.video
    out += _context_parallel_problems(cfg, check_paths)
    for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size", "pipeline_parallel_size"):
        if getattr(mp, key) > 1:
            out.append(
                f"model_parallel.{key} = {getattr(mp, key)}: only data parallelism (FSDP / HSDP) is "
                "implemented for the DiT; set it to 1"
            )
    out += _conditional_frame_problems(cfg)
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
        out += _web_problems(cfg)
    if dl.type == "local" and not v.dataset_dir:
        out.append(
            'dataloader_train.video_dataloader.dataset_dir: required with type = "local" (a folder with '
            "videos/*.mp4 and metas/*.txt)"
        )
    if rl.algorithm == "ddrl" and rl.data_beta > 0 and dl.type == "mock":
        out.append(
            'model.rl.algorithm = "ddrl" trains on dataset videos (data_beta > 0): set '
            'dataloader_train.type = "local" with a dataset_dir (or "web" with s3:// shards), or data_beta = 0'
        )
    if v.offline_text_embedding and dl.type == "mock":
        out.append(
            'dataloader_train.video_dataloader.offline_text_embedding needs type = "local" or "web" (the '
            "embeddings are the dataset's text_embedding/*.pickle, or the shards' <key>.npy / .pickle)"
        )
    out += _mock_video_problems(cfg, check_paths)
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
    out += _object_store_problems(cfg)
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
    if check_paths and (blocked := not_a_folder("job.output_dir", cfg.job.output_dir)):  # run folders go there
        out.append(blocked)
    return out


def _context_parallel_problems(cfg: WfmConfig, check_paths: bool) -> list[str]:
    """context_parallel_size (Ulysses, wfm/context_parallel.py): the launched ranks must hold whole CP groups, and
    the DiT's attention heads must divide by it (read from a local model folder; the trainer checks again, and
    checks that a video's tokens divide too)."""
    cp, m = cfg.model_parallel.context_parallel_size, cfg.model
    if cp == 1:
        return []
    out = []
    if cfg.launch.nproc_per_node != "auto":
        world = int(cfg.launch.nproc_per_node) * cfg.launch.nnodes
        shard = m.fsdp_shard_size if m.fsdp_shard_size != -1 else max(1, world // (m.dp_replicate_size * cp))
        if world != m.dp_replicate_size * shard * cp:
            out.append(
                f"model_parallel.context_parallel_size = {cp}: {world} processes (launch.nproc_per_node x "
                f"nnodes) are not model.dp_replicate_size x fsdp_shard_size x context_parallel_size = "
                f"{m.dp_replicate_size} x {shard} x {cp}; launch a multiple of {m.dp_replicate_size * cp} "
                "processes (fsdp_shard_size = -1 takes the rest) or change the sizes"
            )
    folder = Path(m.model_name_or_path or "").expanduser() / "transformer" / "config.json"
    if check_paths and m.model_name_or_path and looks_local(m.model_name_or_path) and folder.is_file():
        heads = int(json.loads(folder.read_text()).get("num_attention_heads", 1))
        if heads % cp:
            out.append(
                f"model_parallel.context_parallel_size = {cp}: the DiT of {m.model_name_or_path} has {heads} "
                f"attention heads, which do not divide by {cp} (Ulysses context parallel gives each rank "
                "heads / cp of them); use a size that divides the heads"
            )
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


def _mock_video_problems(cfg: WfmConfig, check_paths: bool) -> list[str]:
    """cosmos-rl's mock video dataset: its rows carry their prompt embeddings (t5_dim wide, no text to encode), so
    the DiT must take that width (read from a local model folder; the trainer checks again) and classifier-free
    guidance has no empty prompt to embed."""
    mock, out = cfg.dataloader_train.mock_video, list[str]()
    if mock is None:
        return out
    here = f"{VIDEO_KEY}.dataloader.dataset"
    if cfg.model.rl.guidance > 0:
        out.append(
            f"model.rl.guidance = {cfg.model.rl.guidance:g}: classifier-free guidance needs the empty prompt's "
            f"embedding, and cosmos-rl's mock dataset ({here}.len_t5 set) has embeddings, no prompts to encode; set "
            "guidance = 0"
        )
    m = cfg.model.model_name_or_path
    folder = Path(m or "").expanduser() / "transformer" / "config.json"
    if check_paths and m and looks_local(m) and folder.is_file():
        problem = width_problem(mock.t5_dim, embedding_width(json.loads(folder.read_text())), m)
        out += [problem] if problem else []
    return out


def embedding_width(transformer_config: Mapping[str, Any]) -> int:
    """The width of the prompt embeddings a Predict DiT takes (its transformer/config.json): the full_concat its
    cross-attention projection maps, or its text_embed_dim without one."""
    c = transformer_config
    return int(c["crossattn_proj_in_channels"] if c.get("use_crossattn_projection") else c["text_embed_dim"])
