"""Offline, randomly initialised models of each supported family, small enough for CPU tests.

    cosmos-train make-tiny-model OUT [--family qwen2_5_vl|qwen3_vl|cosmos3_edge|qwen2|qwen3|llama|mistral]
                                     [--size tiny|small] [--seed N]
    python -c "from cosmos_train.models.tiny import make_tiny_model; make_tiny_model('/tmp/tiny')"

Families (`cosmos_train.models.families`): qwen2_5_vl (Cosmos-Reason1, the default and the demo's model),
qwen3_vl (Cosmos-Reason2), cosmos3_edge (Cosmos3-Edge). The folder holds what a hub checkpoint holds, built
from the real classes: config.json + model.safetensors (the family's ForConditionalGeneration class from
its config class), generation_config.json, a byte-level BPE tokenizer with Qwen2.5-VL's pipeline and added
tokens (`cosmos_train.models.tiny_tokenizer`), the family's chat template, preprocessor_config.json (the image
processor settings of the real checkpoint) and video_preprocessor_config.json.

Cosmos3-Edge: its hub tokenizer and chat template are not available offline (transformers ships the model
code only), so its tiny model uses the same Qwen-style tokenizer and the Qwen3-VL chat template, with the
token ids written into its config; the architecture, vision layout (16 px patches, one frame per temporal
patch) and timestamps are Cosmos3-Edge's own.

Text-only families (qwen2 = Qwen2.5, qwen3 dense, llama, mistral): the family's causal LM class (config.json,
model.safetensors, generation_config.json), the language half of the preset, and the same tokenizer with a
ChatML template (Qwen2.5-Instruct's or Qwen3's; the same ChatML for llama / mistral, whose hub templates need their
own tokenizers); no preprocessor files, since a language model has no processor.

torchvision: transformers' Qwen2-VL *video* processor needs it, and AutoProcessor.from_pretrained on
any Qwen2.5-VL folder (this one or the 7B) fails without it. `cosmos_train.models.load.load_processor`
handles that for both: it builds the processor from the folder's tokenizer, image processor (PIL
backend) and chat template, without a video processor; our own `cosmos_train.data.media` does the
video preprocessing. Where torchvision exists, plain AutoProcessor.from_pretrained(OUT) loads the folder.

The vocabulary is a few thousand tokens at most, so embeddings do not dominate the parameter count;
vocab_size in config.json is the tokenizer size rounded up to a multiple of 64, as Qwen pads its own.
Everything is deterministic for a given (size, seed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, cast

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    Cosmos3EdgeConfig,
    GenerationConfig,
    LlamaConfig,
    MistralConfig,
    PreTrainedConfig,
    PreTrainedTokenizerFast,
    Qwen2_5_VLConfig,
    Qwen2Config,
    Qwen3Config,
    Qwen3VLConfig,
)

from cosmos_train.models.load import load_model
from cosmos_train.models.tiny_tokenizer import ADDITIONAL_SPECIAL_TOKENS, build_qwen_style_tokenizer

# The content parts both templates render alike: images and videos as a vision block each, then text.
_PARTS = (
    "{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}"
)
_COUNTERS = "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"

# Qwen2-VL / Qwen2.5-VL-Instruct chat template, verbatim (Cosmos-Reason1-7B ships the same text).
QWEN25_VL_CHAT_TEMPLATE = (
    _COUNTERS + "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n"
    "{% else %}" + _PARTS + "<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen3-VL-Instruct's chat template for system / user / assistant turns (its tool-call and reasoning branches
# left out): no default system prompt, vision parts as <|vision_start|><|video_pad|><|vision_end|>, which the
# processor turns into timestamped per-patch blocks.
QWEN3_VL_CHAT_TEMPLATE = (
    _COUNTERS + "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}" + _PARTS + "{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Qwen2.5-Instruct / Qwen3's own chat templates for system / user / assistant turns with string content (their
# tool-call and reasoning branches left out): ChatML, a default system prompt in Qwen2.5's only.
QWEN25_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN3_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

VISION_FAMILY_NAMES = ("qwen2_5_vl", "qwen3_vl", "cosmos3_edge")
# text-only language models: a causal LM class, our tokenizer and a ChatML template (module docstring)
TEXT_FAMILY_NAMES = ("qwen2", "qwen3", "llama", "mistral")
FAMILY_NAMES = VISION_FAMILY_NAMES + TEXT_FAMILY_NAMES

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


def build_config(
    size: str, vocab_size: int, special_ids: dict[str, int], family: str = "qwen2_5_vl"
) -> PreTrainedConfig:
    """The config of `family` at preset `size`, with the token ids of our tokenizer."""
    if family == "qwen3_vl":
        return _qwen3_vl_config(size, vocab_size, special_ids)
    if family == "cosmos3_edge":
        return _cosmos3_edge_config(size, vocab_size, special_ids)
    if family in TEXT_FAMILY_NAMES:
        return _text_only_config(family, size, vocab_size, special_ids)
    if family != "qwen2_5_vl":
        raise ValueError(f"unknown family {family!r}; choose one of {', '.join(FAMILY_NAMES)}")
    return _qwen2_5_vl_config(size, vocab_size, special_ids)


class _VisionTokenIds(TypedDict):
    """The vision token ids a VLM config takes as keyword arguments."""

    image_token_id: int
    video_token_id: int
    vision_start_token_id: int
    vision_end_token_id: int


def _token_ids(special_ids: dict[str, int]) -> _VisionTokenIds:
    return {
        "image_token_id": special_ids["<|image_pad|>"],
        "video_token_id": special_ids["<|video_pad|>"],
        "vision_start_token_id": special_ids["<|vision_start|>"],
        "vision_end_token_id": special_ids["<|vision_end|>"],
    }


def _text_config(s: TinySize, vocab_size: int, special_ids: dict[str, int]) -> dict:
    return {
        "vocab_size": vocab_size,
        "hidden_size": s.text_hidden,
        "intermediate_size": s.text_intermediate,
        "num_hidden_layers": s.text_layers,
        "num_attention_heads": s.text_heads,
        "num_key_value_heads": s.text_kv_heads,
        "head_dim": s.text_hidden // s.text_heads,
        "rms_norm_eps": 1e-6,
        "bos_token_id": special_ids["<|endoftext|>"],
        "eos_token_id": special_ids["<|im_end|>"],
        "pad_token_id": special_ids["<|endoftext|>"],
        "tie_word_embeddings": False,
    }


def _text_only_config(family: str, size: str, vocab_size: int, special_ids: dict[str, int]) -> PreTrainedConfig:
    """A text-only causal LM of `family` at preset `size` (the language half of the VL presets)."""
    s = SIZES[size]
    cls = {"qwen2": Qwen2Config, "qwen3": Qwen3Config, "llama": LlamaConfig, "mistral": MistralConfig}[family]
    keys = _text_config(s, vocab_size, special_ids) | {
        "max_position_embeddings": 32768,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    }
    if family == "qwen2":  # Qwen2.5's config.json derives head_dim and has no sliding window in use
        keys = {k: v for k, v in keys.items() if k != "head_dim"} | {"use_sliding_window": False}
    return cls(**keys)


def _qwen_vision_config(s: TinySize, patch_size: int) -> dict:
    """The vision-tower keys Qwen2.5-VL and Qwen3-VL share."""
    return {
        "depth": s.vision_depth,
        "hidden_size": s.vision_hidden,
        "intermediate_size": s.vision_intermediate,
        "num_heads": s.vision_heads,
        "out_hidden_size": s.text_hidden,
        "patch_size": patch_size,
        "spatial_merge_size": MERGE_SIZE,
        "temporal_patch_size": TEMPORAL_PATCH_SIZE,
    }


def _qwen3_vl_config(size: str, vocab_size: int, special_ids: dict[str, int]) -> Qwen3VLConfig:
    """Qwen3-VL (Cosmos-Reason2-8B's architecture): interleaved M-RoPE, q/k norms, deepstack vision features."""
    s = SIZES[size]
    text_config = _text_config(s, vocab_size, special_ids) | {
        "max_position_embeddings": 262144,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 5000000.0,
            "mrope_section": list(s.mrope_section),
            "mrope_interleaved": True,
        },
    }
    vision_config = _qwen_vision_config(s, patch_size=16) | {
        # a 16 x 16 learned position grid, interpolated to the input (the 8B has 48 x 48)
        "num_position_embeddings": 256,
        # the 8B adds block 8, 16 and 24's features to the first language layers; here the first block's
        "deepstack_visual_indexes": [0],
    }
    return Qwen3VLConfig(
        text_config=text_config, vision_config=vision_config, tie_word_embeddings=False, **_token_ids(special_ids)
    )


def _cosmos3_edge_config(size: str, vocab_size: int, special_ids: dict[str, int]) -> Cosmos3EdgeConfig:
    """Cosmos3-Edge: SigLIP-style vision encoder, 2 x 2 projector, relu2 MLP language model with M-RoPE."""
    s = SIZES[size]
    text_config = _text_config(s, vocab_size, special_ids) | {
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 100_000_000.0,
            "mrope_section": list(s.mrope_section),
        },
    }
    vision_config = {
        "hidden_size": s.vision_hidden,
        "intermediate_size": s.vision_intermediate,
        "num_hidden_layers": s.vision_depth,
        "num_attention_heads": s.vision_heads,
        "patch_size": 16,
        "spatial_merge_size": MERGE_SIZE,
        "num_patches": 256,
    }
    return Cosmos3EdgeConfig(
        text_config=text_config,
        vision_config=vision_config,
        projector_hidden_size=4 * s.vision_hidden,
        tie_word_embeddings=False,
        **_token_ids(special_ids),
    )


def _qwen2_5_vl_config(size: str, vocab_size: int, special_ids: dict[str, int]) -> Qwen2_5_VLConfig:
    """The Qwen2.5-VL config of preset `size`, with the token ids of our tokenizer."""
    s = SIZES[size]
    head_dim = s.text_hidden // s.text_heads
    if head_dim // 2 != sum(s.mrope_section):
        raise ValueError(f"size {size!r}: mrope_section {s.mrope_section} must sum to head_dim/2 = {head_dim // 2}")
    # Qwen2.5-VL's text config derives head_dim from hidden_size / heads itself (its config.json has none)
    text_config = {k: v for k, v in _text_config(s, vocab_size, special_ids).items() if k != "head_dim"} | {
        "max_position_embeddings": 32768,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": list(s.mrope_section)},
        "use_sliding_window": False,
    }
    vision_config = _qwen_vision_config(s, patch_size=PATCH_SIZE) | {
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


def _image_processor_config(family: str = "qwen2_5_vl") -> dict:
    if family == "qwen3_vl":  # Qwen3-VL's preprocessor_config.json: 16 px patches, 0.5 mean / std
        return {
            "image_processor_type": "Qwen2VLImageProcessor",
            "processor_class": "Qwen3VLProcessor",
            "do_resize": True,
            "do_rescale": True,
            "rescale_factor": 1 / 255,
            "do_normalize": True,
            "do_convert_rgb": True,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "size": {"shortest_edge": 65536, "longest_edge": 16777216},
            "patch_size": 16,
            "temporal_patch_size": TEMPORAL_PATCH_SIZE,
            "merge_size": MERGE_SIZE,
            "resample": 3,
        }
    if family == "cosmos3_edge":
        return {
            "image_processor_type": "Cosmos3EdgeImageProcessor",
            "processor_class": "Cosmos3EdgeProcessor",
            "do_resize": True,
            "do_rescale": True,
            "rescale_factor": 1 / 255,
            "do_normalize": True,
            "do_convert_rgb": True,
            "image_mean": [0.5, 0.5, 0.5],
            "image_std": [0.5, 0.5, 0.5],
            "size": {"shortest_edge": 256 * 256, "longest_edge": 4096 * 4096},
            "patch_size": 16,
            "temporal_patch_size": 1,
            "merge_size": MERGE_SIZE,
            "resample": 3,
        }
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


def _video_processor_config(family: str = "qwen2_5_vl") -> dict:
    cfg = _image_processor_config(family)
    del cfg["image_processor_type"]
    cfg["video_processor_type"] = {
        "qwen2_5_vl": "Qwen2VLVideoProcessor",
        "qwen3_vl": "Qwen3VLVideoProcessor",
        "cosmos3_edge": "Cosmos3EdgeVideoProcessor",
    }[family]
    # The families' video defaults: frames are sampled by the caller (our video.py), not here.
    cfg.update({"do_sample_frames": False, "fps": 2.0, "min_frames": 4, "max_frames": 768})
    if family == "qwen3_vl":
        cfg["size"] = {"shortest_edge": 4096, "longest_edge": 25165824}
    return cfg


def _write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def make_tiny_model(out_dir: str | Path, size: str = "tiny", seed: int = 0, family: str = "qwen2_5_vl") -> Path:
    """Build the preset `size` ("tiny" ~1.2 M parameters, "small" ~8 M) of `family` with weights drawn
    from `seed`.

    Writes a folder that `cosmos_train.models.load` (and transformers' Auto classes) load, and returns it.
    The same (family, size, seed) always gives the same weights and tokenizer.
    """
    if size not in SIZES:
        raise ValueError(f"unknown tiny model size {size!r}; choose one of {sorted(SIZES)}")
    if family not in FAMILY_NAMES:
        raise ValueError(f"unknown family {family!r}; choose one of {', '.join(FAMILY_NAMES)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = build_tokenizer(size)
    # one token in, one id out (transformers types the result as int | list[int] for either form)
    special_ids = {t: cast(int, tokenizer.convert_tokens_to_ids(t)) for t in tokenizer.all_special_tokens}
    vocab_size = -(-len(tokenizer) // 64) * 64
    config = build_config(size, vocab_size, special_ids, family)

    text_only = family in TEXT_FAMILY_NAMES
    # Random init draws from the global generator; fork it so callers' RNG state is left untouched.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = (AutoModelForCausalLM if text_only else AutoModelForImageTextToText).from_config(config)
    model.generation_config = GenerationConfig(
        bos_token_id=special_ids["<|endoftext|>"],
        pad_token_id=special_ids["<|endoftext|>"],
        # Qwen2.5-VL-Instruct stops on either; greedy by default so test outputs are reproducible.
        eos_token_id=[special_ids["<|im_end|>"], special_ids["<|endoftext|>"]],
        do_sample=False,
    )
    model.save_pretrained(out)

    template = {
        "qwen2_5_vl": QWEN25_VL_CHAT_TEMPLATE,
        "qwen2": QWEN25_CHAT_TEMPLATE,
        "llama": QWEN25_CHAT_TEMPLATE,
        "mistral": QWEN25_CHAT_TEMPLATE,
        "qwen3": QWEN3_CHAT_TEMPLATE,
    }.get(family, QWEN3_VL_CHAT_TEMPLATE)
    tokenizer.chat_template = template
    tokenizer.save_pretrained(out)
    # Hub Qwen2.5-VL checkpoints name their tokenizer class Qwen2Tokenizer; transformers' Qwen2Tokenizer
    # reads the same tokenizer.json (same normaliser, pre-tokeniser, decoder), so say so.
    tok_cfg_path = out / "tokenizer_config.json"
    tok_cfg = json.loads(tok_cfg_path.read_text())
    tok_cfg["tokenizer_class"] = "Qwen2Tokenizer"
    if not text_only:
        tok_cfg["processor_class"] = _image_processor_config(family)["processor_class"]
    _write_json(tok_cfg_path, tok_cfg)

    (out / "chat_template.jinja").write_text(template)
    if text_only:  # a language model has a tokenizer and no processor
        return out
    _write_json(out / "preprocessor_config.json", _image_processor_config(family))
    _write_json(out / "video_preprocessor_config.json", _video_processor_config(family))
    return out


def count_parameters(path_or_model: str | Path | torch.nn.Module) -> dict[str, int]:
    """Parameter counts {"total", "vision", "language"} of a model or a saved folder."""
    model = path_or_model if isinstance(path_or_model, torch.nn.Module) else load_model(path_or_model)
    total = sum(p.numel() for p in model.parameters())
    vision = sum(p.numel() for n, p in model.named_parameters() if ".visual." in f".{n}")
    return {"total": total, "vision": vision, "language": total - vision}
