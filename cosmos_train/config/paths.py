"""Path facts the config checks need and the data layer shares: where the cache lives, what names a local path."""

from __future__ import annotations

import os
from pathlib import Path


def cosmos_cache() -> Path:
    """$COSMOS_CACHE (default ~/.cache/cosmos): extracted archives, embedded media, the clip cache."""
    return Path(os.environ.get("COSMOS_CACHE") or Path.home() / ".cache" / "cosmos").expanduser()


def looks_local(name: str) -> bool:
    """True for a model name that is a path, False for a hub id."""
    # A hub id is 'org/name' (one slash, no leading dot or slash); anything else is a path.
    return name.startswith((".", "/", "~")) or name.count("/") != 1 or Path(name).exists()


def is_s3(path: str | os.PathLike[str]) -> bool:
    """An `s3://bucket/prefix` location (an output_dir or resume on S3), not a local path."""
    return str(path).startswith("s3://")


def run_cache_root(output_dir: str) -> Path:
    """Where run folders are made for `output_dir`: the folder itself when it is local; for `s3://bucket/prefix`,
    its local working copy $COSMOS_RUN_CACHE/<bucket>/<prefix> ($COSMOS_RUN_CACHE defaults to $COSMOS_CACHE/runs):
    the run folder the trainer writes, which the run's sync mirrors to the bucket (cosmos_train/run_sync.py)."""
    if not is_s3(output_dir):
        return Path(output_dir).expanduser()
    rest = str(output_dir)[len("s3://") :].strip("/")
    root = Path(os.environ.get("COSMOS_RUN_CACHE") or cosmos_cache() / "runs").expanduser()
    return root.joinpath(*[p for p in rest.split("/") if p not in ("", ".", "..")])
