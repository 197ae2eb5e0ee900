"""An offline, randomly initialised Qwen2.5-VL (the Cosmos-Reason1 architecture) small enough for CPU tests.

    cosmos-train make-tiny-model OUT [--size tiny|small] [--seed N]
    python -c "from cosmos_train.models.tiny import make_tiny_model; make_tiny_model('/tmp/tiny')"

The folder holds what a hub checkpoint of nvidia/Cosmos-Reason1-7B holds, built from the real classes:
config.json + model.safetensors (`Qwen2_5_VLForConditionalGeneration` from `Qwen2_5_VLConfig`),
generation_config.json, a byte-level BPE tokenizer with Qwen2.5-VL's pipeline and added tokens
(`cosmos_train.models.tokenizer`), Qwen2.5-VL's chat template, preprocessor_config.json (the
Qwen2VLImageProcessor settings of the real checkpoint) and video_preprocessor_config.json.

torchvision: transformers' Qwen2-VL *video* processor needs it, and AutoProcessor.from_pretrained on
any Qwen2.5-VL folder (this one or the 7B) fails without it. `cosmos_train.models.load.load_processor`
handles that for both: it builds the processor from the folder's tokenizer, image processor (PIL
backend) and chat template, without a video processor; our own `cosmos_train.data.video` does the
video preprocessing. Where torchvision exists, plain AutoProcessor.from_pretrained(OUT) loads the folder.

The vocabulary is a few thousand tokens at most, so embeddings do not dominate the parameter count;
vocab_size in config.json is the tokenizer size rounded up to a multiple of 64, as Qwen pads its own.
Everything is deterministic for a given (size, seed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2_5_VLConfig
from transformers import Qwen2_5_VLForConditionalGeneration as QwenVLModel

from cosmos_train.models.tokenizer import ADDITIONAL_SPECIAL_TOKENS, build_qwen_style_tokenizer

# Qwen2-VL / Qwen2.5-VL-Instruct chat template, verbatim (Cosmos-Reason1-7B ships the same text).
QWEN25_VL_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# OpenAI CLIP normalisation, as in Qwen2.5-VL's preprocessor_config.json.
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]
PATCH_SIZE, MERGE_SIZE, TEMPORAL_PATCH_SIZE = 14, 2, 2
# The real checkpoint's pixel bounds: 4 to 16384 merged tokens of 28x28 pixels.
MIN_PIXELS, MAX_PIXELS = 3136, 12845056


@dataclass(frozen=True)
class TinySize:
    """Shape of one tiny preset. head_dim = text_hidden / text_heads; its half must equal sum(mrope_section)."""

    bpe_vocab: int
    text_hidden: int
    text_intermediate: int
    text_layers: int
    text_heads: int
    text_kv_heads: int
    mrope_section: tuple[int, int, int]
    vision_depth: int
    vision_hidden: int
    vision_intermediate: int
    vision_heads: int


SIZES: dict[str, TinySize] = {
    "tiny": TinySize(1024, 128, 256, 4, 4, 2, (4, 6, 6), 2, 64, 128, 4),
    "small": TinySize(2048, 256, 768, 6, 8, 4, (4, 6, 6), 4, 128, 256, 4),
}


def build_config(size: str, vocab_size: int, special_ids: dict[str, int]) -> Qwen2_5_VLConfig:
    """The Qwen2.5-VL config of preset `size`, with the token ids of our tokenizer."""
    s = SIZES[size]
    head_dim = s.text_hidden // s.text_heads
    if head_dim // 2 != sum(s.mrope_section):
        raise ValueError(
            f"size {size!r}: mrope_section {s.mrope_section} must sum to head_dim/2 = {head_dim // 2}"
        )
    text_config = {
        "vocab_size": vocab_size,
        "hidden_size": s.text_hidden,
        "intermediate_size": s.text_intermediate,
        "num_hidden_layers": s.text_layers,
        "num_attention_heads": s.text_heads,
        "num_key_value_heads": s.text_kv_heads,
        "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 1000000.0,
            "mrope_section": list(s.mrope_section),
        },
        "bos_token_id": special_ids["<|endoftext|>"],
        "eos_token_id": special_ids["<|im_end|>"],
        "pad_token_id": special_ids["<|endoftext|>"],
        "use_sliding_window": False,
        "tie_word_embeddings": False,
    }
    vision_config = {
        "depth": s.vision_depth,
        "hidden_size": s.vision_hidden,
        "intermediate_size": s.vision_intermediate,
        "num_heads": s.vision_heads,
        "out_hidden_size": s.text_hidden,
        "patch_size": PATCH_SIZE,
        "spatial_merge_size": MERGE_SIZE,
        "temporal_patch_size": TEMPORAL_PATCH_SIZE,
        "tokens_per_second": 2,
        "window_size": 112,
        # The 7B uses full attention every 8th of 32 blocks; here the last block is the full one.
        "fullatt_block_indexes": [s.vision_depth - 1],
    }
    return Qwen2_5_VLConfig(
        text_config=text_config,
        vision_config=vision_config,
        image_token_id=special_ids["<|image_pad|>"],
        video_token_id=special_ids["<|video_pad|>"],
        vision_start_token_id=special_ids["<|vision_start|>"],
        vision_end_token_id=special_ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )


def build_tokenizer(size: str) -> PreTrainedTokenizerFast:
    """The transformers tokenizer of preset `size`, configured like Qwen2.5-VL-Instruct's."""
    raw = build_qwen_style_tokenizer(SIZES[size].bpe_vocab)
    return PreTrainedTokenizerFast(
        tokenizer_object=raw,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        bos_token=None,
        additional_special_tokens=list(ADDITIONAL_SPECIAL_TOKENS),
        model_max_length=32768,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
    )


def _image_processor_config() -> dict:
    return {
        "image_processor_type": "Qwen2VLImageProcessor",
        "processor_class": "Qwen2_5_VLProcessor",
        "do_resize": True,
        "do_rescale": True,
        "rescale_factor": 1 / 255,
        "do_normalize": True,
        "do_convert_rgb": True,
        "image_mean": CLIP_MEAN,
        "image_std": CLIP_STD,
        "min_pixels": MIN_PIXELS,
        "max_pixels": MAX_PIXELS,
        "size": {"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS},
        "patch_size": PATCH_SIZE,
        "temporal_patch_size": TEMPORAL_PATCH_SIZE,
        "merge_size": MERGE_SIZE,
        "resample": 3,
    }


def _video_processor_config() -> dict:
    cfg = _image_processor_config()
    del cfg["image_processor_type"]
    cfg["video_processor_type"] = "Qwen2VLVideoProcessor"
    # Qwen2.5-VL's video defaults: frames are sampled by the caller (our video.py), not here.
    cfg.update({"do_sample_frames": False, "fps": 2.0, "min_frames": 4, "max_frames": 768})
    return cfg


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def make_tiny_model(out_dir: str | Path, size: str = "tiny", seed: int = 0) -> Path:
    """Build the preset `size` ("tiny" ~1.2 M parameters, "small" ~8 M) with weights drawn from `seed`.

    Writes a folder that `cosmos_train.models.load` (and transformers' Auto classes) load, and returns it.
    The same (size, seed) always gives the same weights and tokenizer.
    """
    if size not in SIZES:
        raise ValueError(f"unknown tiny model size {size!r}; choose one of {sorted(SIZES)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = build_tokenizer(size)
    special_ids = {t: tokenizer.convert_tokens_to_ids(t) for t in tokenizer.all_special_tokens}
    vocab_size = -(-len(tokenizer) // 64) * 64
    config = build_config(size, vocab_size, special_ids)

    # Random init draws from the global generator; fork it so callers' RNG state is left untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = QwenVLModel(config)
    model.generation_config = GenerationConfig(
        bos_token_id=special_ids["<|endoftext|>"],
        pad_token_id=special_ids["<|endoftext|>"],
        # Qwen2.5-VL-Instruct stops on either; greedy by default so test outputs are reproducible.
        eos_token_id=[special_ids["<|im_end|>"], special_ids["<|endoftext|>"]],
        do_sample=False,
    )
    model.save_pretrained(out)

    tokenizer.chat_template = QWEN25_VL_CHAT_TEMPLATE
    tokenizer.save_pretrained(out)
    # Hub Qwen2.5-VL checkpoints name their tokenizer class Qwen2Tokenizer; transformers' Qwen2Tokenizer
    # reads the same tokenizer.json (same normaliser, pre-tokeniser, decoder), so say so.
    tok_cfg_path = out / "tokenizer_config.json"
    tok_cfg = json.loads(tok_cfg_path.read_text())
    tok_cfg["tokenizer_class"] = "Qwen2Tokenizer"
    tok_cfg["processor_class"] = "Qwen2_5_VLProcessor"
    _write_json(tok_cfg_path, tok_cfg)

    (out / "chat_template.jinja").write_text(QWEN25_VL_CHAT_TEMPLATE)
    _write_json(out / "preprocessor_config.json", _image_processor_config())
    _write_json(out / "video_preprocessor_config.json", _video_processor_config())
    return out


def count_parameters(path_or_model: str | Path | torch.nn.Module) -> dict[str, int]:
    """Parameter counts {"total", "vision", "language"} of a model or a saved folder."""
    model = path_or_model
    if not isinstance(model, torch.nn.Module):
        model = QwenVLModel.from_pretrained(path_or_model)
    total = sum(p.numel() for p in model.parameters())
    vision = sum(p.numel() for n, p in model.named_parameters() if ".visual." in f".{n}")
    return {"total": total, "vision": vision, "language": total - vision}
