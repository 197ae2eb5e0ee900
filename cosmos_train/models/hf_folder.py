"""Hugging Face safetensors folders: the folder `from_pretrained` (and vLLM) loads, written from a live model or a
full state dict, and checked once written.

`export_safetensors(model, out_dir, source_dir)` is called by every rank of a training run (FSDP2 shards are
gathered to rank 0, which writes); `write_hf_folder(state, out_dir, source_dir)` writes a full CPU state dict in
one process (what `cosmos_train.export` does for a DCP checkpoint).

What is written, the way `save_pretrained` writes it:
- `model.safetensors`, or shards `model-0000K-of-0000N.safetensors` + `model.safetensors.index.json`
  when the weights exceed `max_shard_bytes` (HF convention: an index only when sharded);
- parameter names as the hub checkpoint names them: wrapper prefixes (`_orig_mod.`, FSDP /
  activation-checkpoint wrappers: `cosmos_train.models.wrappers`) stripped, transformers' load-time renames
  reverted (Qwen2.5-VL: `model.language_model.*` -> `model.*`, `model.visual.*` -> `visual.*`), tied weights
  (lm_head tied to the embeddings) stored once;
- config.json (its dtype set to the dtype written), generation_config.json, tokenizer, processor and
  chat-template files copied from the base model folder.
The folder appears atomically: it is written as `<out>.tmp-<nonce>` and renamed; a previous export at
`out_dir` is replaced only once the new one is complete.

Checks: a weight holding NaN or inf (after the dtype cast, which can overflow) stops the export before
anything is written (`TrainingDiverged`). Every safetensors file is read back once written: names,
shapes, dtypes and values must equal what was meant to be written, compared one tensor at a time
from the memory-mapped file, so the check never holds a second copy of the model (`CheckpointError`
naming the file otherwise). A full disk removes the partial folder and raises `DiskFullError` (what the weights
need, what is free), on every rank of a training run alike.
`verify_hf_folder(folder)` checks an existing folder's files (complete, readable, index consistent);
`check_safetensors_file(path)` one file's header and size (what model loading checks first).
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import re
import shutil
import struct
import uuid
from pathlib import Path
from typing import cast

import torch
from huggingface_hub import snapshot_download, split_torch_state_dict_into_shards
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    PreTrainedConfig,
    PreTrainedModel,
)
from transformers.core_model_loading import revert_weight_conversion

from cosmos_train.distributed import barrier, cpu_group, raise_together, rank
from cosmos_train.errors import CheckpointError, TrainingDiverged, from_os_error
from cosmos_train.models.lora import (
    ADAPTER_DIR,
    LoraParts,
    adapter_state,
    lora_parts,
    merged_items,
    write_adapter,
)
from cosmos_train.models.wrappers import strip_wrappers, unwrap

log = logging.getLogger(__name__)

# Files of a base model folder that travel with the weights (never the weights themselves).
COPY_PATTERNS = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "*.tiktoken",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.json",
    "chat_template.jinja",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
    "processor_config.json",
)
COPY_DIRS = ("additional_chat_templates",)
SAFE_WEIGHTS = "model.safetensors"
SAFE_INDEX = "model.safetensors.index.json"
# Elements checked for NaN/inf at a time: bounds the temporary mask to 16 MiB whatever the tensor size.
FINITE_CHUNK = 2**24
# The OS error a safetensors write failed with: its Rust error only says "... (os error 28)" in text.
_RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def export_safetensors(
    model: nn.Module,
    out_dir: Path,
    source_dir: Path | str | None,
    *,
    max_shard_bytes: int = 2 * 2**30,
    dtype: torch.dtype | None = None,
) -> Path | None:
    """Write `model` as a Hugging Face folder at `out_dir`; every rank calls it, rank 0 writes.

    Returns `out_dir` on rank 0 and None elsewhere. `source_dir` is the base model (folder or hub id) whose
    config/tokenizer/processor files are copied; None writes only `model.config` when the model has one.
    `dtype` casts floating-point weights (None keeps the training dtype).
    """
    # Collective under FSDP2: all-gathers every shard; only rank 0 keeps the (CPU) result.
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    # full_state_dict: every value is a plain tensor (the result is typed for any state dict)
    state = cast(dict[str, torch.Tensor], get_model_state_dict(model, options=options))
    out: Path | None = None
    error: BaseException | None = None
    if rank() == 0:
        try:
            out = write_hf_folder(
                state,
                out_dir,
                source_dir,
                hf_model=unwrap(model),
                max_shard_bytes=max_shard_bytes,
                dtype=dtype,
                lora=lora_parts(unwrap(model)),
            )
        except BaseException as e:  # noqa: BLE001 - re-raised below once every rank knows
            error = e
    del state
    group = cpu_group()
    # rank 0's failure on every rank, classified alike: a full disk is a DiskFullError everywhere, so whichever rank
    # records RUN/error.json first, the launch is not retried as a crash
    raise_together(error, f"safetensors export to {out_dir}", group)
    barrier(group)
    return out


def write_hf_folder(
    state: dict[str, torch.Tensor],
    out_dir: Path,
    source_dir: Path | str | None,
    *,
    hf_model: nn.Module | None = None,
    max_shard_bytes: int = 2 * 2**30,
    dtype: torch.dtype | None = None,
    lora: LoraParts | None = None,
) -> Path:
    """Write a full (unsharded, CPU) state dict as a Hugging Face folder; see the module docstring. With `lora`
    (a model trained with adapters) the weights are merged and the adapters also go to `<out>/adapter/`."""
    out_dir = Path(out_dir)
    adapters = None
    if lora is not None:
        adapters = adapter_state(state, lora)
        state = dict(merged_items(state.items(), lora.scalings))
    state = hf_state_dict(state, hf_model)
    if dtype is not None:
        state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
    refuse_non_finite(state, out_dir)
    source = resolve_model_dir(source_dir) if source_dir is not None else None
    weight_bytes = sum(t.numel() * t.element_size() for t in state.values())

    nonce = uuid.uuid4().hex[:12]
    tmp = out_dir.with_name(f"{out_dir.name}.tmp-{nonce}")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.parent.glob(f"{out_dir.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    try:
        tmp.mkdir()
        _write_weights(state, tmp, max_shard_bytes)
        _write_side_files(tmp, source, hf_model, state)
        if adapters is not None and lora is not None:
            write_adapter(tmp / ADAPTER_DIR, adapters, lora, str(source_dir) if source_dir is not None else None)
        _replace_dir(tmp, out_dir, nonce)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        # after the removal: the paragraph says what is free now beside what the weights need
        disk_full = from_os_error(e, out_dir, needed=weight_bytes) if isinstance(e, OSError) else None
        if disk_full is not None:
            raise disk_full from e
        raise
    return out_dir


def refuse_non_finite(state: dict[str, torch.Tensor], out_dir: Path) -> None:
    """Raise TrainingDiverged naming the first tensor that holds a NaN or an inf (nothing written yet)."""
    for name, tensor in state.items():
        if not (tensor.is_floating_point() or tensor.is_complex()):
            continue
        flat = tensor.reshape(-1)
        for start in range(0, flat.numel(), FINITE_CHUNK):
            chunk = flat[start : start + FINITE_CHUNK]
            if not bool(torch.isfinite(chunk).all()):
                bad = int((~torch.isfinite(chunk)).sum())
                raise TrainingDiverged(
                    f"export to {out_dir}: weight {name!r} ({tensor.dtype}, shape {tuple(tensor.shape)}) holds "
                    f"NaN/inf ({bad}+ values); nothing was exported. The training diverged (lower the learning "
                    "rate, clip gradients, check the data) or the export dtype cannot hold the values; export an "
                    "earlier checkpoint with `cosmos-train export`"
                )


def hf_state_dict(state: dict[str, torch.Tensor], hf_model: nn.Module | None) -> dict[str, torch.Tensor]:
    """Training names -> the names a hub checkpoint uses (see the module docstring)."""
    renamed: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        name = strip_wrappers(key)
        if name in renamed:
            raise ValueError(f"two parameters map to the name {name!r} after stripping wrapper prefixes")
        renamed[name] = tensor
    if not isinstance(hf_model, PreTrainedModel):
        return renamed
    # save_pretrained stores a tied pair once (the source); from_pretrained re-ties the target.
    for target, source in (getattr(hf_model, "all_tied_weights_keys", None) or {}).items():
        if target in renamed and source in renamed:
            if not torch.equal(renamed[target], renamed[source]):
                raise ValueError(
                    f"{target} and {source} are tied in the model config but hold different values; "
                    "refusing to drop one (untie them in config.json, tie_word_embeddings=false, to keep both)"
                )
            del renamed[target]
    return revert_weight_conversion(hf_model, renamed)


def _write_weights(state: dict[str, torch.Tensor], folder: Path, max_shard_bytes: int) -> None:
    split = split_torch_state_dict_into_shards(
        state, filename_pattern="model{suffix}.safetensors", max_shard_size=max_shard_bytes
    )
    for filename, names in split.filename_to_tensors.items():
        path = folder / filename
        # contiguous(): gathered/cast tensors may be views; clone() of shared storage is avoided by
        # the tied-weight handling above (safetensors refuses aliased tensors).
        shard = {n: state[n].contiguous() for n in names}
        try:
            save_file(shard, str(path), metadata={"format": "pt"})
        except SafetensorError as e:
            found = _RUST_OS_ERROR.search(str(e))
            if found is None:
                raise
            code = int(found.group(1))
            raise OSError(code, os.strerror(code), str(path)) from e
        verify_written(path, shard)
    if split.is_sharded:
        index = {
            "metadata": {"total_parameters": sum(t.numel() for t in state.values()), **split.metadata},
            "weight_map": split.tensor_to_filename,
        }
        (folder / SAFE_INDEX).write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def verify_written(path: Path, expected: dict[str, torch.Tensor]) -> None:
    """Read `path` back: the same tensor names, shapes, dtypes and values as `expected`, else CheckpointError.

    One tensor at a time from the memory-mapped file, so memory stays at one tensor however large the model.
    """
    check_safetensors_file(path)
    try:
        with safe_open(str(path), "pt") as f:
            names = set(f.keys())
            if names != set(expected):
                missing, extra = sorted(set(expected) - names), sorted(names - set(expected))
                raise CheckpointError(
                    f"{path}: written file does not hold the tensors meant for it (missing {missing[:5]}, "
                    f"unexpected {extra[:5]}); the export was not kept"
                )
            for name in sorted(names):
                got, want = f.get_tensor(name), expected[name]
                if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
                    raise CheckpointError(
                        f"{path}: tensor {name!r} reads back as {got.dtype} {tuple(got.shape)} with other values "
                        f"than the {want.dtype} {tuple(want.shape)} written; the export was not kept (check the "
                        "disk)"
                    )
    except SafetensorError as e:
        raise CheckpointError(f"{path}: written file cannot be read back ({e}); the export was not kept") from e


def check_safetensors_file(path: Path) -> None:
    """A safetensors file whose header parses and whose size is what the header says, else CheckpointError.

    Reads the header only (not the weights), so it is cheap for any model size.
    """
    size = path.stat().st_size
    try:
        with path.open("rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            if 8 + header_len > size:
                raise ValueError(f"header of {header_len} bytes in a file of {size}")
            header = json.loads(f.read(header_len))
        end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
    except (struct.error, ValueError, KeyError, TypeError, IndexError) as e:
        raise CheckpointError(
            f"{path}: not a readable safetensors file ({e}); the export is damaged: export the checkpoint again"
        ) from None
    if 8 + header_len + end != size:
        raise CheckpointError(
            f"{path}: truncated or damaged safetensors file ({size} bytes, its header says "
            f"{8 + header_len + end}); the export is incomplete: export the checkpoint again"
        )


def verify_hf_folder(folder: Path) -> list[Path]:
    """Check an exported folder: every safetensors file complete, the index (when sharded) naming only
    files that exist and every tensor they hold. Returns the weight files; raises CheckpointError."""
    folder = Path(folder)
    index_path = folder / SAFE_INDEX
    if index_path.is_file():
        try:
            weight_map: dict[str, str] = json.loads(index_path.read_text())["weight_map"]
        except (ValueError, KeyError, TypeError) as e:
            raise CheckpointError(f"{index_path}: not a valid safetensors index ({e})") from None
        files = sorted({folder / name for name in weight_map.values()})
    else:
        files = [folder / SAFE_WEIGHTS]
        weight_map = {}
    for path in files:
        if not path.is_file():
            raise CheckpointError(f"{path}: weight file missing from the export at {folder}")
        check_safetensors_file(path)
    if weight_map:
        for path in files:
            with safe_open(str(path), "pt") as f:
                names = set(f.keys())
            listed = {n for n, file in weight_map.items() if folder / file == path}
            if listed != names:
                raise CheckpointError(
                    f"{path}: holds {len(names)} tensors but {index_path.name} assigns it {len(listed)}; the "
                    "export is damaged: export the checkpoint again"
                )
    return files


def _write_side_files(
    folder: Path, source: Path | None, hf_model: nn.Module | None, state: dict[str, torch.Tensor]
) -> None:
    if source is not None:
        for item in sorted(source.iterdir()):
            if item.is_file() and any(fnmatch.fnmatch(item.name, p) for p in COPY_PATTERNS):
                shutil.copy2(item, folder / item.name)
            elif item.is_dir() and item.name in COPY_DIRS:
                shutil.copytree(item, folder / item.name)
    config_path = folder / "config.json"
    if not config_path.exists() and hf_model is not None and hasattr(hf_model, "config"):
        # an HF model's config (nn.Module's attribute access is typed Tensor | Module)
        cast(PreTrainedConfig, hf_model.config).save_pretrained(folder)
        gen = getattr(hf_model, "generation_config", None)
        if gen is not None and not (folder / "generation_config.json").exists():
            gen.save_pretrained(folder)
    if config_path.exists():
        _set_config_dtype(config_path, state)


def _set_config_dtype(config_path: Path, state: dict[str, torch.Tensor]) -> None:
    # from_pretrained (dtype="auto") and vLLM read the dtype from config.json: make it say what was written.
    dtypes = {t.dtype for t in state.values() if t.is_floating_point()}
    if len(dtypes) != 1:
        return
    name = str(next(iter(dtypes))).removeprefix("torch.")
    cfg = json.loads(config_path.read_text())
    key = "torch_dtype" if "torch_dtype" in cfg and "dtype" not in cfg else "dtype"
    if cfg.get(key) != name:
        cfg[key] = name
        config_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def _replace_dir(tmp: Path, out_dir: Path, nonce: str) -> None:
    old = out_dir.with_name(f"{out_dir.name}.old-{nonce}")
    if out_dir.exists():
        out_dir.rename(old)
    tmp.rename(out_dir)
    shutil.rmtree(old, ignore_errors=True)


# ------------------------------------------------------------------------------ the base model
def resolve_model_dir(name_or_path: Path | str, revision: str | None = None) -> Path:
    """A local folder for a base model: the folder itself, or the hub id's snapshot (non-weight files only)."""
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        return path
    try:
        return Path(
            snapshot_download(str(name_or_path), revision=revision, allow_patterns=[*COPY_PATTERNS, "*/*.jinja"])
        )
    except Exception as e:
        raise FileNotFoundError(
            f"base model {name_or_path!r}: not a local folder, and its hub files could not be fetched ({e})"
        ) from e


def build_meta_model(source: Path) -> nn.Module:
    """The architecture of `source` on the meta device (names, shapes, tied weights; no memory)."""
    config = AutoConfig.from_pretrained(str(source))
    errors = []
    for auto in (AutoModelForImageTextToText, AutoModelForCausalLM):
        try:
            with torch.device("meta"):
                return auto.from_config(config)
        except ValueError as e:  # this Auto class does not know the config type
            errors.append(f"{auto.__name__}: {e}")
    raise ValueError(f"{source / 'config.json'}: no model class for this config ({'; '.join(errors)})")
