"""The tiny world model: a Cosmos-Predict2.5-layout diffusers folder (DiT, Wan VAE, Qwen2.5-VL text encoder) small
enough for a CPU, with weights drawn from a seed; its VAE starts as a pass-through so pixel rewards can be learnt.

    cosmos-train make-tiny-wfm outputs/tiny-wfm                 # the offline tiny folder (CPU, seconds)
    python -c "from cosmos_train.wfm.tiny_model import make_tiny_wfm; make_tiny_wfm('/tmp/tiny-wfm')"
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from cosmos_train.models.tiny import make_tiny_model
from cosmos_train.wfm.model import PIPELINE_CLASS

if TYPE_CHECKING:  # diffusers is imported where it is used (a heavy import); these names are for hints only
    from diffusers import AutoencoderKLWan, CosmosTransformer3DModel

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
)


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

        python -c "from cosmos_train.wfm.tiny_model import make_tiny_wfm; print(make_tiny_wfm('/tmp/tiny-wfm'))"
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
