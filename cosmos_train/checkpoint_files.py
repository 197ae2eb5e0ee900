"""Reading a checkpoint's files: one place, where a damaged file is a CheckpointError naming it and what to do.

    from cosmos_train.checkpoint_files import check_dcp_files, load_dcp, load_torch_file, read_trainer_state
    check_dcp_files(ckpt, RESUME)             # .metadata readable, every shard present and as long as it says
    load_dcp(state, ckpt, RESUME, process_group=group, no_dist=False)
    load_torch_file(ckpt / "rng_rank0.pt", ckpt, RESUME, weights_only=True)

A checkpoint folder holding its COMPLETE marker was written whole (checkpoint.py), but it can be damaged
after that: a copy cut short, a disk that lost data, a file emptied or replaced. torch's own errors then
say "failed finding central directory" or "Ran out of input" and name no file, and a resumed run would
retry them as crashes. Here:

- `check_dcp_files`: the DCP `.metadata` loads and is DCP's metadata, and every shard file it points
  into exists and holds the bytes it points at (one stat per file, before any tensor is read), so a
  truncated, empty or missing shard is named with its size and the size it must have;
- `load_dcp`: `torch.distributed.checkpoint.load`, its failures sorted: a damaged file (zip, pickle or
  end-of-file errors in the chain) or tensors of another model (a missing key, a size mismatch) are
  CheckpointErrors; anything else stays the crash it is (a bug, a lost process group);
- `load_torch_file` (RNG and scheduler state) and `read_trainer_state` (trainer_state.json): the same for
  one file.

Each message ends with `todo`, what the caller's user can do (`RESUME`, `EXPORT`), and the other complete
checkpoints found beside the damaged one. An OSError on a path (no permission, a file where a folder is
needed) is not caught here: `cosmos_train.errors.path_error` says those the same way for every path.
"""

from __future__ import annotations

import json
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.metadata import Metadata

from cosmos_train.checkpoint_paths import COMPLETE, list_complete
from cosmos_train.errors import CheckpointError, exception_chain

METADATA = ".metadata"
TRAINER_STATE = "trainer_state.json"

RESUME = (
    "resume from an earlier complete checkpoint instead (point the resume setting, e.g. train.resume, at it), or "
    "move this step folder out of checkpoints/ so that a resumed or retried run continues from the newest good one"
)
EXPORT = "export an earlier complete checkpoint instead, or copy this one again from where it was written"

# What torch says about a file that is not what it should be: its zip reader, the unpickler, a read past the end.
_DAMAGED_TYPES: tuple[type[Exception], ...] = (EOFError, pickle.UnpicklingError, zipfile.BadZipFile)
# ... and what the unpickler raises for a file of another kind (an import, an attribute it cannot find)
_UNPICKLE_TYPES: tuple[type[Exception], ...] = (*_DAMAGED_TYPES, ValueError, TypeError, AttributeError, ImportError)
# ... and torch.load's own words for a file that is not its format
_TORCH_LOAD_TYPES: tuple[type[Exception], ...] = (*_DAMAGED_TYPES, RuntimeError, ValueError)
_DAMAGED_WORDS = ("PytorchStreamReader", "zip archive", "central directory", "Ran out of input", "truncated")
# What DCP's planner says when the checkpoint's tensors are not the ones being loaded.
_MISMATCH_WORDS = ("Missing key in checkpoint state_dict", "Size mismatch between saved")


def damaged(ckpt_dir: Path, problem: str, todo: str) -> CheckpointError:
    """The one paragraph for a damaged checkpoint: what is wrong, what to do, the other complete ones."""
    ckpt_dir = Path(ckpt_dir)
    others = [p for p in list_complete(ckpt_dir.parent) if p != ckpt_dir][-8:]
    listing = (
        f"Complete checkpoints beside it: {', '.join(str(p) for p in others)}"
        if others
        else f"There is no other complete checkpoint under {ckpt_dir.parent}"
    )
    return CheckpointError(
        f"checkpoint {ckpt_dir} is damaged: {problem} (it was complete when written, so it was cut short or "
        f"changed afterwards, e.g. by a copy that stopped); {todo}. {listing}"
    )


def _first_line(exc: BaseException) -> str:
    """What the library said, in one line (torch's weights-only refusal is a page about its own defaults)."""
    text = str(exc).strip()
    if "Weights only load failed" in text:
        return "its bytes are not the data torch wrote: the unpickler refused them"
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}" if text else type(exc).__name__


def read_dcp_metadata(ckpt_dir: Path, todo: str) -> Metadata:
    """The checkpoint's DCP metadata, or a CheckpointError naming `.metadata` (missing, empty, truncated,
    not DCP's)."""
    path = Path(ckpt_dir) / METADATA
    if not path.is_file():
        raise damaged(ckpt_dir, f"{path} is missing (DCP's index of the shards)", todo)
    try:
        metadata = FileSystemReader(str(ckpt_dir)).read_metadata()
    except _UNPICKLE_TYPES as e:
        raise damaged(ckpt_dir, f"{path} ({path.stat().st_size} bytes) cannot be read ({_first_line(e)})", todo) from e
    if not isinstance(metadata, Metadata):
        raise damaged(ckpt_dir, f"{path} holds a {type(metadata).__name__}, not DCP's checkpoint metadata", todo)
    return metadata


def check_dcp_files(ckpt_dir: Path, todo: str) -> Metadata:
    """Every file of a DCP checkpoint there and whole: `.metadata` readable, each shard it points into present
    and at least as long as the last byte it points at. Returns the metadata; raises CheckpointError."""
    ckpt_dir = Path(ckpt_dir)
    metadata = read_dcp_metadata(ckpt_dir, todo)
    ends: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        rel = getattr(info, "relative_path", None)
        if rel is not None:
            ends[rel] = max(ends.get(rel, 0), int(info.offset) + int(info.length))
    for rel, end in sorted(ends.items()):
        shard = ckpt_dir / rel
        if not shard.is_file():
            raise damaged(ckpt_dir, f"its shard {shard} is missing ({METADATA} lists it)", todo)
        size = shard.stat().st_size
        if size < end:
            raise damaged(
                ckpt_dir,
                f"its shard {shard} is truncated: {size} bytes, where {METADATA} says it holds {end}",
                todo,
            )
    return metadata


def _sorted_failure(exc: BaseException, ckpt_dir: Path, what: str, todo: str) -> CheckpointError | None:
    """A CheckpointError for a failure that is the checkpoint's (damaged, or another model's); None for a crash."""
    for e in exception_chain(exc):
        if isinstance(e, CheckpointError):
            return e
        said = next((line.strip() for line in str(e).splitlines() if any(w in line for w in _MISMATCH_WORDS)), None)
        if said is not None:  # (in a CheckpointException, a line of the failed rank's traceback)
            return CheckpointError(
                f"checkpoint {ckpt_dir} does not match the {what} being loaded ({said[:300]}): it "
                "was written by a run of another model or settings (policy.model_name_or_path, policy.lora, the "
                f"optimizer); {todo}"
            )
    for e in exception_chain(exc):
        if isinstance(e, _DAMAGED_TYPES) or (
            isinstance(e, RuntimeError | ValueError) and any(w in str(e) for w in _DAMAGED_WORDS)
        ):
            shards = ", ".join(p.name for p in sorted(ckpt_dir.glob("*.distcp"))[:8]) or "none found"
            return damaged(ckpt_dir, f"one of its shard files ({shards}) cannot be read: {_first_line(e)}", todo)
    return None


def load_dcp(state: dict[str, Any], ckpt_dir: Path, todo: str, what: str = "model", **kwargs: Any) -> None:
    """`dcp.load(state, ...)` from `ckpt_dir` (`kwargs`: storage_reader, process_group, no_dist, as dcp.load
    takes them; checkpoint_id is `ckpt_dir` unless a storage_reader is given), after `check_dcp_files`. A
    damaged file or another model's tensors raise CheckpointError; any other failure is raised as it is."""
    ckpt_dir = Path(ckpt_dir)
    check_dcp_files(ckpt_dir, todo)
    if "storage_reader" not in kwargs:
        kwargs["checkpoint_id"] = str(ckpt_dir)
    try:
        dcp.load(state, **kwargs)
    except (Exception, CheckpointException) as e:  # DCP's own error is a BaseException
        error = _sorted_failure(e, ckpt_dir, what, todo)
        if error is None:
            raise
        raise error from e


def load_torch_file(path: Path, ckpt_dir: Path, todo: str, *, weights_only: bool = True) -> Any:
    """`torch.load(path)` on the CPU; a file that is empty, cut short or not torch's is a CheckpointError."""
    path = Path(path)
    try:
        return torch.load(path, weights_only=weights_only, map_location="cpu")
    except OSError as e:
        if e.filename is not None:
            raise  # the OS refused the path itself (errors.path_error says it): not the file's content
        # torch's zip reader says a file cut short with a bare EINVAL, naming nothing
        raise damaged(ckpt_dir, f"{path} ({path.stat().st_size} bytes) cannot be read ({_first_line(e)})", todo) from e
    except _TORCH_LOAD_TYPES as e:
        raise damaged(ckpt_dir, f"{path} ({path.stat().st_size} bytes) cannot be read ({_first_line(e)})", todo) from e


def read_trainer_state(ckpt_dir: Path, todo: str) -> dict[str, Any]:
    """trainer_state.json of a complete checkpoint: step, extra, scheduler, world size."""
    path = Path(ckpt_dir) / TRAINER_STATE
    if not path.is_file():
        raise damaged(ckpt_dir, f"{path} is missing (it is written before {COMPLETE})", todo)
    try:
        state = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise damaged(ckpt_dir, f"{path} is not valid JSON ({e})", todo) from e
    if not isinstance(state, dict) or not isinstance(state.get("extra"), dict) or "step" not in state:
        raise damaged(ckpt_dir, f"{path} lacks the step and the trainer's state (keys step, extra)", todo)
    return state
