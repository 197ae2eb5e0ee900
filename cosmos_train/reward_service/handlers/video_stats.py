"""Video statistics for world-model rewards, needing no model download.

Pixels are in [0, 255] (the protocol's video / image range), any dtype; every score lies in [0, 1]:
- brightness: mean pixel value / 255 (an all-255 video scores 1.0, an all-0 one 0.0);
- motion: mean |x[t+1] - x[t]| / 255 over frames (0: a still video; 1: frames flipping 0 <-> 255);
- smoothness: 1 - mean |x[t+1] - 2 x[t] + x[t-1]| / 510, the second difference normalised by its
  largest possible value (1: constant-velocity change; 0: every pixel jerking 0 -> 255 -> 0).
A video with too few frames for a difference scores 0 motion and 1 smoothness (nothing moved).
"""

from __future__ import annotations

import numpy as np

from cosmos_train.reward_service.handlers.base import Batch, Handler, register_handler

PIXEL_MAX = 255.0


def _frames_first(batch: Batch) -> np.ndarray:
    """[B, T, ...] float64: video [B, C, T, H, W] -> time on axis 1."""
    assert batch.media is not None
    return np.moveaxis(batch.media.astype(np.float64, copy=False), 2, 1)


@register_handler("brightness")
class Brightness(Handler):
    media_types = ("video", "image")

    def score(self, batch: Batch) -> list[float]:
        assert batch.media is not None
        flat = batch.media.reshape(batch.size, -1).astype(np.float64, copy=False)
        return np.clip(flat.mean(axis=1) / PIXEL_MAX, 0.0, 1.0).tolist()


@register_handler("motion")
class Motion(Handler):
    media_types = ("video",)

    def score(self, batch: Batch) -> list[float]:
        x = _frames_first(batch)
        if x.shape[1] < 2:
            return [0.0] * batch.size
        d1 = np.abs(np.diff(x, axis=1)).reshape(batch.size, -1)
        return np.clip(d1.mean(axis=1) / PIXEL_MAX, 0.0, 1.0).tolist()


@register_handler("smoothness")
class Smoothness(Handler):
    media_types = ("video",)

    def score(self, batch: Batch) -> list[float]:
        x = _frames_first(batch)
        if x.shape[1] < 3:
            return [1.0] * batch.size
        d2 = np.abs(np.diff(x, n=2, axis=1)).reshape(batch.size, -1)
        return np.clip(1.0 - d2.mean(axis=1) / (2 * PIXEL_MAX), 0.0, 1.0).tolist()
