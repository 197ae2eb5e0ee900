"""A small world-model dataset in Cosmos-Predict2.5's local layout, for the offline tests, demo and benches.

    cosmos-train make-synthetic-wfm-data outputs/wfm-data [--n 32] [--text-embeddings-from outputs/tiny-wfm]

    from cosmos_train.wfm.synthetic_data import make_synthetic_wfm_data, write_text_embeddings
    root = make_synthetic_wfm_data("outputs/wfm-data", n=32, num_frames=9, height=32, width=32)
    write_text_embeddings(root, encode)  # encode: list of prompts -> [B, L, D]

Writes `videos/clip_NNNN.mp4` and `metas/clip_NNNN.txt`: a flat background, dark, dim or bright, with a
square or a disc of a contrasting tone moving left, right, up or down across it, and a caption saying so
("a dark scene: a bright disc moves right"). The tones are drawn from bands apart from the word thresholds
(dark < 85 <= dim < 170 <= bright) and the object differs from its background by >= 80 levels, so every
caption word can be read off the decoded pixels. Bright scenes are the rarer (1 in 5) and no scene is
white: the bench's reward is brightness, and a model drifting to all-white frames should drift away from
these videos, which DDRL's data term is there to hold back (bench/RESULTS.md).

The object moves the same way every frame and never leaves the frame or wraps round (a caption "moves
right" stays true): it crosses the free room, at most STEP pixels a frame. The same seed gives the same
captions and, through write_mp4's single-threaded encoder, the same decoded frames.
`write_text_embeddings` adds `text_embedding/<stem>.pickle` (float16 numpy [L, D]).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from cosmos_train.atomic import write_atomic
from cosmos_train.data.synthetic_video import write_mp4
from cosmos_train.wfm.data import scan_dataset

DIRECTIONS = {"left": (0, -1), "right": (0, 1), "up": (-1, 0), "down": (1, 0)}  # (dy, dx)
SHAPES = ("square", "disc")
# background bands (low, high) and how often each is drawn: bright scenes rarer, none white (see above)
SCENES = {"dark": ((16, 70), 0.4), "dim": ((95, 150), 0.4), "bright": ((180, 235), 0.2)}
MIN_CONTRAST = 80  # grey levels between object and background: visible after compression, whatever the tone
STEP = 2.0  # most pixels the object moves per frame


def _tone(level: int) -> str:
    return "dark" if level < 85 else "dim" if level < 170 else "bright"


def _check_sizes(n: int, num_frames: int, height: int, width: int, fps: int) -> None:
    if n < 1 or num_frames < 1 or fps < 1:
        raise ValueError(f"n, num_frames and fps must be >= 1, got {n}, {num_frames}, {fps}")
    if height < 8 or width < 8 or height % 2 or width % 2:
        raise ValueError(
            f"height and width must be even and >= 8 (yuv420p, room for the object to move), got {height}x{width}"
        )


def _levels(rng: np.random.Generator) -> tuple[int, int]:
    """(background, object) grey levels: a scene band, then an object tone at least MIN_CONTRAST away, from
    the bright band on dark scenes, the dark band on bright ones, either on dim ones."""
    names = list(SCENES)
    scene = names[int(rng.choice(len(names), p=[weight for _, weight in SCENES.values()]))]
    (low, high), _ = SCENES[scene]
    background = int(rng.integers(low, high))
    darker = scene == "bright" or (scene == "dim" and bool(rng.integers(0, 2)))
    if darker:
        return background, int(rng.integers(8, min(70, background - MIN_CONTRAST) + 1))
    return background, int(rng.integers(max(180, background + MIN_CONTRAST), 251))


def _path(rng: np.random.Generator, num_frames: int, room: int) -> np.ndarray:
    """Positions along the motion axis, frame by frame: a monotone crossing of up to `room` pixels that
    starts where it can finish inside the frame."""
    travel = min(room, STEP * max(num_frames - 1, 0))
    start = float(rng.integers(0, int(room - travel) + 1))
    return start + np.linspace(0.0, travel, num_frames)


def _draw(frames: np.ndarray, shape: str, ys: np.ndarray, xs: np.ndarray, side: int, level: int) -> None:
    """The object (top-left corner ys[t], xs[t], `side` pixels wide) into each frame, in place."""
    yy, xx = np.mgrid[0 : frames.shape[1], 0 : frames.shape[2]]
    for t, (y, x) in enumerate(zip(np.rint(ys).astype(int), np.rint(xs).astype(int), strict=True)):
        if shape == "square":
            frames[t, y : y + side, x : x + side] = level
        else:
            r = side / 2
            frames[t, (yy - y - r + 0.5) ** 2 + (xx - x - r + 0.5) ** 2 <= r * r] = level


def _clip(rng: np.random.Generator, num_frames: int, height: int, width: int) -> tuple[np.ndarray, str]:
    """One clip, uint8 RGB [T, H, W, 3], and its caption. The draws' order is fixed: it is what makes a seed
    give the same dataset."""
    side = max(4, min(height, width) // 4)
    background, level = _levels(rng)
    shape = SHAPES[int(rng.integers(0, len(SHAPES)))]
    direction = list(DIRECTIONS)[int(rng.integers(0, len(DIRECTIONS)))]
    dy, dx = DIRECTIONS[direction]
    along = _path(rng, num_frames, (width if dx else height) - side)
    across = np.full(num_frames, float(rng.integers(0, (height if dx else width) - side + 1)))
    if dx < 0 or dy < 0:  # moving left / up: the same crossing, run backwards
        along = along[0] + along[-1] - along
    ys, xs = (across, along) if dx else (along, across)
    frames = np.full((num_frames, height, width, 3), background, dtype=np.uint8)
    _draw(frames, shape, ys, xs, side, level)
    return frames, f"a {_tone(background)} scene: a {_tone(level)} {shape} moves {direction}"


def make_synthetic_wfm_data(
    out_dir: str | Path,
    n: int = 32,
    num_frames: int = 9,
    height: int = 32,
    width: int = 32,
    fps: int = 8,
    seed: int = 0,
) -> Path:
    """n clips + captions under out_dir (returned); the same seed gives the same captions and frames."""
    _check_sizes(n, num_frames, height, width, fps)
    out = Path(out_dir)
    (out / "videos").mkdir(parents=True, exist_ok=True)
    (out / "metas").mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        frames, caption = _clip(rng, num_frames, height, width)
        stem = f"clip_{i:04d}"
        # the caption last: a half-written dataset shows as a video without its caption, which scan names
        write_mp4(out / "videos" / f"{stem}.mp4", frames, fps)
        write_atomic(out / "metas" / f"{stem}.txt", caption + "\n")
    return out


def _embeddings(encode: Callable[[list[str]], torch.Tensor], prompts: list[str]) -> np.ndarray:
    """encode(prompts) as float16 numpy [B, L, D], checked: a wrong shape would pickle silently."""
    out = encode(prompts)
    if not isinstance(out, torch.Tensor) or out.dim() != 3 or out.shape[0] != len(prompts):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(f"encode must return a tensor [B, L, D] with B = {len(prompts)} prompts, got {got}")
    return out.detach().to("cpu", torch.float16).numpy()


def write_text_embeddings(dataset_dir: str | Path, encode: Callable[[list[str]], torch.Tensor], batch: int = 16) -> int:
    """text_embedding/<stem>.pickle (float16 numpy [L, D]) for every row of the dataset, from `encode`
    (prompts -> [B, L, D]), `batch` prompts a call; returns how many were written.

    The rows and prompts are scan_dataset's (same pairing, same caption text as the trainer reads); rows it
    would leave out (a caption without its video, an empty caption) get none: scan_dataset names them.
    """
    root = Path(dataset_dir)
    samples, _ = scan_dataset(root, on_bad_row="skip", check_media=False)
    for start in range(0, len(samples), batch):
        chunk = samples[start : start + batch]
        for sample, array in zip(chunk, _embeddings(encode, [s.prompt for s in chunk]), strict=True):
            # atomic: a killed run leaves whole pickles or none, never a truncated one that fails to load
            write_atomic(root / "text_embedding" / f"{sample.name}.pickle", pickle.dumps(array))
    return len(samples)
