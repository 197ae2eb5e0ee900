"""What each entry of a world-model recipe's imaginaire lists does here: [[model.conditioner]] and
[[trainer.callbacks]] entries as (key, "implemented" | "no effect" | "refused", why), and the list of keys a loaded
config accepted with no effect (`wfm_no_effect`: these entries, cosmos-rl's tables we do not read, loader flags)."""

from __future__ import annotations

from typing import Any

from cosmos_train.config.compat import NoEffect
from cosmos_train.wfm.config_schema import WfmConfig
from cosmos_train.wfm.cosmos_rl_form import (
    CALLBACK_IMPLEMENTED,
    CALLBACK_NO_EFFECT,
    CALLBACK_REFUSED,
    CALLBACK_STATES,
    GRAD_CLIP_ARGS,
    NO_EFFECT_TABLES,
)
from cosmos_train.wfm.mock_data import KEY as VIDEO_KEY
from cosmos_train.wfm.mock_data import mock_no_effect


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


def wfm_no_effect(cfg: WfmConfig) -> list[NoEffect]:
    """The keys this config set that have no effect here, each with why (`Config.no_effect`'s list)."""
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
