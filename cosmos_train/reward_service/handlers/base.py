"""The handler plug-in contract and its registry.

A handler is a class registered by name; the service makes one instance per name, calls `set_up()`
once (in a worker thread, before its first batch) and then `score(batch)` for every request that
names it, from the worker pool:

    @register_handler("brightness")
    class Brightness(Handler):
        media_types = ("video", "image")
        def score(self, batch: Batch) -> list[float]: ...

`score` returns one float per item of the batch. A handler that needs settings reads them from the
service config it is given (`self.config`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from cosmos_train.reward_service.config import ServiceConfig

MEDIA_TYPES = ("latent", "video", "image", "text")


@dataclass
class Batch:
    """One enqueue request, parsed and checked.

    media: the tensor as a numpy array ([B, C, T, H, W] for video / latent, [B, H, W, C] for image;
    None for media_type "text"); prompts, video_infos: as sent; completions / samples: the VLM texts
    and their rows ({"reference", "options"}) for the rule and judge handlers."""

    media_type: str
    size: int
    media: np.ndarray | None = None
    prompts: list[str] = field(default_factory=list)
    video_infos: list[dict[str, Any]] = field(default_factory=list)
    completions: list[str] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)


class Handler(ABC):
    """Base of every reward handler: say which media it reads, set up once, score batches."""

    media_types: ClassVar[tuple[str, ...]] = MEDIA_TYPES
    needs_completions: ClassVar[bool] = False

    def __init__(self, name: str, config: ServiceConfig):
        self.name = name
        self.config = config

    def set_up(self) -> None:
        """Load what scoring needs (models, tables). Called once, before the first batch."""
        return None  # most handlers need nothing

    @abstractmethod
    def score(self, batch: Batch) -> Sequence[float] | Mapping[str, Sequence[Any]]:
        """One score per item of `batch`, in order; or several named lists of them (see `score_table`)."""

    def refuse(self, batch_media_type: str, has_completions: bool) -> str | None:
        """Why this handler cannot score such a request (None: it can); checked at enqueue, so the
        client gets its 400 at once instead of a failed result later."""
        if batch_media_type not in self.media_types:
            return f"scores media_type {' | '.join(self.media_types)}, not {batch_media_type!r}"
        if self.needs_completions and not has_completions:
            return "needs the completion texts in 'completions'"
        return None


HANDLERS: dict[str, type[Handler]] = {}


def register_handler(name: str) -> Callable[[type[Handler]], type[Handler]]:
    def deco(cls: type[Handler]) -> type[Handler]:
        HANDLERS[name] = cls
        return cls

    return deco


def handler_names() -> list[str]:
    return sorted(HANDLERS)


def as_floats(values: Sequence[Any], where: str) -> list[float]:
    out = [float(v) for v in values]
    if any(not np.isfinite(v) for v in out):
        raise ValueError(f"{where}: a non-finite score")
    return out


def score_table(values: Sequence[Any] | Mapping[str, Sequence[Any]], name: str, size: int) -> dict[str, list[Any]]:
    """A handler's answer as the result's `scores` object: a list of floats becomes {name: floats}; a
    mapping (several scores per item, as the reference's cosmos_reason1 gives: prediction, no_score, ...)
    keeps its keys. Every list has one entry per item; numbers must be finite, text labels pass as they are."""
    table = dict(values) if isinstance(values, Mapping) else {name: values}
    out: dict[str, list[Any]] = {}
    for key, column in table.items():
        column = list(column)
        if len(column) != size:
            raise ValueError(f"{name}.{key}: {len(column)} scores for a batch of {size}")
        texts = all(isinstance(v, str) for v in column)
        out[key] = column if texts and column else as_floats(column, f"{name}.{key}")
    return out


def sample_of(samples: Sequence[Mapping[str, Any]], i: int) -> Mapping[str, Any]:
    return samples[i] if i < len(samples) else {}
