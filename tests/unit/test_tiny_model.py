"""The offline tiny Qwen2.5-VL: tokenizer, folder contents, loading, determinism, generation from a video."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoTokenizer
from transformers.utils import is_torchvision_available

from cosmos_train.data.chat import encode_chat
from cosmos_train.models.load import Qwen25VLProcessorWithoutVideo, load_model, load_processor
from cosmos_train.models.tiny import QWEN25_VL_CHAT_TEMPLATE, SIZES, count_parameters, make_tiny_model
from cosmos_train.models.tiny_tokenizer import QWEN25_VL_ADDED_TOKENS
from cosmos_train.vision.processor import get_tokenizer


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def write_square_clip(path: Path, frames: int = 4, size: int = 56, fps: int = 4) -> Path:
    """A white 16 px square moving right on black, encoded with PyAV."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for i in range(frames):
            img = np.zeros((size, size, 3), np.uint8)
            img[20:36, 4 + 8 * i : 20 + 8 * i] = 255
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def test_folder_has_the_hub_checkpoint_files(tiny_dir: Path) -> None:
    names = {p.name for p in tiny_dir.iterdir()}
    for required in (
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "preprocessor_config.json",
        "video_preprocessor_config.json",
    ):
        assert required in names
    pre = json.loads((tiny_dir / "preprocessor_config.json").read_text())
    assert (pre["patch_size"], pre["merge_size"], pre["temporal_patch_size"]) == (14, 2, 2)
    assert pre["image_mean"] == [0.48145466, 0.4578275, 0.40821073]
    assert pre["image_std"] == [0.26862954, 0.26130258, 0.27577711]
    gen = json.loads((tiny_dir / "generation_config.json").read_text())
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    assert gen["eos_token_id"] == [
        tok.convert_tokens_to_ids("<|im_end|>"),
        tok.convert_tokens_to_ids("<|endoftext|>"),
    ]


def test_config_token_ids_match_the_tokenizer(tiny_dir: Path) -> None:
    model = AutoModelForImageTextToText.from_pretrained(tiny_dir)
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    cfg = model.config
    assert type(model).__name__ == "Qwen2_5_VLForConditionalGeneration"
    assert cfg.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert cfg.video_token_id == tok.convert_tokens_to_ids("<|video_pad|>")
    assert cfg.vision_start_token_id == tok.convert_tokens_to_ids("<|vision_start|>")
    assert cfg.vision_end_token_id == tok.convert_tokens_to_ids("<|vision_end|>")
    assert cfg.text_config.eos_token_id == tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert cfg.text_config.vocab_size % 64 == 0 and cfg.text_config.vocab_size >= len(tok)
    assert cfg.text_config.rope_parameters["mrope_section"] == [4, 6, 6]
    assert (cfg.vision_config.patch_size, cfg.vision_config.spatial_merge_size) == (14, 2)
    assert cfg.vision_config.out_hidden_size == cfg.text_config.hidden_size


def test_added_tokens_follow_the_bpe_vocab_in_qwen_order(tiny_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    base = SIZES["tiny"].bpe_vocab
    for offset, (content, special) in enumerate(QWEN25_VL_ADDED_TOKENS):
        assert tok.convert_tokens_to_ids(content) == base + offset, content
        assert tok.added_tokens_decoder[base + offset].special is special


@pytest.mark.parametrize(
    "text",
    [
        "The red ball rolls left at 3.5 m/s.",
        "(A) left\n(B) right\n<think>\nIt moves right.\n</think>\n\n<answer>\nB\n</answer>",
        "Unicode survives the byte level: é, ü, 日本, 🚗.",
    ],
)
def test_tokenizer_round_trip(tiny_dir: Path, text: str) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    # The BPE learned the corpus: common words are single tokens, not bytes.
    assert len(ids) < len(text.encode("utf-8"))


def test_special_tokens_are_single_ids_and_skippable(tiny_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    text = "<|im_start|>user\n<|vision_start|><|video_pad|><|vision_end|>Which way?<|im_end|>\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    for special in ("<|im_start|>", "<|vision_start|>", "<|video_pad|>", "<|vision_end|>", "<|im_end|>"):
        assert ids.count(tok.convert_tokens_to_ids(special)) == 1
    assert tok.decode(ids, skip_special_tokens=True) == "user\nWhich way?\n"


def test_chat_template_is_qwen25_vl(tiny_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_dir)
    assert tok.chat_template == QWEN25_VL_CHAT_TEMPLATE
    assert load_processor(tiny_dir).chat_template == QWEN25_VL_CHAT_TEMPLATE


def test_parameter_counts(tiny_dir: Path) -> None:
    counts = count_parameters(tiny_dir)
    assert 0.8e6 < counts["total"] < 1.5e6
    assert counts["vision"] > 0 and counts["language"] > counts["vision"]


def test_same_seed_same_weights_other_seed_differs(tmp_path: Path, tiny_dir: Path) -> None:
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    again = make_tiny_model(tmp_path / "again", seed=0)
    assert torch.rand(1) == before  # the caller's RNG stream is not consumed
    other = make_tiny_model(tmp_path / "other", seed=1)
    ref = load_model(tiny_dir).state_dict()
    same = load_model(again).state_dict()
    diff = load_model(other).state_dict()
    assert all(torch.equal(ref[k], same[k]) for k in ref)
    assert not torch.equal(ref["lm_head.weight"], diff["lm_head.weight"])
    assert (again / "tokenizer.json").read_text() == (tiny_dir / "tokenizer.json").read_text()


def test_save_load_round_trip_keeps_weights(tmp_path: Path, tiny_dir: Path) -> None:
    model = load_model(tiny_dir)
    model.save_pretrained(tmp_path / "copy")
    reloaded = load_model(tmp_path / "copy")
    a, b = model.state_dict(), reloaded.state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    half = load_model(tiny_dir, dtype=torch.bfloat16)
    assert half.dtype == torch.bfloat16


def test_processor_save_round_trip(tmp_path: Path, tiny_dir: Path) -> None:
    processor = load_processor(tiny_dir)
    processor.save_pretrained(tmp_path / "proc")
    saved = json.loads((tmp_path / "proc" / "processor_config.json").read_text())
    assert saved["processor_class"] == "Qwen2_5_VLProcessor"
    assert (tmp_path / "proc" / "video_preprocessor_config.json").exists()
    again = load_processor(tmp_path / "proc")
    assert again.chat_template == processor.chat_template
    assert get_tokenizer(again).get_vocab() == get_tokenizer(processor).get_vocab()


@pytest.mark.skipif(is_torchvision_available(), reason="the torchvision-less processor is only used without it")
def test_processor_without_torchvision_refuses_videos(tiny_dir: Path) -> None:
    processor = load_processor(tiny_dir)
    assert isinstance(processor, Qwen25VLProcessorWithoutVideo)
    with pytest.raises(RuntimeError, match="encode_chat"):
        processor(text=["<|vision_start|><|video_pad|><|vision_end|>"], videos=[np.zeros((4, 56, 56, 3), np.uint8)])


def test_generate_from_video_and_text(tmp_path: Path, tiny_dir: Path) -> None:
    clip = write_square_clip(tmp_path / "clip.mp4")
    processor = load_processor(tiny_dir)
    model = load_model(tiny_dir).eval()
    messages = [
        {"role": "system", "content": "Answer the questions."},
        {
            "role": "user",
            "content": [
                {
                    "type": "video",
                    "video": str(clip),
                    "nframes": 4,
                    "resized_height": 56,
                    "resized_width": 56,
                },
                {"type": "text", "text": "Which way does the square move? (A) left (B) right"},
            ],
        },
    ]
    prompt = encode_chat(processor, messages, add_generation_prompt=True)
    assert prompt.video_grid_thw.tolist() == [[2, 4, 4]]
    with torch.no_grad():
        out = model.generate(**prompt.model_inputs(), max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert out.shape == (1, len(prompt) + 6)
    assert torch.equal(out[0, : len(prompt)], prompt.input_ids)
    # mm_token_type_ids reached the model: 3D RoPE packs 8 video tokens into 2x2x2 positions,
    # so positions end before the sequence does (1D positions would give a delta of 0).
    assert int(model.model.rope_deltas.reshape(-1)[0]) < 0
    # Greedy decoding is reproducible.
    with torch.no_grad():
        again = model.generate(**prompt.model_inputs(), max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert torch.equal(out, again)


def test_processor_reads_chat_template_json_like_hub_checkpoints(tmp_path: Path, tiny_dir: Path) -> None:
    # Cosmos-Reason1-7B / Qwen2.5-VL-7B-Instruct keep the template in chat_template.json.
    folder = tmp_path / "hub-layout"
    folder.mkdir()
    for src in tiny_dir.iterdir():
        if src.name != "chat_template.jinja":
            (folder / src.name).write_bytes(src.read_bytes())
    tok_cfg = json.loads((folder / "tokenizer_config.json").read_text())
    tok_cfg.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_cfg))
    (folder / "chat_template.json").write_text(json.dumps({"chat_template": QWEN25_VL_CHAT_TEMPLATE}))
    assert load_processor(folder).chat_template == QWEN25_VL_CHAT_TEMPLATE
