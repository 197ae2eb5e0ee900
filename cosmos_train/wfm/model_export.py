"""A trained DiT written back into its base model's diffusers folder: `export_wfm` checks the state dict against the
base transformer's names and shapes and writes the complete folder atomically (a temporary sibling renamed into
place), so a reader never sees half an export."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
from safetensors.torch import save_file

from cosmos_train.errors import ModelError
from cosmos_train.wfm.model import WEIGHT_SUFFIXES, check_folder, local_folder

TRANSFORMER_WEIGHTS = "diffusion_pytorch_model.safetensors"


def _transformer_shapes(base: Path) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes of base's transformer, built on the meta device from its config (no weights read,
    so a sharded or .bin base is compared the same way)."""
    from diffusers import CosmosTransformer3DModel  # why: diffusers is heavy, loaded only by world-model code

    with torch.device("meta"):
        model = CosmosTransformer3DModel.from_config(CosmosTransformer3DModel.load_config(base / "transformer"))
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def _state_dict_problems(want: dict[str, tuple[int, ...]], got: dict[str, torch.Tensor]) -> list[str]:
    problems = [f"missing {k}" for k in want if k not in got]
    problems += [f"unexpected {k}" for k in got if k not in want]
    problems += [
        f"{k}: shape {tuple(v.shape)}, base {want[k]}"
        for k, v in got.items()
        if k in want and tuple(v.shape) != want[k]
    ]
    return problems


def _ignore_transformer_weights(transformer_dir: Path) -> Callable[[str, list[str]], list[str]]:
    """copytree's ignore: the base transformer's weight files (one file or shards + index), replaced by the export."""

    def ignore(folder: str, names: list[str]) -> list[str]:
        if Path(folder) != transformer_dir:
            return []
        return [n for n in names if n.endswith(WEIGHT_SUFFIXES)]

    return ignore


def _swap_into_place(tmp: Path, out: Path) -> None:
    """Put the finished folder tmp at out: an existing out is renamed aside first and removed after, so out is
    always either the old folder or the new one, never a half-written one."""
    old = out.with_name(f".{out.name}.{secrets.token_hex(4)}.old")
    if out.exists():
        out.rename(old)
    tmp.rename(out)
    shutil.rmtree(old, ignore_errors=True)


def export_wfm(
    base_dir: str | Path,
    transformer_state_dict: dict[str, torch.Tensor],
    out_dir: str | Path,
    *,
    revision: str | None = None,
) -> Path:
    """A complete diffusers folder at out_dir: base_dir's parts, transformer/ = base's config + the given full
    (unsharded) state dict as diffusion_pytorch_model.safetensors, tensors written as given. ModelError if its keys
    or shapes differ from the base transformer's. Written to a temporary sibling, then renamed into place.

        python -c "from cosmos_train.wfm.model import load_wfm; from cosmos_train.wfm.model_export import export_wfm; \\
            export_wfm('/tmp/tiny-wfm', load_wfm('/tmp/tiny-wfm').transformer.state_dict(), '/tmp/tiny-wfm-export')"
    """
    base, out = local_folder(base_dir, revision), Path(out_dir)
    check_folder(base, text_encoder=False)
    problems = _state_dict_problems(_transformer_shapes(base), transformer_state_dict)
    if problems:
        more = f" ... ({len(problems)} differences)" if len(problems) > 5 else ""
        raise ModelError(
            f"{base}: the trained transformer does not match the base folder's: "
            f"{'; '.join(problems[:5])}{more}; export with the base folder the run trained from"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        shutil.copytree(base, tmp, ignore=_ignore_transformer_weights(base / "transformer"))
        tensors = {k: v.detach().cpu().contiguous() for k, v in transformer_state_dict.items()}
        save_file(tensors, str(tmp / "transformer" / TRANSFORMER_WEIGHTS), metadata={"format": "pt"})
        _swap_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
