"""The reward service's Wan latent decoder (cosmos_train.reward_service.latents) on tiny random Wan2.1 (z_dim 16)
and Wan2.2 (z_dim 48) VAEs: the pixels equal diffusers' own decode of the de-normalised latents, mapped to uint8
with the reference's rule, and their shape is the one predicted from config.json alone."""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from cosmos_train.errors import ConfigError
from cosmos_train.reward_service.config import LatentDecoderSettings, ServiceConfig, load_service_config
from cosmos_train.reward_service.errors import ProtocolError
from cosmos_train.reward_service.handlers import HANDLERS
from cosmos_train.reward_service.latents import LatentDecoder, from_wire
from cosmos_train.reward_service.protocol import decode_enqueue, inspect_enqueue
from tests.wan_vae import make_tiny_wan_vae


@pytest.fixture(scope="module")
def vaes(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    root = tmp_path_factory.mktemp("wan-vae")
    return {z: make_tiny_wan_vae(root / f"z{z}", z_dim=z, seed=z) for z in (16, 48)}


@pytest.fixture(scope="module")
def decoder(vaes: dict[int, Path]) -> LatentDecoder:
    return LatentDecoder(LatentDecoderSettings(wan21_vae=str(vaes[16]), wan22_vae=str(vaes[48])))


def diffusers_pixels(folder: Path, latents: np.ndarray) -> np.ndarray:
    """The same latents decoded by hand with diffusers, a video at a time (a batch of 2 rounds a conv differently,
    moving a pixel across a uint8 step): z * std + mean, vae.decode, uint8((1 + x) / 2 * 255)."""
    from diffusers import AutoencoderKLWan

    vae = AutoencoderKLWan.from_pretrained(folder).eval()
    mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1)
    std = torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1)
    out = []
    for item in torch.from_numpy(latents).float().split(1):
        with torch.no_grad():
            x = vae.decode(item * std + mean).sample
        out.append(((1 + x.clamp(-1, 1)) / 2 * 255).to(torch.uint8).numpy())
    return np.concatenate(out)


@pytest.mark.parametrize(
    ("z_dim", "shape", "pixels"), [(16, (2, 16, 3, 2, 3), (2, 3, 9, 16, 24)), (48, (1, 48, 2, 3, 2), (1, 3, 5, 48, 32))]
)
def test_decode_equals_diffusers(
    decoder: LatentDecoder, vaes: dict[int, Path], z_dim: int, shape: tuple[int, ...], pixels: tuple[int, ...]
) -> None:
    latents = np.random.default_rng(z_dim).standard_normal(shape).astype(np.float16)
    assert decoder.decoded_shape(shape) == pixels  # Wan2.1: 4x time (first frame alone), 8x space; Wan2.2: 16x
    out = decoder.decode(latents)
    assert out.shape == pixels and out.dtype == np.uint8
    assert out.min() < 64 and out.max() > 192  # a real spread of values, not a constant
    np.testing.assert_array_equal(out, diffusers_pixels(vaes[z_dim], latents))


def test_decode_denormalises(decoder: LatentDecoder, vaes: dict[int, Path]) -> None:
    """Decoding the normalised latents must differ from decoding them as raw VAE latents."""
    from diffusers import AutoencoderKLWan

    latents = np.random.default_rng(1).standard_normal((1, 16, 2, 2, 2)).astype(np.float32)
    vae = AutoencoderKLWan.from_pretrained(vaes[16]).eval()
    with torch.no_grad():
        raw = ((1 + vae.decode(torch.from_numpy(latents)).sample.clamp(-1, 1)) / 2 * 255).to(torch.uint8).numpy()
    assert not np.array_equal(decoder.decode(latents), raw)


def test_bfloat16_bytes_as_uint8(decoder: LatentDecoder) -> None:
    """numpy has no bfloat16: the reference reads uint8 latents as bfloat16 bytes; so does the decoder."""
    bf16 = torch.randn(1, 16, 2, 2, 3).to(torch.bfloat16)
    wire = bf16.view(torch.uint8).numpy()
    assert wire.shape == (1, 16, 2, 2, 6)
    np.testing.assert_array_equal(from_wire(wire), bf16.float().numpy())
    np.testing.assert_array_equal(decoder.decode(wire), decoder.decode(bf16.float().numpy()))
    with pytest.raises(ValueError, match="odd"):
        from_wire(np.zeros((1, 16, 1, 1, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="not a float"):
        from_wire(np.zeros((1, 16, 1, 1, 2), dtype=np.int32))


def test_refusals_name_the_key(decoder: LatentDecoder) -> None:
    none = LatentDecoder(LatentDecoderSettings())
    assert none.z_dims() == () and decoder.z_dims() == (16, 48)
    why = none.refuse((1, 16, 2, 2, 2))
    assert why is not None and "[latent_decoder] wan21_vae" in why and "rewards.toml" in why
    why = none.refuse((1, 48, 2, 2, 2))
    assert why is not None and "wan22_vae" in why
    why = decoder.refuse((1, 8, 2, 2, 2))
    assert why is not None and "8 channels" in why
    why = decoder.refuse((16, 2, 2, 2))
    assert why is not None and "[B, C, T, H, W]" in why
    assert decoder.refuse((1, 16, 2, 2, 2)) is None
    with pytest.raises(ValueError, match="wan21_vae"):
        none.decode(np.zeros((1, 16, 1, 1, 1), dtype=np.float32))
    bad = np.zeros((1, 16, 1, 2, 2), dtype=np.float32)
    bad[0, 3, 0, 1, 1] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        decoder.decode(bad)


def test_config_errors_name_the_key(tmp_path: Path, vaes: dict[int, Path]) -> None:
    with pytest.raises(ConfigError, match=r"latent_decoder\.wan21_vae = .*no readable config\.json"):
        LatentDecoder(LatentDecoderSettings(wan21_vae=str(tmp_path / "missing"))).check()
    # the Wan2.2 folder under the Wan2.1 key
    with pytest.raises(ConfigError, match=r"wan21_vae.*z_dim 48.*not an AutoencoderKLWan with z_dim 16"):
        LatentDecoder(LatentDecoderSettings(wan21_vae=str(vaes[48]))).check()
    LatentDecoder(LatentDecoderSettings(wan21_vae=str(vaes[16]), wan22_vae=str(vaes[48]))).check()
    toml = tmp_path / "rewards.toml"
    toml.write_text('[latent_decoder]\nwan21_vae = "x"\ndtype = "int8"\n')
    with pytest.raises(ConfigError, match=r"latent_decoder\.dtype"):
        load_service_config(toml)
    toml.write_text('[latent_decoder]\nwan21_vae = "x"\ndevice = "cuda"\n')
    assert load_service_config(toml).latent_decoder.device == "cuda"
    assert ServiceConfig().latent_decoder.wan21_vae is None


def test_decoded_shape_reads_no_weights(tmp_path: Path, vaes: dict[int, Path]) -> None:
    """decoded_shape works from config.json alone (the service bounds memory before any VAE loads)."""
    folder = tmp_path / "config-only"
    folder.mkdir()
    (folder / "config.json").write_text((vaes[48] / "config.json").read_text())
    assert json.loads((folder / "config.json").read_text())["patch_size"] == 2
    dec = LatentDecoder(LatentDecoderSettings(wan22_vae=str(folder)))
    assert dec.decoded_shape((3, 48, 4, 5, 6)) == (3, 3, 13, 80, 96)


def test_concurrent_decodes_match_sequential(decoder: LatentDecoder) -> None:
    """Workers share one VAE, whose decode keeps a per-call cache on the module: each decode is serialised."""
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal((1, 16, 3, 2, 2)).astype(np.float32) for _ in range(4)]
    expected = [decoder.decode(x) for x in inputs]
    got: list[np.ndarray | None] = [None] * 4

    def run(i: int) -> None:
        for _ in range(3):
            got[i] = decoder.decode(inputs[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    for e, g in zip(expected, got):
        assert g is not None
        np.testing.assert_array_equal(g, e)


def test_latent_bodies_are_checked_at_enqueue(vaes: dict[int, Path]) -> None:
    """Through the protocol: non-finite latents (float, or bfloat16 bytes sent as .npy uint8) are a 400 naming
    them, like non-finite pixels; integer latents and an odd bfloat16-byte axis are refused; a missing media_type
    is latent; the request's weight counts the float32 latents and the pixels they decode to."""
    config = ServiceConfig(latent_decoder=LatentDecoderSettings(wan21_vae=str(vaes[16])))
    handlers = {name: cls(name, config) for name, cls in HANDLERS.items()}
    dec = LatentDecoder(config.latent_decoder)

    def enqueue_body(latents: np.ndarray, named: bool = True) -> bytes:
        buf = io.BytesIO()
        np.save(buf, latents, allow_pickle=False)
        meta = {"reward_fn": {"brightness": 1.0}} | ({"media_type": "latent"} if named else {})
        return json.dumps(meta).encode() + b"\n" + buf.getvalue()

    def refused(data: bytes) -> str:
        with pytest.raises(ProtocolError) as e:
            decode_enqueue(inspect_enqueue(data, handlers, dec, 1 << 30))
        assert e.value.status == 400
        return e.value.message

    good = np.zeros((1, 16, 2, 4, 4), dtype=np.float32)
    incoming = inspect_enqueue(enqueue_body(good, named=False), handlers, dec, 1 << 30)
    assert incoming.media_type == "latent" and incoming.decoded_shape == dec.decoded_shape(good.shape)
    assert incoming.weight == good.nbytes + int(np.prod(incoming.decoded_shape))
    inf = good.copy()
    inf[0, 3, 1, 2, 2] = np.inf
    assert "non-finite" in refused(enqueue_body(inf)) and "[0, 3, 1, 2, 2]" in refused(enqueue_body(inf))
    nan_bf16 = torch.full((1, 16, 2, 4, 4), float("nan"), dtype=torch.bfloat16).view(torch.uint8).numpy()
    assert "non-finite" in refused(enqueue_body(nan_bf16))
    ok_bf16 = torch.zeros((1, 16, 2, 4, 4), dtype=torch.bfloat16).view(torch.uint8).numpy()
    media = decode_enqueue(inspect_enqueue(enqueue_body(ok_bf16), handlers, dec, 1 << 30)).batch.media
    assert media is not None and media.shape == (1, 16, 2, 4, 4) and media.dtype == np.float32
    assert "odd" in refused(enqueue_body(np.zeros((1, 16, 2, 4, 5), dtype=np.uint8)))
    assert "must be float" in refused(enqueue_body(np.zeros((1, 16, 2, 4, 4), dtype=np.int32)))
