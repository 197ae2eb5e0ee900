"""cosmos-rl's world-model recipe form, as this schema reads it: the tables and callbacks it may hold, each in one
stated state (implemented, accepted with no effect and why, or refused with what to do), cosmos-rl's own defaults
for the keys that change the result, and its other names for our [model.rl] keys."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

# the no-effect tables, each with why
NO_EFFECT_TABLES: dict[str, str] = {
    "model.net": "network overrides: the DiT's architecture is its folder's transformer/config.json",
    "model.resolution": "the size is dataloader_train.video_dataloader.video_size",
    "model.use_rf_ckpts": "says how to read cosmos-rl's .pt checkpoint; a diffusers folder is rectified flow",
    "model.tokenizer": "how the VAE chunks frames while encoding: memory, not the latents",
    "model.ema": "cosmos-rl updates its EMA copy only with the ema_model callback (refused here); without it the "
    "copy stays the starting weights, which the export need not hold",
    "model.text_encoder_class": "the text encoder is the folder's text_encoder/",
    "model.text_encoder_config": "the text encoder is the folder's text_encoder/",
    "trainer.grad_scaler_args": "no fp16 loss scaling (float32 / bfloat16 only)",
    "dataloader_val": "evaluation uses [evaluation] (fixed prompts and noise) and held-out dataset rows",
    "dataloader_train.image_dataloader": "video only",
    "dataloader_train.video_dataloader.dataloader": "cosmos-rl's webdataset loader settings (dataset_name, "
    'object_store, augmentors, caches): type = "web" reads the s3:// shards at video_dataloader.dataset_dir with '
    "video_dataloader's batch_size / num_workers (a different batch_size / num_workers here is refused)",
    "checkpoint.type": "checkpoints are torch.distributed.checkpoint folders",
}

# cosmos-rl's [[trainer.callbacks]] by name (cosmos_rl/utils/wfm/callback.py CALLBACK_CLS_MAPPING): implemented,
# accepted with no effect (why), or refused (what to do). A name not here is refused: cosmos-rl refuses it too.
GRAD_CLIP_ARGS = ("clip_norm", "force_finite")
CALLBACK_IMPLEMENTED = {"grad_clip": "clip_norm is trainer.grad_clip_norm, force_finite is trainer.grad_force_finite"}
CALLBACK_NO_EFFECT: dict[str, str] = {
    "iter_speed": "timing log: step_time and rollout_time are in metrics.jsonl",
    "param_count": "parameter-count log: the trainer logs the DiT's parameter count when it starts",
    "heart_beat": "liveness upload to S3: the flow's task state and metrics.jsonl show a live run",
    "device_monitor": "GPU memory / utilisation log",
    "manual_gc": "when Python collects garbage: memory housekeeping, the same math",
    "compile_tokenizer": "torch.compile of the VAE: speed, the same latents",
    "low_prec": "copies float32 master weights into low-precision ones: here the weights and optimizer state stay "
    "float32 and model.param_dtype is only the compute dtype",
    "frame_loss_log": "per-frame loss log",
    "every_n_sample_reg": "sample videos for viewing: [evaluation] samples fixed prompts from the trained weights "
    "(before, every_iter, after: RUN/samples/)",
    "every_n_sample_ema": "sample videos of cosmos-rl's EMA copy for viewing; without the ema_model callback that "
    "copy is the starting weights, which [evaluation]'s before-training samples show",
    "wandb": "wandb logging: [job] wandb_mode sends the metrics to wandb",
    "wandb_10x": "wandb logging: [job] wandb_mode sends the metrics to wandb",
    "dataloader_speed": "data-loading timing log",
    "reward_callback": "reward log: reward_mean and reward_<name> are in metrics.jsonl",
    "verify_data_batch_keys": "checks the first batches' keys: the dataset scan checks every row before training",
    "progress_bar": "console progress: the trainer logs every trainer.logging_iter iterations",
    "iteration_logger": "console log: the trainer logs every trainer.logging_iter iterations",
}
CALLBACK_REFUSED: dict[str, str] = {
    "ema_model": "keeps an EMA copy of the weights (model.ema); EMA weights are not kept here (the export is the "
    "trained weights): remove this callback",
    "every_n": "cosmos-rl's base class, not a callback a recipe runs: remove it",
}
CALLBACK_STATES: dict[str, str] = {
    **dict.fromkeys(CALLBACK_IMPLEMENTED, "implemented"),
    **dict.fromkeys(CALLBACK_NO_EFFECT, "no effect"),
    **dict.fromkeys(CALLBACK_REFUSED, "refused"),
}

# cosmos-rl's defaults (cosmos_rl/policy/config/wfm CosmosVisionGenConfig) for the keys that change the result, in
# this schema's names: a recipe in cosmos-rl's form gets these where it leaves a key out, not ours.
COSMOS_RL_DEFAULTS: dict[str, Any] = {
    "model": {
        "param_dtype": "bfloat16",  # ModelConfig.precision, with float32 master weights (the low_prec callback)
        "rl": {
            "sample_steps": 10,
            "num_generations": 8,
            "train_on": list(range(8)),
            "update_ref_every_iter": 16,
            "guidance": 0.0,
            "min_num_conditional_frames": 1,
            "max_num_conditional_frames": 1,
            "clip_range": 1e-4,
            "kl_beta": 0.01,
            "data_beta": 0.0,
            "use_same_seed": True,
        },
    },
    "trainer": {"max_iter": 25},
    "optimizer": {"lr": 1e-5, "weight_decay": 1e-4, "betas": [0.9, 0.99], "eps": 1e-8},
    "scheduler": {
        "f_start": [1e-6],
        "f_max": [1.0],
        "f_min": [1.0],
        "warm_up_steps": [1000],
        "cycle_lengths": [10_000_000_000_000],
    },
    "checkpoint": {"save_iter": 1000},
    # cosmos-rl scores with its remote reward (RemoteRewardConfig: reward_fn "dance_grpo") at the service URLs, sending
    # the generated latents (RemoteReward.compute_reward posts `latents`, not the decoded pixels)
    "reward": {"backend": "service", "fns": {"dance_grpo": 1.0}, "payload": "latent"},
}
# cosmos-rl's [model.rl] names for keys this schema names otherwise
RL_ALIASES = {"num_rollout": "num_generations", "clip_ratio": "clip_range"}


def is_cosmos_rl_form(raw: Mapping[str, Any]) -> bool:
    """A recipe in cosmos-rl's form names no model.model_name_or_path (cosmos-rl's schema has none: its model is
    [checkpoint] load_path); ours always does."""
    model = raw.get("model")
    return not (isinstance(model, dict) and model.get("model_name_or_path"))


def rename_rl_aliases(raw: dict[str, Any]) -> list[str]:
    """cosmos-rl's [model.rl] names (num_rollout, clip_ratio) to this schema's; both set is a problem."""
    rl = raw.get("model", {}).get("rl") if isinstance(raw.get("model"), dict) else None
    if not isinstance(rl, dict):
        return []
    out = []
    for alias, name in RL_ALIASES.items():
        if alias in rl:
            if name in rl:
                out.append(f"model.rl.{alias} and model.rl.{name}: the same setting (cosmos-rl's and ours); keep one")
            else:
                rl[name] = rl.pop(alias)
    return out


def apply_cosmos_rl_defaults(raw: dict[str, Any]) -> list[str]:
    """Fill the keys a cosmos-rl recipe left out with cosmos-rl's defaults; returns those keys. The model is
    [checkpoint] load_path; the algorithm is DDRL when data_beta > 0 (cosmos-rl has one trainer: the policy term +
    kl_beta x KL + data_beta x the data term)."""
    applied: list[str] = []

    def fill(node: dict[str, Any], defaults: Mapping[str, Any], prefix: str) -> None:
        for key, value in defaults.items():
            if isinstance(value, dict) and key != "fns":
                child = node.setdefault(key, {})
                if isinstance(child, dict):
                    fill(child, value, f"{prefix}{key}.")
            elif key not in node:
                node[key] = copy.deepcopy(value)
                applied.append(f"{prefix}{key}")

    if "reward" not in raw:
        raw["reward"] = copy.deepcopy(COSMOS_RL_DEFAULTS["reward"])
        applied.append("reward")
    fill(raw, {k: v for k, v in COSMOS_RL_DEFAULTS.items() if k != "reward"}, "")
    model, ckpt = raw["model"], raw.get("checkpoint", {})
    if (
        isinstance(model, dict)
        and isinstance(ckpt, dict)
        and ckpt.get("load_path")
        and not model.get("model_name_or_path")
    ):
        model["model_name_or_path"] = ckpt["load_path"]
    rl = model.get("rl") if isinstance(model, dict) else None
    if isinstance(rl, dict) and "algorithm" not in rl:
        rl["algorithm"] = (
            "ddrl" if isinstance(rl.get("data_beta"), int | float) and rl["data_beta"] > 0 else "flow_grpo"
        )
        applied.append("model.rl.algorithm")
    return applied
