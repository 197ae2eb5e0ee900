"""The world model's parts in the Cosmos-Predict2.5 diffusers layout: DiT, Wan video VAE, text encoder.

    cosmos-train make-tiny-wfm outputs/tiny-wfm                 # the offline tiny folder (wfm/tiny_model.py)

    parts = load_wfm("outputs/tiny-wfm")
    emb = encode_prompts(parts, ["a bright ball rolls left"])  # [B, L, layers x hidden]
    z = encode_video(parts, video_uint8)                        # [B, C, T', H', W'] normalised latents
    v = predict_velocity(parts.transformer, z, sigma, emb)      # the DiT's velocity (noise - x0)
    video = decode_latents(parts, z)                            # uint8 [B, 3, T, H, W]
    export_wfm("outputs/tiny-wfm", policy_state_dict, RUN / "diffusers" / "final")  # wfm/model_export.py

What diffusers' `Cosmos2_5_PredictBasePipeline` does, written for training: the text encoder is a Qwen2.5-VL
(Cosmos-Reason1); a prompt's embedding is the system + user chat padded to max_length, the hidden states of
every layer normalised (zero mean, unit std over features) and concatenated ("full_concat"), which the DiT's
crossattn_proj maps to its width. The DiT gets the latents with a condition-mask channel (zeros: text2world),
timestep = sigma in [0, 1], and predicts the rectified-flow velocity; latents are normalised with the VAE's
latents_mean / latents_std. `concat_padding_mask` needs torchvision (absent here): the tiny DiT is built
without it; a real Cosmos-Predict2.5 folder has it and needs torchvision, as in diffusers.

Loading the whole pipeline: `Cosmos2_5_PredictBasePipeline.__init__` builds `CosmosSafetyChecker()` when given
no safety_checker, which raises ImportError without the `cosmos_guardrail` package; passing any object as
`safety_checker=` loads the tiny folder (tests/unit/test_wfm_model.py does). Training never uses the pipeline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import nn
from transformers import AutoModelForImageTextToText, AutoTokenizer, PreTrainedModel

from cosmos_train.errors import CheckpointError, ConfigError, ModelError
from cosmos_train.models.hf_folder import check_safetensors_file

if TYPE_CHECKING:  # diffusers is imported where it is used (a heavy import); these names are for hints only
    from diffusers import AutoencoderKLWan, CosmosTransformer3DModel

ModuleT = TypeVar("ModuleT", bound=nn.Module)

PIPELINE_CLASS = "Cosmos2_5_PredictBasePipeline"
# The system turn of Predict2.5's prompt chat (diffusers' _get_prompt_embeds), word for word.
SYSTEM_PROMPT = "You are a helpful assistant who will provide prompts to an image generator."
COMPONENTS = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")
WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json", ".bin", ".bin.index.json")
VAE_TEMPORAL, VAE_SPATIAL = 4, 8  # Wan2.1's VAE (Predict2.5's): 4x in time after the first frame, 8x in space


@dataclass
class WfmParts:
    """What training needs of a Predict2.5 folder. text_encoder / tokenizer are None when loaded without them."""

    transformer: CosmosTransformer3DModel
    vae: AutoencoderKLWan
    text_encoder: PreTrainedModel | None
    tokenizer: Any
    latents_mean: torch.Tensor  # [1, C, 1, 1, 1]
    latents_std: torch.Tensor  # [1, C, 1, 1, 1]
    latent_channels: int
    vae_scale_temporal: int = VAE_TEMPORAL
    vae_scale_spatial: int = VAE_SPATIAL


# ------------------------------------------------------------------------------------ loading
def local_folder(path: str | Path, revision: str | None) -> Path:
    """A local folder as it is; anything else is tried as a Hub id (HF_HUB_OFFLINE makes that fail fast)."""
    p = Path(path).expanduser()
    if p.is_dir():
        return p
    try:
        from huggingface_hub import snapshot_download  # why: the hub client only for a model named by hub id

        return Path(snapshot_download(str(path), revision=revision))
    except Exception as e:  # noqa: BLE001 - offline, unknown id, no access: one message
        raise ModelError(
            f"{path}: not a local folder, and the Hub copy could not be fetched ({type(e).__name__}: "
            f"{e}); give a diffusers folder (`cosmos-train make-tiny-wfm DIR` writes a tiny one)"
        ) from e


def _component_problem(folder: Path, component: str) -> str | None:
    """What is missing from one component's subfolder, or None."""
    sub = folder / component
    if not sub.is_dir():
        return f"missing {component}/"
    if component == "tokenizer":
        if not any((sub / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
            return f"{component}/ has no tokenizer.json or tokenizer_config.json"
        return None
    if not (sub / "config.json").is_file():
        return f"{component}/ has no config.json"
    if not any(f.name.endswith(WEIGHT_SUFFIXES) for f in sub.iterdir()):
        return f"{component}/ has no weights (*.safetensors)"
    return None


def check_folder(folder: Path, text_encoder: bool = True) -> None:
    """ModelError unless `folder` is a complete Cosmos-Predict2.5 diffusers folder (the scheduler is optional:
    training samples with its own)."""
    index = folder / "model_index.json"
    make = "`cosmos-train make-tiny-wfm DIR` writes a tiny one"
    if not index.is_file():
        raise ModelError(
            f"{folder}: no model_index.json; a world model is a diffusers folder with transformer/, vae/, "
            f"text_encoder/, tokenizer/ ({make})"
        )
    try:
        name = json.loads(index.read_text()).get("_class_name")
    except (ValueError, AttributeError) as e:
        raise ModelError(f"{index}: not a JSON object ({e}); restore it from the model's source ({make})") from e
    if name != PIPELINE_CLASS:
        raise ModelError(
            f"{index}: a {name} folder; world-model RL trains a {PIPELINE_CLASS} (Cosmos-Predict2.5) "
            "folder: DiT transformer/, Wan vae/, Qwen2.5-VL text_encoder/"
        )
    need = [c for c in COMPONENTS if c != "scheduler" and (text_encoder or c not in ("text_encoder", "tokenizer"))]
    problems = [p for c in need if (p := _component_problem(folder, c))]
    if problems:
        raise ModelError(
            f"{folder}: {'; '.join(problems)} (a {PIPELINE_CLASS} folder has "
            f"{', '.join(f'{c}/' for c in COMPONENTS)}; re-download it or point model_name_or_path at "
            "a complete one)"
        )
    for weights in sorted(w for c in need for w in (folder / c).glob("*.safetensors")):
        try:  # a header and a size check per file: a truncated one is named here, not by diffusers' bare OSError
            check_safetensors_file(weights)
        except CheckpointError as e:
            raise ModelError(f"world model {folder}: {e} (a downloaded model: download it again)") from None


def _frozen(module: ModuleT) -> ModuleT:
    """The VAE and text encoder are never trained: no grads, eval mode (no dropout)."""
    return module.requires_grad_(False).eval()


def load_wfm(
    path: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    *,
    text_encoder: bool = True,
    revision: str | None = None,
) -> WfmParts:
    """The folder's parts on `device`: the DiT and text encoder in `dtype`, the VAE in float32 (its encodes are the
    DDRL data targets); the VAE and text encoder frozen. text_encoder=False: runs that condition on precomputed
    embeddings skip it and its tokenizer.

        python -c "from cosmos_train.wfm.model import load_wfm; print(load_wfm('/tmp/tiny-wfm').latents_std)"
    """
    from diffusers import (  # why: diffusers is heavy, loaded only by world-model code
        AutoencoderKLWan,
        CosmosTransformer3DModel,
    )

    folder = local_folder(path, revision)
    check_folder(folder, text_encoder)
    transformer = CosmosTransformer3DModel.from_pretrained(folder, subfolder="transformer", torch_dtype=dtype)
    vae = _frozen(AutoencoderKLWan.from_pretrained(folder, subfolder="vae", torch_dtype=torch.float32).to(device))
    encoder, tokenizer = None, None
    if text_encoder:
        encoder = AutoModelForImageTextToText.from_pretrained(folder / "text_encoder", dtype=dtype)
        # transformers wraps PreTrainedModel.to in functools.wraps, which typeshed types as an unbound function
        encoder = _frozen(encoder.to(device))  # type: ignore[arg-type]
        tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    c = int(vae.config.z_dim)
    mean = torch.tensor(vae.config.latents_mean, dtype=torch.float32, device=device).view(1, c, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std, dtype=torch.float32, device=device).view(1, c, 1, 1, 1)
    # as the pipeline derives them: each temporal_downsample stage halves time, every stage halves space
    down = list(vae.config.temperal_downsample)
    return WfmParts(
        transformer.to(device),
        vae,
        encoder,
        tokenizer,
        mean,
        std,
        c,
        vae_scale_temporal=2 ** sum(down),
        vae_scale_spatial=2 ** len(down),
    )


# ------------------------------------------------------------------------------------ what training calls
def latent_shape(parts: WfmParts, num_frames: int, height: int, width: int) -> tuple[int, int, int, int]:
    """(C, T', H', W') of a num_frames x height x width video: 1 + (T-1)/4 latent frames, 8x smaller frames.
    ConfigError (naming what to change) for a shape the VAE or the DiT's patches cannot take."""
    problems = []
    st = parts.vae_scale_temporal
    if num_frames < 1 or (num_frames - 1) % st:
        problems.append(
            f"num_frames = {num_frames}: must be 1 + {st}k, e.g. {1 + st * max(1, (num_frames - 1) // st)} "
            f"(the VAE keeps the first frame and compresses the rest {st}x in time)"
        )
    patch = parts.transformer.config.patch_size
    step_h, step_w = parts.vae_scale_spatial * patch[1], parts.vae_scale_spatial * patch[2]
    if height < 1 or width < 1 or height % step_h or width % step_w:
        step = f"{step_h}" if step_h == step_w else f"{step_h} (height) and {step_w} (width)"
        problems.append(
            f"video size {width}x{height}: width and height must be multiples of {step} (VAE "
            f"{parts.vae_scale_spatial}x, DiT patch {patch[1]}x{patch[2]})"
        )
    if problems:
        raise ConfigError(problems, what="world-model video shape")
    return (
        parts.latent_channels,
        1 + (num_frames - 1) // st,
        height // parts.vae_scale_spatial,
        width // parts.vae_scale_spatial,
    )


def _prompt_ids(tokenizer: Any, prompts: list[str], max_length: int) -> torch.Tensor:
    """[B, max_length] ids of each prompt's system + user chat, cut or padded at the end (as the pipeline does)."""
    chats = [
        [
            {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
            {"role": "user", "content": [{"type": "text", "text": p}]},
        ]
        for p in prompts
    ]
    enc = tokenizer.apply_chat_template(
        chats,
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        add_generation_prompt=False,
        add_vision_id=False,
        max_length=max_length,
        truncation=True,
        padding="max_length",
    )
    return enc["input_ids"]


@torch.no_grad()
def encode_prompts(parts: WfmParts, prompts: list[str], max_length: int = 128) -> torch.Tensor:
    """float32 [B, max_length, layers x hidden]: Predict2.5's full_concat prompt embedding (no attention mask: the
    pipeline attends to the padding too). The chat's system turn takes ~20 of max_length tokens of Qwen's
    tokenizer (~40 of the tiny one's); the pipeline uses 512.

        python -c "from cosmos_train.wfm.model import *; print(encode_prompts(load_wfm('/tmp/tiny-wfm'), ['a']).shape)"
    """
    if parts.text_encoder is None or parts.tokenizer is None:
        raise ModelError(
            "this run loaded no text encoder (offline_text_embedding = true): prompts cannot be "
            "encoded; give precomputed embeddings or load the folder with its text_encoder/"
        )
    device = next(parts.text_encoder.parameters()).device
    ids = _prompt_ids(parts.tokenizer, prompts, max_length).to(device)
    # The language model only: same hidden states as the full model's, without the [B, L, vocab] logits.
    body = getattr(parts.text_encoder, "model", parts.text_encoder)
    hidden = body(input_ids=ids, output_hidden_states=True).hidden_states
    # hidden[0] is the token embedding; layers 1..N, each normalised over features in float32 (the pipeline does
    # it in the encoder's dtype: the same up to bf16 rounding)
    layers = [h.float() for h in hidden[1:]]
    return torch.cat([(h - h.mean(dim=-1, keepdim=True)) / (h.std(dim=-1, keepdim=True) + 1e-8) for h in layers], -1)


def _check_video(parts: WfmParts, video: torch.Tensor) -> None:
    """ValueError for a tensor that is not a uint8 video batch; ConfigError for a shape the VAE / DiT cannot take."""
    if video.dtype != torch.uint8 or video.ndim != 5 or video.shape[1] != 3:
        raise ValueError(f"encode_video takes uint8 [B, 3, T, H, W], got {video.dtype} {tuple(video.shape)}")
    latent_shape(parts, *video.shape[2:])


@torch.no_grad()
def encode_video(parts: WfmParts, video: torch.Tensor) -> torch.Tensor:
    """uint8 [B, 3, T, H, W] -> normalised float32 latents [B, C, T', H', W'] (the posterior's mode, as the pipeline
    encodes conditioning frames: deterministic)."""
    _check_video(parts, video)
    x = video.to(parts.latents_mean.device, torch.float32) / 127.5 - 1.0
    z = parts.vae.encode(x).latent_dist.mode()
    return (z.float() - parts.latents_mean) / parts.latents_std


@torch.no_grad()
def decode_latents(parts: WfmParts, latents: torch.Tensor) -> torch.Tensor:
    """Normalised latents [B, C, T', H', W'] -> uint8 [B, 3, 1 + 4(T'-1), 8H', 8W'] (pixels clamped to [-1, 1])."""
    z = latents.to(parts.latents_mean.device, torch.float32) * parts.latents_std + parts.latents_mean
    x = parts.vae.decode(z).sample.clamp(-1, 1)
    return ((x + 1) * 127.5).round().to(torch.uint8)


def predict_velocity(
    transformer: CosmosTransformer3DModel,
    latents: torch.Tensor,
    sigma: torch.Tensor,
    prompt_embeds: torch.Tensor,
    condition_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The DiT's velocity [B, C, T, H, W] for latents at noise level sigma [B] in [0, 1] (text2world: no
    conditioning frames). Differentiable; works on an FSDP2-sharded transformer (called as a module).

    The pipeline passes timestep [B, 1, T, 1, 1] (per latent frame, for conditioning frames); with no conditioning
    frame every frame has the same sigma, and the DiT's [B] form gives the same output (tested, bit-equal on CPU)
    without running each block's AdaLN on every token. Video2world (wfm/conditioning.py) passes sigma as
    [B, 1, T, 1, 1] and the condition-mask channel [B, 1, T, H, W] (None: zeros, text2world).
    """
    config = transformer.config  # FSDP2 keeps the module's attributes
    b, _, t, h, w = latents.shape
    dtype = next(transformer.parameters()).dtype
    kwargs: dict[str, Any] = {}
    if config.concat_padding_mask:  # zeros (no padding) resized by the DiT to the latent grid: any size is the same
        kwargs["padding_mask"] = latents.new_zeros(1, 1, h, w, dtype=dtype)
    # sigma stays float32 (as the pipeline's): the DiT's sinusoidal embedding casts after computing
    return transformer(
        hidden_states=latents.to(dtype),
        timestep=sigma.to(latents.device, torch.float32).reshape(b if sigma.numel() == b else (b, 1, t, 1, 1)),
        encoder_hidden_states=prompt_embeds.to(dtype),
        condition_mask=(
            latents.new_zeros(b, 1, t, h, w, dtype=dtype) if condition_mask is None else condition_mask.to(dtype)
        ),
        return_dict=False,
        **kwargs,
    )[0]


def transformer_blocks(transformer: CosmosTransformer3DModel) -> list[nn.Module]:
    """The DiT's blocks: the FSDP2 and activation-checkpointing units."""
    return list(transformer.transformer_blocks)
