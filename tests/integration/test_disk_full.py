"""A disk that fills up mid-checkpoint, through the sft flow on a real (tmpfs) filesystem of a few MB:
the run fails once with "no space left on <path>", leaves no process and no half checkpoint behind,
and the metrics it wrote stay readable."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import mounted_tmpfs, processes_with, write_tiny_sft_config

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 6 MiB filesystem: room for the run folder and a few steps, not for a checkpoint (~14 MB)."""
    with mounted_tmpfs(tmp_path / f"small-{uuid.uuid4().hex[:6]}", "size=6m") as mount:
        yield mount


def test_full_disk_during_checkpoint(
    small_disk: Path, tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    from cosmos_train.checkpoint_paths import complete_checkpoints
    from cosmos_train.errors import DiskFullError
    from cosmos_train.metrics import read_metrics
    from flows.sft import SFTParams, sft

    out = small_disk / "out"
    cfg = write_tiny_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, out, max_num_steps=6)
    state = sft(SFTParams(config=str(cfg), overrides=["launch.nproc_per_node=2"], train_retries=2), return_state=True)
    assert state.is_failed(), state
    with pytest.raises(DiskFullError, match="no space left on") as e:
        state.result()
    assert str(small_disk) in str(e.value)
    run = next(out.iterdir())
    assert not processes_with(str(run), "cosmos_train"), "a process of the run outlived it"
    ckpts = run / "checkpoints"
    assert not list(ckpts.glob("*.tmp*")), "a partial checkpoint was left behind"
    assert all((c / "COMPLETE").is_file() for c in ckpts.glob("step_*")), "an incomplete step_N folder"
    assert complete_checkpoints(ckpts) == sorted(ckpts.glob("step_*"), key=lambda p: int(p.name[5:]))
    read_metrics(run)  # a torn last line (the disk filled mid-write) is skipped, not a crash
