"""Tiny webdataset shards for tests: tar files of `<key>.<ext>` members (mp4 clips from tests/media.py, captions,
json rows), written locally and uploaded to the test S3 server.

    shards = clip_shards(tmp_path, n_shards=4, per_shard=3)   # {"clips/shard-000000.tar": bytes, ...}
    put_shards(s3, shards)                                    # into s3.bucket under the same keys
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

from tests.media import moving_square_mp4
from tests.s3_server import S3Server


def tar_bytes(members: list[tuple[str, bytes]]) -> bytes:
    """A tar of (name, bytes) members in this order (webdataset groups consecutive `<key>.<ext>` files)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def clip_shards(
    tmp: Path, n_shards: int, per_shard: int, *, prefix: str = "clips", frames: int = 5, size: int = 32
) -> dict[str, bytes]:
    """n_shards shards of per_shard samples: `<key>.mp4` (a moving square, a different shift each) and
    `<key>.txt` (its caption "clip S-I"); keys are unique over all shards."""
    out = {}
    for s in range(n_shards):
        members = []
        for i in range(per_shard):
            key = f"s{s:02d}i{i:02d}"
            video = moving_square_mp4(tmp / f"{key}.mp4", shift=3 * (s * per_shard + i), frames=frames, size=size)
            members += [(f"{key}.mp4", video.read_bytes()), (f"{key}.txt", f"clip {s}-{i}".encode())]
        out[f"{prefix}/shard-{s:06d}.tar"] = tar_bytes(members)
    return out


def llava_shards(tmp: Path, n_shards: int, per_shard: int, *, prefix: str = "vlm") -> dict[str, bytes]:
    """Shards of LLaVA rows: `<key>.json` ({"id", "video": "<key>.mp4", "conversations"}) and `<key>.mp4`."""
    out = {}
    for s in range(n_shards):
        members = []
        for i in range(per_shard):
            key = f"v{s:02d}i{i:02d}"
            video = moving_square_mp4(tmp / f"{key}.mp4", shift=5 * (s * per_shard + i), frames=4, size=32)
            row = {
                "id": key,
                "video": f"{key}.mp4",
                "conversations": [
                    {"from": "human", "value": "<video>\nWhere does the square go?"},
                    {"from": "gpt", "value": f"It moves right ({key})."},
                ],
            }
            members += [(f"{key}.json", json.dumps(row).encode()), (f"{key}.mp4", video.read_bytes())]
        out[f"{prefix}/shard-{s:06d}.tar"] = tar_bytes(members)
    return out


def put_shards(s3: S3Server, shards: dict[str, bytes]) -> list[str]:
    """Upload the shards; their s3:// URLs in key order."""
    client = s3.client()
    for key, data in shards.items():
        client.put_object(Bucket=s3.bucket, Key=key, Body=data)
    return [f"s3://{s3.bucket}/{k}" for k in sorted(shards)]
