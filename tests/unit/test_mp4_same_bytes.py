"""The synthetic clips' encoder gives the same bytes for the same frames, encode after encode (a dataset made
twice from one seed is the same dataset): synthetic_video.write_mp4 at the 56 px the datasets use, a side that
is not a multiple of 16, which is where x264's macroblock-tree reads memory it never wrote.

    .venv/bin/python -m pytest tests/unit/test_mp4_same_bytes.py -x -q
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from cosmos_train.data.synthetic_video import pick_codec, read_mp4, write_mp4

pytest.importorskip("av")


def test_the_same_frames_encode_to_the_same_bytes(tmp_path: Path) -> None:
    if pick_codec() != "libx264":
        pytest.skip("the bundled ffmpeg has no libx264")
    # noise: with the macroblock-tree on, 200 encodes of these frames in one process gave 4-6 different files
    frames = np.random.default_rng(0).integers(0, 256, (4, 56, 56, 3), dtype=np.uint8)
    digests = set()
    for i in range(40):
        path = tmp_path / f"{i}.mp4"
        write_mp4(path, frames, fps=4)
        digests.add(hashlib.sha256(path.read_bytes()).hexdigest())
    assert len(digests) == 1, f"{len(digests)} different files from 40 encodes of the same frames"
    assert read_mp4(tmp_path / "0.mp4").shape == frames.shape
