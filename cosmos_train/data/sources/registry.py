"""The registry of dataset sources by name (`register_source`, `get_source`): each source module registers
itself here, and `cosmos_train.data.sources` imports every built-in one, so no source imports the package."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

from cosmos_train.config import DatasetConfig, TrainPolicyConfig
from cosmos_train.data.sources.common import DatasetError

SplitRole = Literal["train", "val"]
SourceFn = Callable[[DatasetConfig, TrainPolicyConfig, SplitRole, dict], Iterable[dict]]
SOURCES: dict[str, SourceFn] = {}


def register_source(name: str) -> Callable[[SourceFn], SourceFn]:
    """Decorator: make `fn` the source called `name` (a later registration replaces it)."""

    def wrap(fn: SourceFn) -> SourceFn:
        SOURCES[name] = fn
        return fn

    return wrap


def get_source(name: str) -> SourceFn:
    if name not in SOURCES:
        raise DatasetError(f"unknown dataset source {name!r}; registered: {', '.join(sorted(SOURCES))}")
    return SOURCES[name]
