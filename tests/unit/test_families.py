"""Model family specs: lookup, processors without torchvision, and our pixels and prompts equal to what
transformers' own Qwen3-VL / Cosmos3-Edge processor code gives (the parts of it that run without torchvision:
image processors' PIL backend, the video processors' patchify, the processors' timestamp expansion)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from cosmos_train.data.chat import VIDEO_TYPE, encode_chat
from cosmos_train.data.media import (
    VisionSettings,
    normalize_frames,
    patchify,
    prepare_video,
    preprocess_image,
    preprocess_video,
    sampled_frames,
)
from cosmos_train.data.synthetic_video import write_mp4
from cosmos_train.errors import ModelError
from cosmos_train.models.families import family_of, family_of_processor
from cosmos_train.models.load import load_model, load_processor
from cosmos_train.vision.processor import get_tokenizer, vision_layout_of
from tests.conftest import FAMILIES

VIDEO_FAMILIES = ("qwen3_vl", "cosmos3_edge")


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """15 noise frames at 6 fps (2.5 s), 64 x 96: sides multiples of 32, so no resize differs anywhere."""
    path = tmp_path_factory.mktemp("family-clip") / "noise.mp4"
    write_mp4(path, np.random.default_rng(0).integers(0, 255, (15, 64, 96, 3), dtype=np.uint8), fps=6)
    return path


@pytest.mark.parametrize("family", FAMILIES)
def test_each_tiny_model_has_its_spec_and_processor(
    family: str, family_model_dirs: dict[str, Path], tmp_path: Path
) -> None:
    folder = family_model_dirs[family]
    model = load_model(folder)
    spec = family_of(model)
    assert spec.name == family and json.loads((folder / "config.json").read_text())["model_type"] == family
    assert len(spec.language_layers(model)) == 4 and len(spec.vision_blocks(model)) == 2
    assert any(n.startswith(spec.vision_prefixes) for n, _ in model.named_parameters())
    processor = load_processor(folder)
    assert family_of_processor(processor) is spec and vision_layout_of(processor) == spec.vision_layout
    # saved as the real processor class (so AutoProcessor loads the folder where torchvision exists); it loads
    # back as the same family's processor here too
    processor.save_pretrained(tmp_path)
    if (tmp_path / "video_preprocessor_config.json").exists():  # ours, without torchvision
        saved = json.loads((tmp_path / "video_preprocessor_config.json").read_text())
        assert saved["processor_class"] == spec.processor_classes[0]
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    assert family_of_processor(load_processor(tmp_path)) is spec


def test_unknown_model_type_lists_the_families() -> None:
    with pytest.raises(ModelError, match="qwen2_5_vl .*qwen3_vl .*cosmos3_edge") as err:
        family_of("llava")
    assert "'llava' is not supported" in str(err.value)


@pytest.mark.parametrize("family", FAMILIES)
def test_image_pixels_equal_the_image_processor(family: str, family_model_dirs: dict[str, Path]) -> None:
    processor = load_processor(family_model_dirs[family])
    layout = vision_layout_of(processor)
    side = layout.factor
    picture = Image.fromarray(np.random.default_rng(1).integers(0, 255, (2 * side, 3 * side, 3), dtype=np.uint8))
    ours = preprocess_image(picture, VisionSettings(min_pixels=side * side), layout)
    theirs = processor.image_processor(
        images=[picture], return_tensors="pt", size={"shortest_edge": side * side, "longest_edge": 1 << 24}
    )
    assert ours.grid_thw.tolist() == theirs["image_grid_thw"][0].tolist() == [1, 4, 6]
    torch.testing.assert_close(ours.pixel_values, theirs["pixel_values"], rtol=0, atol=1e-6)


def test_video_patches_equal_qwen3_vl_video_processor() -> None:
    """Qwen3VLVideoProcessor's rescale, normalise (0.5 / 0.5) and patchify; 5 frames pad to 6 as there."""
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    layout = family_of("qwen3_vl").vision_layout
    frames = torch.from_numpy(np.random.default_rng(2).integers(0, 255, (5, 3, 64, 96), dtype=np.uint8))
    ours, grid = patchify(normalize_frames(frames, layout), layout)
    scaled = ((frames.float() / 255 - 0.5) / 0.5)[None]
    theirs, t, h, w = Qwen3VLVideoProcessor.patchify(None, scaled, patch_size=16, merge_size=2, temporal_patch_size=2)
    assert grid.tolist() == [t, h, w] == [3, 4, 6]
    torch.testing.assert_close(ours, theirs[0], rtol=0, atol=1e-6)


def test_cosmos3_edge_video_is_its_frames_as_images(family_model_dirs: dict[str, Path]) -> None:
    """Cosmos3-Edge patches one frame per temporal patch: a clip's rows are its frames' image rows in order
    (its video processor needs torchvision; its PIL image processor does not)."""
    processor = load_processor(family_model_dirs["cosmos3_edge"])
    layout = vision_layout_of(processor)
    frames = torch.from_numpy(np.random.default_rng(3).integers(0, 255, (3, 3, 64, 96), dtype=np.uint8))
    ours = preprocess_video(frames, None, 2.0, layout)
    images = [Image.fromarray(f.permute(1, 2, 0).numpy()) for f in frames]
    theirs = processor.image_processor(
        images=images, return_tensors="pt", size={"shortest_edge": 1024, "longest_edge": 1 << 24}
    )
    assert ours.grid_thw.tolist() == [3, 4, 6] and theirs["image_grid_thw"].tolist() == [[1, 4, 6]] * 3
    torch.testing.assert_close(ours.pixel_values, theirs["pixel_values"], rtol=0, atol=1e-6)
    assert ours.timestamps == (0.0, 0.5, 1.0)  # no pairing: each frame's own time


@pytest.mark.parametrize("family", VIDEO_FAMILIES)
def test_video_prompt_equals_the_processor_expansion(
    family: str, family_model_dirs: dict[str, Path], clip: Path
) -> None:
    """encode_chat's ids are the tokens of the text transformers' processor writes for this video: its
    replace_video_token (timestamps from the source video's frame numbers and rate) put in by its
    get_text_with_replacements (Qwen3-VL: in place of <|video_pad|>, inside the template's wrapper; Cosmos3-Edge:
    in place of the whole <|vision_start|><|video_pad|><|vision_end|>)."""
    from transformers.video_utils import VideoMetadata

    processor = load_processor(family_model_dirs[family])
    layout = vision_layout_of(processor)
    part = {"type": "video", "video": str(clip), "fps": 3, "video_start": 0.4, "min_pixels": 1024}
    chat = [
        {"role": "user", "content": [{"type": "text", "text": "Watch?"}, part, {"type": "text", "text": "Q"}]},
        {"role": "assistant", "content": "B"},
    ]
    enc = encode_chat(processor, chat)

    settings = layout.settings(VisionSettings.from_part(part))
    item = prepare_video(str(clip), settings, layout)
    indices, fps, total = sampled_frames(str(clip), settings)
    assert indices[0] == 3 and fps == 6 and total == 15  # video_start 0.4 s: from frame 3
    processor.video_processor = SimpleNamespace(
        merge_size=layout.merge_size, temporal_patch_size=layout.temporal_patch_size
    )
    metadata = VideoMetadata(total_num_frames=total, fps=fps, frames_indices=indices)
    replacement = processor.replace_video_token(
        {"video_grid_thw": item.grid_thw[None], "video_metadata": [metadata]}, 0
    )
    text = processor.apply_chat_template(chat, tokenize=False)
    assert replacement.startswith("<0.") and replacement.count("seconds>") == len(item.timestamps)
    (expanded,), _ = processor.get_text_with_replacements([text], videos_replacements=[replacement])
    wrapper = "<|vision_start|><0."
    assert expanded.count(wrapper) == (0 if family == "cosmos3_edge" else 1)
    expected = get_tokenizer(processor)(expanded, add_special_tokens=False)["input_ids"]
    assert enc.input_ids.tolist() == expected
    video_id = get_tokenizer(processor).convert_tokens_to_ids("<|video_pad|>")
    assert ((enc.input_ids == video_id) == (enc.mm_token_type_ids == VIDEO_TYPE)).all()
    assert enc.second_per_grid_ts is None  # these models take time from the prompt only
    torch.testing.assert_close(enc.pixel_values_videos, item.pixel_values, rtol=0, atol=0)


def test_truncation_drops_a_timestamped_video_whole(family_model_dirs: dict[str, Path], clip: Path) -> None:
    """A cut inside a Qwen3-VL video removes the video from its first `<t seconds>` on, pixels included."""
    processor = load_processor(family_model_dirs["qwen3_vl"])
    part = {"type": "video", "video": str(clip), "fps": 3, "min_pixels": 1024}
    chat = [{"role": "user", "content": [{"type": "text", "text": "Look."}, part]}]
    full = encode_chat(processor, chat, add_generation_prompt=True)
    last_pad = int((full.mm_token_type_ids == VIDEO_TYPE).nonzero().max())  # inside the last temporal patch
    cut = encode_chat(processor, chat, add_generation_prompt=True, max_length=last_pad, truncation="right")
    text = get_tokenizer(processor).decode(cut.input_ids)
    assert text.endswith("Look.") and "seconds" not in text and "vision" not in text
    assert cut.pixel_values_videos is None


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_default_targets_are_the_language_projections(family: str, family_model_dirs: dict[str, Path]) -> None:
    """[policy.lora] without target_modules adapts every attention and MLP projection of each language layer
    (Cosmos3-Edge's MLP is fc1 / fc2) and nothing of the vision tower."""
    from cosmos_train.config import LoraConfig
    from cosmos_train.models.lora import apply_lora

    model = load_model(family_model_dirs[family])
    spec = family_of(model)
    apply_lora(model, LoraConfig(r=4))
    adapted = sorted({n.rsplit(".lora_A", 1)[0] for n, _ in model.named_parameters() if ".lora_A." in n})
    mlp = {"fc1", "fc2"} if family == "cosmos3_edge" else {"gate_proj", "up_proj", "down_proj"}
    assert len(adapted) == (4 + len(mlp)) * len(spec.language_layers(model))
    assert not any(n.startswith(spec.vision_prefixes) for n in adapted)
    assert {n.rsplit(".", 1)[1] for n in adapted} == {"q_proj", "k_proj", "v_proj", "o_proj"} | mlp


def test_qwen3_vl_video_equals_transformers_video_processor() -> None:
    """Only where torchvision loads (`make test-vllm`'s environment): Qwen3VLVideoProcessor on the same frames
    (5 frames: padded to 6) gives our pixel_values_videos and grid, resize included."""
    pytest.importorskip("torchvision")
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    layout = family_of("qwen3_vl").vision_layout
    frames = torch.from_numpy(np.random.default_rng(4).integers(0, 255, (5, 3, 150, 230), dtype=np.uint8))
    settings = VisionSettings(min_pixels=32 * 32 * 4, max_pixels=32 * 32 * 40)
    size = layout.settings(settings).video_size(150, 230, 5)
    theirs = Qwen3VLVideoProcessor()(
        videos=[frames],
        do_sample_frames=False,
        return_tensors="pt",
        size={"shortest_edge": 32 * 32, "longest_edge": 6 * size[0] * size[1]},
        cap_pixels_per_frame=False,
    )
    ours = preprocess_video(frames, settings, 2.0, layout)
    assert ours.grid_thw.tolist() == theirs["video_grid_thw"][0].tolist() == [3, size[0] // 16, size[1] // 16]
    torch.testing.assert_close(ours.pixel_values, theirs["pixel_values_videos"], atol=1e-5, rtol=0)


def test_vllm_engine_refuses_a_family_it_cannot_load(
    family_model_dirs: dict[str, Path], synthetic_dir: Path, tmp_path: Path
) -> None:
    """vLLM 0.32 reads Cosmos3-Edge only from its Diffusers layout: a GRPO job with rollout.backend = "vllm"
    (and an evaluation with engine = "vllm") on a transformers folder is refused at check time, saying to use
    the transformers engine; Qwen3-VL passes."""
    from cosmos_train.config import ConfigError
    from cosmos_train.preflight import check_job
    from tests.conftest import write_tiny_grpo_config

    def job(family: str) -> Path:
        return write_tiny_grpo_config(
            tmp_path / family / "config.toml",
            family_model_dirs[family],
            synthetic_dir,
            tmp_path / "out",
            **{"rollout.backend": "vllm"},
        )

    with pytest.raises(ConfigError, match='rollout.backend = "hf"'):
        check_job(job("cosmos3_edge"), read_rows=False)
    qwen3 = job("qwen3_vl")
    check_job(qwen3, read_rows=False, dataset_script=str(qwen3.parent / "toy_rewards.py"))
