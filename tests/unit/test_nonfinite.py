"""A non-finite loss stops the run naming the step, or (train.skip_nonfinite_steps) skips the update;
nothing non-finite is saved or exported. One process, the trainer's own entry point, with the loss of one
step poisoned."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import write_tiny_sft_config

POISONED_STEP = 3


@pytest.fixture
def poisoned_trainer(monkeypatch: pytest.MonkeyPatch):
    """cosmos_train.train.sft with the loss of the POISONED_STEP-th optimizer step made NaN."""
    from cosmos_train.train import sft

    calls = {"step": 0}
    original_step, original_ce = sft.SFTTrainer.train_step, sft.kept_ce_sum

    def counting_step(self, samples):
        calls["step"] += 1
        return original_step(self, samples)

    def ce(logits, labels, keep):
        total, n = original_ce(logits, labels, keep)
        return (total * math.nan if calls["step"] == POISONED_STEP else total), n

    monkeypatch.setattr(sft.SFTTrainer, "train_step", counting_step)
    monkeypatch.setattr(sft, "kept_ce_sum", ce)
    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"}.items():
        monkeypatch.setenv(key, value)
    from cosmos_train.net import free_port

    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    return sft


def _run(sft, tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path, skip: int) -> tuple[int, Path]:
    run = tmp_path / "run"
    cfg = write_tiny_sft_config(
        run / "config.toml", tiny_model_dir, synthetic_dir, tmp_path / "out", max_num_steps=6, skip_nonfinite_steps=skip
    )
    return sft.main(["--config", str(cfg)]), run


def test_nonfinite_loss_stops_the_run_naming_the_step(
    poisoned_trainer, tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path, capsys: pytest.CaptureFixture
) -> None:
    code, run = _run(poisoned_trainer, tmp_path, tiny_model_dir, synthetic_dir, skip=0)
    assert code == 2
    record = json.loads((run / "error.json").read_text())
    assert record["kind"] == "training" and record["step"] == POISONED_STEP
    assert f"step {POISONED_STEP}: the loss is nan" in capsys.readouterr().err
    assert not (run / "safetensors" / "final").exists() and not (run / "result.json").exists()
    # the checkpoint at step 2 is the last good one, and it is finite
    assert (run / "checkpoints" / "step_2" / "COMPLETE").is_file()
    for f in (run / "safetensors" / "step_2").glob("*.safetensors"):
        assert all(torch.isfinite(t).all() for t in load_file(f).values())


def test_skipped_nonfinite_step_makes_no_update(
    poisoned_trainer, tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path
) -> None:
    code, run = _run(poisoned_trainer, tmp_path, tiny_model_dir, synthetic_dir, skip=1)
    assert code == 0
    result = json.loads((run / "result.json").read_text())
    assert result["step"] == 6 and result["skipped_steps"] == [POISONED_STEP]
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["kind"] == "train"] == [1, 2, 4, 5, 6]
    assert [r["step"] for r in rows if r["kind"] == "skipped"] == [POISONED_STEP]
    final = {}
    for f in (run / "safetensors" / "final").glob("*.safetensors"):
        final.update(load_file(f))
    assert final and all(torch.isfinite(t).all() for t in final.values())


def test_val_before_train_scores_the_starting_weights(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path
) -> None:
    """validation.val_before_train (cosmos-rl's key): the starting weights are validated at step 0, then the
    schedule (freq) and the last step as without it."""
    from cosmos_train.net import free_port
    from cosmos_train.train import sft

    for key, value in {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }.items():
        monkeypatch.setenv(key, value)
    run = tmp_path / "run"
    cfg = write_tiny_sft_config(run / "config.toml", tiny_model_dir, synthetic_dir, tmp_path / "out", max_num_steps=4)
    cfg.write_text(
        cfg.read_text()
        + "\n".join(
            [
                "[validation]",
                "enable = true",
                "freq = 3",
                "val_before_train = true",
                "batch_size = 8",
                "[validation.dataset]",
                f'name = "{synthetic_dir}"',
                'split = "train_letter"',
                "[validation.dataset.vision]",
                "min_pixels = 3136",
                "max_pixels = 3136",
                "",
            ]
        )
    )
    assert sft.main(["--config", str(cfg)]) == 0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in rows if r["kind"] == "val"]
    assert [r["step"] for r in val] == [0, 3, 4]
    assert val[0]["loss"] > val[-1]["loss"]  # lr 1e-3 on the letter answers: the starting weights score worse


def test_bfloat16_master_weights_train_and_export_in_bfloat16(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path
) -> None:
    """train.master_dtype = "bfloat16" (a cosmos-rl recipe key): the weights and Adam's moments are held in
    bfloat16, the run learns, and the export is bfloat16."""
    from cosmos_train.net import free_port
    from cosmos_train.train import sft

    for key, value in {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }.items():
        monkeypatch.setenv(key, value)
    seen = {}
    original = sft.SFTTrainer.train_step

    def spy(self, samples):
        out = original(self, samples)
        seen["params"] = {p.dtype for p in self.model.parameters()}
        seen["state"] = {v.dtype for s in self.optimizer.state.values() for k, v in s.items() if k != "step"}
        return out

    monkeypatch.setattr(sft.SFTTrainer, "train_step", spy)
    run = tmp_path / "run"
    cfg = write_tiny_sft_config(
        run / "config.toml", tiny_model_dir, synthetic_dir, tmp_path / "out", max_num_steps=6, master_dtype="bfloat16"
    )
    assert sft.main(["--config", str(cfg)]) == 0
    assert seen["params"] == {torch.bfloat16} and seen["state"] == {torch.bfloat16}
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["kind"] == "train"]
    assert train[-1]["loss"] < train[0]["loss"]
    final = {}
    for f in (run / "safetensors" / "final").glob("*.safetensors"):
        final.update(load_file(f))
    assert {t.dtype for t in final.values()} == {torch.bfloat16}
