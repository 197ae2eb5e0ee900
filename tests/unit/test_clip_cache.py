"""The clip cache: hits skip decoding, content or settings changes miss, corrupt entries are rewritten,
and cached results are identical to uncached ones (through encode_chat and SFTDataset too)."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from cosmos_train.data import media
from cosmos_train.data.chat import encode_chat
from cosmos_train.data.clip_cache import ClipCache
from cosmos_train.data.media import MediaError, VisionSettings
from tests.media import moving_square_mp4

SETTINGS = VisionSettings(min_pixels=3136, max_pixels=3136)


def _clip(path: Path, shift: int = 0) -> Path:
    return moving_square_mp4(
        path, shift, frames=6, box=18, step=7, x0=2, travel=36, y=18, background=30, color=(250, 60, 40)
    )


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every real decode (media.read_video / load_image call), by path."""
    calls: list[str] = []
    real_video, real_image = media.read_video, media.load_image

    def read_video(path, settings=None):
        calls.append(str(path))
        return real_video(path, settings)

    def load_image(source, settings=None):
        calls.append(str(source))
        return real_image(source, settings)

    monkeypatch.setattr(media, "read_video", read_video)
    monkeypatch.setattr(media, "load_image", load_image)
    return calls


def test_hit_does_not_decode_and_is_identical(tmp_path: Path, decodes: list[str]) -> None:
    clip = _clip(tmp_path / "a.mp4")
    ref_frames, ref_fps = media.read_video(clip, SETTINGS)
    decodes.clear()
    cache = ClipCache(tmp_path / "cache")
    first = cache.read_video(clip, SETTINGS)
    assert len(decodes) == 1 and (cache.hits, cache.misses) == (0, 1)
    # a fresh cache object (another worker, another run) over the same folder
    again = ClipCache(tmp_path / "cache")
    second = again.read_video(str(clip), SETTINGS)
    assert len(decodes) == 1 and again.hits == 1
    for frames, fps in (first, second):
        assert frames.dtype == torch.uint8 and torch.equal(frames, ref_frames) and fps == ref_fps
    assert len(list((tmp_path / "cache").rglob("*.clip"))) == 1
    assert not list((tmp_path / "cache").rglob("*.tmp"))  # temporary files renamed into place


def test_changed_content_or_settings_miss(tmp_path: Path, decodes: list[str]) -> None:
    clip = _clip(tmp_path / "a.mp4")
    cache = ClipCache(tmp_path / "cache")
    cache.read_video(clip, SETTINGS)
    cache.read_video(clip, VisionSettings(min_pixels=3136, max_pixels=3136, nframes=4))
    assert len(decodes) == 2
    # same name and size, other pixels, mtime set back: the content hash still tells them apart
    st = clip.stat()
    _clip(clip, shift=9)
    os.utime(clip, ns=(st.st_atime_ns, st.st_mtime_ns))
    frames, _ = cache.read_video(clip, SETTINGS)
    assert len(decodes) == 3
    assert torch.equal(frames, media.read_video(clip, SETTINGS)[0])
    # a copy of the same content under another path hits
    copy = tmp_path / "elsewhere" / "b.mp4"
    copy.parent.mkdir()
    shutil.copy(clip, copy)
    n = len(decodes)
    cache.read_video(copy, SETTINGS)
    assert len(decodes) == n


@pytest.mark.parametrize("damage", ["truncate", "garbage", "flip", "empty"])
def test_corrupt_entry_is_ignored_and_rewritten(tmp_path: Path, decodes: list[str], damage: str) -> None:
    clip = _clip(tmp_path / "a.mp4")
    cache = ClipCache(tmp_path / "cache")
    good = cache.read_video(clip, SETTINGS)
    (entry,) = (tmp_path / "cache").rglob("*.clip")
    data = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        entry.write_bytes(os.urandom(len(data)))
    elif damage == "flip":
        entry.write_bytes(data[:-10] + bytes([data[-10] ^ 0xFF]) + data[-9:])
    else:
        entry.write_bytes(b"")
    again = ClipCache(tmp_path / "cache")
    frames, fps = again.read_video(clip, SETTINGS)
    assert len(decodes) == 2 and again.rewrites == 1 and again.misses == 1
    assert torch.equal(frames, good[0]) and fps == good[1]
    assert entry.read_bytes() == data  # rewritten whole
    third = ClipCache(tmp_path / "cache")
    third.read_video(clip, SETTINGS)
    assert len(decodes) == 2 and third.hits == 1


def test_media_errors_are_not_cached(tmp_path: Path) -> None:
    cache = ClipCache(tmp_path / "cache")
    with pytest.raises(MediaError, match="missing.mp4: file not found"):
        cache.read_video(tmp_path / "missing.mp4", SETTINGS)
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"not a video at all" * 10)
    for _ in range(2):
        with pytest.raises(MediaError, match="bad.mp4"):
            cache.read_video(bad, SETTINGS)
    assert not list((tmp_path / "cache").rglob("*.clip"))


def test_images_cached_by_path_only(tmp_path: Path, decodes: list[str]) -> None:
    img = tmp_path / "i.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (60, 90, 3), dtype=np.uint8)).save(img)
    cache = ClipCache(tmp_path / "cache")
    a = cache.load_image(img, SETTINGS)
    b = cache.load_image(str(img), SETTINGS)
    assert len(decodes) == 1 and torch.equal(a, b) and a.shape[0] == 3
    cache.load_image(Image.open(img), SETTINGS)  # a PIL image has no file to key on
    assert len(decodes) == 2


def _messages(clip: Path, img: Path) -> list[dict]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "video", "video": str(clip), "min_pixels": 3136, "max_pixels": 3136},
                {"type": "image", "image": str(img), "min_pixels": 3136, "max_pixels": 3136},
                {"type": "text", "text": "What moves?"},
            ],
        },
        {"role": "assistant", "content": "A red box."},
    ]


def test_sft_dataset_with_cache_dir_is_identical_and_decodes_once(
    tmp_path: Path, tiny_model_dir: Path, decodes: list[str]
) -> None:
    from cosmos_train.models.load import load_processor
    from cosmos_train.train.data import SFTDataset

    processor = load_processor(tiny_model_dir)
    img = tmp_path / "i.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (50, 70, 3), dtype=np.uint8)).save(img)
    rows = [{"id": "r0", "origin": "x.json:0", "messages": _messages(_clip(tmp_path / "a.mp4"), img)}]
    plain = encode_chat(processor, rows[0]["messages"], max_length=512)
    decodes.clear()
    cached = SFTDataset(rows, processor, 512, "error", clip_cache=str(tmp_path / "cache"))
    epoch1, epoch2 = cached[0], cached[0]
    assert len(decodes) == 2  # the video and the image, once each
    for enc in (epoch1, epoch2):
        for name in (
            "input_ids",
            "labels",
            "pixel_values_videos",
            "video_grid_thw",
            "second_per_grid_ts",
            "pixel_values",
            "image_grid_thw",
        ):
            assert torch.equal(getattr(enc, name), getattr(plain, name)), name
    assert SFTDataset(rows, processor, 512, "error").clip_cache is None


def test_cache_survives_pickling_for_dataloader_workers(tmp_path: Path) -> None:
    cache = ClipCache(tmp_path / "cache")
    cache.file_digest(_clip(tmp_path / "a.mp4"))
    copy = pickle.loads(pickle.dumps(cache))
    assert copy.root == cache.root and copy.hits == 0 and not copy._digests
