"""The world-model dataset (cosmos_train/wfm/data.py) and its synthetic maker (wfm/synthetic_data.py).

HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q tests/unit/test_wfm_data.py
"""

from __future__ import annotations

import pickle
import shutil
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from cosmos_train.data.synthetic_video import pick_codec, read_mp4, write_mp4
from cosmos_train.errors import DataError, MediaError
from cosmos_train.wfm.data import WfmSample, load_clip, load_text_embedding, mock_prompts, scan_dataset
from cosmos_train.wfm.synthetic_data import make_synthetic_wfm_data, write_text_embeddings

STEMS = [f"clip_{i:04d}" for i in range(4)]
LAYOUT = r"videos/<stem>\.mp4 with a metas/<stem>\.txt caption each"  # what a missing folder's error shows


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 clips of 5 frames, 32x32 (read-only for the tests that share it)."""
    return make_synthetic_wfm_data(tmp_path_factory.mktemp("wfm") / "d", n=4, num_frames=5)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _no_stream_mp4(path: Path) -> None:
    """An mp4 that opens but holds no frame: the muxer drops the empty video track, so no video stream."""
    with av.open(str(path), mode="w", format="mp4") as container:
        stream = container.add_stream(pick_codec(), rate=Fraction(8))
        stream.width, stream.height, stream.pix_fmt = 32, 32, "yuv420p"
        container.start_encoding()


# ------------------------------------------------------------------------------------ synthetic data
def test_synthetic_data_writes_the_layout_and_is_deterministic(synthetic: Path, tmp_path: Path) -> None:
    again = make_synthetic_wfm_data(tmp_path / "again", n=4, num_frames=5)
    other_seed = make_synthetic_wfm_data(tmp_path / "other", n=4, num_frames=5, seed=1)
    assert sorted(p.name for p in (synthetic / "videos").iterdir()) == [f"{s}.mp4" for s in STEMS]
    assert sorted(p.name for p in (synthetic / "metas").iterdir()) == [f"{s}.txt" for s in STEMS]
    captions = [(synthetic / "metas" / f"{s}.txt").read_text() for s in STEMS]
    assert captions == [(again / "metas" / f"{s}.txt").read_text() for s in STEMS]
    for s in STEMS:
        video = Path("videos") / f"{s}.mp4"
        assert np.array_equal(read_mp4(synthetic / video), read_mp4(again / video))
    assert captions != [(other_seed / "metas" / f"{s}.txt").read_text() for s in STEMS]


def _tone(level: float) -> str:
    return "dark" if level < 85 else "dim" if level < 170 else "bright"


def test_synthetic_captions_describe_their_videos(tmp_path: Path) -> None:
    """Each caption word read back from the decoded pixels: scene and object tones, shape, direction."""
    root = make_synthetic_wfm_data(tmp_path / "d", n=24, num_frames=6)
    moves = {"left": (0, -1), "right": (0, 1), "up": (-1, 0), "down": (1, 0)}
    seen: dict[str, set[str]] = {"scene": set(), "shape": set(), "direction": set()}
    for meta in sorted((root / "metas").glob("*.txt")):
        words = meta.read_text().split()  # "a dark scene: a bright disc moves right"
        scene, tone, shape, direction = words[1], words[4], words[5], words[7]
        grey = read_mp4(root / "videos" / f"{meta.stem}.mp4").astype(np.float32).mean(-1)  # [T, H, W]
        background = float(np.median(grey[0]))
        masks = np.abs(grey - background) > 40  # the object: >= 80 levels off its background
        assert _tone(background) == scene and _tone(float(np.median(grey[0][masks[0]]))) == tone, meta
        assert (masks[0].sum() == 64) == (shape == "square"), meta  # an 8 x 8 square, or a disc inside one
        centres = np.array([[ys.mean(), xs.mean()] for ys, xs in (np.nonzero(m) for m in masks)])
        along = np.diff(centres, axis=0) @ np.array(moves[direction], dtype=np.float32)
        assert (along > 0.5).all(), (meta, centres)  # every frame a step the said way, never wrapping round
        for key, word in (("scene", scene), ("shape", shape), ("direction", direction)):
            seen[key].add(word)
    assert seen == {"scene": {"dark", "dim", "bright"}, "shape": {"square", "disc"}, "direction": set(moves)}


def test_write_text_embeddings_round_trips_in_float16(synthetic: Path, tmp_path: Path) -> None:
    root = _copy(synthetic, tmp_path / "d")
    seen: list[str] = []

    def encode(prompts: list[str]) -> torch.Tensor:
        seen.extend(prompts)
        return torch.stack([torch.linspace(-3, 3, 6 * 8).reshape(6, 8) * (1 + len(p) / 100) for p in prompts])

    assert write_text_embeddings(root, encode, batch=3) == 4
    samples, _ = scan_dataset(root, offline_text_embedding=True)
    assert seen == [s.prompt for s in samples]
    for s in samples:
        assert s.text_embedding == root / "text_embedding" / f"{s.name}.pickle"
        emb = load_text_embedding(s.text_embedding, root)
        assert emb.dtype == torch.float32 and emb.shape == (6, 8)
        assert torch.allclose(emb, encode([s.prompt])[0], rtol=1e-3, atol=1e-3)  # float16 precision
    with pytest.raises(ValueError, match=r"\[B, L, D\] with B = 3 prompts, got \(3, 8\)"):
        write_text_embeddings(root, lambda prompts: torch.zeros(len(prompts), 8), batch=3)


# ------------------------------------------------------------------------------------ scanning
def test_scan_pairs_rows_and_sorts_them(tmp_path: Path) -> None:
    root = tmp_path / "d"
    (root / "videos").mkdir(parents=True)
    (root / "metas").mkdir()
    for name in ("b", "c10", "a", "c2"):
        write_mp4(root / "videos" / f"{name}.mp4", np.zeros((3, 16, 16, 3), np.uint8), 8)
        (root / "metas" / f"{name}.txt").write_text(f"  caption of {name}\n")
    shutil.copy(root / "videos" / "a.mp4", root / "videos" / "._a.mp4")  # a macOS resource fork: not a row
    samples, report = scan_dataset(root)
    assert [s.name for s in samples] == ["a", "b", "c10", "c2"]
    assert samples[0] == WfmSample("a", "caption of a", root / "videos" / "a.mp4", None)
    assert (report.n_rows, report.n_skipped, report.problems) == (4, 0, [])
    assert report.summary() == f"{root}: 4 rows"


def _dataset_with_bad_rows(src: Path, root: Path) -> Path:
    """The 4 synthetic rows plus one of each bad kind scan_dataset names."""
    _copy(src, root)
    videos, metas = root / "videos", root / "metas"
    shutil.copy(videos / "clip_0000.mp4", videos / "no_caption.mp4")
    (metas / "no_video.txt").write_text("a scene")
    for name, caption in (("empty", b"  \n"), ("latin1", "caf\xe9 au lait".encode("latin-1"))):
        shutil.copy(videos / "clip_0000.mp4", videos / f"{name}.mp4")
        (metas / f"{name}.txt").write_bytes(caption)
    (videos / "broken.mp4").write_bytes(b"not a video")
    _no_stream_mp4(videos / "no_frames.mp4")
    for name in ("broken", "no_frames"):
        (metas / f"{name}.txt").write_text(f"a {name} video")
    return root


BAD_ROWS = {  # what the "fail" error says of each bad row
    "no_caption": "no_caption.mp4: no caption metas/no_caption.txt",
    "no_video": "no_video.txt: no video videos/no_video.mp4",
    "empty": "empty.txt: empty caption",
    "latin1": "latin1.txt: not UTF-8",
    "broken": "broken.mp4: cannot decode",
    "no_frames": "no_frames.mp4: no video stream",
}


def test_each_bad_row_is_named_when_failing(synthetic: Path, tmp_path: Path) -> None:
    root = _dataset_with_bad_rows(synthetic, tmp_path / "d")
    with pytest.raises(DataError) as e:
        scan_dataset(root)
    text = str(e.value)
    for name, said in BAD_ROWS.items():
        assert said in text, name
    assert "6 row(s) cannot be used" in text and 'on_bad_row = "skip"' in text
    assert not any(f"{stem}." in text for stem in STEMS)  # the good rows are not named


def test_bad_rows_are_skipped_counted_and_reported(synthetic: Path, tmp_path: Path) -> None:
    root = _dataset_with_bad_rows(synthetic, tmp_path / "d")
    samples, report = scan_dataset(root, on_bad_row="skip")
    assert [s.name for s in samples] == STEMS
    assert (report.n_rows, report.n_skipped, len(report.problems)) == (4, 6, 6)
    assert report.by_reason == {"missing_caption": 1, "missing_video": 1, "bad_caption": 2, "bad_media": 2}
    for name, said in BAD_ROWS.items():
        assert any(said in p for p in report.problems), name
    assert "6 skipped (bad_caption 2, bad_media 2, missing_caption 1, missing_video 1" in report.summary()
    # without the media probe the videos are not opened: only the pairing and the captions are checked
    _, quick = scan_dataset(root, on_bad_row="skip", check_media=False)
    assert quick.by_reason == {"missing_caption": 1, "missing_video": 1, "bad_caption": 2}


def test_a_recorded_scan_is_reused_only_with_the_same_settings(synthetic: Path, tmp_path: Path) -> None:
    """The flow's check-data scan (RUN/data_scan.json) is what the trainer's ranks read instead of probing every
    video again; another dataset or other settings (the config changed) scan afresh."""
    from cosmos_train.wfm.data import load_scan, save_scan

    root = _dataset_with_bad_rows(synthetic, tmp_path / "d")
    settings = {"dataset_dir": str(root), "offline_text_embedding": False, "on_bad_row": "skip", "min_frames": 5}
    samples, report = scan_dataset(**settings)
    record = tmp_path / "run" / "data_scan.json"
    assert load_scan(record, settings) is None  # nothing recorded yet
    save_scan(record, settings, samples, report)
    assert load_scan(record, settings) == (samples, report)
    assert load_scan(record, {**settings, "min_frames": 9}) is None
    assert load_scan(record, {**settings, "dataset_dir": str(synthetic)}) is None
    record.write_text("{not json")
    assert load_scan(record, settings) is None


def test_embeddings_and_frame_counts_are_checked_when_asked(synthetic: Path, tmp_path: Path) -> None:
    root = _copy(synthetic, tmp_path / "d")
    with pytest.raises(DataError, match=r"text_embedding/clip_0000.pickle: missing; offline_text_embedding"):
        scan_dataset(root, offline_text_embedding=True)
    (root / "text_embedding").mkdir()
    for s in STEMS[1:3]:
        (root / "text_embedding" / f"{s}.pickle").write_bytes(pickle.dumps(np.zeros((2, 4), np.float16)))
    outside = tmp_path / "outside.pickle"
    outside.write_bytes(pickle.dumps(np.zeros((2, 4), np.float16)))
    (root / "text_embedding" / "clip_0003.pickle").symlink_to(outside)
    samples, report = scan_dataset(root, offline_text_embedding=True, on_bad_row="skip")
    assert [s.name for s in samples] == STEMS[1:3]
    assert report.by_reason == {"missing_embedding": 1, "embedding_outside_dataset": 1}
    with pytest.raises(DataError, match=r"clip_0000.mp4: 5 frames, fewer than num_frames = 9"):
        scan_dataset(root, min_frames=9)
    assert len(scan_dataset(root, min_frames=5)[0]) == 4


def test_long_problem_lists_are_cut_and_an_empty_dataset_refused(tmp_path: Path) -> None:
    root = tmp_path / "d"
    (root / "videos").mkdir(parents=True)
    (root / "metas").mkdir()
    for i in range(13):
        (root / "metas" / f"orphan_{i:02d}.txt").write_text("a caption")
    cut = r"13 row\(s\) cannot be used: .*orphan_09.txt.*; and 3 more\. Fix"
    with pytest.raises(DataError, match=cut) as e:
        scan_dataset(root)
    assert "orphan_10" not in str(e.value)  # the first 10 named, the rest counted
    with pytest.raises(DataError, match=r"no usable rows \(13 left out\)"):
        scan_dataset(root, on_bad_row="skip")
    with pytest.raises(ValueError, match="on_bad_row"):
        scan_dataset(root, on_bad_row="ignore")  # type: ignore[arg-type]


def test_missing_folders_say_the_layout(tmp_path: Path) -> None:
    missing = rf"nothing: the world-model dataset folder does not exist; it holds {LAYOUT}"
    with pytest.raises(DataError, match=missing):
        scan_dataset(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=rf"no videos/ and no metas/ folder; .*{LAYOUT}"):
        scan_dataset(tmp_path / "empty")
    (tmp_path / "empty" / "videos").mkdir()
    with pytest.raises(DataError, match=rf"no metas/ folder; .*{LAYOUT}"):
        scan_dataset(tmp_path / "empty")


# ------------------------------------------------------------------------------------ clips
def _ramp(path: Path, n_frames: int, height: int = 32, width: int = 48) -> Path:
    """Frame t is a flat grey of level 10 + 20 t: the frame index can be read back from the brightness."""
    write_mp4(path, np.stack([np.full((height, width, 3), 10 + 20 * t, np.uint8) for t in range(n_frames)]), fps=8)
    return path


def test_clip_is_channel_first_uint8_and_evenly_spaced(tmp_path: Path) -> None:
    clip = load_clip(_ramp(tmp_path / "nine.mp4", 9), 5, 16, 24)
    assert clip.shape == (3, 5, 16, 24) and clip.dtype == torch.uint8 and clip.is_contiguous()
    levels = clip.float().mean(dim=(0, 2, 3))
    assert torch.allclose(levels, torch.tensor([10.0, 50, 90, 130, 170]), atol=3)  # frames 0, 2, 4, 6, 8
    levels = load_clip(_ramp(tmp_path / "ten.mp4", 10), 4, 32, 48).float().mean(dim=(0, 2, 3))
    assert torch.allclose(levels, torch.tensor([10.0, 70, 130, 190]), atol=3)  # 0, 3, 6, 9: first and last
    assert torch.allclose(load_clip(tmp_path / "ten.mp4", 1, 8, 8).float().mean(), torch.tensor(10.0), atol=3)


def test_clip_resize_keeps_the_whole_frame(tmp_path: Path) -> None:
    """No crop: a white left half stays the left half after a squeeze to a square."""
    frames = np.zeros((3, 32, 64, 3), np.uint8)
    frames[:, :, :32] = 255
    write_mp4(tmp_path / "half.mp4", frames, 8)
    clip = load_clip(tmp_path / "half.mp4", 3, 16, 16).float()
    assert clip[:, :, :, :7].mean() > 240 and clip[:, :, :, 9:].mean() < 15


def test_short_or_unreadable_videos_are_refused(tmp_path: Path) -> None:
    _ramp(tmp_path / "nine.mp4", 9)
    with pytest.raises(MediaError, match=r"nine\.mp4: 9 frames, fewer than num_frames = 13"):
        load_clip(tmp_path / "nine.mp4", 13, 16, 16)
    (tmp_path / "junk.mp4").write_bytes(b"not a video")
    with pytest.raises(MediaError, match=r"junk\.mp4: cannot decode"):
        load_clip(tmp_path / "junk.mp4", 1, 16, 16)
    with pytest.raises(MediaError, match=r"gone\.mp4: file not found"):
        load_clip(tmp_path / "gone.mp4", 1, 16, 16)


# ------------------------------------------------------------------------------------ embeddings
@pytest.mark.parametrize(
    "obj",
    [
        np.ones((3, 4), np.float16),
        torch.ones(3, 4, dtype=torch.bfloat16),
        {"embeddings": np.ones((3, 4), np.float32)},
        {"t5_text_embeddings": torch.ones(3, 4), "prompt": "a scene"},
        {"whatever": np.ones((3, 4))},
        [np.ones((3, 4))],
    ],
    ids=["numpy", "torch", "embeddings-key", "t5-key", "only-array", "one-element-list"],
)
def test_embedding_forms_are_accepted(obj: object, tmp_path: Path) -> None:
    (tmp_path / "text_embedding").mkdir()
    (tmp_path / "text_embedding" / "e.pickle").write_bytes(pickle.dumps(obj))
    emb = load_text_embedding(tmp_path / "text_embedding" / "e.pickle", tmp_path)
    assert emb.dtype == torch.float32 and emb.shape == (3, 4) and torch.equal(emb, torch.ones(3, 4))


@pytest.mark.parametrize(
    ("obj", "said"),
    [
        (np.ones(5, np.float32), r"shape \(5,\); expected a float array \[n_tokens, dim\]"),
        (torch.ones(1, 3, 4), r"shape \(1, 3, 4\); expected a float array \[n_tokens, dim\]"),
        (np.arange(6).reshape(1, 6), r"dtype int64; .*\(token ids are not embeddings\)"),
        ("hello", r"holds a str; expected a float array \[n_tokens, dim\]"),
        ({"a": np.ones((2, 2)), "b": np.ones((2, 2))}, r"holds a dict with keys \['a', 'b'\]"),
        ([np.ones((2, 2)), np.ones((2, 2))], r"holds a list of 2 items"),
    ],
    ids=["1d", "3d", "int", "str", "two-arrays", "two-items"],
)
def test_bad_embeddings_are_refused_naming_the_file(obj: object, said: str, tmp_path: Path) -> None:
    (tmp_path / "text_embedding").mkdir()
    (tmp_path / "text_embedding" / "bad.pickle").write_bytes(pickle.dumps(obj))
    with pytest.raises(DataError, match=rf"bad\.pickle: .*{said}"):
        load_text_embedding(tmp_path / "text_embedding" / "bad.pickle", tmp_path)


def test_embeddings_are_read_only_inside_the_dataset(tmp_path: Path) -> None:
    folder = tmp_path / "d" / "text_embedding"
    folder.mkdir(parents=True)
    outside = tmp_path / "elsewhere.pickle"
    outside.write_bytes(pickle.dumps(np.ones((2, 2))))
    (folder / "link.pickle").symlink_to(outside)
    for escaping in (folder / "link.pickle", folder / ".." / ".." / "elsewhere.pickle", outside):
        with pytest.raises(DataError, match=r"outside .*text_embedding; .*\(loading one runs code\)"):
            load_text_embedding(escaping, tmp_path / "d")
    with pytest.raises(DataError, match=r"gone\.pickle: missing"):
        load_text_embedding(folder / "gone.pickle", tmp_path / "d")
    (folder / "torn.pickle").write_bytes(pickle.dumps(np.ones((64, 64)))[:100])
    with pytest.raises(DataError, match=r"torn\.pickle: not a readable pickle"):
        load_text_embedding(folder / "torn.pickle", tmp_path / "d")


# ------------------------------------------------------------------------------------ mock data
def test_mock_prompts_are_deterministic_and_varied() -> None:
    assert mock_prompts(5, seed=3) == mock_prompts(5, seed=3) and mock_prompts(5, seed=3) != mock_prompts(5)
    assert mock_prompts(3) == mock_prompts(8)[:3]  # a longer list extends a shorter one
    prompts = mock_prompts(50)
    assert len(set(prompts)) > 25 and all(p.startswith("a ") and " scene: a " in p for p in prompts)
    assert mock_prompts(0) == []
