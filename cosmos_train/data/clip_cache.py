"""A disk cache of decoded, sampled and resized clips, so a second epoch or run does not decode again.

    [train.train_policy.dataset]
    cache_dir = "/scratch/clip-cache"      # off when unset

    cache = ClipCache("/scratch/clip-cache")
    frames, sample_fps = cache.read_video("clip.mp4", settings)   # same result as media.read_video
    image = cache.load_image("frame.png", settings)               # same result as media.load_image

What is stored: the uint8 frames `media.read_video` returns (sampled and resized, [T, 3, H, W]) and
their sample rate, not the float32 pixel_values. `preprocess_video` (rescale, normalise, patchify)
is a deterministic function of those frames, so training on a cache hit is bit-identical to an
uncached run, the entry is 4x smaller than the float32 tensor, and recomputing it costs a few
milliseconds against the hundreds a decode costs. Decode and resize are the expensive part.

The key is sha256 over (CACHE_VERSION, media kind, sha256 of the file's bytes, the resolved
VisionSettings). Content, not (size, mtime, inode): a file replaced by a copy with the same size
and a preserved mtime (rsync -t, tar extraction, a dataset re-download) must miss, and a copy of
the same clip under another path (another run's extraction folder) may hit. Hashing reads the file
once per process: the digest is memoised by (path, size, mtime_ns, inode), which only saves
re-reading, never decides a hit. Hashing is ~1 GB/s, far cheaper than decoding.

Entries are single files `<root>/<key[:2]>/<key>.clip`: a magic line, a JSON header (key, shape,
sample_fps, blake2b of the payload) and the raw frames. They are written to a temporary file in the
same folder and renamed into place, so concurrent DataLoader workers and ranks writing the same
entry each leave a whole file (identical content; the last rename wins) and a reader never sees a
partial one. An entry that does not parse, has the wrong key or size, or fails its checksum is a
miss: the clip is decoded again and the entry rewritten. Errors of the media itself (missing file,
corrupt mp4) are never cached; they are raised by `cosmos_train.data.media` as without a cache.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import struct
import threading
from pathlib import Path

import numpy as np
import torch

from cosmos_train.atomic import write_atomic
from cosmos_train.data import media
from cosmos_train.vision.settings import VisionSettings

# Bump when what read_video / load_image return for the same file and settings changes
# (decode, sampling or resize rules): old entries then simply stop matching.
CACHE_VERSION = 2  # 2: frames resized by torch's uint8 kernel, as torchvision does
MAGIC = b"COSMOSCLIP1\n"
_HEADER_LEN = struct.Struct("<I")
_HASH_CHUNK = 1 << 20


class ClipCache:
    """Preprocessed clips and images on disk, keyed by file content and vision settings.

    `hits`, `misses` and `rewrites` (corrupt entries replaced) count this process's lookups.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).expanduser()
        self.hits = self.misses = self.rewrites = 0
        self._digests: dict[tuple[str, int, int, int], str] = {}
        self._lock = threading.Lock()  # prepare-data checks rows in a thread pool

    def __repr__(self) -> str:
        return f"ClipCache({str(self.root)!r})"

    # DataLoader workers get a pickled copy: the memo and the lock are per process.
    def __getstate__(self) -> dict:
        return {"root": self.root}

    def __setstate__(self, state: dict) -> None:
        ClipCache.__init__(self, state["root"])

    # ------------------------------------------------------------------ public
    def read_video(self, path: str | os.PathLike, settings: VisionSettings | None = None) -> tuple[torch.Tensor, float]:
        """`media.read_video(path, settings)`, from the cache when this content was read with these settings."""
        settings = settings or VisionSettings()
        key = self._key("video", path, settings)
        if key is None:
            return media.read_video(path, settings)
        entry = self._load(key, ndim=4)
        if entry is not None and entry[1] > 0:
            self._count("hits")
            return entry
        self._count("misses")
        frames, sample_fps = media.read_video(path, settings)
        self._store(key, frames, sample_fps)
        return frames, sample_fps

    def load_image(self, source: media.ImageSource, settings: VisionSettings | None = None) -> torch.Tensor:
        """`media.load_image(source, settings)`; only file paths are cached (not PIL images or bytes)."""
        settings = settings or VisionSettings()
        key = self._key("image", source, settings) if isinstance(source, str | os.PathLike) else None
        if key is None:
            return media.load_image(source, settings)
        entry = self._load(key, ndim=3)
        if entry is not None:
            self._count("hits")
            return entry[0]
        self._count("misses")
        image = media.load_image(source, settings)
        self._store(key, image, 0.0)
        return image

    def entry_path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.clip"

    # ------------------------------------------------------------------ keys
    def file_digest(self, path: str | os.PathLike) -> str | None:
        """sha256 of the file's bytes (memoised per process by path, size, mtime_ns, inode);
        None when it cannot be read, so the decoder raises its own clear MediaError."""
        text = os.fspath(path)
        if text.startswith(("http://", "https://")):
            return None
        local = Path(text.removeprefix("file://"))
        try:
            st = local.stat()
            memo = (str(local.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
            with self._lock:
                if memo in self._digests:
                    return self._digests[memo]
            h = hashlib.sha256()
            with open(local, "rb") as f:
                while chunk := f.read(_HASH_CHUNK):
                    h.update(chunk)
        except OSError:
            return None
        digest = h.hexdigest()
        with self._lock:
            self._digests[memo] = digest
        return digest

    def _key(self, kind: str, path: str | os.PathLike, settings: VisionSettings) -> str | None:
        digest = self.file_digest(path)
        if digest is None:
            return None
        what = {"version": CACHE_VERSION, "kind": kind, "content": digest, "settings": dataclasses.asdict(settings)}
        return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()

    # ------------------------------------------------------------------ entries
    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def _load(self, key: str, ndim: int) -> tuple[torch.Tensor, float] | None:
        """The entry's (uint8 tensor, sample_fps), or None when absent or not a whole, valid entry
        (counted in `rewrites`: the caller decodes and stores it again)."""
        path = self.entry_path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        try:
            if not data.startswith(MAGIC):
                raise ValueError("bad magic")
            at = len(MAGIC)
            (n,) = _HEADER_LEN.unpack_from(data, at)
            at += _HEADER_LEN.size
            header = json.loads(data[at : at + n])
            payload = data[at + n :]
            shape = [int(s) for s in header["shape"]]
            if (
                header["key"] != key
                or len(shape) != ndim
                or shape[ndim - 3] != 3
                or len(payload) != int(np.prod(shape))
                or hashlib.blake2b(payload, digest_size=16).hexdigest() != header["checksum"]
            ):
                raise ValueError("key, size or checksum mismatch")
            array = np.frombuffer(payload, dtype=np.uint8).reshape(shape)
            return torch.from_numpy(array.copy()), float(header["sample_fps"])
        except (ValueError, KeyError, TypeError, IndexError, struct.error):
            self._count("rewrites")  # corrupt or foreign: a miss, rewritten by the caller
            return None

    def _store(self, key: str, tensor: torch.Tensor, sample_fps: float) -> None:
        """Write atomically (temporary file + rename); a full disk or read-only cache only costs the caching."""
        payload = tensor.contiguous().numpy().tobytes()
        header = json.dumps(
            {
                "key": key,
                "shape": list(tensor.shape),
                "sample_fps": sample_fps,
                "checksum": hashlib.blake2b(payload, digest_size=16).hexdigest(),
            }
        ).encode()
        try:
            write_atomic(self.entry_path(key), MAGIC + _HEADER_LEN.pack(len(header)) + header + payload)
        except OSError:
            pass  # a cache that cannot be written (full disk, read-only folder) only costs a decode next time


def open_clip_cache(cache_dir: str | os.PathLike | None) -> ClipCache | None:
    """The cache for `dataset.cache_dir`, or None when caching is off."""
    return ClipCache(cache_dir) if cache_dir else None
