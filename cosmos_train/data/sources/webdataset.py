"""`webdataset` source: LLaVA-style rows in webdataset tar shards on S3, read by `cosmos_train.data.shards`.

    [train.train_policy.dataset]
    name = "s3://bucket/llava-shards/"        # every .tar under it; or "s3://bucket/p/shard-{000..099}.tar"

A sample is the files `<key>.<ext>` of a shard: `<key>.json`, one LLaVA row ({"id", "conversations": [{"from",
"value"}], "video" | "image" | "images"}, or a chat sample with "messages"), and its media `<key>.mp4` / `.jpg` /
`.png` / ... . A media name in the row is matched to the sample's member of the same file name, else of the same
extension (`"video": "clip.mp4"` takes `<key>.mp4`); a row naming no media gets the sample's media members (videos
as "video", images as "image"). The members are written under `<dataset.local_dir or
$COSMOS_CACHE/webdataset>/<bucket>/<shard>/<key>/` as the shard streams past (the chat samples name files there),
and an unchanged one is not written again. Credentials: PROD_S3_CHECKPOINT_* or AWS_* (`cosmos_train.storage.s3`).

Bad rows are error samples for `dataset.on_bad_row`, named `shard URL:key`: no json (`bad_row`), json that does not
parse (`bad_row`), a named media file the sample does not hold (`missing_media`), and whatever the row mapping
refuses. The rows are read in shard order, shard by shard; the run's sampler splits them over ranks and keeps the
resumable position (`cosmos_train.train.sampler`), as for every other source.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from cosmos_train.config import DatasetConfig, TrainPolicyConfig
from cosmos_train.config.paths import cosmos_cache
from cosmos_train.data.shards import sample_name, shard_samples, shard_urls
from cosmos_train.data.sources.common import DatasetError, RowError, context_for, error_sample, row_to_samples
from cosmos_train.data.sources.registry import register_source
from cosmos_train.storage.s3 import s3_client, s3_settings
from cosmos_train.storage.targets import parse_target

VIDEO_EXTS = ("mp4", "mov", "mkv", "webm", "avi")
IMAGE_EXTS = ("jpg", "jpeg", "png", "webp", "bmp")


def _write(path: Path, data: bytes) -> Path:
    if path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path


def _media_lookup(files: dict[str, Path], where: str) -> Any:
    """value -> the member it names: the same file name, else the only member with the same extension."""

    def lookup(value: str) -> Path:
        name = Path(str(value)).name
        if name in files:
            return files[name]
        ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
        same = [p for n, p in files.items() if n.rsplit(".", 1)[-1] == ext]
        if len(same) == 1:
            return same[0]
        held = ", ".join(sorted(files)) or "no media"
        raise RowError("missing_media", f"{where}: the row names {value!r}; the sample holds {held}")

    return lookup


def _row(sample: Mapping[str, Any], where: str, folder: Path) -> tuple[dict[str, Any], dict[str, Path]]:
    if "json" not in sample:
        raise RowError("bad_row", f"{where}: no {sample['__key__']}.json row in the shard")
    try:
        row = json.loads(sample["json"])
    except ValueError as e:
        raise RowError("bad_row", f"{where}.json: not JSON ({e})") from None
    if not isinstance(row, dict):
        raise RowError("bad_row", f"{where}.json: a {type(row).__name__}, not an object")
    key = str(sample["__key__"]).rsplit("/", 1)[-1]
    files = {
        f"{key}.{ext}": _write(folder / f"{key}.{ext}", bytes(data))
        for ext, data in sample.items()
        if ext in VIDEO_EXTS + IMAGE_EXTS
    }
    if not any(row.get(k) for k in ("video", "videos", "image", "images")) and "messages" not in row:
        videos = [n for n in files if n.rsplit(".", 1)[-1] in VIDEO_EXTS]
        images = [n for n in files if n.rsplit(".", 1)[-1] in IMAGE_EXTS]
        row = {**row, **({"video": videos} if videos else {}), **({"image": images} if images else {})}
    return row, files


@register_source("webdataset")
def webdataset_source(
    ds: DatasetConfig, train_policy: TrainPolicyConfig, split_role: str, custom: dict
) -> Iterator[dict]:
    if split_role == "val":
        raise DatasetError(f"shards {ds.name} have no held-out split: set dataset.test_size or a [validation.dataset]")
    settings = s3_settings(os.environ)
    client = s3_client(settings)
    root = Path(ds.local_dir).expanduser() if ds.local_dir else cosmos_cache() / "webdataset"
    for url in shard_urls(ds.name, client):
        target = parse_target(url)
        shard_dir = root / target.bucket_or_repo / target.prefix
        for sample in shard_samples(client, url):
            where = f"{url}:{sample['__key__']}"
            sid = str(sample["__key__"])
            try:
                row, files = _row(sample, where, shard_dir.with_suffix("") / sample_name(sample))
                ctx = context_for(
                    train_policy,
                    ds.vision.as_part_defaults(),
                    media_roots=[shard_dir.with_suffix("")],
                    media_lookup=_media_lookup(files, where),
                )
                yield from row_to_samples(row, where, str(row.get("id") or sid), ctx)
            except RowError as e:
                yield error_sample(sid, where, e.reason, f"{where}: {e}" if not str(e).startswith(url) else str(e))
