"""Drawing and difficulty settings for the synthetic physical-reasoning clips.

A clip is a uint8 numpy array [T, H, W, 3] (RGB) drawn here; the question families
(`synthetic_families.py`) decide what moves where. Every coordinate is an even integer
and every object size is even, so that flat-coloured objects survive the 2x2 chroma
subsampling of yuv420p video without colour bleeding into their neighbours.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Named colours a question can refer to. Gray and white are kept out: distractors and the ground
# are gray, and a low-contrast white object would look just like them.
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (240, 40, 40),
    "green": (40, 220, 40),
    "blue": (40, 80, 255),
    "yellow": (240, 220, 40),
    "cyan": (40, 220, 230),
    "magenta": (230, 40, 230),
    "orange": (250, 140, 20),
}


@dataclass(frozen=True)
class Difficulty:
    """How hard the clips are to read. Fractions are of the canvas side (56 px by default)."""

    name: str
    object_frac: tuple[float, float]  # object side (or ball diameter), min..max
    travel_frac: tuple[float, float]  # total distance a moving object covers over the clip
    accel: float  # speeding-up steps go from (1 - accel) to (1 + accel) times the mean step
    palette: tuple[str, ...]  # colours named objects are drawn from
    background: tuple[int, int]  # gray level of the background, min..max
    contrast: tuple[float, float]  # 1 = pure colour, lower blends the object into the background
    noise_std: float  # per-pixel Gaussian noise, redrawn every frame
    distractors: tuple[int, int]  # static gray squares that are never the subject of a question
    both_ways: bool  # speed / sideways / two-object motion may go left as well as right


# "easy" follows machine.md: a 16 px square moving ~10 px per frame on 4-frame 56x56 clips is
# what a ~1M-parameter model learned to 100% in ~300 steps, so easy keeps objects that large,
# moves them 26-32 px over the clip, and uses pure colours on black with no noise.
DIFFICULTIES: dict[str, Difficulty] = {
    "easy": Difficulty(
        name="easy",
        object_frac=(16 / 56, 16 / 56),
        travel_frac=(26 / 56, 32 / 56),
        accel=0.8,
        palette=("red", "green", "blue"),
        background=(0, 0),
        contrast=(1.0, 1.0),
        noise_std=0.0,
        distractors=(0, 0),
        both_ways=False,  # one less thing for a tiny model to learn; "direction" covers all four
    ),
    "medium": Difficulty(
        name="medium",
        object_frac=(10 / 56, 12 / 56),
        travel_frac=(16 / 56, 24 / 56),
        accel=0.6,
        palette=("red", "green", "blue", "yellow", "cyan", "magenta"),
        background=(0, 60),
        contrast=(0.7, 1.0),
        noise_std=6.0,
        distractors=(0, 1),
        both_ways=True,
    ),
    "hard": Difficulty(
        name="hard",
        object_frac=(6 / 56, 8 / 56),
        travel_frac=(12 / 56, 18 / 56),
        accel=0.5,
        palette=tuple(COLORS),
        background=(40, 110),
        contrast=(0.45, 0.7),
        noise_std=14.0,
        distractors=(1, 3),
        both_ways=True,
    ),
}


def even(x: float) -> int:
    """Nearest even integer (see the module docstring for why everything is even)."""
    return 2 * int(round(x / 2))


def even_between(rng: np.random.Generator, lo: float, hi: float) -> int:
    """A uniformly drawn even integer in [lo, hi]; raises when the range holds none."""
    lo_i, hi_i = int(np.ceil(lo / 2)), int(np.floor(hi / 2))
    if hi_i < lo_i:
        raise ValueError(
            f"no even position in [{lo:g}, {hi:g}]: the motion does not fit on the canvas "
            "(use a larger size or fewer frames)"
        )
    return 2 * int(rng.integers(lo_i, hi_i + 1))


@dataclass(frozen=True)
class Canvas:
    """Clip geometry shared by every family: square frames of `size` px, `n_frames` frames."""

    size: int
    n_frames: int
    difficulty: Difficulty

    def px(self, frac: float) -> float:
        return frac * self.size

    def object_size(self, rng: np.random.Generator) -> int:
        lo, hi = self.difficulty.object_frac
        return max(2, even_between(rng, self.px(lo), self.px(hi)))

    def travel(self, rng: np.random.Generator) -> int:
        lo, hi = self.difficulty.travel_frac
        return even_between(rng, self.px(lo), self.px(hi))


@dataclass(frozen=True)
class Look:
    """Colours of one clip: background gray level and the blend of named colours into it."""

    background: int
    contrast: float

    def color(self, name: str) -> np.ndarray:
        rgb = np.asarray(COLORS[name], dtype=np.float64)
        bg = float(self.background)
        return np.clip(np.round(bg + self.contrast * (rgb - bg)), 0, 255).astype(np.uint8)


def draw_look(rng: np.random.Generator, difficulty: Difficulty) -> Look:
    lo, hi = difficulty.background
    clo, chi = difficulty.contrast
    return Look(background=int(rng.integers(lo, hi + 1)), contrast=float(rng.uniform(clo, chi)))


def blank(canvas: Canvas, look: Look) -> np.ndarray:
    return np.full((canvas.n_frames, canvas.size, canvas.size, 3), look.background, dtype=np.uint8)


def _disc_mask(side: int) -> np.ndarray:
    """A disc drawn in 2x2 blocks, so that its edge, too, survives yuv420p chroma subsampling."""
    half = side // 2
    c = (half - 1) / 2
    yy, xx = np.mgrid[0:half, 0:half]
    small = (xx - c) ** 2 + (yy - c) ** 2 <= (half / 2) ** 2 + 0.25
    return np.kron(small, np.ones((2, 2), dtype=bool)).astype(bool)


def draw(frame: np.ndarray, x: int, y: int, side: int, rgb: np.ndarray, shape: str = "square") -> None:
    """Paint one object with its top-left corner at (x, y), clipped to the frame, in place."""
    h, w = frame.shape[:2]
    x0, y0, x1, y1 = max(x, 0), max(y, 0), min(x + side, w), min(y + side, h)
    if x1 <= x0 or y1 <= y0:
        return
    region = frame[y0:y1, x0:x1]
    if shape == "square":
        region[...] = rgb
    elif shape == "disc":
        mask = _disc_mask(side)[y0 - y : y1 - y, x0 - x : x1 - x]
        region[mask] = rgb
    else:
        raise ValueError(f"unknown shape {shape!r}")


def add_distractors(rng: np.random.Generator, frames: np.ndarray, canvas: Canvas, look: Look) -> int:
    """Static gray squares drawn under the moving objects (call before drawing them)."""
    lo, hi = canvas.difficulty.distractors
    count = int(rng.integers(lo, hi + 1))
    for _ in range(count):
        side = canvas.object_size(rng)
        x = even_between(rng, 0, canvas.size - side)
        y = even_between(rng, 0, canvas.size - side)
        # Far enough from the background to be seen, but never one of the named colours.
        level = (look.background + 70 + int(rng.integers(0, 40))) % 256
        gray = np.full(3, level, dtype=np.uint8)
        for frame in frames:
            draw(frame, x, y, side, gray)
    return count


def add_noise(rng: np.random.Generator, frames: np.ndarray, std: float) -> np.ndarray:
    if std <= 0:
        return frames
    noisy = frames.astype(np.int16) + np.round(rng.normal(0.0, std, frames.shape)).astype(np.int16)
    return np.clip(noisy, 0, 255).astype(np.uint8)
