"""The tiny world model's folder and the model API the trainer uses (cosmos_train/wfm/model.py, tiny_model.py,
model_export.py).

HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q tests/unit/test_wfm_model.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from cosmos_train.errors import ConfigError, ModelError
from cosmos_train.wfm import model as wm
from cosmos_train.wfm import model_export, tiny_model


@pytest.fixture(scope="module")
def parts(tiny_wfm_dir: Path) -> wm.WfmParts:
    return wm.load_wfm(tiny_wfm_dir)


class NoGuardrail:
    """Stands in for cosmos_guardrail's CosmosSafetyChecker: the pipeline builds one itself only when given None,
    which raises ImportError where cosmos_guardrail is not installed (here)."""

    def to(self, *args: object, **kwargs: object) -> NoGuardrail:
        return self


def test_diffusers_loads_the_folder_as_a_predict2_5_pipeline(tiny_wfm_dir: Path, parts: wm.WfmParts) -> None:
    from diffusers import Cosmos2_5_PredictBasePipeline, DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(tiny_wfm_dir, safety_checker=NoGuardrail())
    assert isinstance(pipe, Cosmos2_5_PredictBasePipeline)
    assert type(pipe.transformer).__name__ == "CosmosTransformer3DModel"
    assert type(pipe.vae).__name__ == "AutoencoderKLWan"
    assert type(pipe.text_encoder).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert (pipe.vae_scale_factor_temporal, pipe.vae_scale_factor_spatial) == (4, 8)
    # our prompt embedding is the pipeline's own, and our latent normalisation its (z - mean) * (1 / std)
    prompts = ["a bright ball rolls left", "a dark cube"]
    with torch.no_grad():
        theirs = pipe._get_prompt_embeds(prompts, max_sequence_length=80, device=torch.device("cpu"))
    assert torch.allclose(wm.encode_prompts(parts, prompts, 80), theirs.float(), atol=1e-5)
    assert torch.allclose(pipe.latents_mean, parts.latents_mean) and torch.allclose(
        1 / pipe.latents_std, parts.latents_std
    )


def test_tiny_folder_is_deterministic(tmp_path: Path, tiny_wfm_dir: Path) -> None:
    again = tiny_model.make_tiny_wfm(tmp_path / "again")
    files = sorted(p.relative_to(tiny_wfm_dir) for p in tiny_wfm_dir.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    assert {
        "transformer/diffusion_pytorch_model.safetensors",
        "vae/diffusion_pytorch_model.safetensors",
        "text_encoder/model.safetensors",
        "tokenizer/tokenizer.json",
    } <= {str(f) for f in files}
    assert all((tiny_wfm_dir / f).read_bytes() == (again / f).read_bytes() for f in files)
    other = tiny_model.make_tiny_wfm(tmp_path / "other", seed=1)
    name = "transformer/diffusion_pytorch_model.safetensors"
    assert (other / name).read_bytes() != (again / name).read_bytes()


def test_latent_statistics_make_unit_scale_latents(parts: wm.WfmParts) -> None:
    """latents_mean / latents_std were measured on synthetic videos, so encoded videos come out ~N(0, 1)."""
    video = (tiny_model._calibration_videos(n=8, seed=3) * 127.5 + 127.5).round().to(torch.uint8)
    z = wm.encode_video(parts, video)
    assert z.mean().abs() < 0.5 and 0.5 < z.std() < 2.0


def test_latent_shape_and_its_refusals(parts: wm.WfmParts) -> None:
    assert (parts.vae_scale_temporal, parts.vae_scale_spatial) == (4, 8)
    assert wm.latent_shape(parts, 5, 32, 48) == (4, 2, 4, 6)
    assert wm.latent_shape(parts, 1, 16, 16) == (4, 1, 2, 2)
    assert wm.latent_shape(parts, 93, 480, 832) == (4, 24, 60, 104)
    with pytest.raises(ConfigError, match="num_frames = 6: must be 1 \\+ 4k, e.g. 5"):
        wm.latent_shape(parts, 6, 32, 32)
    for bad in (0, -3):
        with pytest.raises(ConfigError, match=f"num_frames = {bad}"):
            wm.latent_shape(parts, bad, 32, 32)
    with pytest.raises(ConfigError, match="video size 32x40: width and height must be multiples of 16"):
        wm.latent_shape(parts, 5, 40, 32)
    with pytest.raises(ConfigError) as both:  # every problem at once
        wm.latent_shape(parts, 6, 40, 24)
    assert len(both.value.problems) == 2


def _by_hand(parts: wm.WfmParts, prompt: str, max_length: int) -> torch.Tensor:
    """Predict2.5's full_concat for one prompt, spelled out: the chat's ids through the whole text encoder, every
    layer's hidden states normalised over features, concatenated."""
    chat = [
        {"role": "system", "content": [{"type": "text", "text": wm.SYSTEM_PROMPT}]},
        {"role": "user", "content": [{"type": "text", "text": prompt}]},
    ]
    text = parts.tokenizer.apply_chat_template(chat, tokenize=False)
    assert text.startswith("<|im_start|>system\n" + wm.SYSTEM_PROMPT) and f"user\n{prompt}<|im_end|>" in text
    ids = parts.tokenizer(
        text, max_length=max_length, truncation=True, padding="max_length", return_tensors="pt"
    ).input_ids
    with torch.no_grad():
        hs = parts.text_encoder(input_ids=ids, output_hidden_states=True).hidden_states
    return torch.cat([(h - h.mean(-1, keepdim=True)) / (h.std(-1, keepdim=True) + 1e-8) for h in hs[1:]], -1)[0]


def test_prompt_embedding_is_predict2_5s_full_concat(parts: wm.WfmParts) -> None:
    emb = wm.encode_prompts(parts, ["a bright ball rolls left", "a dark cube", "a bright ball rolls left"], 96)
    text = parts.text_encoder.config.get_text_config()
    assert emb.shape == (3, 96, text.num_hidden_layers * text.hidden_size) and emb.dtype == torch.float32
    assert not emb.requires_grad
    assert torch.equal(emb[0], emb[2]) and not torch.equal(emb[0], emb[1])
    assert torch.allclose(emb[1], _by_hand(parts, "a dark cube", 96), atol=1e-5)
    assert wm.encode_prompts(parts, ["x"]).shape[1] == 128  # the default max_length (the config's too)


def test_vae_carries_latents_to_pixels(parts: wm.WfmParts) -> None:
    """The tiny VAE's decoder responds to its latents (a random Wan VAE's does not: see _pass_through)."""
    z = torch.zeros(2, 4, 2, 4, 4)
    z[0, :3], z[1, :3] = 2.0, -2.0
    video = wm.decode_latents(parts, z)
    assert video.dtype == torch.uint8 and video.shape == (2, 3, 5, 32, 32)
    assert video[0].float().mean() > video[1].float().mean() + 20  # brighter latents, brighter pixels
    still = wm.decode_latents(parts, torch.randn(1, 4, 1, 4, 4).repeat(1, 1, 2, 1, 1)).float()
    assert torch.equal(still[:, :, 1], still[:, :, 4])  # equal latent frames decode to equal frames


def test_encode_decode_round_trip(parts: wm.WfmParts) -> None:
    video = torch.randint(0, 256, (2, 3, 5, 32, 48), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    latents = wm.encode_video(parts, video)
    assert latents.shape == (2, 4, 2, 4, 6) and latents.dtype == torch.float32 and not latents.requires_grad
    assert torch.equal(latents, wm.encode_video(parts, video))  # the posterior's mode: no sampling
    back = wm.decode_latents(parts, latents)
    assert back.shape == video.shape and back.dtype == torch.uint8
    assert torch.equal(back, wm.decode_latents(parts, wm.encode_video(parts, video)))
    with pytest.raises(ValueError, match="uint8"):
        wm.encode_video(parts, video.float())
    with pytest.raises(ConfigError, match="num_frames = 4"):
        wm.encode_video(parts, video[:, :, :4])


def test_velocity_matches_the_pipelines_call_and_has_gradients(parts: wm.WfmParts) -> None:
    emb = wm.encode_prompts(parts, ["a", "b"], 16)
    latents, sigma = torch.randn(2, 4, 2, 4, 4), torch.tensor([0.3, 0.9])
    v = wm.predict_velocity(parts.transformer, latents, sigma, emb)
    assert v.shape == latents.shape
    # the pipeline's text2world call: timestep [B, 1, T, 1, 1] (all frames at sigma), condition_mask zeros
    with torch.no_grad():
        theirs = parts.transformer(
            hidden_states=latents,
            timestep=sigma.view(2, 1, 1, 1, 1).expand(2, 1, 2, 1, 1),
            encoder_hidden_states=emb,
            condition_mask=torch.zeros(2, 1, 2, 4, 4),
            return_dict=False,
        )[0]
    assert torch.allclose(v, theirs, atol=1e-6)
    v.square().mean().backward()
    try:
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in parts.transformer.parameters())
        assert all(p.grad is not None for b in wm.transformer_blocks(parts.transformer) for p in b.parameters())
    finally:
        parts.transformer.zero_grad(set_to_none=True)
    assert len(wm.transformer_blocks(parts.transformer)) == 2


def test_frozen_parts(parts: wm.WfmParts) -> None:
    for frozen in (parts.vae, parts.text_encoder):
        assert not frozen.training and not any(p.requires_grad for p in frozen.parameters())
    assert all(p.requires_grad for p in parts.transformer.parameters())
    assert parts.latents_mean.shape == parts.latents_std.shape == (1, 4, 1, 1, 1)


def test_export_round_trips_exactly(parts: wm.WfmParts, tiny_wfm_dir: Path, tmp_path: Path) -> None:
    from diffusers import CosmosTransformer3DModel

    trained = {k: t + 0.5 for k, t in parts.transformer.state_dict().items()}
    out = model_export.export_wfm(tiny_wfm_dir, trained, tmp_path / "export")
    loaded = CosmosTransformer3DModel.from_pretrained(out, subfolder="transformer").state_dict()
    assert loaded.keys() == trained.keys() and all(torch.equal(loaded[k], trained[k]) for k in trained)
    for same in (
        "model_index.json",
        "vae/diffusion_pytorch_model.safetensors",
        "text_encoder/model.safetensors",
        "tokenizer/tokenizer.json",
        "scheduler/scheduler_config.json",
        "transformer/config.json",
    ):
        assert (out / same).read_bytes() == (tiny_wfm_dir / same).read_bytes()
    again = model_export.export_wfm(tiny_wfm_dir, parts.transformer.state_dict(), out)  # over an existing export
    assert wm.load_wfm(again, text_encoder=False).transformer.state_dict().keys() == trained.keys()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]  # no temporary siblings left


def test_export_refuses_a_mismatched_state_dict(parts: wm.WfmParts, tiny_wfm_dir: Path, tmp_path: Path) -> None:
    sd = dict(parts.transformer.state_dict())
    first = next(iter(sd))
    with pytest.raises(ModelError, match=f"does not match.*missing {first}"):
        model_export.export_wfm(tiny_wfm_dir, {k: t for k, t in sd.items() if k != first}, tmp_path / "bad")
    name = "proj_out.weight"
    with pytest.raises(ModelError, match=f"{name}: shape \\(4, 64\\)"):
        model_export.export_wfm(
            tiny_wfm_dir, sd | {name: torch.zeros(4, 64), "extra.weight": torch.zeros(1)}, tmp_path / "bad"
        )
    assert list(tmp_path.iterdir()) == []


def test_folder_problems_are_model_errors(tmp_path: Path, tiny_wfm_dir: Path) -> None:
    with pytest.raises(ModelError, match="no model_index.json"):
        wm.load_wfm(tmp_path)
    broken = shutil.copytree(tiny_wfm_dir, tmp_path / "broken", ignore=shutil.ignore_patterns("vae"))
    with pytest.raises(ModelError, match=f"{broken}: missing vae/"):
        wm.load_wfm(broken)
    no_weights = shutil.copytree(tiny_wfm_dir, tmp_path / "no-weights", ignore=shutil.ignore_patterns("*.safetensors"))
    with pytest.raises(ModelError, match="transformer/ has no weights"):
        wm.load_wfm(no_weights)
    other = shutil.copytree(tiny_wfm_dir, tmp_path / "other")
    (other / "model_index.json").write_text(json.dumps({"_class_name": "WanPipeline"}))
    with pytest.raises(ModelError, match="a WanPipeline folder"):
        wm.load_wfm(other)


def test_loading_without_the_text_encoder(tmp_path: Path, tiny_wfm_dir: Path) -> None:
    folder = shutil.copytree(tiny_wfm_dir, tmp_path / "m", ignore=shutil.ignore_patterns("text_encoder", "tokenizer"))
    with pytest.raises(ModelError, match="missing text_encoder/"):
        wm.load_wfm(folder)
    parts = wm.load_wfm(folder, text_encoder=False)
    assert parts.text_encoder is None and parts.tokenizer is None
    with pytest.raises(ModelError, match="no text encoder"):
        wm.encode_prompts(parts, ["a"])
