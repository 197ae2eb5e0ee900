"""Video and image input for Qwen2/2.5-VL models without torchvision.

Decode with PyAV, sample frames and resize as qwen-vl-utils does, then rescale, normalise and
patchify into the exact layout of transformers' Qwen2-VL processors:

    pixel_values [grid_t * grid_h * grid_w, C * temporal_patch(2) * patch(14) * patch(14)]

rows in the 2x2 spatial-merge order, so the model's vision tower can consume them directly.

    settings = VisionSettings.from_part({"type": "video", "video": "clip.mp4", "fps": 1, "max_pixels": 81920})
    frames, sample_fps = read_video("clip.mp4", settings)  # sampled and resized, uint8 [T, 3, H, W]
    item = preprocess_video(frames, settings, sample_fps)  # VisionInput
    item = prepare_video("clip.mp4", settings)             # the two steps at once

Resize kernels, chosen to match the reference pipeline bit for bit where it can be matched:
- video frames: torch bicubic with antialias on float, then clamp and round to uint8. That is
  exactly what torchvision's tensor resize does, which qwen-vl-utils' fetch_video and
  transformers' Qwen2VLVideoProcessor both use.
- images: PIL bicubic on the uint8 image, as qwen-vl-utils' fetch_image and transformers'
  PIL image processor do (the torchvision image processor then sees an already sized image).
The two kernels agree to within a level or two on natural pictures; PIL rounds to uint8 between
its horizontal and vertical passes, torch does not, so on pixel noise they can differ more.

Decoding is sized for DataLoader workers: only the needed frames are converted to RGB, decoding
stops after the last needed frame, and a `video_start` seeks to the keyframe before it.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import os
from pathlib import Path

import av
import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, UnidentifiedImageError

from cosmos_train.data.vision_settings import VisionSettings, VisionSettingsError
from cosmos_train.errors import MediaError

__all__ = [
    "MediaError",
    "VisionInput",
    "VisionSettings",
    "VisionSettingsError",
    "load_image",
    "normalize_frames",
    "patchify",
    "prepare_image",
    "prepare_video",
    "preprocess_image",
    "preprocess_video",
    "read_video",
    "resize_frames",
]

PATCH_SIZE = 14
MERGE_SIZE = 2
TEMPORAL_PATCH_SIZE = 2
# OpenAI CLIP statistics, the image_mean / image_std of every Qwen2-VL processor config.
IMAGE_MEAN = (0.48145466, 0.4578275, 0.40821073)
IMAGE_STD = (0.26862954, 0.26130258, 0.27577711)
# Frames resized per interpolate call: bounds the float32 copy of long high-resolution clips.
_RESIZE_CHUNK = 16
# Frames the container may over-report (edit lists, a truncated tail) before a shortfall is an error.
_FRAME_COUNT_SLACK = 2

MediaSource = str | os.PathLike




@dataclasses.dataclass
class VisionInput:
    """One image or video, ready for the model.

    pixel_values: float32 [grid_t * grid_h * grid_w, 3 * 2 * 14 * 14].
    grid_thw: int64 [3] = (grid_t, grid_h, grid_w) in 14-pixel patches (grid_t in frame pairs).
    second_per_grid_t: seconds covered by one temporal patch (videos); None for images.
    """

    pixel_values: torch.Tensor
    grid_thw: torch.Tensor
    second_per_grid_t: float | None

    @property
    def num_tokens(self) -> int:
        """LLM tokens after the 2x2 spatial merge: the count of vision pad tokens in the prompt."""
        return int(self.grid_thw.prod()) // (MERGE_SIZE * MERGE_SIZE)


# ---------------------------------------------------------------- decoding


def _local_path(source: MediaSource) -> Path:
    text = os.fspath(source)
    if text.startswith(("http://", "https://")):
        raise MediaError(text, "remote URLs are not supported; download the file first")
    if text.startswith("file://"):
        text = text[len("file://") :]
    path = Path(text)
    if not path.is_file():
        raise MediaError(path, "file not found" if not path.exists() else "not a regular file")
    if path.stat().st_size == 0:
        raise MediaError(path, "empty file")
    return path


def _count_packets(path: Path) -> int:
    """Frame count by reading packets (no decoding), for containers that do not record it
    (mkv, webm). A separate open, because seeking back to the start is not always allowed."""
    with av.open(str(path)) as container:
        return sum(1 for packet in container.demux(video=0) if packet.size > 0)


def _frame_index(frame: av.VideoFrame, start_time: int, time_base: float, fps: float) -> int:
    return round((frame.pts - start_time) * time_base * fps)


def _decode_indices(
    path: Path,
    container: av.container.InputContainer,
    stream: av.video.stream.VideoStream,
    indices: list[int],
    fps: float,
    total_frames: int,
) -> np.ndarray:
    """Decode the frames at `indices` (sorted, frame numbers in presentation order) as
    uint8 [len(indices), H, W, 3]."""
    start_time = stream.start_time or 0
    time_base = float(stream.time_base) if stream.time_base is not None else 0.0
    use_pts = indices[0] > 0 and time_base > 0
    if use_pts:
        # Seek to the keyframe at or before the first wanted frame; half a frame early so
        # rounding of the timestamp cannot land after it. Frame numbers then come from pts.
        target = start_time + int((indices[0] - 0.5) / fps / time_base)
        try:
            container.seek(max(target, start_time), stream=stream, backward=True, any_frame=False)
        except av.FFmpegError:
            pass  # not seekable (e.g. a raw stream): decode from the start, numbering by pts still
    out: list[np.ndarray | None] = [None] * len(indices)
    arrays: dict[int, np.ndarray] = {}  # frame number -> RGB, so repeated indices convert once
    wanted = 0
    last_index, last_frame = -1, None
    frames = container.decode(stream)
    for counter in itertools.count():
        try:
            frame = next(frames)
        except StopIteration:
            break
        except av.FFmpegError as error:
            raise MediaError(path, f"decoding failed after frame {last_index}: {error}") from error
        if use_pts and frame.pts is None:
            raise MediaError(path, "frames carry no timestamps, so video_start cannot be honoured")
        index = _frame_index(frame, start_time, time_base, fps) if use_pts else counter
        last_index, last_frame = index, frame
        # A frame serves every wanted index up to it: exact for constant frame rate, and the
        # nearest later frame where a variable-rate stream skips a number. (Without a seek,
        # frames are numbered by decode count, exactly as decord/torchcodec index them.)
        while wanted < len(indices) and indices[wanted] <= index:
            if index not in arrays:
                arrays[index] = frame.to_ndarray(format="rgb24")
            out[wanted] = arrays[index]
            wanted += 1
        if wanted == len(indices):
            break
    if wanted < len(indices):
        if last_frame is None:
            raise MediaError(path, "the video stream has no decodable frames")
        if indices[-1] - last_index > _FRAME_COUNT_SLACK:
            raise MediaError(
                path,
                f"decoding stopped at frame {last_index} but frame {indices[-1]} was needed "
                f"(the container reports {total_frames} frames); the file may be truncated",
            )
        tail = last_frame.to_ndarray(format="rgb24")
        for i in range(wanted, len(indices)):
            out[i] = tail
    return np.stack(out)


def read_video(path: MediaSource, settings: VisionSettings | None = None) -> tuple[torch.Tensor, float]:
    """Decode, sample and resize a video as qwen-vl-utils' fetch_video does.

    Returns (frames uint8 [T, 3, H, W] with H, W multiples of 28, sample_fps): the frames the
    model sees and the rate they were sampled at. Raises MediaError naming the file when it is
    missing, unreadable, has no video stream or too few frames for the requested sampling.
    """
    settings = settings or VisionSettings()
    local = _local_path(path)
    try:
        with av.open(str(local)) as container:
            if not container.streams.video:
                raise MediaError(local, "no video stream")
            stream = container.streams.video[0]
            total_frames = stream.frames or _count_packets(local)
            if total_frames <= 0:
                raise MediaError(local, "the video stream has no frames")
            fps = float(stream.average_rate or stream.guessed_rate or 0)
            if fps <= 0:
                raise MediaError(local, "the video stream has no frame rate")
            try:
                first, last = settings.frame_range(total_frames, fps)
                nframes = settings.num_frames(last - first + 1, fps)
            except ValueError as error:
                raise MediaError(local, str(error)) from error
            # qwen-vl-utils: torch.linspace(start, end, n).round(); float32 and round-half-even
            # like upstream so the chosen frames are the same.
            indices = torch.linspace(first, last, nframes).round().long().tolist()
            rgb = _decode_indices(local, container, stream, indices, fps, total_frames)
    except av.FFmpegError as error:
        raise MediaError(local, f"cannot decode: {error}") from error
    sample_fps = nframes / max(last - first + 1, 1e-6) * fps
    frames = torch.from_numpy(rgb).permute(0, 3, 1, 2)
    height, width = settings.video_size(frames.shape[2], frames.shape[3], nframes)
    return resize_frames(frames, height, width), sample_fps


# ---------------------------------------------------------------- resizing and patchify


def resize_frames(frames: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Bicubic, antialiased resize of uint8 [T, C, H, W] frames, rounded back to uint8:
    torchvision's tensor resize (used by qwen-vl-utils and Qwen2VLVideoProcessor), in plain torch."""
    if frames.shape[-2:] == (height, width):
        return frames
    chunks = []
    for start in range(0, frames.shape[0], _RESIZE_CHUNK):
        chunk = frames[start : start + _RESIZE_CHUNK].float()
        chunk = F.interpolate(
            chunk, size=(height, width), mode="bicubic", align_corners=False, antialias=True
        )
        chunks.append(chunk.clamp_(0, 255).round_().to(torch.uint8))
    return torch.cat(chunks)


def normalize_frames(frames: torch.Tensor) -> torch.Tensor:
    """uint8 [T, C, H, W] -> float32, rescaled by 1/255 then normalised with the CLIP mean/std
    (the processors' do_rescale + do_normalize)."""
    mean = torch.tensor(IMAGE_MEAN, dtype=torch.float32).view(1, -1, 1, 1)
    std = torch.tensor(IMAGE_STD, dtype=torch.float32).view(1, -1, 1, 1)
    # In place after the one float copy: same arithmetic, ~4x faster than out-of-place broadcasts.
    return frames.to(torch.float32, copy=True).mul_(1.0 / 255.0).sub_(mean).div_(std)


def patchify(frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """float [T, C, H, W] (H, W multiples of 28) -> (pixel_values [grid_t*grid_h*grid_w, C*2*14*14],
    grid_thw [3]) in Qwen2-VL's layout; T is padded to even by repeating the last frame.

    Rows run over (t, h/2, w/2, 2, 2): the four patches of each 2x2 merge group are adjacent,
    which is what the vision tower's patch merger expects. Each row is (C, temporal, 14, 14).
    """
    num_frames, channels, height, width = frames.shape
    if height % (PATCH_SIZE * MERGE_SIZE) or width % (PATCH_SIZE * MERGE_SIZE):
        raise ValueError(f"frame size {height}x{width} is not a multiple of {PATCH_SIZE * MERGE_SIZE}")
    if pad := -num_frames % TEMPORAL_PATCH_SIZE:
        frames = torch.cat([frames, frames[-1:].expand(pad, -1, -1, -1)])
        num_frames += pad
    grid_t = num_frames // TEMPORAL_PATCH_SIZE
    grid_h, grid_w = height // PATCH_SIZE, width // PATCH_SIZE
    patches = frames.reshape(
        grid_t,
        TEMPORAL_PATCH_SIZE,
        channels,
        grid_h // MERGE_SIZE,
        MERGE_SIZE,
        PATCH_SIZE,
        grid_w // MERGE_SIZE,
        MERGE_SIZE,
        PATCH_SIZE,
    )
    # -> (grid_t, h/2, w/2, 2, 2, C, temporal, 14, 14), as Qwen2VLVideoProcessor.patchify.
    patches = patches.permute(0, 3, 6, 4, 7, 2, 1, 5, 8)
    pixel_values = patches.reshape(
        grid_t * grid_h * grid_w, channels * TEMPORAL_PATCH_SIZE * PATCH_SIZE * PATCH_SIZE
    )
    return pixel_values, torch.tensor([grid_t, grid_h, grid_w], dtype=torch.long)


def _is_sized(height: int, width: int) -> bool:
    factor = PATCH_SIZE * MERGE_SIZE
    return height % factor == 0 and width % factor == 0


def _check_frames(frames: torch.Tensor, what: str) -> None:
    if not isinstance(frames, torch.Tensor) or frames.dtype != torch.uint8:
        raise TypeError(f"{what} must be a uint8 torch tensor, got {getattr(frames, 'dtype', type(frames))}")


def preprocess_video(frames: torch.Tensor, settings: VisionSettings | None, sample_fps: float) -> VisionInput:
    """uint8 [T, 3, H, W] frames sampled at `sample_fps` -> VisionInput.

    Frames whose sides are multiples of 28 are taken as sized (read_video's output) and are
    not resized again: qwen-vl-utils' rule is not idempotent when min_pixels exceeds max_pixels
    (the Cosmos-Reason default max_pixels=81920 is below the default min 128*28*28), and the HF
    processor after qwen-vl-utils leaves such frames alone too (its own bounds, 56*56 to
    16384*28*28 in the Qwen2.5-VL configs, are wide). Other frames are resized per `settings`.
    """
    _check_frames(frames, "video frames")
    if frames.ndim != 4 or frames.shape[1] != 3 or frames.shape[0] == 0:
        raise ValueError(f"video frames must be [T>0, 3, H, W], got {list(frames.shape)}")
    if not sample_fps > 0:
        raise ValueError(f"sample_fps must be > 0, got {sample_fps}")
    if not _is_sized(frames.shape[2], frames.shape[3]):
        height, width = (settings or VisionSettings()).video_size(
            frames.shape[2], frames.shape[3], frames.shape[0]
        )
        frames = resize_frames(frames, height, width)
    pixel_values, grid_thw = patchify(normalize_frames(frames))
    return VisionInput(pixel_values, grid_thw, TEMPORAL_PATCH_SIZE / sample_fps)


# ---------------------------------------------------------------- images


def _to_rgb(image: Image.Image) -> Image.Image:
    """qwen-vl-utils to_rgb: transparent pixels become white, not black."""
    if image.mode == "RGBA":
        background = Image.new("RGB", image.size, (255, 255, 255))
        background.paste(image, mask=image.split()[3])
        return background
    return image.convert("RGB")


def _resize_image(image: Image.Image, settings: VisionSettings) -> Image.Image:
    height, width = settings.image_size(image.height, image.width)
    if (image.height, image.width) == (height, width):
        return image
    return image.resize((width, height), resample=Image.Resampling.BICUBIC)


def load_image(
    source: MediaSource | Image.Image | bytes, settings: VisionSettings | None = None
) -> torch.Tensor:
    """Open an image (path, PIL image or encoded bytes), convert to RGB and resize as
    qwen-vl-utils' fetch_image does. Returns uint8 [3, H, W], H and W multiples of 28."""
    settings = settings or VisionSettings()
    if isinstance(source, Image.Image):
        name, image = "<PIL image>", source
    else:
        name = "<image bytes>" if isinstance(source, bytes) else _local_path(source)
        try:
            image = Image.open(io.BytesIO(source) if isinstance(source, bytes) else name)
            image.load()  # decode now so a truncated file fails here, with its name
        except (UnidentifiedImageError, OSError) as error:
            raise MediaError(name, f"cannot decode image: {error}") from error
    try:
        image = _resize_image(_to_rgb(image), settings)
    except ValueError as error:  # e.g. an aspect ratio over 200
        raise MediaError(name, str(error)) from error
    return torch.from_numpy(np.asarray(image).copy()).permute(2, 0, 1)


def preprocess_image(
    image: torch.Tensor | Image.Image, settings: VisionSettings | None = None
) -> VisionInput:
    """An image (uint8 [3, H, W] or PIL) -> VisionInput with grid_t = 1: the frame is repeated
    over the temporal patch, as the Qwen2-VL image processor does.

    As in preprocess_video, an image with sides multiples of 28 (load_image's output) is taken
    as sized; a PIL image or other sizes are resized per `settings`."""
    if isinstance(image, Image.Image):
        image = load_image(image, settings)
    _check_frames(image, "image")
    if image.ndim != 3 or image.shape[0] != 3:
        raise ValueError(f"an image must be [3, H, W], got {list(image.shape)}")
    if not _is_sized(image.shape[1], image.shape[2]):
        pil = _resize_image(Image.fromarray(image.permute(1, 2, 0).numpy()), settings or VisionSettings())
        image = torch.from_numpy(np.asarray(pil).copy()).permute(2, 0, 1)
    frames = normalize_frames(image.unsqueeze(0))
    pixel_values, grid_thw = patchify(frames.expand(TEMPORAL_PATCH_SIZE, -1, -1, -1))
    return VisionInput(pixel_values, grid_thw, None)


def prepare_video(path: MediaSource, settings: VisionSettings | None = None) -> VisionInput:
    """read_video + preprocess_video."""
    frames, sample_fps = read_video(path, settings)
    return preprocess_video(frames, settings, sample_fps)


def prepare_image(
    source: MediaSource | Image.Image | bytes, settings: VisionSettings | None = None
) -> VisionInput:
    """load_image + preprocess_image."""
    return preprocess_image(load_image(source, settings), settings)
