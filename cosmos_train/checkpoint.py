"""Resumable training checkpoints: torch.distributed.checkpoint (DCP) of model + optimizer, atomic, rotated.

One checkpoint is one folder, `<run_dir>/checkpoints/step_N/`:

    .metadata, __R_0.distcp   DCP shards of {"model": ..., "optimizer": ...} (each rank writes its own shard)
    trainer_state.json        step, the trainer's `extra` (consumed_samples, epoch, ...), scheduler state,
                              the world size that wrote it (rank 0 writes it)
    rng_rank{R}.pt            python / numpy / torch CPU / CUDA RNG state of rank R
    COMPLETE                  written last: a folder without it is never loaded

Atomicity: everything is written into `step_N.tmp-<nonce>`; after every rank is done, rank 0 writes
COMPLETE and renames the folder to `step_N`. A crash at any point leaves either the old set of
checkpoints or a `*.tmp-*` folder that `find_latest` and `load` ignore and that the next manager
(a new or resumed run) or the next save deletes. A write that fails with an OSError (a full disk
above all) removes its own `.tmp` folder at once; a full disk is raised as `DiskFullError` on every
rank alike (one paragraph: the checkpoint, about how much it needs, how much is free), the previous
checkpoints stay as they were. A process that fails mid-run calls `abort()` before it exits: the
folder it was writing is finished and marked (an async write that completed on every rank) or removed.

Async saves (`save_mode = "async"`): `dcp.async_save` copies the state to CPU memory before it returns,
then writes in a background thread while training goes on; the COMPLETE marker, the rename and the
rotation happen when that write is done, at the next `save()` or at `wait()` (call it before exiting).
The DCP traffic runs on a gloo process group of its own, so the writer thread never interleaves
collectives with training's.

Model/optimizer state comes from `torch.distributed.checkpoint.state_dict.get_state_dict`, so the same
code serves FSDP2 (`fully_shard`) modules and plain modules, and a checkpoint written at one world size
loads at another (DCP reshards). Used by the trainers; offline conversion to Hugging Face safetensors is
`cosmos_train.export`. Loading reads through `cosmos_train.checkpoint_files`: a checkpoint damaged after it was
written (a truncated or missing shard, unreadable .metadata, RNG or trainer state) is a CheckpointError naming
the file, never retried as a crash. Beside this manager: trainer_state.json is `cosmos_train.checkpoint_state`'s,
the RNG files' state `cosmos_train.rng_state`'s, a failed write agreed by every rank
`cosmos_train.checkpoint_failures`'s, and the rank collectives (rank, cpu_group, raise_together, ...)
`cosmos_train.distributed`'.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
import uuid
import warnings
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    get_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from cosmos_train.atomic import write_json_atomic
from cosmos_train.checkpoint_failures import OK, OS_ERROR, agree_outcome, bytes_written_here, raise_failed
from cosmos_train.checkpoint_files import RESUME, load_dcp, load_torch_file, read_trainer_state
from cosmos_train.checkpoint_paths import (  # noqa: F401  (re-exported: the checkpoint API in one import)
    COMPLETE,
    complete_checkpoints,
    describe_complete,
    find_latest,
    is_complete,
    list_complete,
    resolve_resume,
    step_of,
)
from cosmos_train.checkpoint_state import restore_scheduler, trainer_state, write_trainer_state
from cosmos_train.config import CheckpointConfig
from cosmos_train.distributed import barrier, broadcast_str, cpu_group, dist_on, rank, world_size
from cosmos_train.errors import CheckpointError
from cosmos_train.rng_state import rng_state, seed_process_rngs, set_rng_state

log = logging.getLogger(__name__)
# DCP warns on every call made without a process group; offline export and single-process tests do that on
# purpose (no_dist=True below), so the warning carries no information here.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")

_TMP_DIR = re.compile(r"step_(\d+)\.tmp-[0-9a-f]+")
# After a failure (`abort`): how long an async write still in flight may take to finish and be kept; torchrun
# gives a stopping rank 30 s before it kills it.
ABORT_WAIT_S = 20.0


# ------------------------------------------------------------------------------ folder helpers
def _fsync_dir(path: Path) -> None:
    # The rename is only durable once the parent directory entry is on disk.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------ the manager
@dataclass
class _PendingSave:
    step: int
    tmp: Path
    final: Path
    future: Future
    started: float
    bytes_here: int  # what this rank writes (a full disk's paragraph says what the checkpoint needs)


class CheckpointManager:
    """Save / find / load resumable checkpoints of one run. Every rank constructs it and calls save/load/wait.

        ckpt = CheckpointManager(run_dir, cfg.train.ckpt, seed=cfg.train.seed)
        if (latest := CheckpointManager.find_latest(run_dir)) is not None:
            extra = ckpt.load(latest, model, optimizer, scheduler)
        ...
        ckpt.save(step, model, optimizer, scheduler, {"step": step, "consumed_samples": n})
        ...
        ckpt.wait()   # before exiting: finalizes an async save still in flight

    `seed` only matters when a checkpoint written at a smaller world size is loaded: ranks with no RNG file
    are seeded from (seed, rank).
    """

    def __init__(self, run_dir: Path, cfg: CheckpointConfig, *, seed: int = 0):
        if cfg.max_keep == 0 or cfg.max_keep < -1:
            raise ValueError(f"train.ckpt.max_keep: {cfg.max_keep} is invalid (>= 1, or -1 to keep all)")
        self.run_dir = Path(run_dir)
        self.ckpt_root = self.run_dir / "checkpoints"
        self.cfg = cfg
        self.seed = seed
        self._group = cpu_group()
        # The background thread of an async save runs collectives while the training thread runs its
        # own on cpu_group (the per-step exit agreement, export's checks): on one shared group their
        # order could differ between ranks and deadlock. The async write gets a group of its own.
        self._async_group = dist.new_group(backend="gloo") if dist_on() and cfg.save_mode == "async" else None
        self._pending: _PendingSave | None = None
        # The step_N.tmp-* folder of the save not yet finished (marked and renamed) or removed: what `abort`
        # settles when the process fails before it is.
        self._writing: Path | None = None
        if rank() == 0:
            # A run that crashed (or was killed) mid-save left its step_N.tmp-* behind: never loadable,
            # possibly large, and on the disk a full-disk failure needs free.
            self._remove_stale_tmp()
        # Seconds of the last save that blocked training / of the last finalized write (for metrics).
        self.last_blocking_s = 0.0
        self.last_write_s = 0.0

    # -------------------------------------------------------------------- save
    def save(
        self,
        step: int,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        scheduler: Any,
        extra: dict[str, Any],
        *,
        blocking: bool = False,
    ) -> Path:
        """Checkpoint `model`/`optimizer`/`scheduler`/`extra` as step_{step}; all ranks call it.

        Returns the step_N path; with an async save it exists only once that save is finalized
        (at the next save() or wait()). Saving a step that already has a complete checkpoint is a no-op.
        """
        t0 = time.perf_counter()
        self.wait()  # at most one save in flight
        final = self.ckpt_root / f"step_{step}"
        if is_complete(final):
            log.info("checkpoint %s already exists; not saving step %d again", final, step)
            return final
        state_json = trainer_state(step, scheduler, extra)
        model_sd, optim_sd = get_state_dict(model, [optimizer] if optimizer is not None else [])
        state: dict[str, Any] = {"model": model_sd}
        if optimizer is not None:
            state["optimizer"] = optim_sd
        bytes_here = bytes_written_here(state)

        nonce = broadcast_str(uuid.uuid4().hex[:12] if rank() == 0 else "", self._group)
        tmp = self.ckpt_root / f"step_{step}.tmp-{nonce}"
        if rank() == 0:
            self._remove_stale_tmp()
        barrier(self._group)  # the stale-folder sweep is over before any rank creates the new folder
        self._writing = tmp
        error: BaseException | None = None
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            torch.save(rng_state(), tmp / f"rng_rank{rank()}.pt")
            if rank() == 0:
                write_trainer_state(tmp, state_json)
        except Exception as e:  # noqa: BLE001 - raised by _raise_failed once every rank knows
            error = e
        self._raise_failed(step, tmp, final, error, bytes_here)

        t_write = time.perf_counter()
        try:
            if self.cfg.save_mode == "async" and not blocking:
                future = dcp.async_save(
                    state, checkpoint_id=str(tmp), process_group=self._async_group, no_dist=not dist_on()
                )
            else:
                dcp.save(state, checkpoint_id=str(tmp), process_group=self._group, no_dist=not dist_on())
        except (Exception, CheckpointException) as e:  # DCP's own error is a BaseException
            # DCP reports every rank's failure on every rank, so all ranks arrive here together.
            self._raise_failed(step, tmp, final, e, bytes_here)
        if self.cfg.save_mode == "async" and not blocking:
            assert isinstance(future, Future)  # an AsyncSaveResponse comes only with async staging (off by default)
            self._pending = _PendingSave(step, tmp, final, future, t_write, bytes_here)
            self.last_blocking_s = time.perf_counter() - t0
            log.info("checkpoint step %d: async save started (%.2fs blocking)", step, self.last_blocking_s)
        else:
            self._finalize(step, tmp, final, bytes_here)
            self.last_write_s = time.perf_counter() - t_write
            self.last_blocking_s = time.perf_counter() - t0
            log.info("checkpoint step %d saved to %s (%.2fs)", step, final, self.last_blocking_s)
        return final

    def wait(self) -> None:
        """Finish the async save in flight, if any: wait for its write, then mark, rename and rotate."""
        pending = self._pending
        if pending is None:
            return
        error: BaseException | None = None
        try:
            pending.future.result()
        except BaseException as e:  # noqa: BLE001 - the background write's error, raised once every rank knows
            error = e
        self._raise_failed(pending.step, pending.tmp, pending.final, error, pending.bytes_here)
        self._finalize(pending.step, pending.tmp, pending.final, pending.bytes_here)
        self.last_write_s = time.perf_counter() - pending.started
        log.info("checkpoint step %d saved to %s (async write %.2fs)", pending.step, pending.final, self.last_write_s)

    @property
    def in_flight(self) -> bool:
        return self._pending is not None

    def abort(self, timeout_s: float = ABORT_WAIT_S) -> None:
        """After a failure, on the way out of a process whose peers may be anywhere (no collective): settle the
        save not yet finished. An async write still in flight gets up to `timeout_s` to end; when it ended well on
        rank 0, every rank's shard is on disk (DCP's coordinator writes .metadata only after every rank reported
        its write, and every rank's RNG file was agreed on before the write began), so rank 0 marks and renames
        it; otherwise rank 0 removes the folder. Never a complete-but-unmarked step_N.tmp-* left behind. Every
        rank calls it before leaving the process group: its own write may be what rank 0's waits for."""
        pending, self._pending = self._pending, None
        tmp, self._writing = self._writing, None
        written = False
        if pending is not None:
            try:
                pending.future.result(timeout=timeout_s)
                written = pending.tmp == tmp
            except (Exception, CheckpointException):  # noqa: BLE001 - failed or unfinished: the folder goes
                pass
        if rank() != 0 or tmp is None or not tmp.is_dir():
            return
        if written and pending is not None:
            try:
                self._mark_complete(pending.step, tmp, pending.final)
                log.warning(
                    "checkpoint step %d: its write ended after the failure; saved to %s", pending.step, pending.final
                )
                return
            except OSError:
                pass
        shutil.rmtree(tmp, ignore_errors=True)
        log.warning("checkpoint: removed %s, unfinished when the run failed", tmp)

    def _finalize(self, step: int, tmp: Path, final: Path, bytes_here: int) -> None:
        barrier(self._group)  # every rank's shard and RNG file are on disk
        error: Exception | None = None
        if rank() == 0:
            try:
                self._mark_complete(step, tmp, final)
            except Exception as e:  # noqa: BLE001 - raised by _raise_failed on every rank
                error = e
        self._raise_failed(step, tmp, final, error, bytes_here)
        self._writing = None
        if rank() == 0:
            self._rotate()
        barrier(self._group)

    def _mark_complete(self, step: int, tmp: Path, final: Path) -> None:
        """Rank 0, once every rank's part of `tmp` is on disk: COMPLETE, then the rename to `final`."""
        write_json_atomic(
            tmp / COMPLETE,
            {"step": step, "time": time.time(), "world_size": world_size()},
            fsync=True,
            sort_keys=True,
        )
        if final.exists():
            # A step_N without COMPLETE (never loadable): replace it.
            shutil.rmtree(final)
        tmp.rename(final)
        _fsync_dir(self.ckpt_root)

    def _raise_failed(self, step: int, tmp: Path, final: Path, error: BaseException | None, bytes_here: int) -> None:
        """Return when the write went well on every rank; otherwise raise on every rank.

        Collective: every rank calls it with its own error (None when its part went well). After an
        OSError on any rank the partial `tmp` is removed (rank 0, once all ranks stopped writing into
        it); a full disk raises the same DiskFullError on every rank, another OSError is re-raised as it
        is (checkpoint_failures.raise_failed). A failure that is no OSError (a crash mid-write) leaves
        `tmp` for the next save to sweep, or `abort` on the way out.
        """
        worst, os_error = agree_outcome(error, tmp, self._group)
        if self._pending is not None and self._pending.tmp == tmp:
            self._pending = None  # settled: every rank knows how its write went
        if worst == OK:
            return
        if worst >= OS_ERROR:
            self._writing = None
            if rank() == 0:
                shutil.rmtree(tmp, ignore_errors=True)
                log.warning("checkpoint step %d: removed the partial %s after a failed write", step, tmp)
        raise_failed(step, tmp, final, error, os_error, worst, bytes_here, self._group)

    def _rotate(self) -> None:
        if self.cfg.max_keep == -1:
            return
        done = complete_checkpoints(self.ckpt_root)
        for old in done[: max(0, len(done) - self.cfg.max_keep)]:
            # Drop the marker first so a crash half-way through the delete leaves an ignored folder.
            (old / COMPLETE).unlink()
            shutil.rmtree(old)
            log.info("checkpoint rotation: removed %s (max_keep=%d)", old, self.cfg.max_keep)

    def _remove_stale_tmp(self) -> None:
        if not self.ckpt_root.is_dir():
            return
        for p in self.ckpt_root.iterdir():
            if p.is_dir() and _TMP_DIR.fullmatch(p.name):
                log.warning("removing incomplete checkpoint %s (an interrupted save)", p)
                shutil.rmtree(p, ignore_errors=True)

    # -------------------------------------------------------------------- find / load
    @staticmethod
    def find_latest(path: Path) -> Path | None:
        """The newest complete checkpoint under `path`, or None (see checkpoint_paths.find_latest)."""
        return find_latest(path)

    def load(
        self,
        ckpt_dir: Path,
        model: nn.Module,
        optimizer: torch.optim.Optimizer | None,
        scheduler: Any,
    ) -> dict[str, Any]:
        """Restore model/optimizer/scheduler and this rank's RNG from `ckpt_dir`; returns the saved `extra`.

        All ranks call it. A checkpoint from another world size reshards through DCP.
        """
        ckpt_dir = Path(ckpt_dir)
        if not is_complete(ckpt_dir):
            raise CheckpointError(
                f"{ckpt_dir}: not a complete checkpoint (a step_N folder holding its {COMPLETE} marker; an "
                f"interrupted save never has one, and is never loaded); {describe_complete(ckpt_dir.parent)}"
            )
        t0 = time.perf_counter()
        meta = read_trainer_state(ckpt_dir, RESUME)
        model_sd, optim_sd = get_state_dict(model, [optimizer] if optimizer is not None else [])
        state: dict[str, Any] = {"model": model_sd}
        if optimizer is not None:
            state["optimizer"] = optim_sd
        # a damaged file or another model's tensors: a CheckpointError naming it (every rank reads the same files)
        load_dcp(
            state,
            ckpt_dir,
            RESUME,
            what="model and optimizer" if optimizer is not None else "model",
            process_group=self._group,
            no_dist=not dist_on(),
        )
        set_model_state_dict(model, state["model"])
        if optimizer is not None:
            set_optimizer_state_dict(model, [optimizer], state["optimizer"])

        if scheduler is not None:
            restore_scheduler(scheduler, meta, ckpt_dir)

        self._restore_rng(ckpt_dir, int(meta.get("world_size", 0)))
        extra = dict(meta["extra"])
        extra.setdefault("step", meta["step"])
        log.info("loaded checkpoint %s (step %d) in %.2fs", ckpt_dir, meta["step"], time.perf_counter() - t0)
        return extra

    def _restore_rng(self, ckpt_dir: Path, saved_world: int) -> None:
        rng_file = ckpt_dir / f"rng_rank{rank()}.pt"
        if rng_file.is_file():
            set_rng_state(load_torch_file(rng_file, ckpt_dir, RESUME, weights_only=True))
            return
        derived = seed_process_rngs(self.seed, rank())
        log.warning(
            "%s has no RNG state for rank %d (written by %d ranks, now %d): seeded this rank's RNGs "
            "deterministically from (seed=%d, rank=%d) -> %d",
            ckpt_dir,
            rank(),
            saved_world,
            world_size(),
            self.seed,
            rank(),
            derived,
        )
