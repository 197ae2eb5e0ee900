"""What the tests that launch a trainer as a subprocess read back from it: its output, and an export's weights."""

from __future__ import annotations

import subprocess
from pathlib import Path

import torch
from safetensors.torch import load_file


def finish(p: subprocess.Popen, timeout: float = 300) -> str:
    """The launched process's output, once it exited 0 (the output's tail in the assertion otherwise)."""
    out, _ = p.communicate(timeout=timeout)
    assert p.returncode == 0, out[-4000:]
    return out


def tensors_under(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of every .safetensors file under `folder` (sub-folders too: a diffusers export), keyed
    `relative/path.safetensors:name`."""
    out: dict[str, torch.Tensor] = {}
    for f in sorted(folder.rglob("*.safetensors")):
        out.update({f"{f.relative_to(folder)}:{k}": v for k, v in load_file(f).items()})
    return out


def same_weights(a: Path, b: Path) -> bool:
    """Both folders hold the same tensors, bit for bit (and at least one)."""
    x, y = tensors_under(a), tensors_under(b)
    return bool(x) and x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)
