"""docs/CONFIG.md is generated from the schema and must match it (regenerate: cosmos-train config docs)."""

from __future__ import annotations

from pathlib import Path

from cosmos_train.config.docs import config_reference
from cosmos_train.evaluation.config import EvalConfig
from cosmos_train.wfm.config_schema import WfmConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "CONFIG.md"


def test_config_reference_is_current() -> None:
    assert DOC.read_text() == config_reference(EvalConfig, WfmConfig), (
        "docs/CONFIG.md is out of date: run `cosmos-train config docs > docs/CONFIG.md`"
    )


def test_reference_shows_bounds_and_every_key() -> None:
    text = config_reference(EvalConfig, WfmConfig)
    assert "| `optm_lr` | float | 1e-06 | > 0 |" in text
    assert "| `max_keep` | -1 \\| int | 2 | >= 1 |" in text
    assert "### [train.train_policy.dataset.vision]" in text and "### [evaluation]" in text
    assert '| `output_dir` | str | "./outputs" | non-empty |' in text
