"""Where checkpoints are on disk, without torch: what a complete one is, listing, the newest, train.resume.

    from cosmos_train.checkpoint_paths import find_latest, resolve_resume
    resolve_resume("outputs/run/checkpoints/step_40", "outputs")   # the path, or a CheckpointError

A checkpoint is a `step_N` folder holding the COMPLETE marker (written last, see checkpoint.py). Kept
apart from the save/load code so a command can check `train.resume` in a fraction of a second, before
torch is imported.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from cosmos_train.errors import CheckpointError

COMPLETE = "COMPLETE"
_STEP_DIR = re.compile(r"step_(\d+)")


def is_complete(path: Path) -> bool:
    """A finished checkpoint: a step_N folder holding the COMPLETE marker."""
    path = Path(path)
    return _STEP_DIR.fullmatch(path.name) is not None and (path / COMPLETE).is_file()


def step_of(path: Path) -> int:
    m = _STEP_DIR.fullmatch(Path(path).name)
    if m is None:
        raise ValueError(f"{path}: not a checkpoint folder (expected a name like step_100)")
    return int(m.group(1))


def complete_checkpoints(ckpt_root: Path) -> list[Path]:
    """The complete step_N folders directly under `ckpt_root`, oldest step first."""
    if not Path(ckpt_root).is_dir():
        return []
    found = [p for p in Path(ckpt_root).iterdir() if p.is_dir() and is_complete(p)]
    return sorted(found, key=step_of)


def list_complete(path: Path) -> list[Path]:
    """Every complete checkpoint under `path`, in the layouts `find_latest` accepts (a step_N folder,
    a run's checkpoints/, a run folder, an output_dir of runs); by run, then step."""
    path = Path(path)
    if not path.is_dir():
        return []
    if _STEP_DIR.fullmatch(path.name):
        return [path] if is_complete(path) else []
    for root in (path / "checkpoints", path):
        if found := complete_checkpoints(root):
            return found
    return [
        ckpt for run in sorted(path.iterdir()) if run.is_dir() for ckpt in complete_checkpoints(run / "checkpoints")
    ]


def describe_complete(path: Path, limit: int = 8) -> str:
    """'complete ones under PATH: a, b, ...' (or 'none'), for error messages about a wrong checkpoint."""
    found = list_complete(path)
    if not found:
        return f"there is no complete checkpoint under {path}"
    shown = ", ".join(str(p) for p in found[-limit:])
    more = f" (and {len(found) - limit} older)" if len(found) > limit else ""
    return f"complete ones under {path}: {shown}{more}"


def _written_at(ckpt: Path) -> float:
    try:
        return float(json.loads((ckpt / COMPLETE).read_text())["time"])
    except (ValueError, KeyError, TypeError, OSError):
        return (ckpt / COMPLETE).stat().st_mtime


def find_latest(path: Path) -> Path | None:
    """The newest complete checkpoint under `path`, or None.

    `path` may be a step_N folder, a run's `checkpoints/` folder, a run folder, or an output_dir holding
    timestamped run folders (then the run whose newest checkpoint was written last wins).
    """
    path = Path(path)
    if not path.is_dir():
        return None
    if _STEP_DIR.fullmatch(path.name):
        return path if is_complete(path) else None
    for root in (path / "checkpoints", path):
        found = complete_checkpoints(root)
        if found:
            return found[-1]
    newest_per_run = [
        found[-1] for run in path.iterdir() if run.is_dir() and (found := complete_checkpoints(run / "checkpoints"))
    ]
    if not newest_per_run:
        return None
    return max(newest_per_run, key=lambda p: (_written_at(p), step_of(p)))


def resolve_resume(resume: bool | str, output_dir: str | Path) -> Path | None:
    """The checkpoint `train.resume` names, checked before anything is loaded.

    - false: None (start fresh).
    - true: the newest complete checkpoint under output_dir, or None when there is none (the caller says
      so in its log and result: starting fresh is what a first run of a resumable job does).
    - a path: that checkpoint (a step_N folder), or the newest complete one in a run folder / its
      checkpoints/ folder / an output_dir. Anything else is a CheckpointError that lists the complete
      checkpoints found, so the user can copy one: a missing path or an interrupted save never silently
      becomes a run from step 0.
    """
    if resume is False:
        return None
    if resume is True:
        return find_latest(Path(output_dir).expanduser())
    path = Path(resume).expanduser()
    found = find_latest(path)
    if found is not None and (not _STEP_DIR.fullmatch(path.name) or found == path):
        return found
    if not path.exists():
        why = "does not exist"
    elif _STEP_DIR.fullmatch(path.name):
        why = f"is not a complete checkpoint (no {COMPLETE} marker: the save was interrupted)"
    else:
        why = "holds no complete checkpoint"
    # Where the user probably meant: the closest existing folder of the path's run, and output_dir.
    roots = [p for p in (path, path.parent, path.parent.parent) if p.is_dir()][:1] + [Path(output_dir).expanduser()]
    nearby = sorted(
        {c.resolve() for root in roots for c in list_complete(root)}, key=lambda p: (_written_at(p), step_of(p))
    )
    listing = (
        ("complete checkpoints nearby:\n" + "\n".join(f"    {p}" for p in nearby[-10:]))
        if nearby
        else ("no complete checkpoint was found there or under train.output_dir")
    )
    raise CheckpointError(
        f"train.resume: {path} {why}; set it to a step_N folder that holds {COMPLETE}, "
        f"or to true for the newest one. {listing}"
    )


def newest_export(root: Path, name: str = "final") -> Path | None:
    """The most recently written `<run>/safetensors/<name>` export at any depth under `root` (an export
    is complete once its folder exists: models/hf_folder.py renames it into place whole), or None."""
    root = Path(root).expanduser()
    if not root.is_dir():
        return None
    found = [p for p in root.glob(f"**/safetensors/{name}") if (p / "config.json").is_file()]
    return max(found, key=lambda p: p.stat().st_mtime_ns, default=None)
