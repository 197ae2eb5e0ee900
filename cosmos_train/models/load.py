"""Load a vision-language model of a supported family and its processor from a folder or hub id (a tiny
model, nvidia/Cosmos-Reason1-7B, nvidia/Cosmos-Reason2-8B, ...), or a text-only family's causal LM and its
tokenizer, which stands in for the processor (Qwen/Qwen2.5-7B-Instruct, Qwen/Qwen3-8B, a Llama or Mistral).

Nothing here knows about the tiny models: the same calls load `make_tiny_model`'s folders and the hub
checkpoints. The family (`cosmos_train.models.families`) comes from the folder's config.json model_type.

torchvision: transformers' Qwen2-VL / Qwen3-VL / Cosmos3-Edge video processors import it, so
`AutoProcessor.from_pretrained` raises ImportError on such folders where torchvision is missing (as on
CPU-only machines with the local torch wheel). `load_processor` then builds the family's processor
without video (`Qwen25VLProcessorWithoutVideo`, `Qwen3VLProcessorWithoutVideo`,
`Cosmos3EdgeProcessorWithoutVideo`): the real processor code with the folder's tokenizer, image processor
(transformers' PIL backend) and chat template, and no video processor. Videos are decoded and patchified by
`cosmos_train.data.media` and tokenised by `cosmos_train.data.chat.encode_chat`, which work with
either processor; calling that processor with `videos=` raises rather than leaving pads unexpanded.

A local folder is checked before transformers reads it, so a folder that lacks files fails as a
`ModelError` naming the folder and the missing files (transformers' own errors for that are vague, and
a processor that half-loads surfaces much later as a problem with the data rows). A hub id that
cannot be fetched (offline without a cached copy, a typo, no access) is a `ModelError` too.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import torch
from transformers import (
    AutoImageProcessor,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
    Cosmos3EdgeProcessor,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2_5_VLProcessor,
    Qwen3VLProcessor,
)
from transformers.processing_utils import ProcessorMixin
from transformers.utils import cached_file, is_torchvision_available

from cosmos_train.errors import CheckpointError, ConfigError, ModelError, UserError
from cosmos_train.models.families import family_of
from cosmos_train.models.hf_folder import check_safetensors_file

# What a folder needs, as (what it is, alternatives: each a set of files that together suffice).
TOKENIZER_FILES: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...] = (
    ("tokenizer", (("tokenizer.json",), ("vocab.json", "merges.txt"), ("tokenizer.model",))),
    ("tokenizer config", (("tokenizer_config.json",),)),
)
# A processor saved by recent transformers keeps the image processor's settings in processor_config.json.
PROCESSOR_FILES = (("image preprocessor config", (("preprocessor_config.json",), ("processor_config.json",))),)
MODEL_FILES = (
    ("model config", (("config.json",),)),
    (
        "weights",
        (
            ("model.safetensors",),
            ("model.safetensors.index.json",),
            ("pytorch_model.bin",),
            ("pytorch_model.bin.index.json",),
        ),
    ),
)
HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
T = TypeVar("T")


class _WithoutVideo(ProcessorMixin):
    """The processor of a family without its torchvision-only video processor (text, chat template, images).
    Mixed in before the real processor class, whose name `save_pretrained` writes back."""

    video_processor_type: str

    def __init__(self, image_processor: Any = None, tokenizer: Any = None, chat_template: str | None = None, **kwargs):
        # The token attributes the real __init__ sets; that __init__ insists on a video processor.
        for name, default in (
            ("image", "<|image_pad|>"),
            ("video", "<|video_pad|>"),
            ("vision_start", "<|vision_start|>"),
            ("vision_end", "<|vision_end|>"),
        ):
            token = getattr(tokenizer, f"{name}_token", None) or default
            setattr(self, f"{name}_token", token)
            setattr(self, f"{name}_token_id", tokenizer.convert_tokens_to_ids(token))
        ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    def __call__(self, *args: Any, videos: Any = None, **kwargs: Any):
        if videos is not None:
            raise RuntimeError(
                "this processor has no video processor (transformers' needs torchvision); encode videos with "
                "cosmos_train.data.chat.encode_chat, which preprocesses them with cosmos_train.data.media"
            )
        return super().__call__(*args, **kwargs)

    def save_pretrained(self, save_directory: str | Path, push_to_hub: bool = False, **kwargs: Any) -> list[str]:
        """Save like the real processor so the folder loads with AutoProcessor where torchvision exists."""
        files = super().save_pretrained(save_directory, push_to_hub=push_to_hub, **kwargs)
        real = _real_processor_class(type(self)).__name__
        out = Path(save_directory)
        for name in ("processor_config.json", "tokenizer_config.json"):
            path = out / name
            if path.exists():
                cfg = json.loads(path.read_text())
                if "processor_class" in cfg:
                    cfg["processor_class"] = real
                    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        # The family's video processor shares the image processor's settings.
        video_cfg = self.image_processor.to_dict()
        video_cfg.pop("image_processor_type", None)
        video_cfg["video_processor_type"] = self.video_processor_type
        video_cfg["processor_class"] = real
        (out / "video_preprocessor_config.json").write_text(json.dumps(video_cfg, indent=2, sort_keys=True) + "\n")
        return files


def _real_processor_class(cls: type) -> type:
    return next(c for c in cls.__mro__ if issubclass(c, ProcessorMixin) and not issubclass(c, _WithoutVideo))


class Qwen25VLProcessorWithoutVideo(_WithoutVideo, Qwen2_5_VLProcessor):
    """Qwen2_5_VLProcessor without its video processor."""

    video_processor_type = "Qwen2VLVideoProcessor"


class Qwen3VLProcessorWithoutVideo(_WithoutVideo, Qwen3VLProcessor):
    """Qwen3VLProcessor without its video processor."""

    video_processor_type = "Qwen3VLVideoProcessor"


class Cosmos3EdgeProcessorWithoutVideo(_WithoutVideo, Cosmos3EdgeProcessor):
    """Cosmos3EdgeProcessor without its video processor."""

    video_processor_type = "Cosmos3EdgeVideoProcessor"


# family name -> the processor class `load_processor` builds where torchvision is missing
_WITHOUT_VIDEO: dict[str, type[_WithoutVideo]] = {
    "qwen2_5_vl": Qwen25VLProcessorWithoutVideo,
    "qwen3_vl": Qwen3VLProcessorWithoutVideo,
    "cosmos3_edge": Cosmos3EdgeProcessorWithoutVideo,
}


def check_model_source(path: str | Path, need: Literal["processor", "tokenizer", "model"]) -> Path | None:
    """The local folder `path` names, checked to hold what `need` reads (a text-only model's processor is its
    tokenizer); None for a hub id.

    Raises ModelError naming the folder, the missing files and what to do; a path that is neither an
    existing folder nor a hub id (org/name) is a ModelError too.
    """
    folder = Path(path).expanduser()
    if not folder.exists():
        if HUB_ID.fullmatch(str(path)) and not str(path).startswith((".", "/", "~")):
            return None
        raise ModelError(f"model {path}: no such folder, and not a hub id (org/name)")
    if not folder.is_dir():
        raise ModelError(
            f"model {folder}: not a folder (a model folder holds config.json, weights and tokenizer files)"
        )
    wanted = {"processor": TOKENIZER_FILES + PROCESSOR_FILES, "tokenizer": TOKENIZER_FILES, "model": MODEL_FILES}[need]
    missing = [
        f"{what} ({' or '.join(' + '.join(group) for group in options)})"
        for what, options in wanted
        if not any(all((folder / name).is_file() for name in group) for group in options)
    ]
    if missing:
        raise ModelError(
            f"model folder {folder} lacks the {need} files: missing {'; '.join(missing)}. Copy them from the base "
            "model this folder was made from (a safetensors export copies them itself), or point "
            "policy.model_name_or_path at a complete folder"
        )
    if need == "model":
        for weights in sorted(folder.glob("*.safetensors")):
            try:
                check_safetensors_file(weights)
            except CheckpointError as e:
                raise ModelError(str(e)) from None
    return folder


def _from_hub_or_folder(path: str | Path, folder: Path | None, what: str, load: Callable[[], T]) -> T:
    """`load()`, with transformers' failure to read `path` turned into a ModelError saying what to do."""
    try:
        return load()
    except UserError:
        raise
    except OSError as e:
        if folder is not None:
            raise ModelError(f"model folder {folder}: transformers cannot read its {what}: {e}") from e
        raise ModelError(
            f"model {path!r}: not a local folder, and its {what} could not be fetched from the hub ({e}). Offline "
            "(HF_HUB_OFFLINE=1) it must be in the Hugging Face cache: download it once with `hf download "
            f"{path}`, or set policy.model_name_or_path to a local folder"
        ) from e


def load_processor(path: str | Path, **kwargs: Any) -> ProcessorMixin | PreTrainedTokenizerBase:
    """The processor of the model at `path` (folder or hub id); see the module docstring for torchvision.
    A text-only model (`FamilySpec.text_only`) has no processor: its tokenizer, which every caller takes alike
    (`cosmos_train.vision.processor.get_tokenizer`, `cosmos_train.data.chat.encode_chat`)."""
    folder = check_model_source(path, "tokenizer")  # a folder that exists, or a hub id
    if is_text_only(path, **kwargs):
        return _from_hub_or_folder(
            path, folder, "tokenizer files", lambda: AutoTokenizer.from_pretrained(str(path), **kwargs)
        )
    folder = check_model_source(path, "processor")
    return _from_hub_or_folder(path, folder, "tokenizer / processor files", lambda: _load_processor(path, **kwargs))


def is_text_only(path: str | Path, **kwargs: Any) -> bool:
    """The model at `path` is a text-only language model (its config.json's family; False where it has none)."""
    return family_of(family_name(path, **kwargs)).text_only


def _load_processor(path: str | Path, **kwargs: Any) -> ProcessorMixin:
    if is_torchvision_available():
        return AutoProcessor.from_pretrained(str(path), **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(str(path), **kwargs)
    image_processor = AutoImageProcessor.from_pretrained(str(path), backend="pil", **kwargs)
    chat_template = getattr(tokenizer, "chat_template", None) or _processor_chat_template(path, **kwargs)
    if chat_template is None:
        raise ModelError(
            f"{path}: no chat template found (chat_template.jinja, chat_template.json or tokenizer_config); "
            "copy chat_template.jinja from the base model"
        )
    return _WITHOUT_VIDEO[family_name(path, **kwargs)](image_processor, tokenizer, chat_template=chat_template)


def family_name(path: str | Path, **kwargs: Any) -> str:
    """The family of the model at `path` from its config.json (Qwen2.5-VL where a processor folder has none)."""
    resolved = cached_file(
        str(path),
        "config.json",
        _raise_exceptions_for_missing_entries=False,
        _raise_exceptions_for_connection_errors=False,
        **{k: v for k, v in kwargs.items() if k in ("revision", "cache_dir", "token", "local_files_only")},
    )
    if resolved is None:
        return "qwen2_5_vl"
    return family_of(json.loads(Path(resolved).read_text()).get("model_type")).name


def _processor_chat_template(path: str | Path, **kwargs: Any) -> str | None:
    """The template a processor file holds: older hub checkpoints keep it only in chat_template.json."""
    for name in ("chat_template.jinja", "chat_template.json"):
        resolved = cached_file(
            str(path),
            name,
            _raise_exceptions_for_missing_entries=False,
            _raise_exceptions_for_connection_errors=False,
            **{k: v for k, v in kwargs.items() if k in ("revision", "cache_dir", "token", "local_files_only")},
        )
        if resolved is None:
            continue
        text = Path(resolved).read_text()
        return json.loads(text)["chat_template"] if name.endswith(".json") else text
    return None


# the package each flash attention kernel of transformers imports
_FLASH_PACKAGES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}


def resolve_attention(requested: str, device: torch.device, compute_dtype: torch.dtype, policy_type: str) -> str:
    """The attention implementation the trained model loads with, from policy.attn_implementation.

    auto: flash_attention_2 for SFT on a GPU with flash-attn installed and a 16-bit compute dtype (its kernels
    take no fp32), sdpa otherwise. A flash kernel named outright where it cannot run is a ConfigError naming the
    key, raised before the weights load (transformers would fail inside from_pretrained)."""
    half = compute_dtype in (torch.bfloat16, torch.float16)
    if requested == "auto":
        usable = (
            device.type == "cuda"
            and half
            and policy_type == "sft"
            and importlib.util.find_spec("flash_attn") is not None
        )
        return "flash_attention_2" if usable else "sdpa"
    package = _FLASH_PACKAGES.get(requested)
    if package is None:
        return requested
    why = (
        "the policy trains on a CPU"
        if device.type != "cuda"
        else f"the compute dtype is {str(compute_dtype).removeprefix('torch.')} (train.param_dtype: flash "
        "attention takes bfloat16 or float16)"
        if not half
        else f"the {package} package is not installed (pip install {package.replace('_', '-')})"
        if importlib.util.find_spec(package) is None
        else None
    )
    if why:
        raise ConfigError(
            [
                f'policy.attn_implementation = "{requested}" cannot run here: {why}; set it to '
                '"auto" (flash attention where it can run, else sdpa) or "sdpa"'
            ]
        )
    return requested


def load_model(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    attn_implementation: str | None = None,
    **kwargs: Any,
) -> PreTrainedModel:
    """Load the model at `path` in `dtype` onto `device` (a vision-language model, or a text-only family's
    causal LM).

    attn_implementation: None lets transformers choose (sdpa where available); "flash_attention_2" on GPUs.
    """
    folder = check_model_source(path, "model")
    # an unknown model type is refused before the weights are read; a text-only one loads as a causal LM
    auto = AutoModelForCausalLM if family_of(family_name(path)).text_only else AutoModelForImageTextToText
    model = _from_hub_or_folder(
        path,
        folder,
        "config and weights",
        lambda: auto.from_pretrained(str(path), dtype=dtype, attn_implementation=attn_implementation, **kwargs),
    )
    family_of(model)
    # transformers wraps PreTrainedModel.to in functools.wraps, which typeshed types as an unbound function
    return model.to(device)  # type: ignore[arg-type]
