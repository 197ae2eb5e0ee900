"""Every model family on its tiny model (`make-tiny-model --family`), 2 processes, FSDP2 (gloo): SFT trains
(loss falls), the export equals the trained weights and loads with plain `from_pretrained`, evaluation runs on
the export, and GRPO (HF rollout engine) trains and exports. The families' SFT runs share one launch, one after
another, and their GRPO runs another."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import FAMILIES, write_tiny_grpo_config, write_tiny_sft_config
from tests.integration.distributed.test_grpo_dist import exported as folder_tensors
from tests.integration.distributed.test_grpo_dist import rows as grpo_rows
from tests.integration.distributed.test_sft_dist import exported, metrics
from tests.torchrun import grpo_runs, sft_runs

pytestmark = pytest.mark.slow


GRPO_FAMILIES = [f for f in FAMILIES if f != "qwen2_5_vl"]  # Qwen2.5-VL: test_grpo_dist


@pytest.fixture(scope="module")
def sft_by_family(
    family_model_dirs: dict[str, Path], synthetic_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Each family's 4 SFT steps on 2 processes, in one launch: its run folder."""
    tmp = tmp_path_factory.mktemp("family-sft")
    configs = {
        family: write_tiny_sft_config(
            tmp / family / "config.toml", family_model_dirs[family], synthetic_dir, tmp / f"o-{family}", max_num_steps=4
        )
        for family in FAMILIES
    }
    sft_runs(list(configs.values()), 2)
    return {family: cfg.parent for family, cfg in configs.items()}


@pytest.fixture(scope="module")
def grpo_by_family(
    family_model_dirs: dict[str, Path], synthetic_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """Each of GRPO_FAMILIES' 2 GRPO steps on 2 processes, in one launch: its run folder."""
    tmp = tmp_path_factory.mktemp("family-grpo")
    keys = {"train.max_num_steps": 2, "rollout.sampling_config.top_k": 4, "train.train_policy.kl_beta": 0.1}
    configs = {
        family: write_tiny_grpo_config(
            tmp / family / "config.toml", family_model_dirs[family], synthetic_dir, tmp / f"o-{family}", **keys
        )
        for family in GRPO_FAMILIES
    }
    grpo_runs(list(configs.values()), 2)
    return {family: cfg.parent for family, cfg in configs.items()}


@pytest.mark.parametrize("family", FAMILIES)
def test_sft_export_and_evaluation(
    family: str, family_model_dirs: dict[str, Path], sft_by_family: dict[str, Path], synthetic_dir: Path, tmp_path: Path
) -> None:
    model_dir = family_model_dirs[family]
    run = sft_by_family[family]
    train = [m for m in metrics(run) if m["kind"] == "train"]
    assert [m["step"] for m in train] == [1, 2, 3, 4] and all(m["label_tokens"] == 8 for m in train)
    assert train[-1]["loss"] < train[0]["loss"] - 0.5

    from transformers import AutoConfig, AutoModelForImageTextToText

    final = run / "safetensors" / "final"
    assert AutoConfig.from_pretrained(final).model_type == family
    base, trained = folder_tensors(model_dir), exported(run)
    assert trained.keys() == base.keys() and any(not torch.equal(base[k], trained[k]) for k in base)
    # the export is what training ended with: the offline export of the step-4 checkpoint is the same tensors
    from cosmos_train.export import export_checkpoint

    offline = folder_tensors(export_checkpoint(run / "checkpoints" / "step_4", tmp_path / "offline"))
    assert offline.keys() == trained.keys() and all(torch.equal(offline[k], trained[k]) for k in trained)
    loaded = AutoModelForImageTextToText.from_pretrained(final).state_dict()  # plain transformers
    assert all(torch.equal(loaded[k], v) for k, v in trained.items() if k in loaded)

    from cosmos_train.evaluation.config import eval_config_from_dict
    from cosmos_train.evaluation.predictions import read_dataset_predictions
    from cosmos_train.evaluation.runner import evaluate_model

    cfg = eval_config_from_dict(
        {
            "datasets": ["synthetic"],
            "data_dir": str(synthetic_dir),
            "results_dir": str(tmp_path / "results"),
            "engine": "hf",
            "device": "cpu",
            "batch_size": 3,
            "limit": 6,
            "model": {"model_name": str(final), "dtype": "float32", "max_length": 4096},
            "evaluation": {"answer_type": "letter", "fps": 1, "min_pixels": 3136, "max_pixels": 3136},
            "generation": {"max_retries": 0, "letter_max_tokens": 4},
        }
    )
    result = evaluate_model(cfg)
    records = read_dataset_predictions(result.run_dir / "synthetic")
    assert result.scores.micro.total == len(records) == 6
    assert all(r["is_correct"] == (r["answer"] == r["correct_answer"]) for r in records)


@pytest.mark.parametrize("family", GRPO_FAMILIES)
def test_grpo_trains_and_exports(
    family: str, family_model_dirs: dict[str, Path], grpo_by_family: dict[str, Path]
) -> None:
    model_dir = family_model_dirs[family]
    run = grpo_by_family[family]
    train = [m for m in grpo_rows(run) if m["kind"] == "train"]
    assert [m["step"] for m in train] == [1, 2] and all(m["completions"] == 16 for m in train)
    assert train[1]["kl"] > 0  # the policy moved after the first update
    assert exported(run).keys() == folder_tensors(model_dir).keys()
