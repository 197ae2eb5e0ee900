"""Per-media vision settings and the qwen-vl-utils sizing rules (frame count, resize target).

A chat message part such as ``{"type": "video", "video": "clip.mp4", "fps": 1, "max_pixels": 81920}``
carries these settings as extra keys; `VisionSettings.from_part` reads and checks them. The rules
below copy qwen-vl-utils' ``vision_process.py`` (the Qwen2.5-VL release: ``smart_resize``,
``smart_nframes``, ``calculate_video_frame_range`` and the pixel budget of ``fetch_video``), so a
model post-trained here sees the same frames and sizes as with the Qwen/Cosmos-Reason tooling.

One deliberate difference: qwen-vl-utils reads the total-video pixel budget from the
``VIDEO_MAX_PIXELS`` environment variable; here it is the ``total_pixels`` setting only, so the
config file is the single source of truth.

`factor` is the model's pixels per merged token side (patch size x spatial merge: 28 for Qwen2.5-VL,
32 for Qwen3-VL and Cosmos3-Edge). Sizes are multiples of it and the default pixel bounds are token
counts times factor**2, as qwen-vl-utils computes them from `image_patch_size` since its Qwen3-VL
release (for 28 they equal the Qwen2.5-VL constants). It is not a message-part key: `encode_chat` sets it
from the model family (`cosmos_train.vision.layout.VisionLayout`).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from typing import Any

from cosmos_train.errors import DataError

# qwen-vl-utils constants (Qwen2.5-VL: patch 14 x spatial merge 2 = 28 pixels per token side).
IMAGE_FACTOR = 28
MAX_RATIO = 200
# Token bounds; pixels = tokens * factor**2 (qwen-vl-utils' *_TOKEN_NUM and MODEL_SEQ_LEN).
IMAGE_MIN_TOKENS, IMAGE_MAX_TOKENS = 4, 16384
VIDEO_MIN_TOKENS, VIDEO_MAX_TOKENS = 128, 768
VIDEO_TOTAL_TOKENS = 128000 * 0.9  # 128k tokens of context, 90% of it for video
MIN_PIXELS = IMAGE_MIN_TOKENS * IMAGE_FACTOR**2
MAX_PIXELS = IMAGE_MAX_TOKENS * IMAGE_FACTOR**2
VIDEO_MAX_PIXELS = VIDEO_MAX_TOKENS * IMAGE_FACTOR**2
FRAME_FACTOR = 2
FPS = 2.0
FPS_MIN_FRAMES = 4
FPS_MAX_FRAMES = 768

VISION_KEYS = (
    "fps",
    "nframes",
    "min_frames",
    "max_frames",
    "max_pixels",
    "min_pixels",
    "total_pixels",
    "resized_height",
    "resized_width",
    "video_start",
    "video_end",
)
_FLOAT_KEYS = ("fps", "video_start", "video_end")
_INT_KEYS = tuple(k for k in VISION_KEYS if k not in _FLOAT_KEYS)


class VisionSettingsError(DataError):
    """A vision setting is unknown (a likely typo), has the wrong type, or contradicts another."""


def round_by_factor(number: float, factor: int) -> int:
    return round(number / factor) * factor


def ceil_by_factor(number: float, factor: int) -> int:
    return math.ceil(number / factor) * factor


def floor_by_factor(number: float, factor: int) -> int:
    return math.floor(number / factor) * factor


def smart_resize(
    height: int,
    width: int,
    factor: int = IMAGE_FACTOR,
    min_pixels: float = MIN_PIXELS,
    max_pixels: float = MAX_PIXELS,
) -> tuple[int, int]:
    """qwen-vl-utils' smart_resize: sides multiples of `factor`, area in [min_pixels, max_pixels]
    (min wins when the two conflict, as upstream), aspect ratio kept as closely as possible.

    Not idempotent in general (a size under min_pixels chosen because of max_pixels grows when
    fed back), so the pipeline applies it once: in read_video / load_image.
    """
    if min(height, width) <= 0:
        raise ValueError(f"cannot resize an empty image of {height}x{width}")
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(
            f"absolute aspect ratio must be smaller than {MAX_RATIO}, got {max(height, width) / min(height, width)}"
        )
    h_bar = max(factor, round_by_factor(height, factor))
    w_bar = max(factor, round_by_factor(width, factor))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, floor_by_factor(height / beta, factor))
        w_bar = max(factor, floor_by_factor(width / beta, factor))
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = ceil_by_factor(height * beta, factor)
        w_bar = ceil_by_factor(width * beta, factor)
    return h_bar, w_bar


def _check_number(key: str, value: Any) -> float | int:
    # bool is an int subclass; `"fps": true` is a mistake, not 1 frame per second.
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise VisionSettingsError(f"vision setting {key!r} must be a number, got {value!r}")
    if key in _INT_KEYS:
        if isinstance(value, float) and not value.is_integer():
            raise VisionSettingsError(f"vision setting {key!r} must be a whole number, got {value!r}")
        return int(value)
    return float(value)


@dataclasses.dataclass(frozen=True)
class VisionSettings:
    """How one image or video becomes model input. None means the qwen-vl-utils default.

    fps: frames sampled per second of video (default 2.0); exclusive with nframes.
    nframes: exact number of frames to sample (rounded to an even number).
    min_frames / max_frames: bounds on the fps-derived frame count (default 4 / 768).
    min_pixels / max_pixels: bounds on the area of each frame or image after resizing
        (video default 128*28*28 / 768*28*28, image default 4*28*28 / 16384*28*28).
    total_pixels: budget for the whole video; each frame gets total_pixels / nframes * 2 at most.
    resized_height / resized_width: explicit size (rounded to multiples of 28); both or neither.
    video_start / video_end: the time range of the video to sample, in seconds.
    factor: pixels per merged token side of the model (28 Qwen2.5-VL, 32 Qwen3-VL); not a part key.
    """

    fps: float | None = None
    nframes: int | None = None
    min_frames: int | None = None
    max_frames: int | None = None
    max_pixels: int | None = None
    min_pixels: int | None = None
    total_pixels: int | None = None
    resized_height: int | None = None
    resized_width: int | None = None
    video_start: float | None = None
    video_end: float | None = None
    factor: int = IMAGE_FACTOR

    def __post_init__(self) -> None:
        if isinstance(self.factor, bool) or not isinstance(self.factor, int) or self.factor <= 0:
            raise VisionSettingsError(f"vision factor must be a positive whole number of pixels, got {self.factor!r}")
        for key in VISION_KEYS:
            value = getattr(self, key)
            if value is None:
                continue
            value = _check_number(key, value)
            object.__setattr__(self, key, value)  # frozen: normalise ints/floats once here
            if key in ("video_start", "video_end"):
                if value < 0:
                    raise VisionSettingsError(f"vision setting {key!r} must be >= 0 seconds, got {value}")
            elif value <= 0:
                raise VisionSettingsError(f"vision setting {key!r} must be > 0, got {value}")
        if self.fps is not None and self.nframes is not None:
            raise VisionSettingsError("vision settings 'fps' and 'nframes' are exclusive; give one of them")
        if self.min_frames is not None and self.max_frames is not None and self.min_frames > self.max_frames:
            raise VisionSettingsError(
                f"vision setting 'min_frames' ({self.min_frames}) exceeds 'max_frames' ({self.max_frames})"
            )
        if self.min_pixels is not None and self.max_pixels is not None and self.min_pixels > self.max_pixels:
            raise VisionSettingsError(
                f"vision setting 'min_pixels' ({self.min_pixels}) exceeds 'max_pixels' ({self.max_pixels})"
            )
        if (self.resized_height is None) != (self.resized_width is None):
            raise VisionSettingsError("vision settings 'resized_height' and 'resized_width' go together")
        if self.video_start is not None and self.video_end is not None and self.video_end <= self.video_start:
            raise VisionSettingsError(
                f"vision setting 'video_end' ({self.video_end}) must be after 'video_start' ({self.video_start})"
            )

    @classmethod
    def from_part(cls, part: Mapping[str, Any], defaults: VisionSettings | None = None) -> VisionSettings:
        """Read the vision keys of a chat message part, on top of `defaults` (e.g. from the config).

        Other keys ("type", "video", "image", "text", ...) are ignored, but a key that looks like
        a misspelt vision key ("max_pixel", "frames") raises, so a typo cannot silently fall back
        to a default. A part giving `nframes` overrides a default `fps` and vice versa.
        """
        if not isinstance(part, Mapping):
            raise VisionSettingsError(f"a message part must be a mapping, got {type(part).__name__}")
        given: dict[str, Any] = {}
        for key, value in part.items():
            if key in VISION_KEYS:
                given[key] = value
                continue
            close = difflib.get_close_matches(str(key), VISION_KEYS, n=1, cutoff=0.8)
            if close:
                raise VisionSettingsError(f"unknown vision setting {key!r} in message part; did you mean {close[0]!r}?")
        merged = dataclasses.asdict(defaults) if defaults is not None else {}
        if "nframes" in given:
            merged.pop("fps", None)
        if "fps" in given:
            merged.pop("nframes", None)
        if "resized_height" in given or "resized_width" in given:
            merged.pop("resized_height", None)
            merged.pop("resized_width", None)
        merged.update(given)
        return cls(**{k: v for k, v in merged.items() if v is not None})

    # ---- the qwen-vl-utils rules, resolved against these settings ----

    def frame_range(self, total_frames: int, video_fps: float) -> tuple[int, int]:
        """First and last frame index (inclusive) inside [video_start, video_end]
        (qwen-vl-utils calculate_video_frame_range)."""
        if self.video_start is None and self.video_end is None:
            return 0, total_frames - 1
        duration = total_frames / video_fps
        start = 0
        if self.video_start is not None:
            start = math.ceil(max(0.0, min(self.video_start, duration)) * video_fps)
        end = total_frames - 1
        if self.video_end is not None:
            end = min(math.floor(max(0.0, min(self.video_end, duration)) * video_fps), total_frames - 1)
        if start >= end:
            raise ValueError(
                f"time range [{self.video_start}, {self.video_end}] s selects no frames of a "
                f"{duration:.2f} s video ({total_frames} frames at {video_fps:g} fps)"
            )
        return start, end

    def num_frames(self, total_frames: int, video_fps: float) -> int:
        """How many frames to sample from `total_frames` frames at `video_fps` (smart_nframes)."""
        if self.nframes is not None:
            nframes = round_by_factor(self.nframes, FRAME_FACTOR)
        else:
            fps = self.fps if self.fps is not None else FPS
            min_frames = ceil_by_factor(
                self.min_frames if self.min_frames is not None else FPS_MIN_FRAMES, FRAME_FACTOR
            )
            max_frames = floor_by_factor(
                self.max_frames if self.max_frames is not None else min(FPS_MAX_FRAMES, total_frames),
                FRAME_FACTOR,
            )
            wanted = total_frames / video_fps * fps
            nframes = floor_by_factor(min(min(max(wanted, min_frames), max_frames), total_frames), FRAME_FACTOR)
        if not FRAME_FACTOR <= nframes <= total_frames:
            raise ValueError(
                f"cannot sample {nframes} frames from {total_frames}: the count must lie in "
                f"[{FRAME_FACTOR}, {total_frames}]"
            )
        return nframes

    def video_size(self, height: int, width: int, nframes: int) -> tuple[int, int]:
        """Per-frame size for a video of `nframes` frames of height x width (fetch_video's rules:
        the total budget is split over frame pairs and never pushes a frame under 1.05 * min)."""
        if self.resized_height is not None and self.resized_width is not None:
            return smart_resize(self.resized_height, self.resized_width, factor=self.factor)
        area = self.factor**2
        min_pixels = self.min_pixels if self.min_pixels is not None else VIDEO_MIN_TOKENS * area
        total_pixels = self.total_pixels if self.total_pixels is not None else int(VIDEO_TOTAL_TOKENS * area)
        max_pixels = max(min(VIDEO_MAX_TOKENS * area, total_pixels / nframes * FRAME_FACTOR), int(min_pixels * 1.05))
        if self.max_pixels is not None:
            max_pixels = min(self.max_pixels, max_pixels)
        return smart_resize(height, width, factor=self.factor, min_pixels=min_pixels, max_pixels=max_pixels)

    def image_size(self, height: int, width: int) -> tuple[int, int]:
        """Size for an image of height x width (fetch_image's rules)."""
        if self.resized_height is not None and self.resized_width is not None:
            return smart_resize(self.resized_height, self.resized_width, factor=self.factor)
        area = self.factor**2
        return smart_resize(
            height,
            width,
            factor=self.factor,
            min_pixels=self.min_pixels if self.min_pixels is not None else IMAGE_MIN_TOKENS * area,
            max_pixels=self.max_pixels if self.max_pixels is not None else IMAGE_MAX_TOKENS * area,
        )
