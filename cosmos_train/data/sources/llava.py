"""`llava` source: a LLaVA-format annotation file plus a media folder.

    [train.train_policy.dataset]
    annotation_path = "data/llava.json"   # [{"id", "image" | "images" | "video", "conversations": [{"from", "value"}]}]
    media_path = "data/media"             # "" when the rows hold absolute paths
    allow_media_outside_root = true       # only when those absolute paths lie outside both folders

Unlike the reference, multi-turn rows and video rows work. `<image>` / `<video>` placeholders
are replaced by the media part where they stand (the n-th placeholder takes the n-th file); a
placeholder count that differs from the row's media count is an error naming the row. Rows
without any placeholder get their media in front of the first user turn.

Media roots: `media_path` and the annotation file's folder. A path that resolves outside both (a
`../` path, an absolute path elsewhere, a symlink out) is a bad row `media_outside_root` unless
`allow_media_outside_root` is set.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from cosmos_train.config import DatasetConfig, TrainPolicyConfig
from cosmos_train.data.sources.common import DatasetError, context_for, map_rows, read_rows
from cosmos_train.data.sources.registry import register_source


@register_source("llava")
def llava_source(ds: DatasetConfig, train_policy: TrainPolicyConfig, split_role: str, custom: dict) -> Iterator[dict]:
    if not ds.annotation_path:
        raise DatasetError("train.train_policy.dataset.annotation_path: required by the llava source")
    if split_role == "val":
        raise DatasetError(
            f"LLaVA file {ds.annotation_path} has no held-out split: set dataset.test_size or a [validation.dataset]"
        )
    annotation = Path(ds.annotation_path).expanduser()
    roots = [Path(ds.media_path).expanduser()] if ds.media_path else []
    ctx = context_for(
        train_policy,
        ds.vision.as_part_defaults(),
        media_roots=roots + [annotation.parent],
        allow_outside_root=ds.allow_media_outside_root,
    )
    yield from map_rows(read_rows(annotation), str(annotation), ctx)
