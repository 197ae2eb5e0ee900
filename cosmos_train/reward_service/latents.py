"""Wan VAE latents -> uint8 video pixels, as the reference reward service decodes media_type "latent" (and a
request without a media_type) before its video rewards.

    decoder = LatentDecoder(config.latent_decoder)       # [latent_decoder] in rewards.toml
    why = decoder.refuse(latents.shape)                  # at enqueue: None, or why it cannot be decoded
    nbytes = prod(decoder.decoded_shape(latents.shape))  # the pixels' size, from config.json alone
    pixels = decoder.decode(latents)                     # uint8 [B, 3, T', H', W']

The channel count picks the VAE: 16 is Wan2.1 (`wan21_vae`), 48 is Wan2.2 (`wan22_vae`), each a local diffusers
`AutoencoderKLWan` folder. Latents arrive normalised as cosmos-rl's WanVAE encodes them, (mu - mean) / std with
the VAE's latents_mean / latents_std; decoding undoes that (z * std + mean, as diffusers' Wan pipelines do), runs
the VAE decoder and maps [-1, 1] to [0, 255] with the reference's rule: uint8((1 + clamp(x, -1, 1)) / 2 * 255),
truncating. Sizes: T' = 1 + (T - 1) * 2^(temporal downsamples), H' = H * 2^(len(dim_mult) - 1) * patch_size.

Each VAE loads once, on first use; one item decodes at a time (the decoder's memory is one video's), and a VAE
decodes one video at a time (its causal convolutions keep a per-call cache on the module).
"""

from __future__ import annotations

import json
import logging
import math
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

from cosmos_train.errors import ConfigError
from cosmos_train.reward_service.config import LatentDecoderSettings

log = logging.getLogger(__name__)

# latent channels -> the [latent_decoder] key of the VAE that decodes them
Z_DIM_KEYS = {16: "wan21_vae", 48: "wan22_vae"}
WAN_NAMES = {16: "Wan2.1", 48: "Wan2.2"}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def from_wire(latents: np.ndarray) -> np.ndarray:
    """The latents as float32. A uint8 array is bfloat16 bytes (numpy has no bfloat16, so the reference's clients
    may send `tensor.view(torch.uint8)`), read back as the reference does: its last axis halves."""
    if latents.dtype == np.uint8:
        if latents.shape[-1] % 2:
            raise ValueError(
                f"latents: uint8 latents are read as bfloat16 bytes, but the last axis ({latents.shape[-1]}) is odd; "
                "send float16 / float32 latents"
            )
        # a writable contiguous copy of the bytes: the protocol's arrays are read-only views of the request body
        as_bf16 = torch.from_numpy(np.require(latents, requirements=["C", "W"])).view(torch.bfloat16)
        return as_bf16.float().numpy()
    if latents.dtype.kind != "f":
        raise ValueError(f"latents: dtype {latents.dtype} is not a float; send float16 / float32 latents")
    return latents.astype(np.float32, copy=False)


class LatentDecoder:
    def __init__(self, settings: LatentDecoderSettings):
        self.settings = settings
        self._folders: dict[int, str] = {
            z: folder for z, key in Z_DIM_KEYS.items() if (folder := getattr(settings, key)) is not None
        }
        self._configs: dict[int, dict[str, Any]] = {}
        self._vaes: dict[int, Any] = {}
        self._load_lock = threading.Lock()
        self._decode_locks = {z: threading.Lock() for z in self._folders}

    def z_dims(self) -> tuple[int, ...]:
        """The latent channel counts a VAE is configured for."""
        return tuple(sorted(self._folders))

    def refuse(self, shape: tuple[int, ...]) -> str | None:
        """Why latents of `shape` cannot be decoded; None when they can."""
        if len(shape) != 5 or 0 in shape:
            return f"latents must be [B, C, T, H, W] with no empty axis, got {list(shape)}"
        channels = shape[1]
        if channels not in Z_DIM_KEYS:
            return (
                f"latents have {channels} channels; the service decodes Wan2.1 (16) and Wan2.2 (48) VAE latents "
                "[B, C, T, H, W]; send pixels as media_type 'video' instead"
            )
        if channels not in self._folders:
            key = Z_DIM_KEYS[channels]
            return (
                f"{WAN_NAMES[channels]} latents ({channels} channels) need a VAE: set [latent_decoder] {key} in the "
                f"service's rewards.toml to a local diffusers AutoencoderKLWan folder (z_dim {channels})"
            )
        return None

    def check(self) -> None:
        """Read every configured folder's config.json now (at service start), so a wrong path is a ConfigError
        naming its key instead of a failed request later."""
        problems = []
        for z in self._folders:
            try:
                self._config(z)
            except ConfigError as e:
                problems += e.problems
        if problems:
            raise ConfigError(problems, what="reward service config")

    def decoded_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The uint8 pixels' shape [B, 3, T', H', W'] for latents of `shape`, from config.json (no weights)."""
        why = self.refuse(shape)
        if why:
            raise ValueError(why)
        b, c, t, h, w = shape
        cfg = self._config(c)
        patch = cfg.get("patch_size") or 1
        spatial = 2 ** (len(cfg["dim_mult"]) - 1) * patch
        temporal = 2 ** sum(bool(d) for d in cfg["temperal_downsample"])
        return (b, cfg["out_channels"] // patch**2, 1 + (t - 1) * temporal, h * spatial, w * spatial)

    def decode(self, latents: np.ndarray) -> np.ndarray:
        """Normalised latents [B, C, T, H, W] -> uint8 pixels [B, 3, T', H', W'] in [0, 255]. Float latents of any
        width, or bfloat16 bytes as uint8 (`from_wire`; call it before `refuse` / `decoded_shape` too)."""
        if latents.dtype.kind != "f":
            latents = from_wire(latents)
        why = self.refuse(latents.shape)
        if why:
            raise ValueError(why)
        if not np.isfinite(latents).all():
            raise ValueError("latents: non-finite values (nan or inf); the VAE cannot decode them")
        z_dim = latents.shape[1]
        vae = self._vae(z_dim)
        cfg = self._config(z_dim)
        device, dtype = torch.device(self.settings.device), DTYPES[self.settings.dtype]
        mean = torch.tensor(cfg["latents_mean"], dtype=torch.float32, device=device).view(1, z_dim, 1, 1, 1)
        std = torch.tensor(cfg["latents_std"], dtype=torch.float32, device=device).view(1, z_dim, 1, 1, 1)
        out = np.empty(self.decoded_shape(latents.shape), dtype=np.uint8)
        for i in range(latents.shape[0]):
            z = torch.from_numpy(np.array(latents[i : i + 1], dtype=np.float32)).to(device)  # a copy: one item
            z = (z * std + mean).to(dtype)
            with self._decode_locks[z_dim], torch.inference_mode():
                x = vae.decode(z).sample.float()
            pixels = ((1 + x.clamp(-1, 1)) / 2 * 255).to(torch.uint8)
            if tuple(pixels.shape[1:]) != out.shape[1:]:  # a VAE whose layout the size rule does not cover
                raise RuntimeError(f"the VAE decoded {list(pixels.shape)}, expected {list(out.shape)}")
            out[i] = pixels[0].cpu().numpy()
        return out

    # ------------------------------------------------------------------ loading
    def _config(self, z_dim: int) -> dict[str, Any]:
        if z_dim not in self._configs:
            key = Z_DIM_KEYS[z_dim]
            path = Path(self._folders[z_dim]) / "config.json"
            where = f"latent_decoder.{key} = {self._folders[z_dim]!r}"
            try:
                cfg = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as e:
                raise ConfigError(
                    f"{where}: no readable {path.name} ({type(e).__name__}: {e}); point it at a diffusers "
                    "AutoencoderKLWan folder (save_pretrained's output, e.g. a Wan pipeline's vae/ folder)",
                    what="reward service config",
                ) from None
            if cfg.get("_class_name") != "AutoencoderKLWan" or cfg.get("z_dim") != z_dim:
                raise ConfigError(
                    f"{where}: its config.json is a {cfg.get('_class_name')} with z_dim {cfg.get('z_dim')}, "
                    f"not an AutoencoderKLWan with z_dim {z_dim} ({WAN_NAMES[z_dim]}); set {key} to the "
                    f"{WAN_NAMES[z_dim]} VAE's folder",
                    what="reward service config",
                )
            mean, std = cfg.get("latents_mean"), cfg.get("latents_std")
            if not (isinstance(mean, list) and isinstance(std, list) and len(mean) == len(std) == z_dim):
                raise ConfigError(
                    f"{where}: config.json needs latents_mean and latents_std of {z_dim} values each",
                    what="reward service config",
                )
            if not all(math.isfinite(s) and s > 0 for s in std):
                raise ConfigError(f"{where}: latents_std must be finite and > 0", what="reward service config")
            self._configs[z_dim] = cfg
        return self._configs[z_dim]

    def _vae(self, z_dim: int) -> Any:
        if z_dim not in self._vaes:
            with self._load_lock:  # two workers meeting the first latent request load it once
                if z_dim not in self._vaes:
                    self._config(z_dim)
                    # why: diffusers is heavy and only needed once latents arrive
                    from diffusers import AutoencoderKLWan

                    folder = self._folders[z_dim]
                    log.info("loading the %s VAE from %s", WAN_NAMES[z_dim], folder)
                    vae = AutoencoderKLWan.from_pretrained(folder, torch_dtype=DTYPES[self.settings.dtype])
                    self._vaes[z_dim] = vae.to(self.settings.device).eval()
        return self._vaes[z_dim]
