"""A checkpoint's trainer_state.json, beside its DCP shards: the step, the trainer's `extra` (consumed_samples,
epoch, ...), the learning-rate scheduler's state and the world size that wrote it. Rank 0 writes it at a save (a
scheduler state that is not JSON goes into scheduler.pt instead); a load restores the scheduler from it. Reading
the file, damage said as a CheckpointError: checkpoint_files.read_trainer_state."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from cosmos_train.atomic import write_json_atomic
from cosmos_train.checkpoint_files import RESUME, TRAINER_STATE, load_torch_file
from cosmos_train.distributed import world_size
from cosmos_train.errors import CheckpointError

SCHEDULER_FALLBACK = "scheduler.pt"
FORMAT_VERSION = 1


def trainer_state(step: int, scheduler: Any, extra: dict[str, Any]) -> dict[str, Any]:
    """trainer_state.json's content for a save of `step`; `extra` must be JSON (a TypeError names the keys not)."""
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


def write_trainer_state(folder: Path, state_json: dict[str, Any]) -> None:
    """Write `state_json` (`trainer_state`'s) into the checkpoint folder `folder` (rank 0)."""
    if not _json_ok(state_json["scheduler"]):
        # A scheduler whose state holds callables/tensors: keep it exact in a torch file instead.
        torch.save(state_json["scheduler"], folder / SCHEDULER_FALLBACK)
        state_json = {**state_json, "scheduler": {"file": SCHEDULER_FALLBACK}}
    write_json_atomic(folder / TRAINER_STATE, state_json, fsync=True, sort_keys=True)


def restore_scheduler(scheduler: Any, meta: dict[str, Any], ckpt_dir: Path) -> None:
    """Load the scheduler state of the checkpoint `ckpt_dir` (its trainer_state.json: `meta`) into `scheduler`."""
    sched = meta.get("scheduler")
    if sched is None:
        raise CheckpointError(
            f"{ckpt_dir / TRAINER_STATE}: no scheduler state saved, but this run has a learning-rate "
            f"scheduler: the checkpoint was written by another kind of run; {RESUME}"
        )
    if sched == {"file": SCHEDULER_FALLBACK}:
        sched = load_torch_file(ckpt_dir / SCHEDULER_FALLBACK, ckpt_dir, RESUME, weights_only=False)
    scheduler.load_state_dict(sched)


def _json_ok(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True
