"""The world-model dataset layout (cosmos_train/wfm/data.py) and its synthetic maker (data/synthetic_wfm.py)."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from cosmos_train.data.synthetic_video import write_mp4
from cosmos_train.data.synthetic_wfm import make_synthetic_wfm_data, write_text_embeddings
from cosmos_train.errors import DataError, MediaError
from cosmos_train.wfm.data import load_clip, load_text_embedding, mock_prompts, scan_dataset


def test_synthetic_layout_is_deterministic(tmp_path: Path) -> None:
    a = make_synthetic_wfm_data(tmp_path / "a", n=4, num_frames=5)
    b = make_synthetic_wfm_data(tmp_path / "b", n=4, num_frames=5)
    assert sorted(p.name for p in (a / "videos").iterdir()) == [f"clip_{i:04d}.mp4" for i in range(4)]
    for i in range(4):
        stem = f"clip_{i:04d}"
        assert (a / "metas" / f"{stem}.txt").read_text() == (b / "metas" / f"{stem}.txt").read_text()
        assert torch.equal(load_clip(a / "videos" / f"{stem}.mp4", 5, 32, 32),
                           load_clip(b / "videos" / f"{stem}.mp4", 5, 32, 32))
    samples, report = scan_dataset(a)
    assert [s.name for s in samples] == [f"clip_{i:04d}" for i in range(4)] and report.n_skipped == 0
    assert "scene: a" in samples[0].prompt and samples[0].text_embedding is None


def _dataset_with_bad_rows(root: Path) -> Path:
    make_synthetic_wfm_data(root, n=3, num_frames=5)
    shutil.copy(root / "videos" / "clip_0000.mp4", root / "videos" / "no_caption.mp4")
    (root / "metas" / "no_video.txt").write_text("a scene")
    shutil.copy(root / "videos" / "clip_0000.mp4", root / "videos" / "empty.mp4")
    (root / "metas" / "empty.txt").write_text("  \n")
    shutil.copy(root / "videos" / "clip_0000.mp4", root / "videos" / "latin1.mp4")
    (root / "metas" / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (root / "videos" / "broken.mp4").write_bytes(b"not a video")
    (root / "metas" / "broken.txt").write_text("a broken video")
    return root


def test_bad_rows_are_named_or_skipped_and_counted(tmp_path: Path) -> None:
    root = _dataset_with_bad_rows(tmp_path / "d")
    with pytest.raises(DataError) as e:
        scan_dataset(root)
    text = str(e.value)
    for what in ("no_caption.mp4: no caption", "no_video.txt: no video", "empty.txt: empty caption",
                 "latin1.txt: not UTF-8", "broken.mp4: no decodable video frames", 'on_bad_row = "skip"'):
        assert what in text, what
    samples, report = scan_dataset(root, on_bad_row="skip")
    assert [s.name for s in samples] == ["clip_0000", "clip_0001", "clip_0002"]
    assert report.n_skipped == 5 and "5 skipped" in report.summary()
    with pytest.raises(DataError, match="text_embedding/clip_0000.pickle: missing"):
        scan_dataset(root, on_bad_row="fail", offline_text_embedding=True)


def test_missing_folders_say_the_layout(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist; it holds videos/\\*.mp4"):
        scan_dataset(tmp_path / "nothing")
    (tmp_path / "only").mkdir()
    (tmp_path / "only" / "videos").mkdir()
    with pytest.raises(DataError, match="no metas/ folder"):
        scan_dataset(tmp_path / "only")


def test_clip_frames_are_evenly_spaced_and_resized(tmp_path: Path) -> None:
    frames = np.stack([np.full((32, 48, 3), 10 + 20 * t, dtype=np.uint8) for t in range(9)])  # frame t: 10 + 20 t
    write_mp4(tmp_path / "ramp.mp4", frames, fps=8)
    clip = load_clip(tmp_path / "ramp.mp4", 5, 16, 16)
    assert clip.shape == (3, 5, 16, 16) and clip.dtype == torch.uint8
    levels = clip.float().mean(dim=(0, 2, 3))
    assert torch.allclose(levels, torch.tensor([10.0, 50, 90, 130, 170]), atol=3)  # frames 0, 2, 4, 6, 8
    with pytest.raises(MediaError, match="9 frames, fewer than num_frames = 13"):
        load_clip(tmp_path / "ramp.mp4", 13, 16, 16)


def test_text_embeddings_round_trip_and_stay_inside_the_dataset(tmp_path: Path) -> None:
    root = make_synthetic_wfm_data(tmp_path / "d", n=2, num_frames=5)
    assert write_text_embeddings(root, lambda prompts: torch.randn(len(prompts), 6, 8)) == 2
    samples, _ = scan_dataset(root, offline_text_embedding=True)
    emb = load_text_embedding(samples[0].text_embedding, root)
    assert emb.shape == (6, 8) and emb.dtype == torch.float32
    folder = root / "text_embedding"
    for i, obj in enumerate((np.ones((3, 4), np.float16), torch.ones(3, 4), {"embeddings": np.ones((3, 4))},
                             [np.ones((3, 4))])):
        (folder / f"f{i}.pickle").write_bytes(pickle.dumps(obj))
        assert load_text_embedding(folder / f"f{i}.pickle", root).shape == (3, 4)
    (folder / "bad.pickle").write_bytes(pickle.dumps(np.ones(5)))
    with pytest.raises(DataError, match=r"shape \(5,\); expected \[n_tokens, dim\]"):
        load_text_embedding(folder / "bad.pickle", root)
    (folder / "text.pickle").write_bytes(pickle.dumps("hello"))
    with pytest.raises(DataError, match="holds a str"):
        load_text_embedding(folder / "text.pickle", root)
    outside = tmp_path / "elsewhere.pickle"
    outside.write_bytes(pickle.dumps(np.ones((2, 2))))
    (folder / "link.pickle").symlink_to(outside)
    with pytest.raises(DataError, match=r"outside .*\(loading one runs code\)"):
        load_text_embedding(folder / "link.pickle", root)


def test_mock_prompts_are_deterministic() -> None:
    assert mock_prompts(5, seed=3) == mock_prompts(5, seed=3) and mock_prompts(5, seed=3) != mock_prompts(5)
    assert len(set(mock_prompts(50))) > 25
