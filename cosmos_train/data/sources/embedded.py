"""Media stored inside the rows (Hugging Face `Image` columns, parquet exports of them) as files.

A datasets row with an `Image` feature holds a decoded PIL image; the same column read straight
from parquet is a struct {"bytes": ..., "path": ...}. Samples travel as JSON (the data-prep
manifest, DataLoader workers), so each embedded image or video is written once to a
content-addressed file and the sample refers to that path, like any other media:

    <store>/<sha256 of the bytes, 32 hex>.<ext>

The store is `dataset.cache_dir/embedded_media` when set, else `$COSMOS_CACHE/embedded_media`.
Writing is atomic (temp file, then rename), so concurrent ranks or runs never see half a file.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from PIL import Image

from cosmos_train.atomic import write_atomic

# Leading bytes -> file suffix, so the stored file says what it holds (the decoders sniff anyway).
SIGNATURES: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, ".png"),
    (b"\xff\xd8\xff", 0, ".jpg"),
    (b"GIF8", 0, ".gif"),
    (b"WEBP", 8, ".webp"),
    (b"BM", 0, ".bmp"),
    (b"ftyp", 4, ".mp4"),
    (b"\x1aE\xdf\xa3", 0, ".mkv"),
)


def is_embedded(value: Any) -> bool:
    """A PIL image, raw bytes, or a {"bytes": <non-empty>, ...} struct."""
    if isinstance(value, Image.Image | bytes | bytearray):
        return True
    return isinstance(value, Mapping) and isinstance(value.get("bytes"), bytes | bytearray) and bool(value["bytes"])


def _suffix(data: bytes, name: str | None) -> str:
    for magic, offset, suffix in SIGNATURES:
        if data[offset : offset + len(magic)] == magic:
            return suffix
    if name and Path(name).suffix:
        return Path(name).suffix.lower()
    return ".bin"


def encoded_bytes(value: Any) -> tuple[bytes, str | None]:
    """(file bytes, original name or None) of an embedded value.

    A PIL image is saved as PNG: lossless, so the pixels the model sees are the row's pixels.
    """
    if isinstance(value, Image.Image):
        buffer = io.BytesIO()
        value.save(buffer, format="PNG")
        return buffer.getvalue(), None
    if isinstance(value, bytes | bytearray):
        return bytes(value), None
    name = value.get("path") if isinstance(value.get("path"), str) else None
    return bytes(value["bytes"]), name


def store_embedded(value: Any, store: Path) -> Path:
    """Write an embedded image/video to `store` (once per content) and return its path."""
    data, name = encoded_bytes(value)
    path = store / f"{hashlib.sha256(data).hexdigest()[:32]}{_suffix(data, name)}"
    if path.is_file() and path.stat().st_size == len(data):
        return path
    return write_atomic(path, data)
