"""The tiny world model's folder and the model API the trainer uses (cosmos_train/wfm/model.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cosmos_train.errors import ConfigError, ModelError
from cosmos_train.wfm import model as wm


@pytest.fixture(scope="module")
def parts(tiny_wfm_dir: Path) -> wm.WfmParts:
    return wm.load_wfm(tiny_wfm_dir)


def test_diffusers_loads_the_folder_as_a_predict2_5_pipeline(tiny_wfm_dir: Path) -> None:
    from diffusers import Cosmos2_5_PredictBasePipeline

    class NoGuardrail:  # cosmos_guardrail is not installed here; the pipeline only builds its own when given None
        pass

    pipe = Cosmos2_5_PredictBasePipeline.from_pretrained(tiny_wfm_dir, safety_checker=NoGuardrail())
    assert type(pipe.transformer).__name__ == "CosmosTransformer3DModel"
    assert type(pipe.vae).__name__ == "AutoencoderKLWan"
    assert type(pipe.text_encoder).__name__ == "Qwen2_5_VLForConditionalGeneration"


def test_tiny_folder_is_deterministic(tmp_path: Path, tiny_wfm_dir: Path) -> None:
    from safetensors.torch import load_file

    again = wm.make_tiny_wfm(tmp_path / "again")
    for part, name in (("transformer", wm.TRANSFORMER_WEIGHTS), ("vae", "diffusion_pytorch_model.safetensors")):
        a, b = load_file(str(tiny_wfm_dir / part / name)), load_file(str(again / part / name))
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_latent_shape_and_its_refusals(parts: wm.WfmParts) -> None:
    assert wm.latent_shape(parts, 5, 32, 48) == (4, 2, 4, 6)
    assert wm.latent_shape(parts, 93, 480, 832) == (4, 24, 60, 104)
    with pytest.raises(ConfigError, match="num_frames = 6: must be 1 \\+ 4k"):
        wm.latent_shape(parts, 6, 32, 32)
    with pytest.raises(ConfigError, match="multiples of 16"):
        wm.latent_shape(parts, 5, 40, 32)


def test_prompt_embedding_is_predict2_5s_full_concat(parts: wm.WfmParts) -> None:
    emb = wm.encode_prompts(parts, ["a bright ball rolls left", "a dark cube", "a bright ball rolls left"], 96)
    layers = parts.text_encoder.config.get_text_config().num_hidden_layers
    hidden = parts.text_encoder.config.get_text_config().hidden_size
    assert emb.shape == (3, 96, layers * hidden)
    assert torch.equal(emb[0], emb[2]) and not torch.equal(emb[0], emb[1])
    # by hand: the chat's ids, every layer's hidden states normalised over features, concatenated
    chat = [{"role": "system", "content": [{"type": "text", "text": wm.SYSTEM_PROMPT}]},
            {"role": "user", "content": [{"type": "text", "text": "a dark cube"}]}]
    text = parts.tokenizer.apply_chat_template(chat, tokenize=False)
    ids = parts.tokenizer(text, max_length=96, truncation=True, padding="max_length", return_tensors="pt").input_ids
    with torch.no_grad():
        hs = parts.text_encoder(input_ids=ids, output_hidden_states=True).hidden_states
    want = torch.cat([(h - h.mean(-1, keepdim=True)) / (h.std(-1, keepdim=True) + 1e-8) for h in hs[1:]], -1)
    assert torch.allclose(emb[1], want[0], atol=1e-5)


def test_vae_carries_latents_to_pixels(parts: wm.WfmParts) -> None:
    """The tiny VAE's decoder responds to its latents (a random Wan VAE's does not: see _pass_through)."""
    z = torch.zeros(2, 4, 2, 4, 4)
    z[0, :3], z[1, :3] = 2.0, -2.0
    video = wm.decode_latents(parts, z)
    assert video.dtype == torch.uint8 and video.shape == (2, 3, 5, 32, 32)
    assert video[0].float().mean() > video[1].float().mean() + 20  # brighter latents, brighter pixels
    still = wm.decode_latents(parts, torch.randn(1, 4, 1, 4, 4).repeat(1, 1, 2, 1, 1)).float()
    assert torch.equal(still[:, :, 1], still[:, :, 4])  # equal latent frames decode to equal frames
    latents = wm.encode_video(parts, video)
    assert latents.shape == (2, 4, 2, 4, 4) and torch.equal(latents, wm.encode_video(parts, video))


def test_velocity_has_gradients_and_the_export_round_trips(parts: wm.WfmParts, tiny_wfm_dir: Path,
                                                           tmp_path: Path) -> None:
    from diffusers import CosmosTransformer3DModel

    emb = wm.encode_prompts(parts, ["a", "b"], 16)
    v = wm.predict_velocity(parts.transformer, torch.randn(2, 4, 2, 4, 4), torch.tensor([0.3, 0.9]), emb)
    assert v.shape == (2, 4, 2, 4, 4)
    v.square().mean().backward()
    assert all(p.grad is not None for p in wm.transformer_blocks(parts.transformer)[0].parameters())
    parts.transformer.zero_grad()
    trained = {k: t + 0.5 for k, t in parts.transformer.state_dict().items()}
    out = wm.export_wfm(tiny_wfm_dir, trained, tmp_path / "export")
    loaded = CosmosTransformer3DModel.from_pretrained(out, subfolder="transformer").state_dict()
    assert all(torch.equal(loaded[k], trained[k]) for k in trained)
    assert (out / "vae").is_dir() and (out / "model_index.json").is_file() and not (tmp_path / ".export.tmp").exists()
    with pytest.raises(ModelError, match="does not match"):
        wm.export_wfm(tiny_wfm_dir, {k: t for k, t in list(trained.items())[1:]}, tmp_path / "bad")


def test_folder_problems_are_model_errors(tmp_path: Path, tiny_wfm_dir: Path) -> None:
    with pytest.raises(ModelError, match="no model_index.json"):
        wm.load_wfm(tmp_path)
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny_wfm_dir, broken, ignore=shutil.ignore_patterns("vae"))
    with pytest.raises(ModelError, match="missing vae/"):
        wm.load_wfm(broken)
