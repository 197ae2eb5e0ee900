"""Decoded clips kept in memory for one process's run: a clip asked about several times is decoded once.

    memo = FrameMemo(max_bytes=2 << 30)
    frames, sample_fps = memo.read_video("clip.mp4", settings)   # same result as media.read_video
    encode_chat(processor, chat, clip_cache=memo)                 # what the generation engines do
    memo.encode_chat(processor, chat, add_generation_prompt=True) # the same, the encoding itself kept

Benchmarks ask several questions about one clip (a `qa_pairs` list, or rows repeating a video), and
the engines build each question's input separately, so without this each question decodes the clip
again. Entries are the uint8 frames `media.read_video` returns, evicted least recently used beyond
`max_bytes`. The key is (kind, resolved path, size, mtime_ns, settings): enough inside one run,
where a file is not rewritten under us (the disk ClipCache keys by content because its entries
outlive runs). Threads asking for the same clip at once wait for one decode. Media errors are
raised each time, never stored. Callers must not modify the returned tensors in place: the next
question gets the same object (preprocess_video and the vLLM engine copy before changing them).

`encode_chat` keeps whole encoded prompts the same way: in GRPO the rollout engine and the trainer encode
each step's prompts with the same processor and settings (the colocated engine shares its memo with the
trainer), and the second gets the first's result instead of resizing, normalising and patching the media
and rendering the template again. The key is the processor's path, the chat as JSON, each media file's
(path, size, mtime_ns) and the settings; a chat whose media is not a local file (a PIL image, bytes, a
URL) is encoded every time.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any

import torch

from cosmos_train.data import media
from cosmos_train.data.chat import EncodedChat
from cosmos_train.data.chat import encode_chat as _encode_chat
from cosmos_train.vision.processor import get_tokenizer
from cosmos_train.vision.settings import VisionSettings

Key = tuple[str, str, int, int, VisionSettings]


@dataclass
class _Counts:
    hits: int = 0
    misses: int = 0


class FrameMemo:
    """read_video / load_image (and encode_chat) with an in-memory LRU of the results: `hits`, `misses` count
    the media lookups, `encoded_hits`, `encoded_misses` the encoded chats'."""

    def __init__(self, max_bytes: int = 2 << 30):
        self.max_bytes = max_bytes
        self._media = _Counts()
        self._encoded = _Counts()
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._loading: dict[Hashable, threading.Lock] = {}

    @property
    def size_bytes(self) -> int:
        return self._bytes

    @property
    def hits(self) -> int:
        return self._media.hits

    @property
    def misses(self) -> int:
        return self._media.misses

    @property
    def encoded_hits(self) -> int:
        return self._encoded.hits

    @property
    def encoded_misses(self) -> int:
        return self._encoded.misses

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

    def encode_chat(self, processor: Any, messages: Sequence[dict], **settings: Any) -> EncodedChat:
        """`chat.encode_chat(processor, messages, clip_cache=self, **settings)`, the result kept (module
        docstring). `origin` only names the row in errors and is not part of the key."""
        key = _chat_key(processor, messages, settings)
        if key is None:
            return _encode_chat(processor, messages, clip_cache=self, **settings)
        encode = partial(_encode_chat, processor, messages, clip_cache=self, **settings)
        return self._get(key, encode, _encoded_bytes, self._encoded)

    def _get(
        self, key: Hashable, load: Callable[[], Any], nbytes: Callable[[Any], int], counts: _Counts | None = None
    ) -> Any:
        counts = counts or self._media
        with self._lock:
            found = self._lookup(key, counts)
            if found is not None:
                return found
            key_lock = self._loading.setdefault(key, threading.Lock())
        with key_lock:  # one decode per clip; the others wait for it
            try:
                with self._lock:
                    found = self._lookup(key, counts)
                    if found is not None:
                        return found
                value = load()
                with self._lock:
                    counts.misses += 1
                    self._insert(key, value, nbytes(value))
                return value
            finally:
                with self._lock:
                    self._loading.pop(key, None)

    def _lookup(self, key: Hashable, counts: _Counts) -> Any:
        entry = self._entries.get(key)
        if entry is None:
            return None
        self._entries.move_to_end(key)
        counts.hits += 1
        return entry[0]

    def _insert(self, key: Hashable, value: Any, size: int) -> None:
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


_MEDIA_KEYS = ("image", "image_url", "video")


def _chat_key(processor: Any, messages: Sequence[dict], settings: dict[str, Any]) -> Hashable | None:
    """The key of an encoded chat (module docstring), or None when it cannot be keyed."""
    files: list[tuple[str, int, int]] = []
    for msg in messages:
        content = msg.get("content") if isinstance(msg, dict) else None
        for part in content if isinstance(content, list) else ():
            for name in _MEDIA_KEYS:
                source = part.get(name) if isinstance(part, dict) else None
                if source is None:
                    continue
                if not isinstance(source, str | os.PathLike):
                    return None
                found = _key(name, source, VisionSettings())
                if found is None:
                    return None
                files.append(found[1:4])
    try:  # a value JSON cannot write and that is not a path (a PIL image, bytes): no key
        text = json.dumps(list(messages), sort_keys=True, default=os.fspath)
    except TypeError:
        return None
    source_path = getattr(get_tokenizer(processor), "name_or_path", "") or f"object {id(processor)}"
    kept = tuple(sorted((k, repr(v)) for k, v in settings.items() if k != "origin"))
    return ("chat", type(processor).__name__, source_path, text, tuple(files), kept)


def _encoded_bytes(encoded: EncodedChat) -> int:
    return sum(v.nbytes for f in fields(encoded) if isinstance(v := getattr(encoded, f.name), torch.Tensor))
