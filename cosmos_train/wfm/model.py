"""The world model's parts in the Cosmos-Predict2.5 diffusers layout: DiT, Wan video VAE, text encoder.

    cosmos-train make-tiny-wfm outputs/tiny-wfm                 # the offline tiny folder (CPU, seconds)
    parts = load_wfm("outputs/tiny-wfm")
    emb = encode_prompts(parts, ["a bright ball rolls left"])  # [B, L, layers x hidden]
    z = encode_video(parts, video_uint8)                        # [B, C, T', H', W'] normalised latents
    v = predict_velocity(parts.transformer, z, sigma, emb)      # the DiT's velocity (eps - x0)
    video = decode_latents(parts, z)                            # uint8 [B, 3, T, H, W]

What diffusers' `Cosmos2_5_PredictBasePipeline` does, written for training: the text encoder is a Qwen2.5-VL
(Cosmos-Reason1); a prompt's embedding is the system + user chat padded to max_length, the hidden states of
every layer normalised (zero mean, unit std over features) and concatenated ("full_concat"), which the DiT's
crossattn_proj maps to its width. The DiT gets the latents with a condition-mask channel (zeros: text2world),
timestep = sigma in [0, 1], and predicts the rectified-flow velocity; latents are normalised with the VAE's
latents_mean / latents_std. `concat_padding_mask` needs torchvision (not on CPU torch here): the tiny DiT is
built without it; a real Cosmos-Predict2.5 folder has it and needs torchvision, as in diffusers.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cosmos_train.errors import ConfigError, ModelError

PIPELINE_CLASS = "Cosmos2_5_PredictBasePipeline"
SYSTEM_PROMPT = "You are a helpful assistant who will provide prompts to an image generator."
COMPONENTS = ("transformer", "vae", "text_encoder", "tokenizer", "scheduler")
TRANSFORMER_WEIGHTS = "diffusion_pytorch_model.safetensors"
VAE_TEMPORAL, VAE_SPATIAL, PATCH = 4, 8, 2


@dataclass
class WfmParts:
    transformer: nn.Module
    vae: nn.Module
    text_encoder: nn.Module | None
    tokenizer: Any
    latents_mean: torch.Tensor  # [1, C, 1, 1, 1]
    latents_std: torch.Tensor  # [1, C, 1, 1, 1]
    latent_channels: int
    vae_scale_temporal: int = VAE_TEMPORAL
    vae_scale_spatial: int = VAE_SPATIAL


# ------------------------------------------------------------------------------------ the tiny folder
def _tiny_vae(latent_channels: int) -> nn.Module:
    from diffusers import AutoencoderKLWan

    return AutoencoderKLWan(base_dim=16, z_dim=latent_channels, dim_mult=[1, 2, 2, 2], num_res_blocks=1,
                            temperal_downsample=[False, True, True], latents_mean=[0.0] * latent_channels,
                            latents_std=[1.0] * latent_channels)


def _identity_like(conv: nn.Module, average: bool = False) -> None:
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


def _pass_through(vae: nn.Module) -> None:
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


def _tiny_transformer(latent_channels: int, text_dim: int) -> nn.Module:
    from diffusers import CosmosTransformer3DModel

    return CosmosTransformer3DModel(
        in_channels=latent_channels + 1, out_channels=latent_channels, num_attention_heads=2, attention_head_dim=32,
        num_layers=2, mlp_ratio=2.0, text_embed_dim=64, adaln_lora_dim=16, max_size=(16, 32, 32), patch_size=(1, 2, 2),
        rope_scale=(1.0, 1.0, 1.0), concat_padding_mask=False, extra_pos_embed_type=None,
        use_crossattn_projection=True, crossattn_proj_in_channels=text_dim, encoder_hidden_states_channels=64)


def _calibration_videos(n: int = 16, frames: int = 5, size: int = 32, seed: int = 0) -> torch.Tensor:
    """[n, 3, T, H, W] in [-1, 1]: flat scenes of varied brightness with a moving square, to measure the random
    VAE's latent statistics."""
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(n, 1, 1, 1, 1, generator=g) * 1.6 - 0.8
    video = base.expand(n, 3, frames, size, size).clone()
    for i in range(n):
        y, x = (int(v) for v in torch.randint(0, size - 8, (2,), generator=g))
        for t in range(frames):
            video[i, :, t, y:y + 8, (x + 2 * t) % (size - 8):(x + 2 * t) % (size - 8) + 8] = -base[i, 0, 0, 0, 0]
    return video


def make_tiny_wfm(out_dir: str | Path, seed: int = 0, *, latent_channels: int = 4) -> Path:
    """Write a tiny Cosmos-Predict2.5-layout diffusers folder (model_index.json, transformer/, vae/, text_encoder/,
    tokenizer/, scheduler/) with weights drawn from `seed`; the same seed gives the same tensors."""
    from diffusers import UniPCMultistepScheduler

    from cosmos_train.models.tiny import make_tiny_model

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    te_dir = make_tiny_model(out / "text_encoder", seed=seed, family="qwen2_5_vl")
    (out / "tokenizer").mkdir(exist_ok=True)
    for f in te_dir.iterdir():  # the tokenizer files beside the model's, as the hub folder has them
        if f.name.startswith(("tokenizer", "special_tokens", "chat_template", "vocab", "merges")):
            shutil.copy2(f, out / "tokenizer" / f.name)
    te_config = json.loads((te_dir / "config.json").read_text())
    text = te_config.get("text_config", te_config)
    text_dim = int(text["num_hidden_layers"]) * int(text["hidden_size"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        vae = _tiny_vae(latent_channels)
        _pass_through(vae)
        transformer = _tiny_transformer(latent_channels, text_dim)
        with torch.no_grad():  # a random VAE's latents are far from unit scale: measure them, as a trained one is
            z = vae.encode(_calibration_videos(seed=seed)).latent_dist.mode()
        vae.register_to_config(latents_mean=[round(float(v), 6) for v in z.mean(dim=(0, 2, 3, 4))],
                               latents_std=[round(float(v), 6) for v in z.std(dim=(0, 2, 3, 4))])
    vae.save_pretrained(out / "vae")
    transformer.save_pretrained(out / "transformer")
    UniPCMultistepScheduler(use_flow_sigmas=True, prediction_type="flow_prediction", flow_shift=3.0).save_pretrained(
        out / "scheduler")
    import diffusers

    index = {"_class_name": PIPELINE_CLASS, "_diffusers_version": diffusers.__version__,
             "scheduler": ["diffusers", "UniPCMultistepScheduler"],
             "text_encoder": ["transformers", "Qwen2_5_VLForConditionalGeneration"],
             "tokenizer": ["transformers", "Qwen2Tokenizer"],
             "transformer": ["diffusers", "CosmosTransformer3DModel"], "vae": ["diffusers", "AutoencoderKLWan"],
             "safety_checker": [None, None]}
    (out / "model_index.json").write_text(json.dumps(index, indent=2) + "\n")
    return out


# ------------------------------------------------------------------------------------ loading
def _folder(path: str | Path, revision: str | None) -> Path:
    p = Path(path).expanduser()
    if p.is_dir():
        return p
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(str(path), revision=revision))
    except Exception as e:  # noqa: BLE001 - offline, unknown id, no access: one message
        raise ModelError(f"{path}: not a local folder, and the Hub copy could not be fetched ({type(e).__name__}: "
                         f"{e}); give a diffusers folder (`cosmos-train make-tiny-wfm DIR` writes a tiny one)") from e


def check_folder(folder: Path, text_encoder: bool = True) -> None:
    index = folder / "model_index.json"
    if not index.is_file():
        raise ModelError(f"{folder}: no model_index.json; a world model is a diffusers folder with transformer/, vae/, "
                         "text_encoder/, tokenizer/ (`cosmos-train make-tiny-wfm DIR` writes a tiny one)")
    name = json.loads(index.read_text()).get("_class_name")
    if name != PIPELINE_CLASS:
        raise ModelError(f"{index}: a {name} folder; world-model RL trains a {PIPELINE_CLASS} (Cosmos-Predict2.5) "
                         "folder: DiT transformer/, Wan vae/, Qwen2.5-VL text_encoder/")
    need = [c for c in COMPONENTS if c != "scheduler" and (text_encoder or c not in ("text_encoder", "tokenizer"))]
    missing = [c for c in need if not (folder / c).is_dir()]
    if missing:
        raise ModelError(f"{folder}: missing {', '.join(f'{c}/' for c in missing)} (a {PIPELINE_CLASS} folder has "
                         f"{', '.join(f'{c}/' for c in COMPONENTS)})")


def load_wfm(path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, *,
             text_encoder: bool = True, revision: str | None = None) -> WfmParts:
    """The folder's parts on `device`; the VAE and the text encoder frozen (eval, no grad). text_encoder=False:
    runs that condition on precomputed embeddings skip it."""
    from diffusers import AutoencoderKLWan, CosmosTransformer3DModel

    folder = _folder(path, revision)
    check_folder(folder, text_encoder)
    transformer = CosmosTransformer3DModel.from_pretrained(folder, subfolder="transformer", torch_dtype=dtype).to(device)
    vae = AutoencoderKLWan.from_pretrained(folder, subfolder="vae", torch_dtype=torch.float32).to(device)
    vae.requires_grad_(False).eval()
    encoder, tokenizer = None, None
    if text_encoder:
        from transformers import AutoModelForImageTextToText, AutoTokenizer

        encoder = AutoModelForImageTextToText.from_pretrained(folder / "text_encoder", dtype=dtype).to(device)
        encoder.requires_grad_(False).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder / "tokenizer")
    c = int(vae.config.z_dim)
    mean = torch.tensor(vae.config.latents_mean, dtype=torch.float32, device=device).view(1, c, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std, dtype=torch.float32, device=device).view(1, c, 1, 1, 1)
    return WfmParts(transformer, vae, encoder, tokenizer, mean, std, c)


# ------------------------------------------------------------------------------------ what training calls
def latent_shape(parts: WfmParts, num_frames: int, height: int, width: int) -> tuple[int, int, int, int]:
    """(C, T', H', W') of a num_frames x height x width video: 1 + (T-1)/4 latent frames, 8x smaller frames."""
    problems = []
    if (num_frames - 1) % parts.vae_scale_temporal:
        problems.append(f"num_frames = {num_frames}: must be 1 + {parts.vae_scale_temporal}k (the VAE compresses "
                        f"time {parts.vae_scale_temporal}x after the first frame)")
    step = parts.vae_scale_spatial * PATCH
    if height % step or width % step:
        problems.append(f"video size {width}x{height}: width and height must be multiples of {step} (VAE "
                        f"{parts.vae_scale_spatial}x, DiT patch {PATCH})")
    if problems:
        raise ConfigError(problems, what="world-model video shape")
    return (parts.latent_channels, 1 + (num_frames - 1) // parts.vae_scale_temporal,
            height // parts.vae_scale_spatial, width // parts.vae_scale_spatial)


@torch.no_grad()
def encode_prompts(parts: WfmParts, prompts: list[str], max_length: int = 128) -> torch.Tensor:
    """[B, max_length, layers x hidden]: Predict2.5's full_concat prompt embedding."""
    if parts.text_encoder is None or parts.tokenizer is None:
        raise ModelError("this run loaded no text encoder (offline_text_embedding = true): prompts cannot be encoded")
    ids = []
    for prompt in prompts:
        chat = [{"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]},
                {"role": "user", "content": [{"type": "text", "text": prompt}]}]
        text = parts.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=False)
        ids.append(parts.tokenizer(text, max_length=max_length, truncation=True, padding="max_length",
                                   return_tensors="pt")["input_ids"][0])
    device = next(parts.text_encoder.parameters()).device
    out = parts.text_encoder(input_ids=torch.stack(ids).to(device), output_hidden_states=True)
    layers = [(h - h.mean(dim=-1, keepdim=True)) / (h.std(dim=-1, keepdim=True) + 1e-8)
              for h in out.hidden_states[1:]]
    return torch.cat(layers, dim=-1).float()


@torch.no_grad()
def encode_video(parts: WfmParts, video: torch.Tensor) -> torch.Tensor:
    """uint8 [B, 3, T, H, W] -> normalised latents [B, C, T', H', W'] (the posterior's mode: deterministic)."""
    x = video.to(parts.latents_mean.device).float() / 127.5 - 1.0
    z = parts.vae.encode(x).latent_dist.mode()
    return (z.float() - parts.latents_mean) / parts.latents_std


@torch.no_grad()
def decode_latents(parts: WfmParts, latents: torch.Tensor) -> torch.Tensor:
    """Normalised latents -> uint8 [B, 3, T, H, W]."""
    z = latents.float() * parts.latents_std + parts.latents_mean
    x = parts.vae.decode(z).sample.clamp(-1, 1)
    return ((x + 1) * 127.5).round().to(torch.uint8)


def predict_velocity(transformer: nn.Module, latents: torch.Tensor, sigma: torch.Tensor, prompt_embeds: torch.Tensor
                     ) -> torch.Tensor:
    """The DiT's velocity for latents at noise level sigma [B] (text2world: no conditioning frames)."""
    config = transformer.config
    b, _, t, h, w = latents.shape
    kwargs: dict[str, Any] = {}
    if config.concat_padding_mask:
        kwargs["padding_mask"] = latents.new_zeros(1, 1, h * config.patch_size[1] * 4, w * config.patch_size[2] * 4)
    dtype = next(transformer.parameters()).dtype
    return transformer(hidden_states=latents.to(dtype), timestep=sigma.to(dtype),
                       encoder_hidden_states=prompt_embeds.to(dtype),
                       condition_mask=latents.new_zeros(b, 1, t, h, w, dtype=dtype), return_dict=False)[0]


def transformer_blocks(transformer: nn.Module) -> list[nn.Module]:
    """The DiT's blocks: the FSDP2 and activation-checkpointing units."""
    return list(transformer.transformer_blocks)


# ------------------------------------------------------------------------------------ export
def _base_transformer_weights(folder: str, names: list[str]) -> list[str]:
    """copytree's ignore: the base transformer's weight files (one file or shards + index), replaced by the export."""
    if Path(folder).name != "transformer":
        return []
    return [n for n in names if n.endswith((".safetensors", ".safetensors.index.json"))]


def export_wfm(base_dir: str | Path, transformer_state_dict: dict[str, torch.Tensor], out_dir: str | Path) -> Path:
    """A complete diffusers folder: base_dir's parts, transformer/ written from the given full state dict (same keys
    and shapes as the base transformer's, else ModelError). Written beside out_dir, then renamed into place."""
    from safetensors.torch import load_file, save_file

    base, out = Path(base_dir), Path(out_dir)
    base_weights = load_file(str(base / "transformer" / TRANSFORMER_WEIGHTS)) if \
        (base / "transformer" / TRANSFORMER_WEIGHTS).is_file() else None
    if base_weights is not None:
        problems = [f"missing {k}" for k in base_weights if k not in transformer_state_dict]
        problems += [f"unexpected {k}" for k in transformer_state_dict if k not in base_weights]
        problems += [f"{k}: shape {tuple(v.shape)}, base {tuple(base_weights[k].shape)}"
                     for k, v in transformer_state_dict.items() if k in base_weights and v.shape != base_weights[k].shape]
        if problems:
            raise ModelError(f"{base}: the trained transformer does not match the base folder's: "
                             f"{'; '.join(problems[:5])}{' ...' if len(problems) > 5 else ''}")
    tmp = out.parent / f".{out.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(base, tmp, ignore=_base_transformer_weights)
    tensors = {k: v.detach().cpu().contiguous() for k, v in transformer_state_dict.items()}
    save_file(tensors, str(tmp / "transformer" / TRANSFORMER_WEIGHTS), metadata={"format": "pt"})
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out
