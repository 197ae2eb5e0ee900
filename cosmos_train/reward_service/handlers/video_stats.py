"""Video statistics for world-model rewards, needing no model download.

Pixels are in [0, 255] (the protocol's video / image range), any dtype; every score lies in [0, 1]:
- brightness: mean pixel value / 255 (an all-255 video scores 1.0, an all-0 one 0.0);
- motion: mean |x[t+1] - x[t]| / 255 over frames (0: a still video; 1: frames flipping 0 <-> 255);
- smoothness: 1 - mean |x[t+1] - 2 x[t] + x[t-1]| / 510, the second difference normalised by its
  largest possible value (1: constant-velocity change; 0: every pixel jerking 0 -> 255 -> 0);
- first_frame_brightness: 1 - mean over frames t >= 1 of |mean(x[t]) - mean(x[0])| / 255, how well a video keeps
  its first frame's brightness (1: every frame as bright as the first). A video2world reward: the first frame is
  the given one, so a model scores by continuing it, not by any one brightness.
A video with too few frames for a difference scores 0 motion and 1 smoothness (nothing moved).
Each item is reduced a frame at a time in float64, so scoring holds a few frames of scratch memory, not
a float copy of the batch.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from cosmos_train.reward_service.handlers.base import Batch, Handler, register_handler

PIXEL_MAX = 255.0


def _videos(batch: Batch) -> Iterator[np.ndarray]:
    """Per item, its frames [T, C, H, W] (a view: nothing copied)."""
    assert batch.media is not None
    for video in batch.media:
        yield np.moveaxis(video, 1, 0)


def _frame(frames: np.ndarray, t: int) -> np.ndarray:
    return frames[t].astype(np.float64)


@register_handler("brightness")
class Brightness(Handler):
    media_types = ("video", "image")

    def score(self, batch: Batch) -> list[float]:
        assert batch.media is not None
        means = [float(item.mean(dtype=np.float64)) for item in batch.media]  # reduced in buffered chunks
        return np.clip(np.asarray(means) / PIXEL_MAX, 0.0, 1.0).tolist()


@register_handler("motion")
class Motion(Handler):
    media_types = ("video",)

    def score(self, batch: Batch) -> list[float]:
        out = []
        for frames in _videos(batch):
            if len(frames) < 2:
                out.append(0.0)
                continue
            total = sum(float(np.abs(_frame(frames, t + 1) - _frame(frames, t)).sum()) for t in range(len(frames) - 1))
            out.append(total / ((len(frames) - 1) * frames[0].size))
        return np.clip(np.asarray(out) / PIXEL_MAX, 0.0, 1.0).tolist()


@register_handler("first_frame_brightness")
class FirstFrameBrightness(Handler):
    media_types = ("video",)

    def score(self, batch: Batch) -> list[float]:
        out = []
        for frames in _videos(batch):
            first = float(frames[0].mean(dtype=np.float64))
            later = [abs(float(frames[t].mean(dtype=np.float64)) - first) for t in range(1, len(frames))]
            out.append(1.0 - (sum(later) / len(later) if later else 0.0) / PIXEL_MAX)
        return np.clip(np.asarray(out), 0.0, 1.0).tolist()


@register_handler("smoothness")
class Smoothness(Handler):
    media_types = ("video",)

    def score(self, batch: Batch) -> list[float]:
        out = []
        for frames in _videos(batch):
            if len(frames) < 3:
                out.append(1.0)
                continue
            total = sum(
                float(np.abs(_frame(frames, t + 2) - 2 * _frame(frames, t + 1) + _frame(frames, t)).sum())
                for t in range(len(frames) - 2)
            )
            out.append(1.0 - total / ((len(frames) - 2) * frames[0].size) / (2 * PIXEL_MAX))
        return np.clip(np.asarray(out), 0.0, 1.0).tolist()
