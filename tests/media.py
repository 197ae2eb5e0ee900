"""Small test videos written with PyAV: a square moving right over a flat background."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np


def moving_square_mp4(
    path: Path,
    shift: int = 0,
    frames: int = 4,
    *,
    size: int = 56,
    box: int = 16,
    step: int = 8,
    x0: int = 4,
    travel: int = 30,
    y: int = 20,
    background: int = 0,
    color: tuple[int, int, int] = (255, 40, 40),
) -> Path:
    """`frames` frames at 4 fps; frame i has the square's left edge at x0 + (i*step + shift) % travel,
    so different shifts give different clips."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as c:
        s = c.add_stream("mpeg4", rate=4)
        s.width = s.height = size
        s.pix_fmt = "yuv420p"
        for i in range(frames):
            img = np.full((size, size, 3), background, np.uint8)
            x = x0 + (i * step + shift) % travel
            img[y : y + box, x : x + box] = color
            c.mux(s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")))
        c.mux(s.encode())
    return path
