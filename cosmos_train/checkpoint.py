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
the file, never retried as a crash.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import re
import shutil
import time
import uuid
import warnings
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
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
from torch.distributed.tensor import DTensor

from cosmos_train.atomic import write_json_atomic
from cosmos_train.checkpoint_files import RESUME, TRAINER_STATE, load_dcp, load_torch_file, read_trainer_state
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
from cosmos_train.config import CheckpointConfig
from cosmos_train.errors import (
    CheckpointError,
    DiskFullError,
    disk_full_at,
    error_from_record,
    exception_chain,
    from_os_error,
    out_of_space,
    user_error_of,
)

log = logging.getLogger(__name__)
# DCP warns on every call made without a process group; offline export and single-process tests do that on
# purpose (no_dist=True below), so the warning carries no information here.
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")

SCHEDULER_FALLBACK = "scheduler.pt"
FORMAT_VERSION = 1
_TMP_DIR = re.compile(r"step_(\d+)\.tmp-[0-9a-f]+")
# How a save went on one rank; ranks agree on the worst (an all-reduce MAX), so all of them raise alike.
_OK, _FAILED, _OS_ERROR, _DISK_FULL = 0, 1, 2, 3
# After a failure (`abort`): how long an async write still in flight may take to finish and be kept; torchrun
# gives a stopping rank 30 s before it kills it.
ABORT_WAIT_S = 20.0


# ------------------------------------------------------------------------------ process-group helpers
def dist_on() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if dist_on() else 0


def world_size() -> int:
    return dist.get_world_size() if dist_on() else 1


# (the default group it belongs to, the gloo group): re-created when the default group is re-initialised.
_CPU_GROUP: tuple[Any, Any] | None = None


def cpu_group() -> Any:
    """A gloo group over all ranks for small CPU collectives (barriers, flags, DCP planning).

    Created on first use; every rank must reach the first call at the same point (it is collective).
    A separate group also keeps an async checkpoint's background collectives apart from training's.
    """
    global _CPU_GROUP
    if not dist_on():
        return None
    world = dist.group.WORLD
    if _CPU_GROUP is None or _CPU_GROUP[0] is not world:
        _CPU_GROUP = (world, dist.new_group(backend="gloo"))
    return _CPU_GROUP[1]


def barrier(group: Any = None) -> None:
    if dist_on():
        dist.barrier(group=group)


def all_ok(ok: bool, group: Any = None) -> bool:
    """True when `ok` holds on every rank (so all ranks raise together instead of one hanging)."""
    if not dist_on():
        return ok
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(flag.item())


def _reduce_int(value: int, op: Any, group: Any) -> int:
    if not dist_on():
        return value
    box = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(box, op=op, group=group)
    return int(box.item())


def agree_max(value: int, group: Any = None) -> int:
    """The largest `value` over all ranks."""
    return _reduce_int(value, dist.ReduceOp.MAX, group)


def agree_sum(value: int, group: Any = None) -> int:
    """The sum of `value` over all ranks."""
    return _reduce_int(value, dist.ReduceOp.SUM, group)


def broadcast_str(value: str, group: Any = None) -> str:
    """Rank 0's `value` on every rank."""
    if not dist_on():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0, group=group)
    return box[0]


def raise_together(error: BaseException | None, what: str, group: Any = None) -> None:
    """Collective: return when `what` went well on every rank (`error` None everywhere); otherwise raise on every
    rank, classified alike. When a failed rank's error is a user error (`errors.user_error_of`: a full disk above
    all), every rank raises that one (the lowest such rank's), so RUN/error.json holds it whichever rank writes
    first and the launch is not retried as a crash; otherwise a failed rank raises its own error and the others a
    RuntimeError naming it. `group` must take CPU tensors (`cpu_group()`): when every rank went well this costs one
    small all-reduce, so it can stand on a step's path; the errors are gathered only on the way out."""
    if all_ok(error is None, group):
        return
    mine = None if error is None else _failure_record(error)
    records: list[dict[str, Any] | None] = [mine]
    if dist_on():
        records = [None] * world_size()
        dist.all_gather_object(records, mine, group=group)
    failed = [(r, rec) for r, rec in enumerate(records) if rec is not None]
    if not failed:
        return
    shared = next(((r, rec) for r, rec in failed if rec["kind"] is not None), None)
    if shared is not None:
        own = user_error_of(error) if error is not None and shared[0] == rank() else None
        if own is not None and own is error:
            raise own
        raise (own or error_from_record(shared[1]) or RuntimeError(shared[1]["message"])) from error
    if error is not None:
        raise error
    raise RuntimeError(f"{what} failed on rank {failed[0][0]}: {failed[0][1]['message']}")


def _failure_record(error: BaseException) -> dict[str, Any]:
    user = user_error_of(error)
    return {"kind": user.kind if user else None, "message": str(user) if user else f"{type(error).__name__}: {error}"}


def _bytes_written_here(state: dict[str, Any]) -> int:
    """About the bytes this rank writes of `state` into a checkpoint: its part of each sharded tensor (DTensor)
    and, on rank 0, every plain tensor (replicated on every rank; DCP writes one copy)."""
    total = 0
    todo: list[Any] = [state]
    while todo:
        value = todo.pop()
        if isinstance(value, DTensor):
            local = value.to_local()
            total += local.numel() * local.element_size()
        elif isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size() if rank() == 0 else 0
        elif isinstance(value, dict):
            todo.extend(value.values())
        elif isinstance(value, list | tuple):
            todo.extend(value)
    return total


# ------------------------------------------------------------------------------ folder helpers
def _os_error_in(exc: BaseException) -> OSError | None:
    """The OSError behind `exc` (its chain, or a rank's failure inside DCP's CheckpointException)."""
    return next((e for e in exception_chain(exc) if isinstance(e, OSError)), None)


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


# ------------------------------------------------------------------------------ RNG state
def rng_state() -> dict[str, Any]:
    """This process's RNG states as plain tensors/ints (loadable with torch.load(weights_only=True))."""
    np_state = np.random.get_state(legacy=True)  # legacy=True is the default, though numpy's stub types it False
    assert isinstance(np_state, tuple)  # the global generator is an MT19937, whose legacy state is a tuple
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np_state
    py_version, py_internal, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "python": {"version": py_version, "internal": list(py_internal), "gauss_next": py_gauss},
        "numpy": {
            "name": np_name,
            "keys": torch.from_numpy(np_keys.astype(np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    py = state["python"]
    random.setstate((py["version"], tuple(py["internal"]), py["gauss_next"]))
    n = state["numpy"]
    keys = n["keys"].numpy().astype(np.uint32)
    np.random.set_state((n["name"], keys, n["pos"], n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def seed_process_rngs(seed: int, rank_: int) -> int:
    """Seed Python's, NumPy's and torch's global RNGs of this process as a fresh run's rank `rank_` is seeded
    (the trainers' start, and a resumed rank that has no saved RNG state); returns the seed used."""
    derived = seed + rank_
    random.seed(derived)
    np.random.seed(derived)
    torch.manual_seed(derived)  # also seeds every CUDA device
    return derived


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
        state_json = self._trainer_state(step, scheduler, extra)
        model_sd, optim_sd = get_state_dict(model, [optimizer] if optimizer is not None else [])
        state: dict[str, Any] = {"model": model_sd}
        if optimizer is not None:
            state["optimizer"] = optim_sd
        bytes_here = _bytes_written_here(state)

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
                self._write_trainer_state(tmp, state_json, scheduler)
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

    def _trainer_state(self, step: int, scheduler: Any, extra: dict[str, Any]) -> dict[str, Any]:
        extra = dict(extra)
        extra.setdefault("step", step)
        try:
            json.dumps(extra)
        except (TypeError, ValueError) as e:
            bad = [k for k, v in extra.items() if not _json_ok(v)]
            raise TypeError(f"checkpoint extra: keys {bad} are not JSON-serialisable ({e})") from e
        sched = scheduler.state_dict() if scheduler is not None else None
        return {
            "format_version": FORMAT_VERSION,
            "step": step,
            "world_size": world_size(),
            "extra": extra,
            "scheduler": sched,
        }

    def _write_trainer_state(self, tmp: Path, state_json: dict[str, Any], scheduler: Any) -> None:
        if not _json_ok(state_json["scheduler"]):
            # A scheduler whose state holds callables/tensors: keep it exact in a torch file instead.
            torch.save(state_json["scheduler"], tmp / SCHEDULER_FALLBACK)
            state_json = {**state_json, "scheduler": {"file": SCHEDULER_FALLBACK}}
        write_json_atomic(tmp / TRAINER_STATE, state_json, fsync=True, sort_keys=True)

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
        it); a full disk raises the same DiskFullError on every rank (rank 0's paragraph, made once the
        partial folder is gone: what the checkpoint needs, `bytes_here` summed over the ranks, and what is
        free), another OSError is re-raised as it is. A failure that is no OSError (a crash mid-write)
        leaves `tmp` for the next save to sweep, or `abort` on the way out.
        """
        os_error = _os_error_in(error) if error is not None else None
        if error is not None and os_error is None and out_of_space(tmp):
            # torch's zip writer reports a write cut short by a full disk as "unexpected pos", not ENOSPC
            os_error = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
        if error is None:
            code = _OK
        elif os_error is None:
            code = _FAILED
        else:
            code = _DISK_FULL if from_os_error(os_error) is not None else _OS_ERROR
        worst = agree_max(code, self._group)
        if self._pending is not None and self._pending.tmp == tmp:
            self._pending = None  # settled: every rank knows how its write went
        if worst == _OK:
            return
        if worst >= _OS_ERROR:
            self._writing = None
            if rank() == 0:
                shutil.rmtree(tmp, ignore_errors=True)
                log.warning("checkpoint step %d: removed the partial %s after a failed write", step, tmp)
        if worst == _DISK_FULL:
            needed = agree_sum(bytes_here, self._group)
            said = str(disk_full_at(final, needed)) if rank() == 0 else ""  # after the removal: what is free now
            raise DiskFullError(broadcast_str(said, self._group)) from error
        if error is None:  # this rank's part went well; another rank's did not
            raise RuntimeError(f"checkpoint of step {step} into {tmp} failed on another rank")
        if os_error is not None:
            if os_error is error:
                raise error
            raise os_error from error
        raise RuntimeError(f"checkpoint of step {step} into {tmp} failed: {error}") from error

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
            sched = meta.get("scheduler")
            if sched is None:
                raise CheckpointError(
                    f"{ckpt_dir / TRAINER_STATE}: no scheduler state saved, but this run has a learning-rate "
                    f"scheduler: the checkpoint was written by another kind of run; {RESUME}"
                )
            if sched == {"file": SCHEDULER_FALLBACK}:
                sched = load_torch_file(ckpt_dir / SCHEDULER_FALLBACK, ckpt_dir, RESUME, weights_only=False)
            scheduler.load_state_dict(sched)

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


def _json_ok(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
