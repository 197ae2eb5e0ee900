"""A full disk is one DiskFullError on every rank, said with the space needed and free, never a crash to retry;
and a process that fails mid-save leaves no complete-but-unmarked checkpoint folder (`CheckpointManager.abort`)."""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint import FileSystemWriter

from cosmos_train.checkpoint import CheckpointManager, complete_checkpoints
from cosmos_train.config import CheckpointConfig
from cosmos_train.distributed import raise_together
from cosmos_train.errors import (
    DiskFullError,
    disk_full_at,
    human_bytes,
    read_error_file,
    report_rank_failure,
    write_error_file,
)
from tests.spawn_ranks import spawn_ranks


def _export_fails_on_rank_0(rank: int, store: str, out: str) -> None:
    """One rank of two: rank 0's write found the disk full, rank 1's part went well; what each raises."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/runs/x/safetensors/step_4") if rank == 0 else None
    try:
        raise_together(error, "safetensors export", None)
        raised: dict[str, str] = {"type": "nothing"}
    except Exception as e:  # noqa: BLE001 - what is raised is the point
        raised = {"type": type(e).__name__, "message": str(e)}
    finally:
        dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(raised))


def test_a_full_disk_on_one_rank_is_a_disk_full_error_on_every_rank(tmp_path: Path) -> None:
    spawn_ranks(_export_fails_on_rank_0, str(tmp_path / "store"), str(tmp_path))
    raised = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["type"] for r in raised] == ["DiskFullError", "DiskFullError"], raised
    assert raised[0]["message"] == raised[1]["message"]
    assert raised[0]["message"].startswith("no space left on /runs/x/safetensors/step_4: free space there")


def test_one_process_raises_its_own_error_through_raise_together() -> None:
    raise_together(None, "nothing failed")
    with pytest.raises(DiskFullError, match="no space left on /d/f"):
        raise_together(OSError(errno.ENOSPC, "full", "/d/f"), "write")
    with pytest.raises(KeyError):  # a crash stays itself, with its traceback
        raise_together(KeyError("bug"), "write")


def test_the_paragraph_says_what_the_write_needs_and_what_is_free(tmp_path: Path) -> None:
    said = str(disk_full_at(tmp_path / "not-yet" / "step_4", needed=15 * 2**20))
    assert said.startswith(f"no space left on {tmp_path / 'not-yet' / 'step_4'}: free space there or point")
    assert re.search(r"\(the write needs about 15\.0 MiB, [0-9.]+ [KMGT]iB is free there\)$", said), said
    assert human_bytes(512) == "512 B" and human_bytes(1536) == "1.5 KiB" and human_bytes(3 * 2**40) == "3.0 TiB"


def test_a_user_error_replaces_the_crash_another_rank_recorded_first(tmp_path: Path) -> None:
    # rank 1 saw only its peer leave ("Connection closed by peer"), and wrote first
    assert write_error_file(tmp_path, RuntimeError("Connection closed by peer"), step=4, rank=1)
    assert report_rank_failure(DiskFullError("no space left on /x"), tmp_path, step=4, rank=0) == 2
    assert read_error_file(tmp_path)["kind"] == "disk"  # type: ignore[index]
    # ...but a crash never replaces a user error
    assert not write_error_file(tmp_path, RuntimeError("later crash"), step=4, rank=1)
    assert read_error_file(tmp_path)["rank"] == 0  # type: ignore[index]


def test_a_crash_record_with_a_full_disk_said_in_the_ranks_lines_is_not_retried(tmp_path: Path) -> None:
    from tasks.errors import retry_only_crashes
    from tasks.torchrun import failure_from_run

    write_error_file(tmp_path, RuntimeError("Connection closed by peer"), step=4, rank=1)
    said = "no space left on /runs/x/safetensors/step_4: free space there or point train.output_dir at a larger disk"
    error = failure_from_run(tmp_path, 2, ["[sft] step 4", f"error: {said}"])
    assert isinstance(error, DiskFullError) and str(error) == said

    class State:
        def result(self, raise_on_failure: bool = False) -> BaseException:
            return error

    assert not retry_only_crashes(None, None, State())


def _model() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 8)).sum().backward()
    opt.step()
    return model, opt


def test_abort_marks_an_async_save_whose_write_ended(tmp_path: Path) -> None:
    model, opt = _model()
    mgr = CheckpointManager(tmp_path / "run", CheckpointConfig(save_mode="async", max_keep=-1))
    mgr.save(2, model, opt, None, {})
    mgr.abort()  # the run failed before the next save or wait() marked it
    root = tmp_path / "run" / "checkpoints"
    assert [p.name for p in root.iterdir()] == ["step_2"]
    assert [p.name for p in complete_checkpoints(root)] == ["step_2"]
    assert not mgr.in_flight
    CheckpointManager(tmp_path / "run", CheckpointConfig()).load(root / "step_2", *_model(), None)


def test_abort_removes_a_save_whose_write_failed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, opt = _model()

    def finish(self: FileSystemWriter, metadata: object, results: object) -> None:
        raise RuntimeError("the writer died")

    monkeypatch.setattr(FileSystemWriter, "finish", finish)
    for mode in ("async", "sync"):
        mgr = CheckpointManager(tmp_path / mode, CheckpointConfig(save_mode=mode, max_keep=-1))
        if mode == "sync":  # the failure is raised (and the folder kept for the next save to sweep) ...
            with pytest.raises(RuntimeError):
                mgr.save(2, model, opt, None, {})
        else:
            mgr.save(2, model, opt, None, {})
        assert [p.name for p in (tmp_path / mode / "checkpoints").iterdir()][0].startswith("step_2.tmp-")
        mgr.abort()  # ... until the process, failing, leaves
        assert list((tmp_path / mode / "checkpoints").iterdir()) == [], mode


def test_a_crash_that_follows_another_ranks_user_error_is_that_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0 alone found the disk full (a write only it makes) and left; rank 1's next collective lost its peer.
    Rank 1 exits with rank 0's code and one warning line, not a traceback that would only repeat the peer's loss."""
    import logging

    from cosmos_train.logs import LIBRARY_LOGGER
    from cosmos_train.train.loop import BaseTrainer, run_main

    class LostPeer(BaseTrainer):  # type: ignore[type-arg]
        name = "sft"

        @classmethod
        def load_job_config(cls, path: Path) -> None:  # type: ignore[override]
            raise RuntimeError("[gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:29500")

    library = logging.getLogger(LIBRARY_LOGGER)
    monkeypatch.setattr(library, "handlers", list(library.handlers))  # setup_logging's handlers go with the test
    monkeypatch.setenv("RANK", "1")
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.toml").write_text("")
    write_error_file(run, DiskFullError("no space left on /x/metrics.jsonl"), step=4, rank=0)
    assert run_main(LostPeer, ["--config", str(run / "config.toml")]) == 2
    assert read_error_file(run)["kind"] == "disk"  # type: ignore[index]
    (run / "error.json").unlink()  # no other rank's user error: a crash, with its traceback
    with pytest.raises(RuntimeError, match="Connection closed by peer"):
        run_main(LostPeer, ["--config", str(run / "config.toml")])
