"""Offline conversion of a run's DCP checkpoint into the folder its model loads from, for either kind of job: a
policy (SFT / GRPO) into a Hugging Face safetensors folder (`cosmos_train.models.hf_folder`), a world-model
RL run's DiT into its base diffusers folder (`cosmos_train.wfm.model_export.export_wfm`).

    cosmos-train export OUTPUTS/RUN/checkpoints/step_100 OUTPUTS/RUN/safetensors/step_100
    python -m cosmos_train.export CKPT_DIR OUT_DIR [--dtype bfloat16]

`export_checkpoint(ckpt_dir, out_dir)` runs in one process, without torchrun: it reads the run's config.toml
for the kind of job and its base model. A live model is exported by its trainer on every rank
(`cosmos_train.models.hf_folder.export_safetensors`).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import TensorStorageMetadata

from cosmos_train.checkpoint import describe_complete, is_complete
from cosmos_train.checkpoint_files import EXPORT, check_dcp_files, load_dcp
from cosmos_train.config import is_world_model_recipe, load_config
from cosmos_train.errors import CheckpointError, PathError, not_a_folder
from cosmos_train.models.hf_folder import build_meta_model, resolve_model_dir, write_hf_folder
from cosmos_train.models.lora import apply_lora, lora_parts
from cosmos_train.models.wrappers import strip_wrappers
from cosmos_train.wfm.config import load_wfm_config
from cosmos_train.wfm.model_export import export_wfm

log = logging.getLogger(__name__)


def export_checkpoint(ckpt_dir: Path, out_dir: Path, *, dtype: torch.dtype | None = None) -> Path:
    """Convert a DCP checkpoint (`<run>/checkpoints/step_N`) to a Hugging Face folder, in this one process.

    The base model comes from the run's config.toml (`policy.model_name_or_path`); the model is built on the
    meta device (no base weights are read) and only the checkpoint's model tensors are loaded.
    """
    ckpt_dir = Path(ckpt_dir)
    if blocked := not_a_folder("OUT", out_dir, subject=f"the export folder {out_dir}"):  # before anything is read
        raise PathError(blocked)
    if not is_complete(ckpt_dir):
        raise CheckpointError(
            f"{ckpt_dir}: not a complete checkpoint (expected a step_N folder with COMPLETE); "
            f"{describe_complete(ckpt_dir.parent)}"
        )
    config_path = ckpt_dir.parent.parent / "config.toml"
    if not config_path.is_file():
        raise CheckpointError(
            f"{config_path}: the run's config.toml is missing (export reads the base model from it, next to "
            f"checkpoints/): export the checkpoint where its run folder wrote it (RUN/checkpoints/step_N), or copy "
            "the run's config.toml there"
        )
    if is_world_model_recipe(config_path):  # a world-model RL run: its DiT into the base diffusers folder
        wfm = load_wfm_config(config_path, env={}, check_paths=False)
        return export_wfm(
            wfm.model.model_name_or_path, read_checkpoint_model(ckpt_dir), out_dir, revision=wfm.model.model_revision
        )
    cfg = load_config(config_path, env={}, check_paths=False)
    source = resolve_model_dir(cfg.policy.model_name_or_path, cfg.policy.model_revision)
    hf_model = build_meta_model(source)
    lora = None
    if cfg.policy.lora is not None:  # the run trained adapters: the same modules, merged as training exported
        apply_lora(hf_model, cfg.policy.lora)
        lora = lora_parts(hf_model)

    t0 = time.perf_counter()
    state = read_checkpoint_model(ckpt_dir)

    expected = set(hf_model.state_dict().keys())
    got = {strip_wrappers(k) for k in state}
    missing, unexpected = sorted(expected - got), sorted(got - expected)
    if missing or unexpected:
        raise CheckpointError(
            f"{ckpt_dir}: model tensors do not match {source}'s architecture: "
            f"missing {missing[:8]}{'...' if len(missing) > 8 else ''}, "
            f"unexpected {unexpected[:8]}{'...' if len(unexpected) > 8 else ''}"
        )
    out = write_hf_folder(state, out_dir, source, hf_model=hf_model, dtype=dtype, lora=lora)
    log.info("exported %s to %s in %.2fs", ckpt_dir, out, time.perf_counter() - t0)
    return out


def read_checkpoint_model(ckpt_dir: Path) -> dict[str, torch.Tensor]:
    """The full model tensors of a DCP checkpoint (names without the "model." prefix), in this one process
    whatever world size wrote them."""
    state: dict[str, torch.Tensor] = {}
    # every file there and whole before a tensor is read (a damaged one: a CheckpointError naming it)
    for key, item in check_dcp_files(ckpt_dir, EXPORT).state_dict_metadata.items():
        if key.startswith("model.") and isinstance(item, TensorStorageMetadata):
            state[key.removeprefix("model.")] = torch.empty(item.size, dtype=item.properties.dtype)
    if not state:
        raise CheckpointError(f"{ckpt_dir}: the checkpoint holds no model tensors")
    # no_dist: one process reading every rank's shards
    load_dcp({"model": state}, ckpt_dir, EXPORT, storage_reader=FileSystemReader(str(ckpt_dir)), no_dist=True)
    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cosmos-train export", description=export_checkpoint.__doc__)
    parser.add_argument("ckpt_dir", type=Path, help="a step_N checkpoint folder of a run")
    parser.add_argument("out_dir", type=Path, help="the Hugging Face folder to write")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    dtype = getattr(torch, args.dtype) if args.dtype else None
    print(export_checkpoint(args.ckpt_dir, args.out_dir, dtype=dtype))
    return 0


if __name__ == "__main__":
    sys.exit(main())
