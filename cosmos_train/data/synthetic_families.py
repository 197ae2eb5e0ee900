"""The question families of the synthetic dataset: what moves, how, and what is asked.

Each family simulates a tiny scene (integer, even pixel positions per frame), renders it and
states the question, the four option texts and a reasoning text, all derived from the simulated
positions. `make(rng, label, canvas)` draws a clip whose ground truth is `label`; the simulated
track is re-classified before returning, so a clip whose rounded motion would not show its label
unambiguously is redrawn instead of being emitted with a wrong answer.

Families (labels in the order of FAMILIES[name].labels):
- direction:   left / right / up / down                  (one square, uniform motion)
- speed:       speeding_up / slowing_down / constant / not_moving   (one square, horizontal)
- gravity:     falling / rising / sideways / at_rest     (one ball above a gray ground strip)
- two_objects: first_only / second_only / both / neither (which of two squares moves)
- size:        growing / shrinking / same_size / grows_then_shrinks (one square about a fixed centre)
- count:       one / two / three / four                  (how many squares move, one per horizontal lane)

DEFAULT_FAMILIES are the first four: a dataset made with the defaults stays what it was before
`size` and `count` existed (the demo's and the tests' data); ask for the others by name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from cosmos_train.data.synthetic_render import (
    Canvas,
    Look,
    add_distractors,
    add_noise,
    blank,
    draw,
    draw_look,
    even,
    even_between,
)

MAX_REDRAWS = 50  # a label that cannot be shown in 50 draws means the canvas is too small


@dataclass
class Clip:
    """One simulated clip and everything needed to ask about it."""

    family: str
    label: str
    frames: np.ndarray  # uint8 [T, H, W, 3]
    question: str
    options: dict[str, str]  # every label of the family -> its option text
    reasoning: str
    params: dict[str, Any] = field(default_factory=dict)  # the simulation (tracks are top-left px)


@dataclass(frozen=True)
class Family:
    name: str
    labels: tuple[str, ...]
    simulate: Callable[[np.random.Generator, str, Canvas], Clip | None]  # None: redraw

    def make(self, rng: np.random.Generator, label: str, canvas: Canvas) -> Clip:
        if label not in self.labels:
            raise ValueError(f"family {self.name!r} has no label {label!r}; labels: {list(self.labels)}")
        for _ in range(MAX_REDRAWS):
            try:
                clip = self.simulate(rng, label, canvas)
            except ValueError as e:  # e.g. the motion does not fit on the canvas
                raise ValueError(f"family {self.name!r}, label {label!r}: {e}") from e
            if clip is not None:
                return clip
        raise ValueError(
            f"family {self.name!r} could not show label {label!r} unambiguously on a "
            f"{canvas.size}px, {canvas.n_frames}-frame canvas at difficulty {canvas.difficulty.name!r}"
        )


# ---------------------------------------------------------------- motion helpers


def track(start: int, steps: Sequence[int]) -> list[int]:
    """Positions per frame: start, then start plus the running sum of the steps."""
    return [start] + [start + int(c) for c in np.cumsum(steps)]


def step_sizes(positions: Sequence[int]) -> list[int]:
    return [b - a for a, b in zip(positions[:-1], positions[1:])]


def uniform_steps(travel: float, n_steps: int) -> list[int]:
    """Equal even steps covering about `travel` px (even steps keep every position even)."""
    return [max(2, even(travel / n_steps))] * n_steps


def speed_steps(label: str, travel: float, n_steps: int, accel: float) -> list[int]:
    """Unsigned even steps covering about `travel` px that show the speed pattern `label`.

    Speeding up is an arithmetic progression (constant acceleration, as under gravity) whose
    steps differ by at least 2 px, so every step is visibly longer than the one before.
    """
    if label == "not_moving":
        return [0] * n_steps
    if label == "constant":
        return uniform_steps(travel, n_steps)
    mean = travel / n_steps
    delta = max(2, even(2 * accel * mean / max(1, n_steps - 1)))
    first = max(2, even(mean - delta * (n_steps - 1) / 2))
    steps = [first + k * delta for k in range(n_steps)]
    return steps[::-1] if label == "slowing_down" else steps


def speed_pattern(steps: Sequence[int]) -> str | None:
    """What the rounded steps show; None when they are ambiguous (mixed signs, uneven)."""
    if all(s == 0 for s in steps):
        return "not_moving"
    if not (all(s > 0 for s in steps) or all(s < 0 for s in steps)):
        return None
    mags = [abs(s) for s in steps]
    if all(m == mags[0] for m in mags):
        return "constant"
    if all(b > a for a, b in zip(mags[:-1], mags[1:])):
        return "speeding_up"
    if all(b < a for a, b in zip(mags[:-1], mags[1:])):
        return "slowing_down"
    return None


def size_pattern(sides: Sequence[int]) -> str | None:
    """How the rounded sides change over the frames; None for any other pattern."""
    changes = step_sizes(sides)
    if all(c == 0 for c in changes):
        return "same_size"
    if all(c > 0 for c in changes):
        return "growing"
    if all(c < 0 for c in changes):
        return "shrinking"
    rise = next(i for i, c in enumerate(changes) if c <= 0)
    if rise > 0 and all(c < 0 for c in changes[rise:]):
        return "grows_then_shrinks"
    return None


def apart(objects: Sequence[dict[str, Any]], n_frames: int, gap: int = 2) -> bool:
    """True when no two objects come within `gap` px of each other in any frame, so each is seen as its own."""
    for t in range(n_frames):
        boxes = [(o["x"][t], o["y"][t], o["x"][t] + side_at(o, t), o["y"][t] + side_at(o, t)) for o in objects]
        for i, a in enumerate(boxes):
            for b in boxes[i + 1 :]:
                if a[0] < b[2] + gap and b[0] < a[2] + gap and a[1] < b[3] + gap and b[1] < a[3] + gap:
                    return False
    return True


def list_words(values: Sequence[int]) -> str:
    words = [str(abs(v)) for v in values]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def render(
    rng: np.random.Generator, canvas: Canvas, look: Look, objects: list[dict[str, Any]], ground: int = 0
) -> tuple[np.ndarray, int]:
    """Draw distractors, the ground strip (height `ground` px), the objects, then noise."""
    frames = blank(canvas, look)
    n_distractors = add_distractors(rng, frames, canvas, look)
    if ground:
        frames[:, canvas.size - ground :, :, :] = (look.background + 110) % 256
    for obj in objects:
        rgb = look.color(obj["color"])
        for t in range(canvas.n_frames):
            draw(frames[t], obj["x"][t], obj["y"][t], side_at(obj, t), rgb, obj["shape"])
    return add_noise(rng, frames, canvas.difficulty.noise_std), n_distractors


def side_at(obj: dict[str, Any], t: int) -> int:
    """The object's side in frame t: `size` is one number, or one per frame for a square that grows."""
    size = obj["size"]
    return int(size[t]) if isinstance(size, list) else int(size)


def centre(obj: dict[str, Any], t: int) -> tuple[int, int]:
    half = side_at(obj, t) // 2
    return obj["x"][t] + half, obj["y"][t] + half


def pick_colors(rng: np.random.Generator, canvas: Canvas, k: int) -> list[str]:
    palette = canvas.difficulty.palette
    return [palette[i] for i in rng.choice(len(palette), size=k, replace=False)]


# ---------------------------------------------------------------- families


def _direction(rng: np.random.Generator, label: str, canvas: Canvas) -> Clip | None:
    look = draw_look(rng, canvas.difficulty)
    (color,) = pick_colors(rng, canvas, 1)
    side, travel, n = canvas.object_size(rng), canvas.travel(rng), canvas.n_frames
    free = canvas.size - side
    steps = uniform_steps(travel, n - 1)
    along = track(even_between(rng, 0, free - sum(steps)), steps)
    if label in ("left", "up"):
        along = [free - p for p in along]
    across = [even_between(rng, 0, free)] * n
    xs, ys = (along, across) if label in ("left", "right") else (across, along)
    obj = {"color": color, "shape": "square", "size": side, "x": xs, "y": ys}
    frames, n_distractors = render(rng, canvas, look, [obj])

    (x0, y0), (x1, y1) = centre(obj, 0), centre(obj, n - 1)
    axis, other = ("x", "y") if label in ("left", "right") else ("y", "x")
    delta = (x1 - x0) if axis == "x" else (y1 - y0)
    shown = {("x", True): "right", ("x", False): "left", ("y", True): "down", ("y", False): "up"}
    if delta == 0 or shown[(axis, delta > 0)] != label:
        return None
    options = {
        "left": "It moves to the left",
        "right": "It moves to the right",
        "up": "It moves up",
        "down": "It moves down",
    }
    reasoning = (
        f"The {color} square's centre starts at x={x0}, y={y0} and ends at x={x1}, y={y1}. "
        f"Its {axis} {'grows' if delta > 0 else 'shrinks'} by {abs(delta)} pixels while its {other} "
        f"stays the same{' (y grows downward)' if axis == 'y' else ''}, so {options[label].lower()}."
    )
    return Clip(
        family="direction",
        label=label,
        frames=frames,
        question=f"In which direction does the {color} square move?",
        options=options,
        reasoning=reasoning,
        params={"objects": [obj], "background": look.background, "distractors": n_distractors},
    )


def _speed(rng: np.random.Generator, label: str, canvas: Canvas) -> Clip | None:
    look = draw_look(rng, canvas.difficulty)
    (color,) = pick_colors(rng, canvas, 1)
    side, travel, n = canvas.object_size(rng), canvas.travel(rng), canvas.n_frames
    free = canvas.size - side
    steps = speed_steps(label, travel, n - 1, canvas.difficulty.accel)
    xs = track(even_between(rng, 0, free - sum(steps)), steps)
    leftward = canvas.difficulty.both_ways and bool(rng.integers(0, 2))
    if leftward:
        xs = [free - x for x in xs]
    ys = [even_between(rng, 0, free)] * n
    obj = {"color": color, "shape": "square", "size": side, "x": xs, "y": ys}
    steps = step_sizes(xs)
    if speed_pattern(steps) != label:
        return None
    frames, n_distractors = render(rng, canvas, look, [obj])

    x0, y0 = centre(obj, 0)
    way = "left" if leftward else "right"
    options = {
        "speeding_up": "It speeds up",
        "slowing_down": "It slows down",
        "constant": "It moves at a constant speed",
        "not_moving": "It does not move",
    }
    if label == "not_moving":
        reasoning = f"The {color} square stays at x={x0}, y={y0} in every frame, so it does not move."
    else:
        verdict = {
            "speeding_up": "Each step is longer than the one before, so it speeds up.",
            "slowing_down": "Each step is shorter than the one before, so it slows down.",
            "constant": "The steps are all equal, so it moves at a constant speed.",
        }[label]
        reasoning = f"Between frames the {color} square moves {list_words(steps)} pixels to the {way}. {verdict}"
    return Clip(
        family="speed",
        label=label,
        frames=frames,
        question=f"How does the speed of the {color} square change during the clip?",
        options=options,
        reasoning=reasoning,
        params={"objects": [obj], "background": look.background, "distractors": n_distractors},
    )


def _gravity(rng: np.random.Generator, label: str, canvas: Canvas) -> Clip | None:
    look = draw_look(rng, canvas.difficulty)
    (color,) = pick_colors(rng, canvas, 1)
    side, travel, n = canvas.object_size(rng), canvas.travel(rng), canvas.n_frames
    accel = canvas.difficulty.accel
    up_down = speed_steps("speeding_up", travel, n - 1, accel) if label in ("falling", "rising") else [0]
    # The ground's thickness varies (as far as the fall leaves room) so that the few places a ball
    # can rest still give many different clips.
    thin = max(2, canvas.size / 14)
    ground = even_between(rng, thin, max(thin, min(canvas.size / 7, canvas.size - side - sum(up_down))))
    floor_y = canvas.size - ground - side  # top-left y of a ball resting on the ground
    free_x = canvas.size - side
    if label == "falling":  # gravity: faster every frame on the way down
        ys = track(even_between(rng, 0, floor_y - sum(up_down)), up_down)
        xs = [even_between(rng, 0, free_x)] * n
    elif label == "rising":  # thrown upward: slower every frame on the way up
        ys = track(even_between(rng, sum(up_down), floor_y), [-s for s in reversed(up_down)])
        xs = [even_between(rng, 0, free_x)] * n
    elif label == "sideways":
        side_steps = uniform_steps(travel, n - 1)
        xs = track(even_between(rng, 0, free_x - sum(side_steps)), side_steps)
        if canvas.difficulty.both_ways and rng.integers(0, 2):
            xs = [free_x - x for x in xs]
        ys = [even_between(rng, 0, floor_y)] * n
    else:  # at_rest: lying on the ground
        xs, ys = [even_between(rng, 0, free_x)] * n, [floor_y] * n
    obj = {"color": color, "shape": "disc", "size": side, "x": xs, "y": ys}

    dy, dx = step_sizes(ys), step_sizes(xs)
    shown = {
        "falling": speed_pattern(dy) == "speeding_up" and dy[0] > 0 and not any(dx),
        "rising": speed_pattern(dy) == "slowing_down" and dy[0] < 0 and not any(dx),
        "sideways": speed_pattern(dx) == "constant" and not any(dy),
        "at_rest": not any(dx) and not any(dy),
    }[label]
    if not shown or max(ys) > floor_y:
        return None
    frames, n_distractors = render(rng, canvas, look, [obj], ground=ground)

    (x0, y0), (x1, y1) = centre(obj, 0), centre(obj, n - 1)
    options = {
        "falling": "It falls toward the ground",
        "rising": "It rises away from the ground",
        "sideways": "It moves sideways",
        "at_rest": "It stays at rest",
    }
    if label == "falling":
        reasoning = (
            f"The {color} ball's centre goes from y={y0} to y={y1} (y grows downward), moving down "
            f"{list_words(dy)} pixels per frame: it gains speed toward the ground, so it falls."
        )
    elif label == "rising":
        reasoning = (
            f"The {color} ball's centre goes from y={y0} up to y={y1} (y grows downward), moving up "
            f"{list_words(dy)} pixels per frame: it climbs away from the ground while slowing, so it rises."
        )
    elif label == "sideways":
        reasoning = (
            f"The {color} ball stays at height y={y0} while its centre goes from x={x0} to x={x1}, "
            f"so it moves sideways."
        )
    else:
        reasoning = f"The {color} ball lies on the ground at x={x0}, y={y0} in every frame, so it stays at rest."
    return Clip(
        family="gravity",
        label=label,
        frames=frames,
        question=f"The {color} ball is above a gray ground strip at the bottom. What does the ball do?",
        options=options,
        reasoning=reasoning,
        params={"objects": [obj], "ground_px": ground, "background": look.background, "distractors": n_distractors},
    )


def _two_objects(rng: np.random.Generator, label: str, canvas: Canvas) -> Clip | None:
    look = draw_look(rng, canvas.difficulty)
    first, second = pick_colors(rng, canvas, 2)
    side, n = canvas.object_size(rng), canvas.n_frames
    band = canvas.size // 2
    free = canvas.size - side
    movers = {
        "first_only": (True, False),
        "second_only": (False, True),
        "both": (True, True),
        "neither": (False, False),
    }[label]
    bands = [0, 1] if rng.integers(0, 2) else [1, 0]  # which square is in the top half
    objects: list[dict[str, Any]] = []
    for color, moves, b in zip((first, second), movers, bands):
        y = even_between(rng, b * band, b * band + band - side)
        if moves:
            steps = uniform_steps(canvas.travel(rng), n - 1)
            xs = track(even_between(rng, 0, free - sum(steps)), steps)
            if canvas.difficulty.both_ways and rng.integers(0, 2):
                xs = [free - x for x in xs]
        else:
            xs = [even_between(rng, 0, free)] * n
        objects.append({"color": color, "shape": "square", "size": side, "x": xs, "y": [y] * n})
    if tuple(o["x"][0] != o["x"][-1] for o in objects) != movers:
        return None
    frames, n_distractors = render(rng, canvas, look, objects)

    def says(obj: dict[str, Any]) -> str:
        (x0, y0), (x1, _) = centre(obj, 0), centre(obj, n - 1)
        if x0 == x1:
            return f"the {obj['color']} square stays at x={x0}, y={y0}"
        return f"the {obj['color']} square goes from x={x0} to x={x1}"

    options = {
        "first_only": f"Only the {first} square",
        "second_only": f"Only the {second} square",
        "both": "Both squares",
        "neither": "Neither square",
    }
    verdict = {
        "first_only": f"only the {first} square moves",
        "second_only": f"only the {second} square moves",
        "both": "both squares move",
        "neither": "neither square moves",
    }[label]
    reasoning = f"In the clip {says(objects[0])} and {says(objects[1])}, so {verdict}."
    reasoning = reasoning[0].upper() + reasoning[1:]
    return Clip(
        family="two_objects",
        label=label,
        frames=frames,
        question=f"There is a {first} square and a {second} square. Which of them moves?",
        options=options,
        reasoning=reasoning,
        params={"objects": objects, "background": look.background, "distractors": n_distractors},
    )


def _size(rng: np.random.Generator, label: str, canvas: Canvas) -> Clip | None:
    look = draw_look(rng, canvas.difficulty)
    (color,) = pick_colors(rng, canvas, 1)
    n = canvas.n_frames
    # Sides are multiples of 4, so a square that grows by 2 px on every side about a fixed, even
    # centre keeps even corners. The change per frame follows the difficulty's travel (at 56 px on
    # 4 frames: 8 px at easy, 4-8 at medium, 4 at hard), never under 4 px, and the square stays
    # between half the difficulty's smallest object and three quarters of the canvas.
    step = max(4, 4 * round(0.8 * canvas.travel(rng) / (n - 1) / 4))
    smallest = max(4, 4 * int(np.ceil(canvas.px(canvas.difficulty.object_frac[0]) / 8)))
    largest = 4 * int(canvas.size * 0.75 / 4)
    peak = int(rng.integers(1, n - 1))  # grows_then_shrinks: the frame it is largest in
    changes = {
        "growing": [step] * (n - 1),
        "shrinking": [-step] * (n - 1),
        "same_size": [0] * (n - 1),
        "grows_then_shrinks": [step] * peak + [-step] * (n - 1 - peak),
    }[label]
    offsets = track(0, changes)
    first = 2 * even_between(rng, (smallest - min(offsets)) / 2, (largest - max(offsets)) / 2)
    sides = [first + o for o in offsets]
    cx, cy = (even_between(rng, max(sides) / 2, canvas.size - max(sides) / 2) for _ in range(2))
    xs, ys = [cx - s // 2 for s in sides], [cy - s // 2 for s in sides]
    fits = all(0 <= p and p + s <= canvas.size for s, x, y in zip(sides, xs, ys) for p in (x, y))
    if size_pattern(sides) != label or not fits:
        return None
    obj = {"color": color, "shape": "square", "size": sides, "x": xs, "y": ys}
    frames, n_distractors = render(rng, canvas, look, [obj])

    options = {
        "growing": "It grows",
        "shrinking": "It shrinks",
        "same_size": "It keeps the same size",
        "grows_then_shrinks": "It grows, then shrinks",
    }
    seen = f"The {color} square, centred at x={cx}, y={cy}"
    if label == "same_size":
        reasoning = f"{seen}, is {sides[0]} pixels wide in every frame, so it keeps the same size."
    else:
        verdict = {
            "growing": "it is larger in every frame than in the one before, so it grows",
            "shrinking": "it is smaller in every frame than in the one before, so it shrinks",
            "grows_then_shrinks": f"it gets larger up to frame {peak + 1}, then smaller, so it grows, then shrinks",
        }[label]
        reasoning = f"{seen}, is {list_words(sides)} pixels wide in the {n} frames: {verdict}."
    return Clip(
        family="size",
        label=label,
        frames=frames,
        question=f"How does the size of the {color} square change during the clip?",
        options=options,
        reasoning=reasoning,
        params={"objects": [obj], "background": look.background, "distractors": n_distractors},
    )


COUNT_LABELS = ("one", "two", "three", "four")


def _count(rng: np.random.Generator, label: str, canvas: Canvas) -> Clip | None:
    look = draw_look(rng, canvas.difficulty)
    k, n = COUNT_LABELS.index(label) + 1, canvas.n_frames
    # Four horizontal lanes, one square at most in each, at least 2 px apart: squares never overlap
    # however they move. At 56 px a lane is 14 px, one row of the tiny model's vision patches.
    lane = 2 * (canvas.size // 8)
    side = min(canvas.object_size(rng), lane - 2)
    free = canvas.size - side
    palette = canvas.difficulty.palette
    # Colours repeat only when the palette is smaller than the count (easy has three).
    colors = [palette[i] for i in rng.choice(len(palette), size=k, replace=k > len(palette))]
    objects: list[dict[str, Any]] = []
    for color, row in zip(colors, sorted(int(r) for r in rng.choice(4, size=k, replace=False))):
        y = even_between(rng, row * lane, row * lane + lane - side - 2)
        steps = uniform_steps(canvas.travel(rng), n - 1)
        xs = track(even_between(rng, 0, free - sum(steps)), steps)
        if canvas.difficulty.both_ways and rng.integers(0, 2):
            xs = [free - x for x in xs]
        objects.append({"color": color, "shape": "square", "size": side, "x": xs, "y": [y] * n})
    if sum(o["x"][0] != o["x"][-1] for o in objects) != k or not apart(objects, n):
        return None
    frames, n_distractors = render(rng, canvas, look, objects)

    options = {
        "one": "One square moves",
        "two": "Two squares move",
        "three": "Three squares move",
        "four": "Four squares move",
    }
    paths = []
    for obj in objects:
        (x0, y0), (x1, _) = centre(obj, 0), centre(obj, n - 1)
        paths.append(f"the {obj['color']} square at y={y0} goes from x={x0} to x={x1}")
    still = {0: "", 1: ", and the gray square stays where it is"}.get(
        n_distractors, ", and the gray squares stay where they are"
    )
    reasoning = f"From top to bottom, {'; '.join(paths)}. That is {label} moving square{'s' if k > 1 else ''}{still}."
    return Clip(
        family="count",
        label=label,
        frames=frames,
        question="How many squares move during the clip?",
        options=options,
        reasoning=reasoning[0].upper() + reasoning[1:],
        params={"objects": objects, "lane_px": lane, "background": look.background, "distractors": n_distractors},
    )


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("direction", ("left", "right", "up", "down"), _direction),
        Family("speed", ("speeding_up", "slowing_down", "constant", "not_moving"), _speed),
        Family("gravity", ("falling", "rising", "sideways", "at_rest"), _gravity),
        Family("two_objects", ("first_only", "second_only", "both", "neither"), _two_objects),
        Family("size", ("growing", "shrinking", "same_size", "grows_then_shrinks"), _size),
        Family("count", COUNT_LABELS, _count),
    )
}
DEFAULT_FAMILIES = ("direction", "speed", "gravity", "two_objects")  # why the first four: the module docstring
