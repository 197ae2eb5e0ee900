"""`video_folder` source: captioned clips in a folder (the custom-SFT layout of the Cosmos guides).

    <name>/videos/<id><video_suffix>.mp4
    <name>/metas/<id>.label.json   (the caption as JSON: a string, or {"caption": ...})
    <name>/metas/<id>.txt          (or the caption as plain text)

Each clip becomes user [video, `dataset.caption_prompt`] -> assistant caption. A caption without
its video still yields a sample (validation reports the missing file); a video without a caption
is an error sample (`missing_caption`); a video that is a symlink out of `videos/` is one too
(`media_outside_root`) unless `dataset.allow_media_outside_root`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cosmos_train.config import DatasetConfig, TrainPolicyConfig
from cosmos_train.data.sources.common import (
    DatasetError,
    RowError,
    check_inside_roots,
    context_for,
    error_sample,
    media_part,
)
from cosmos_train.data.sources.registry import register_source

CAPTION_KEYS = ("caption", "text", "label", "description")


def read_caption(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    if path.name.endswith(".txt"):
        caption: Any = text.strip()
    else:
        try:
            caption = json.loads(text)
        except json.JSONDecodeError as e:
            raise RowError("bad_caption", f"not valid JSON: {e}") from None
        if isinstance(caption, dict):
            caption = next((caption[k] for k in CAPTION_KEYS if isinstance(caption.get(k), str)), None)
        elif isinstance(caption, list) and caption and isinstance(caption[0], str):
            caption = caption[0]
    if not isinstance(caption, str) or not caption.strip():
        raise RowError("bad_caption", f"no caption text (a string, or an object with one of {CAPTION_KEYS})")
    return caption.strip()


def _meta_id(path: Path) -> str | None:
    for ending in (".label.json", ".txt"):
        if path.name.endswith(ending):
            return path.name[: -len(ending)]
    return None


@register_source("video_folder")
def video_folder_source(
    ds: DatasetConfig, train_policy: TrainPolicyConfig, split_role: str, custom: dict
) -> Iterator[dict]:
    root = Path(ds.name).expanduser()
    videos, metas = root / "videos", root / "metas"
    if not videos.is_dir() or not metas.is_dir():
        raise DatasetError(f"dataset.name {ds.name}: a video folder needs videos/ and metas/ subfolders")
    if split_role == "val":
        raise DatasetError(
            f"video folder {ds.name} has no held-out split: set dataset.test_size or a [validation.dataset]"
        )
    ctx = context_for(
        train_policy, ds.vision.as_part_defaults(), media_roots=[videos], allow_outside_root=ds.allow_media_outside_root
    )
    suffix = f"{ds.video_suffix}.mp4"
    captions: dict[str, Path] = {}
    for meta_file in sorted(metas.iterdir()):
        mid = _meta_id(meta_file)
        if mid is not None:
            captions.setdefault(mid, meta_file)  # .label.json sorts before .txt and wins
    ids = set(captions)
    ids |= {p.name[: -len(suffix)] for p in videos.iterdir() if p.name.endswith(suffix)}
    for sample_id in sorted(ids):
        video = videos / f"{sample_id}{suffix}"
        meta = captions.get(sample_id)
        origin = str(meta if meta is not None else video)
        if meta is None:
            yield error_sample(
                sample_id, origin, "missing_caption", f"{video}: no metas/{sample_id}.label.json or .txt"
            )
            continue
        try:
            caption = read_caption(meta)
            check_inside_roots(video, video.name, ctx)
        except RowError as e:
            yield error_sample(sample_id, origin, e.reason, f"{meta}: {e}")
            continue
        yield {
            "id": sample_id,
            "origin": origin,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        media_part("video", str(video.absolute()), ctx, {}),
                        {"type": "text", "text": ds.caption_prompt},
                    ],
                },
                {"role": "assistant", "content": caption},
            ],
        }
