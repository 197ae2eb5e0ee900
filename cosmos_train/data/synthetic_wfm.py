"""A small world-model dataset in Cosmos-Predict2.5's local layout, for the offline tests, the demo and benches.

    cosmos-train make-synthetic-wfm-data outputs/wfm-data [--n 32] [--text-embeddings-from outputs/tiny-wfm]

Writes `videos/<stem>.mp4` and `metas/<stem>.txt`: a flat background of some brightness with a square of the
opposite tone moving left, right, up or down, and a caption saying so ("a dark scene: a bright square moves to
the right"). Backgrounds spread over dark and mid tones, so a model rewarded for brightness that drifts to
all-white frames drifts away from these videos. `write_text_embeddings` adds `text_embedding/<stem>.pickle`.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from cosmos_train.atomic import write_atomic
from cosmos_train.data.synthetic_video import write_mp4

DIRECTIONS = {"left": (0, -1), "right": (0, 1), "up": (-1, 0), "down": (1, 0)}


def _tone(level: int) -> str:
    return "dark" if level < 85 else "dim" if level < 170 else "bright"


def make_synthetic_wfm_data(out_dir: str | Path, n: int = 32, num_frames: int = 9, height: int = 32,
                            width: int = 32, fps: int = 8, seed: int = 0) -> Path:
    """n clips + captions; the same seed gives the same captions and frames."""
    out = Path(out_dir)
    (out / "videos").mkdir(parents=True, exist_ok=True)
    (out / "metas").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    side = max(4, min(height, width) // 4)
    for i in range(n):
        background = int(rng.integers(20, 160))
        square = 255 - background
        direction = list(DIRECTIONS)[int(rng.integers(0, 4))]
        dy, dx = DIRECTIONS[direction]
        y, x = int(rng.integers(0, height - side)), int(rng.integers(0, width - side))
        frames = np.full((num_frames, height, width, 3), background, dtype=np.uint8)
        for t in range(num_frames):
            ty, tx = (y + dy * 2 * t) % (height - side), (x + dx * 2 * t) % (width - side)
            frames[t, ty:ty + side, tx:tx + side] = square
        stem = f"clip_{i:04d}"
        write_mp4(out / "videos" / f"{stem}.mp4", frames, fps)
        caption = f"a {_tone(background)} scene: a {_tone(square)} square moves {direction}"
        write_atomic(out / "metas" / f"{stem}.txt", caption + "\n")
    return out


def write_text_embeddings(dataset_dir: str | Path, encode: Callable[[list[str]], torch.Tensor],
                          batch: int = 16) -> int:
    """text_embedding/<stem>.pickle (float16 numpy [L, D]) for every caption, from `encode` (prompts -> [B, L, D])."""
    root = Path(dataset_dir)
    metas = sorted((root / "metas").glob("*.txt"))
    (root / "text_embedding").mkdir(exist_ok=True)
    for start in range(0, len(metas), batch):
        chunk = metas[start:start + batch]
        embeddings = encode([m.read_text(encoding="utf-8").strip() for m in chunk])
        for meta, emb in zip(chunk, embeddings):
            array = emb.detach().cpu().to(torch.float16).numpy()
            write_atomic(root / "text_embedding" / f"{meta.stem}.pickle", pickle.dumps(array))
    return len(metas)
