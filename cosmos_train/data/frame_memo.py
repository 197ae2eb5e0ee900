"""Decoded clips kept in memory for one process's run: a clip asked about several times is decoded once.

    memo = FrameMemo(max_bytes=2 << 30)
    frames, sample_fps = memo.read_video("clip.mp4", settings)   # same result as media.read_video
    encode_chat(processor, chat, clip_cache=memo)                 # what the generation engines do

Benchmarks ask several questions about one clip (a `qa_pairs` list, or rows repeating a video), and
the engines build each question's input separately, so without this each question decodes the clip
again. Entries are the uint8 frames `media.read_video` returns, evicted least recently used beyond
`max_bytes`. The key is (kind, resolved path, size, mtime_ns, settings): enough inside one run,
where a file is not rewritten under us (the disk ClipCache keys by content because its entries
outlive runs). Threads asking for the same clip at once wait for one decode. Media errors are
raised each time, never stored. Callers must not modify the returned tensors in place: the next
question gets the same object (preprocess_video and the vLLM engine copy before changing them).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from cosmos_train.data import media
from cosmos_train.vision.settings import VisionSettings

Key = tuple[str, str, int, int, VisionSettings]


class FrameMemo:
    """read_video / load_image with an in-memory LRU of the results (`hits`, `misses` count lookups)."""

    def __init__(self, max_bytes: int = 2 << 30):
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[Key, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._loading: dict[Key, threading.Lock] = {}

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def read_video(self, path: str | os.PathLike, settings: VisionSettings | None = None) -> tuple[torch.Tensor, float]:
        settings = settings or VisionSettings()
        key = _key("video", path, settings)
        if key is None:
            return media.read_video(path, settings)
        return self._get(key, lambda: media.read_video(path, settings), lambda v: v[0].nbytes)

    def load_image(self, source: media.ImageSource, settings: VisionSettings | None = None) -> torch.Tensor:
        settings = settings or VisionSettings()
        key = _key("image", source, settings) if isinstance(source, str | os.PathLike) else None
        if key is None:  # PIL images and bytes: nothing to key on, and nothing to decode twice
            return media.load_image(source, settings)
        return self._get(key, lambda: media.load_image(source, settings), lambda v: v.nbytes)

    def _get(self, key: Key, load: Callable[[], Any], nbytes: Callable[[Any], int]) -> Any:
        with self._lock:
            found = self._lookup(key)
            if found is not None:
                return found
            key_lock = self._loading.setdefault(key, threading.Lock())
        with key_lock:  # one decode per clip; the others wait for it
            try:
                with self._lock:
                    found = self._lookup(key)
                    if found is not None:
                        return found
                value = load()
                with self._lock:
                    self.misses += 1
                    self._insert(key, value, nbytes(value))
                return value
            finally:
                with self._lock:
                    self._loading.pop(key, None)

    def _lookup(self, key: Key) -> Any:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry[0]

    def _insert(self, key: Key, value: Any, size: int) -> None:
        if size > self.max_bytes:
            return  # bigger than the whole budget: keeping it would evict everything else
        self._entries[key] = (value, size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, (_, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped


def _key(kind: str, path: media.MediaSource, settings: VisionSettings) -> Key | None:
    """None for what cannot be keyed (URLs, unreadable files: the decoder names the problem)."""
    text = os.fspath(path)
    if text.startswith(("http://", "https://")):
        return None
    local = Path(text.removeprefix("file://"))
    try:
        st = local.stat()
        return (kind, str(local.resolve()), st.st_size, st.st_mtime_ns, settings)
    except OSError:
        return None
