"""Benchmark clips are confined to the benchmark folder as training media are to the dataset's media roots: a row
whose "video" climbs out with `../`, is absolute elsewhere, or is a symlink that leads out is refused naming the
file, the row and the path (evaluation.allow_media_outside_root lets it through); clips inside still load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cosmos_train.errors import BenchmarkError
from cosmos_train.evaluation.benchmark import load_benchmark

OPTS = {"A": "left", "B": "right"}


def _bench(root: Path, videos: list[str]) -> Path:
    """A benchmark `ds` with one row per video and a real file clips/in.mp4; returns the QA file."""
    folder = root / "data" / "benchmark" / "ds"
    (folder / "clips").mkdir(parents=True)
    (folder / "clips" / "in.mp4").write_bytes(b"inside")
    rows = [{"video": v, "qa_pairs": {"question": "Where?", "index2ans": OPTS, "answer": "A"}} for v in videos]
    qa_file = folder / "ds_benchmark_qa_pairs.json"
    qa_file.write_text(json.dumps(rows))
    return qa_file


def _outside(root: Path) -> Path:
    secret = root / "private" / "secret.mp4"  # exists, so only confinement can refuse it
    secret.parent.mkdir()
    secret.write_bytes(b"not a video: the evaluation must never read this")
    return secret


@pytest.mark.parametrize("how", ["climbs out", "absolute", "symlink"])
def test_a_clip_outside_the_benchmark_folder_is_refused(tmp_path: Path, how: str) -> None:
    secret = _outside(tmp_path)
    video = {"climbs out": "../../../private/secret.mp4", "absolute": str(secret), "symlink": "clips/link.mp4"}[how]
    qa_file = _bench(tmp_path, ["clips/in.mp4", video])
    if how == "symlink":
        (qa_file.parent / "clips" / "link.mp4").symlink_to(secret)
    with pytest.raises(BenchmarkError) as refused:
        load_benchmark(tmp_path / "data", "ds")
    text = refused.value.paragraph
    assert "\n" not in text
    assert text.startswith(f"{qa_file}:row 1: video {video!r} resolves to {secret}, outside the benchmark folder")
    assert "evaluation.allow_media_outside_root = true" in text
    # the setting says the rows are meant to point there
    videos = load_benchmark(tmp_path / "data", "ds", allow_media_outside_root=True)
    assert [v.video_path for v in videos][1] in (secret, qa_file.parent / video)


def test_clips_inside_still_load(tmp_path: Path) -> None:
    qa_file = _bench(tmp_path, ["clips/in.mp4"])
    folder = qa_file.parent
    (folder / "more").mkdir()
    (folder / "more" / "b.mp4").write_bytes(b"inside too")
    rows = json.loads(qa_file.read_text())
    for video in ("clips/../more/b.mp4", str(folder / "clips" / "in.mp4")):  # `..` that stays inside; absolute inside
        rows.append({"video": video, "qa_pairs": {"question": "Q?", "index2ans": OPTS, "answer": "B"}})
    qa_file.write_text(json.dumps(rows))
    videos = load_benchmark(tmp_path / "data", "ds")
    assert [v.video_path for v in videos] == [folder / "clips" / "in.mp4", folder / "clips/../more/b.mp4"]
    assert len(videos[0].questions) == 2  # the absolute path names the same clip as row 0


def test_a_missing_clip_outside_is_refused_as_outside(tmp_path: Path) -> None:
    """Confinement is decided on the path alone: whether something exists out there is not revealed."""
    qa_file = _bench(tmp_path, ["/nonexistent/clip.mp4"])
    with pytest.raises(BenchmarkError, match="outside the benchmark folder"):
        load_benchmark(tmp_path / "data", "ds")
    assert qa_file.is_file()
