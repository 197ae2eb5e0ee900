"""Tiny Wan VAEs made offline for tests: diffusers `AutoencoderKLWan` folders (save_pretrained), random weights.

    make_tiny_wan_vae(tmp / "wan21", z_dim=16)   # Wan2.1 layout: 3 -> 16 channels, 4x time, 8x space
    make_tiny_wan_vae(tmp / "wan22", z_dim=48)   # Wan2.2 layout: residual blocks, 2x2 patchify (12 channels),
                                                 # 4x time, 16x space, 48 latents_mean / latents_std

The architecture keys are the real checkpoints' (Wan2.1-T2V vae/config.json; Wan2.2-TI2V-5B's: is_residual,
patch_size 2, in / out channels 12, decoder_base_dim, scale_factor_spatial 16); only the widths are tiny
(base_dim 8, one res block per stage), so a decode of a few latent frames takes well under a second on CPU.
latents_mean / latents_std are drawn from the seed (std in [0.5, 2]), so de-normalisation is visible in a test.
"""

from __future__ import annotations

from pathlib import Path

import torch

WAN22_Z_DIM = 48


def make_tiny_wan_vae(out: str | Path, z_dim: int = 16, seed: int = 0) -> Path:
    """Writes the folder and returns it."""
    # why: diffusers is heavy and only the latent tests need it
    from diffusers import AutoencoderKLWan

    gen = torch.Generator().manual_seed(seed)
    mean = (torch.rand(z_dim, generator=gen) - 0.5).tolist()
    std = (0.5 + 1.5 * torch.rand(z_dim, generator=gen)).tolist()
    common = {
        "z_dim": z_dim,
        "dim_mult": [1, 2, 2, 2],
        "num_res_blocks": 1,
        "temperal_downsample": [False, True, True],
        "latents_mean": mean,
        "latents_std": std,
        "scale_factor_temporal": 4,
    }
    if z_dim == WAN22_Z_DIM:
        layout = {
            "base_dim": 8,
            "decoder_base_dim": 8,
            "is_residual": True,
            "in_channels": 12,
            "out_channels": 12,
            "patch_size": 2,
            "scale_factor_spatial": 16,
        }
    else:
        layout = {"base_dim": 8, "scale_factor_spatial": 8}
    torch.manual_seed(seed)  # the weights' init
    vae = AutoencoderKLWan(**common, **layout)
    with torch.no_grad():  # the default init leaves some convs at zero; random ones make every channel matter
        for p in vae.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    out = Path(out)
    vae.save_pretrained(out)
    return out
