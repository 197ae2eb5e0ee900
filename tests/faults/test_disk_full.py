"""A disk that fills up mid-run, on a real (tmpfs) filesystem, through the real CLI on two ranks: the export that
finds it full is rank 0's alone, yet every rank stops with the same DiskFullError (not a crash on the other rank,
which would be retried); the command says it once, with the path and the space needed and free, exits 2 without
a traceback or a retry, leaves no process and no partial checkpoint or export marked complete; once the disk has
room, `--run-dir RUN` resumes to the same final weights as a run that was never interrupted."""

from __future__ import annotations

import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from cosmos_train.checkpoint_paths import complete_checkpoints, step_of
from cosmos_train.metrics import read_metrics
from tests.conftest import mounted_tmpfs
from tests.faults.conftest import CliRun, resume_to_the_end, sft_args, start_cli, write_fault_sft_config
from tests.run_outputs import same_weights

STOP_BOUND_S = 180  # start to exit 2: setup, 4 steps, the failure (measured: ~40 s on 2 loaded cores)
STOP_AFTER_FAULT_S = 60  # the failing step to exit 2 (measured: ~5 s)
# the whole job: a checkpoint (~14 MiB) and an export (~4.4 MiB) every 2 steps; tmpfs takes only what is used
ROOMY = "size=1g"


def tmpfs_bytes(folder: Path) -> int:
    """What `folder`'s files take on a tmpfs: each file in whole 4 KiB pages."""
    return sum(-(-f.stat().st_size // 4096) * 4096 for f in folder.rglob("*") if f.is_file())


@pytest.fixture
def disk_full_at_step_4_export(tmp_path: Path, uninterrupted_sft: Path) -> Iterator[Path]:
    """A tmpfs with room for the job's files up to its step 4 checkpoint and half the step 4 export: the export, which
    rank 0 writes alone, finds the disk full. Sized from the uninterrupted run's step 2 checkpoint and export."""
    run = uninterrupted_sft.parent.parent
    ckpt, export = tmpfs_bytes(run / "checkpoints" / "step_2"), tmpfs_bytes(run / "safetensors" / "step_2")
    size_kib = (2 * ckpt + export + export // 2 + (1 << 20)) // 1024  # 1 MiB: config, logs, metrics, plots
    with mounted_tmpfs(tmp_path / f"disk-{uuid.uuid4().hex[:6]}", f"size={size_kib}k") as mount:
        yield mount


def test_full_disk_at_an_export_stops_once_with_one_paragraph_and_resumes(
    disk_full_at_step_4_export: Path,
    tiny_model_dir: Path,
    synthetic_dir: Path,
    tmp_path: Path,
    cli_runs: list[CliRun],
    uninterrupted_sft: Path,
) -> None:
    disk = disk_full_at_step_4_export
    out = disk / "out"
    cfg = write_fault_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, out)
    run = start_cli(sft_args(cfg), tmp_path, out)
    cli_runs.append(run)
    code, seconds = run.wait(timeout=STOP_BOUND_S)
    ended = time.time()
    said = run.output()
    assert code == 2, said[-4000:]
    assert run.sessions_left() == []
    run_dir = run.run_dir()
    assert run_dir is not None
    # from the last step (4: its checkpoint fits, its export does not) to the command's exit
    stop_s = ended - read_metrics(run_dir)[-1]["time"]
    print(f"exit {code}: {stop_s:.1f} s after the step whose export found the disk full, {seconds:.1f} s in all")
    assert stop_s < STOP_AFTER_FAULT_S, said[-4000:]
    export = run_dir / "safetensors" / "step_4"
    # one paragraph (the suite's convention: the command's own `error: ` line; Prefect's state lines and the ranks'
    # streamed log quote it too), said once, not by each rank nor each retry: the export, what it needs, what is free
    paragraphs = [line for line in said.splitlines() if line.startswith("error: ")]
    assert len(paragraphs) == 1, said[-4000:]
    assert re.fullmatch(
        re.escape(f"error: no space left on {export}: free space there or point train.output_dir at a larger disk")
        + r" \(the write needs about 4\.\d MiB, [0-9.]+ (KiB|MiB) is free there\)",
        paragraphs[0],
    ), paragraphs[0]
    assert said.count(f" - error: no space left on {export}") <= 1, "said by each rank"  # the ranks' streamed lines
    assert "Traceback" not in said and "RuntimeError" not in said, said[-4000:]
    assert said.count("[sft] training ") == 1, "launched more than once: a full disk was retried"
    assert not (run_dir / "failures.jsonl").exists(), "recorded as a crash"

    ckpts = run_dir / "checkpoints"
    assert [step_of(c) for c in complete_checkpoints(ckpts)] == [2, 4]
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_2", "step_4"], "a partial checkpoint was left"
    assert sorted(p.name for p in (run_dir / "safetensors").iterdir()) == ["step_2"], "a partial export was left"
    read_metrics(run_dir)  # a torn last line (the disk filled mid-write) is skipped, not a crash

    subprocess.run(["mount", "-o", f"remount,{ROOMY}", str(disk)], check=True)  # room made
    output = resume_to_the_end(sft_args(cfg, "--run-dir", str(run_dir)), tmp_path, out, cli_runs)
    assert f"resumed from {ckpts / 'step_4'} at step 4" in output
    assert same_weights(run_dir / "safetensors" / "final", uninterrupted_sft)
