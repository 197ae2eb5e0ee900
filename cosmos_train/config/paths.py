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
