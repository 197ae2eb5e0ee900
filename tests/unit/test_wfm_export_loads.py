"""A world-model export loads in diffusers as docs/world-models.md documents, and generates.

diffusers' `Cosmos2_5_PredictBasePipeline` builds cosmos_guardrail's `CosmosSafetyChecker` when given no
safety_checker. That package is not installed here: it needs torchvision and a torch it would replace (pip resolves
torch 2.14 + CUDA wheels for it), and its checker downloads the gated nvidia/Cosmos-1.0-Guardrail and
Qwen/Qwen3Guard-Gen-0.6B models when built, which an offline CI cannot. So the documented call passes
`safety_checker=`: an object with the two methods the pipeline calls, which lets every prompt and video through.
This file runs that call, as docs/world-models.md prints it, on a fresh export.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from cosmos_train.wfm.model import load_wfm
from cosmos_train.wfm.model_export import export_wfm


# --- the code of docs/world-models.md ("Loading an export in diffusers"), as printed there ------------------
class NoGuardrail:
    """Stands in for cosmos_guardrail's CosmosSafetyChecker: lets every prompt and video through."""

    def to(self, *args: object, **kwargs: object) -> NoGuardrail:
        return self

    def check_text_safety(self, prompt: str) -> bool:
        return True


def load_export(path: Path) -> Any:
    from diffusers import Cosmos2_5_PredictBasePipeline

    return Cosmos2_5_PredictBasePipeline.from_pretrained(path, safety_checker=NoGuardrail())


# -------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def export(tiny_wfm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """RUN/diffusers/final as the trainer writes it: the base folder with a changed transformer."""
    parts = load_wfm(tiny_wfm_dir, text_encoder=False)
    sd = {k: v + 0.05 for k, v in parts.transformer.state_dict().items()}
    return export_wfm(tiny_wfm_dir, sd, tmp_path_factory.mktemp("run") / "diffusers" / "final")


def test_the_documented_call_loads_the_export_and_generates(export: Path) -> None:
    pipe = load_export(export)
    assert type(pipe).__name__ == "Cosmos2_5_PredictBasePipeline"
    # the export's trained weights, not the base's
    saved = load_file(str(export / "transformer" / "diffusion_pytorch_model.safetensors"))
    for name, tensor in pipe.transformer.state_dict().items():
        assert torch.equal(tensor, saved[name]), name
    out = pipe(
        prompt="a red ball rolls to the left",
        height=32,
        width=32,
        num_frames=5,
        num_inference_steps=8,
        output_type="np",
        generator=torch.Generator().manual_seed(0),
    ).frames
    assert out.shape == (1, 5, 32, 32, 3) and np.isfinite(out).all() and out.std() > 0


@pytest.mark.skipif(
    importlib.util.find_spec("cosmos_guardrail") is not None, reason="cosmos_guardrail is installed here"
)
def test_without_safety_checker_it_asks_for_cosmos_guardrail(export: Path) -> None:
    """Why the documented call passes safety_checker=: the plain call fails this way where the guardrail is absent."""
    from diffusers import Cosmos2_5_PredictBasePipeline

    with pytest.raises(ImportError, match="cosmos_guardrail"):
        Cosmos2_5_PredictBasePipeline.from_pretrained(export)
