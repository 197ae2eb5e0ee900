"""A complete checkpoint damaged after it was written (cut short, emptied, overwritten, another model's): loading
it is a CheckpointError naming the file and what to do, never torch's "failed finding central directory"."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from torch import nn

import cosmos_train.checkpoint_files as checkpoint_files
from cosmos_train.checkpoint import CheckpointManager
from cosmos_train.checkpoint_files import EXPORT, check_dcp_files
from cosmos_train.config import CheckpointConfig
from cosmos_train.errors import CheckpointError


def make(width: int = 16, seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, object]:
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, width), nn.Tanh(), nn.Linear(width, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return model, opt, sched


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, Path]:
    """A run with two complete checkpoints: (step_2, step_4)."""
    model, opt, sched = make()
    mgr = CheckpointManager(tmp_path / "run", CheckpointConfig(save_mode="sync"))
    return mgr.save(2, model, opt, sched, {}), mgr.save(4, model, opt, sched, {})


def load(ckpt: Path, width: int = 16) -> dict:
    model, opt, sched = make(width, seed=1)
    return CheckpointManager(ckpt.parent.parent, CheckpointConfig(save_mode="sync")).load(ckpt, model, opt, sched)


def shard(ckpt: Path) -> Path:
    (found,) = ckpt.glob("*.distcp")
    return found


def test_an_intact_checkpoint_loads(saved: tuple[Path, Path]) -> None:
    assert load(saved[1])["step"] == 4


def test_truncated_shard_names_the_file_and_the_good_one(saved: tuple[Path, Path]) -> None:
    good, bad = saved
    size = shard(bad).stat().st_size
    os.truncate(shard(bad), size // 2)
    with pytest.raises(CheckpointError) as e:
        load(bad)
    text = str(e.value)
    assert f"its shard {shard(bad)} is truncated: {size // 2} bytes" in text and str(size) in text
    assert "resume from an earlier complete checkpoint" in text and str(good) in text


def test_empty_shard_and_missing_shard(saved: tuple[Path, Path]) -> None:
    bad = saved[1]
    os.truncate(shard(bad), 0)
    with pytest.raises(CheckpointError, match=r"is truncated: 0 bytes"):
        load(bad)
    path = shard(bad)
    path.unlink()
    with pytest.raises(CheckpointError, match=rf"its shard {path} is missing"):
        load(bad)


@pytest.mark.parametrize(("content", "words"), [(b"", "Ran out of input"), (b'{"json": 1}', "invalid load key")])
def test_unreadable_metadata(saved: tuple[Path, Path], content: bytes, words: str) -> None:
    bad = saved[1]
    (bad / ".metadata").write_bytes(content)
    with pytest.raises(CheckpointError, match=rf"{bad / '.metadata'} \({len(content)} bytes\) cannot be read.*{words}"):
        load(bad)
    with pytest.raises(CheckpointError, match="export an earlier complete checkpoint"):
        check_dcp_files(bad, EXPORT)


def test_overwritten_shard_of_the_right_size(saved: tuple[Path, Path]) -> None:
    bad = saved[1]
    with shard(bad).open("r+b") as f:
        f.write(b"\0" * shard(bad).stat().st_size)
    with pytest.raises(CheckpointError, match=r"one of its shard files \(__0_0.distcp\) cannot be read"):
        load(bad)


def test_damaged_rng_scheduler_and_trainer_state(saved: tuple[Path, Path]) -> None:
    bad = saved[1]
    rng = bad / "rng_rank0.pt"
    os.truncate(rng, rng.stat().st_size // 2)
    with pytest.raises(CheckpointError, match=rf"{rng} \(\d+ bytes\) cannot be read"):
        load(bad)
    state = bad / "trainer_state.json"
    state.write_text('{"step": 4, "ext')
    with pytest.raises(CheckpointError, match=rf"{state} is not valid JSON"):
        load(bad)
    state.unlink()
    with pytest.raises(CheckpointError, match=rf"{state} is missing"):
        load(bad)


def test_another_models_checkpoint_does_not_match(saved: tuple[Path, Path]) -> None:
    with pytest.raises(
        CheckpointError,
        match=r"does not match the model and optimizer being loaded \(.*Size mismatch .* for model.0.weight\)",
    ):
        load(saved[1], width=32)


def test_a_crash_while_loading_stays_a_crash(saved: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("process group lost")

    monkeypatch.setattr(checkpoint_files.dcp, "load", boom)
    with pytest.raises(RuntimeError, match="process group lost"):
        load(saved[1])


def test_export_of_a_truncated_checkpoint(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The exporter reads through the same checks (the CLI case: tests/integration/flows/test_cli_path_errors.py)."""
    from cosmos_train.config import Config
    from cosmos_train.export import export_checkpoint

    run = tmp_path / "run"
    cfg = Config()
    cfg.policy.model_name_or_path = str(tiny_model_dir)
    cfg.write(run / "config.toml")
    ckpt = CheckpointManager(run, CheckpointConfig(save_mode="sync")).save(1, make()[0], None, None, {})
    shutil.copy(run / "config.toml", tmp_path / "kept.toml")
    os.truncate(shard(ckpt), 100)
    with pytest.raises(CheckpointError, match=r"is truncated: 100 bytes.*export an earlier complete checkpoint"):
        export_checkpoint(ckpt, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert json.loads((ckpt / "COMPLETE").read_text())["step"] == 1  # nothing of the checkpoint was changed
