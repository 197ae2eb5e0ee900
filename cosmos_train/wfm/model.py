"""The world model's parts in the Cosmos-Predict2.5 diffusers layout: DiT, Wan video VAE, text encoder.

    cosmos-train make-tiny-wfm outputs/tiny-wfm                 # the offline tiny folder (CPU, seconds)
    python -c "from cosmos_train.wfm.model import make_tiny_wfm; make_tiny_wfm('/tmp/tiny-wfm')"

    parts = load_wfm("outputs/tiny-wfm")
    emb = encode_prompts(parts, ["a bright ball rolls left"])  # [B, L, layers x hidden]
    z = encode_video(parts, video_uint8)                        # [B, C, T', H', W'] normalised latents
    v = predict_velocity(parts.transformer, z, sigma, emb)      # the DiT's velocity (noise - x0)
    video = decode_latents(parts, z)                            # uint8 [B, 3, T, H, W]
    export_wfm("outputs/tiny-wfm", policy_state_dict, RUN / "diffusers" / "final")

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
import os
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from safetensors.torch import save_file
from torch import nn
from transformers import AutoModelForImageTextToText, AutoTokenizer, PreTrainedModel

from cosmos_train.errors import CheckpointError, ConfigError, ModelError
from cosmos_train.models.hf_folder import check_safetensors_file
from cosmos_train.models.tiny import make_tiny_model

if TYPE_CHECKING:  # diffusers is imported where it is used (a heavy import); these names are for hints only
    from diffusers import AutoencoderKLWan, CosmosTransformer3DModel

ModuleT = TypeVar("ModuleT", bound=nn.Module)

PIPELINE_CLASS = "Cosmos2_5_PredictBasePipeline"
# The system turn of Predict2.5's prompt chat (diffusers' _get_prompt_embeds), word for word.
SYSTEM_PROMPT = "You are a helpful assistant who will provide prompts to an image generator."
COMPONENTS = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")
TRANSFORMER_WEIGHTS = "diffusion_pytorch_model.safetensors"
WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json", ".bin", ".bin.index.json")
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
)
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


# ------------------------------------------------------------------------------------ the tiny folder
def _tiny_vae(latent_channels: int, base_dim: int = 16) -> AutoencoderKLWan:
    """Wan2.1's VAE layout at base_dim 16: three down stages (8x space), time halved twice (4x)."""
    from diffusers import AutoencoderKLWan  # why: diffusers is heavy, loaded only by world-model code

    return AutoencoderKLWan(
        base_dim=base_dim,
        z_dim=latent_channels,
        dim_mult=[1, 2, 2, 2],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
        latents_mean=[0.0] * latent_channels,
        latents_std=[1.0] * latent_channels,
    )


def _identity_like(conv: nn.Conv2d | nn.Conv3d, average: bool = False) -> None:
    """A conv that copies channel o % in_channels of the current frame's centre pixel to output channel o (with
    `average`, the mean of its spatial window instead: a strided downsample that keeps a region's brightness).
    The current frame is the last temporal tap: Wan's causal convs pad in the past only."""
    w = torch.zeros_like(conv.weight)
    k = w.shape[2:]
    t = (k[0] - 1,) if len(k) == 3 else ()
    for o in range(w.shape[0]):
        i = o % w.shape[1]
        if average:
            w[(o, i, *t)] = 1.0 / (k[-1] * k[-2])
        else:
            w[(o, i, *t, k[-2] // 2, k[-1] // 2)] = 1.0
    conv.weight.data.copy_(w)
    if conv.bias is not None:
        conv.bias.data.zero_()


def _pass_through(vae: AutoencoderKLWan) -> None:
    """Make a random Wan VAE carry latents to pixels (and pixels to latents). Measured: a randomly initialised
    AutoencoderKLWan's decoded frames do not depend on its latents (a linear read-out of its last features
    explains ~0% of a latent channel; brightness, motion and smoothness of decodes vary by < 1%), so no pixel
    reward could be learned through it. Here every residual branch and attention output starts at zero (each
    block passes its input through), and every other conv copies channels (o <- o mod in) at the current frame's
    centre (strided downsamples average their window): the decoder renders the normalised latent channels 0-2
    as RGB (brightness follows them), the encoder writes RGB into the latent channels. The architecture and
    the folder are the real ones; only the starting weights are chosen."""
    zeroed = set()
    for m in vae.modules():
        kind = type(m).__name__
        for part in ({"WanResidualBlock": ("conv2",), "WanAttentionBlock": ("proj",)}).get(kind, ()):
            conv = getattr(m, part)
            conv.weight.data.zero_()
            conv.bias.data.zero_()
            zeroed.add(id(conv))
    for name, m in vae.named_modules():
        if isinstance(m, nn.Conv2d | nn.Conv3d) and id(m) not in zeroed and not name.endswith("to_qkv"):
            stride = m.stride[-1] if isinstance(m.stride, tuple) else m.stride
            _identity_like(m, average=stride > 1)


def _tiny_transformer(
    latent_channels: int,
    text_dim: int,
    heads: int = 2,
    *,
    text_embed_dim: int | None = None,
    max_size: tuple[int, int, int] = (16, 32, 32),
    patch_size: tuple[int, int, int] = (1, 2, 2),
) -> CosmosTransformer3DModel:
    """Predict2.5's DiT layout, tiny: 2 blocks of 2 heads x 32 (or `heads` x 64 / heads: context parallel over 4
    ranks needs 4), cross-attention on the projected full_concat (text_dim wide), or with text_embed_dim on
    embeddings of that width directly (no projection: Predict2's T5 layout)."""
    from diffusers import CosmosTransformer3DModel  # why: diffusers is heavy, loaded only by world-model code

    return CosmosTransformer3DModel(
        in_channels=latent_channels + 1,
        out_channels=latent_channels,
        num_attention_heads=heads,
        attention_head_dim=64 // heads,
        num_layers=2,
        mlp_ratio=2.0,
        text_embed_dim=text_embed_dim or 64,
        adaln_lora_dim=16,
        max_size=max_size,
        patch_size=patch_size,
        rope_scale=(1.0, 1.0, 1.0),
        concat_padding_mask=False,
        extra_pos_embed_type=None,
        use_crossattn_projection=text_embed_dim is None,
        crossattn_proj_in_channels=text_dim,
        encoder_hidden_states_channels=64,
    )


def _calibration_videos(n: int = 16, frames: int = 5, size: int = 32, seed: int = 0) -> torch.Tensor:
    """[n, 3, T, H, W] in [-1, 1]: flat scenes of varied brightness with a moving square, to measure the random
    VAE's latent statistics."""
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(n, 1, 1, 1, 1, generator=g) * 1.6 - 0.8
    video = base.expand(n, 3, frames, size, size).clone()
    for i in range(n):
        y, x = (int(v) for v in torch.randint(0, size - 8, (2,), generator=g))
        for t in range(frames):
            video[i, :, t, y : y + 8, (x + 2 * t) % (size - 8) : (x + 2 * t) % (size - 8) + 8] = -base[i, 0, 0, 0, 0]
    return video


def _write_text_encoder(out: Path, seed: int) -> int:
    """text_encoder/ (our tiny Qwen2.5-VL, Cosmos-Reason1's architecture) and tokenizer/ beside it, as the hub
    folder splits them; returns the full_concat width (layers x hidden) the DiT's crossattn_proj takes."""
    te_dir = make_tiny_model(out / "text_encoder", seed=seed, family="qwen2_5_vl")
    (out / "tokenizer").mkdir(exist_ok=True)
    for name in TOKENIZER_FILES:  # moved, not copied: one tokenizer (with its chat template) in one place
        if (te_dir / name).is_file():
            shutil.move(te_dir / name, out / "tokenizer" / name)
    text = json.loads((te_dir / "config.json").read_text())
    text = text.get("text_config", text)
    return int(text["num_hidden_layers"]) * int(text["hidden_size"])


def _model_index() -> dict[str, Any]:
    """model_index.json of a Predict2.5 folder; safety_checker is a null component (cosmos_guardrail's)."""
    import diffusers  # why: diffusers is heavy, loaded only by world-model code

    return {
        "_class_name": PIPELINE_CLASS,
        "_diffusers_version": diffusers.__version__,
        "scheduler": ["diffusers", "UniPCMultistepScheduler"],
        "text_encoder": ["transformers", "Qwen2_5_VLForConditionalGeneration"],
        "tokenizer": ["transformers", "Qwen2Tokenizer"],
        "transformer": ["diffusers", "CosmosTransformer3DModel"],
        "vae": ["diffusers", "AutoencoderKLWan"],
        "safety_checker": [None, None],
    }


def make_tiny_wfm(
    out_dir: str | Path,
    seed: int = 0,
    *,
    latent_channels: int = 4,
    heads: int = 2,
    text_embed_dim: int | None = None,
    max_size: tuple[int, int, int] = (16, 32, 32),
    patch_size: tuple[int, int, int] = (1, 2, 2),
    vae_base_dim: int = 16,
) -> Path:
    """Write a tiny Cosmos-Predict2.5-layout diffusers folder (model_index.json, transformer/, vae/, text_encoder/,
    tokenizer/, scheduler/) with weights drawn from `seed`; the same seed gives the same bytes.

    The defaults make the tiny model of the tests (videos up to 16 latent frames of 32 x 32). For cosmos-rl's
    mock-data recipes (embeddings carried by the rows, 480p clips): text_embed_dim (the DiT takes embeddings of
    that width, e.g. 1024 as cosmos-rl's default net; its text_encoder/ then does not feed it), max_size (the
    latent grid its RoPE covers, (T', H', W')), patch_size (fewer tokens per video) and vae_base_dim (the VAE's
    width: its cost per pixel).

        python -c "from cosmos_train.wfm.model import make_tiny_wfm; print(make_tiny_wfm('/tmp/tiny-wfm'))"
    """
    from diffusers import UniPCMultistepScheduler  # why: diffusers is heavy, loaded only by world-model code

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text_dim = _write_text_encoder(out, seed)
    # Random init draws from the global generator; fork it so callers' RNG state is left untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        vae = _tiny_vae(latent_channels, vae_base_dim)
        _pass_through(vae)
        transformer = _tiny_transformer(
            latent_channels, text_dim, heads, text_embed_dim=text_embed_dim, max_size=max_size, patch_size=patch_size
        )
        # A made-up VAE's latents are far from unit scale: measure mean / std per channel on synthetic videos (as
        # Wan's were measured on real ones), so that normalised latents, what the DiT sees, are ~N(0, 1).
        with torch.no_grad():
            z = vae.encode(_calibration_videos(seed=seed)).latent_dist.mode()
    vae.register_to_config(
        latents_mean=[round(float(v), 6) for v in z.mean(dim=(0, 2, 3, 4))],
        latents_std=[round(float(v), 6) for v in z.std(dim=(0, 2, 3, 4))],
    )
    vae.save_pretrained(out / "vae")
    transformer.save_pretrained(out / "transformer")
    # Only for diffusers' pipeline: training uses its own SDE sampler (wfm/sde.py). Predict2.5's scheduler settings.
    UniPCMultistepScheduler(use_flow_sigmas=True, prediction_type="flow_prediction", flow_shift=3.0).save_pretrained(
        out / "scheduler"
    )
    (out / "model_index.json").write_text(json.dumps(_model_index(), indent=2) + "\n")
    return out


# ------------------------------------------------------------------------------------ loading
def _folder(path: str | Path, revision: str | None) -> Path:
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

    folder = _folder(path, revision)
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


# ------------------------------------------------------------------------------------ export
def _transformer_shapes(base: Path) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes of base's transformer, built on the meta device from its config (no weights read,
    so a sharded or .bin base is compared the same way)."""
    from diffusers import CosmosTransformer3DModel  # why: diffusers is heavy, loaded only by world-model code

    with torch.device("meta"):
        model = CosmosTransformer3DModel.from_config(CosmosTransformer3DModel.load_config(base / "transformer"))
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _state_dict_problems(want: dict[str, tuple[int, ...]], got: dict[str, torch.Tensor]) -> list[str]:
    problems = [f"missing {k}" for k in want if k not in got]
    problems += [f"unexpected {k}" for k in got if k not in want]
    problems += [
        f"{k}: shape {tuple(v.shape)}, base {want[k]}"
        for k, v in got.items()
        if k in want and tuple(v.shape) != want[k]
    ]
    return problems


def _ignore_transformer_weights(transformer_dir: Path) -> Callable[[str, list[str]], list[str]]:
    """copytree's ignore: the base transformer's weight files (one file or shards + index), replaced by the export."""

    def ignore(folder: str, names: list[str]) -> list[str]:
        if Path(folder) != transformer_dir:
            return []
        return [n for n in names if n.endswith(WEIGHT_SUFFIXES)]

    return ignore


def _swap_into_place(tmp: Path, out: Path) -> None:
    """Put the finished folder tmp at out: an existing out is renamed aside first and removed after, so out is
    always either the old folder or the new one, never a half-written one."""
    old = out.with_name(f".{out.name}.{secrets.token_hex(4)}.old")
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def export_wfm(
    base_dir: str | Path,
    transformer_state_dict: dict[str, torch.Tensor],
    out_dir: str | Path,
    *,
    revision: str | None = None,
) -> Path:
    """A complete diffusers folder at out_dir: base_dir's parts, transformer/ = base's config + the given full
    (unsharded) state dict as diffusion_pytorch_model.safetensors, tensors written as given. ModelError if its keys
    or shapes differ from the base transformer's. Written to a temporary sibling, then renamed into place.

        python -c "from cosmos_train.wfm.model import *; p = load_wfm('/tmp/tiny-wfm'); \\
            export_wfm('/tmp/tiny-wfm', p.transformer.state_dict(), '/tmp/tiny-wfm-export')"
    """
    base, out = _folder(base_dir, revision), Path(out_dir)
    check_folder(base, text_encoder=False)
    problems = _state_dict_problems(_transformer_shapes(base), transformer_state_dict)
    if problems:
        more = f" ... ({len(problems)} differences)" if len(problems) > 5 else ""
        raise ModelError(
            f"{base}: the trained transformer does not match the base folder's: "
            f"{'; '.join(problems[:5])}{more}; export with the base folder the run trained from"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        shutil.copytree(base, tmp, ignore=_ignore_transformer_weights(base / "transformer"))
        tensors = {k: v.detach().cpu().contiguous() for k, v in transformer_state_dict.items()}
        save_file(tensors, str(tmp / "transformer" / TRANSFORMER_WEIGHTS), metadata={"format": "pt"})
        _swap_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
