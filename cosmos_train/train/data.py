"""Rows for the trainer: the validated manifest of the data-prep step, or the dataset sources.

`SFTDataset[i]` turns chat sample i into token ids, labels and vision tensors (video decode happens
here, so it runs in DataLoader workers). An error names the row's id and origin.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from torch.utils.data import Dataset

from cosmos_train.config import Config
from cosmos_train.data.chat import encode_chat
from cosmos_train.data.clip_cache import ClipCache, open_clip_cache
from cosmos_train.data.prepare import read_manifest
from cosmos_train.data.sources import load_samples
from cosmos_train.data.sources.registry import SplitRole
from cosmos_train.errors import DataError


def manifest_path(run_dir: Path, split_role: str) -> Path:
    return run_dir / ("manifest.jsonl" if split_role == "train" else f"manifest_{split_role}.jsonl")


def load_train_samples(cfg: Config, run_dir: Path, split_role: SplitRole, script: str | None = None) -> list[dict]:
    """The data-prep manifest when present (rows already validated), else the configured source."""
    path = manifest_path(run_dir, split_role)
    if path.exists():
        return read_manifest(path)
    return list(load_samples(cfg, split_role, script))


class RowError(DataError):
    """A row that cannot be encoded, named by id and origin (file:row)."""


class SFTDataset(Dataset):
    """clip_cache: a ClipCache or its folder (`dataset.cache_dir`); decoded clips are kept there so a
    later epoch or run reads them instead of decoding. None decodes every time."""

    def __init__(
        self,
        samples: list[dict],
        processor: Any,
        max_length: int,
        overlength: str,
        clip_cache: ClipCache | str | os.PathLike | None = None,
    ):
        self.samples = samples
        self.processor = processor
        self.max_length = max_length
        self.truncation: Literal["right", "error"] = "right" if overlength == "truncate" else "error"
        self.clip_cache = clip_cache if isinstance(clip_cache, ClipCache) else open_clip_cache(clip_cache)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, i: int) -> Any:
        s = self.samples[i]
        try:
            return encode_chat(
                self.processor,
                s["messages"],
                max_length=self.max_length,
                truncation=self.truncation,
                clip_cache=self.clip_cache,
            )
        except Exception as e:
            raise RowError(f"row {s.get('id', i)} ({s.get('origin', '?')}): {e}") from e
