"""Video and image input for Qwen-VL style models (Qwen2.5-VL, Qwen3-VL, Cosmos3-Edge) without torchvision.

Decode with PyAV, sample frames and resize as qwen-vl-utils does, then rescale, normalise and
patchify into the exact layout of transformers' Qwen2-VL / Qwen3-VL processors:

    pixel_values [grid_t * grid_h * grid_w, C * temporal_patch * patch * patch]

rows in the 2x2 spatial-merge order, so the model's vision tower can consume them directly. What differs
between families is a `VisionLayout` (`cosmos_train.vision.layout`; each family's spec names one):
patch size (14 Qwen2.5-VL, 16 Qwen3-VL), temporal patch (2; 1 for Cosmos3-Edge), normalisation (CLIP
statistics; 0.5 / 0.5 for Qwen3-VL) and whether the prompt carries a `<t seconds>` timestamp before each
temporal patch of a video (Qwen3-VL and Cosmos3-Edge: `VisionInput.timestamps`, from the sampled
frames' times in the source video as transformers' Qwen3VLProcessor computes them).

    settings = VisionSettings.from_part({"type": "video", "video": "clip.mp4", "fps": 1, "max_pixels": 81920})
    frames, sample_fps = read_video("clip.mp4", settings)  # sampled and resized, uint8 [T, 3, H, W]
    item = preprocess_video(frames, settings, sample_fps)  # VisionInput
    item = prepare_video("clip.mp4", settings)             # the two steps at once
    item = prepare_video("clip.mp4", settings, family_of("qwen3_vl").vision_layout)  # 16 px patches, timestamps

Resize kernels, chosen to match the reference pipeline bit for bit where it can be matched:
- video frames: torch's bicubic antialiased interpolate on the uint8 frames themselves (its uint8 kernel
  rounds internally). That is exactly what torchvision's tensor resize does with uint8 frames (torchvision
  0.28), which qwen-vl-utils' fetch_video and transformers' Qwen2VL / Qwen3VL video processors both use;
  interpolating float copies and rounding differs from it by up to ~20 levels on pixel noise.
- images: PIL bicubic on the uint8 image, as qwen-vl-utils' fetch_image and transformers'
  PIL image processor do (the torchvision image processor then sees an already sized image).
The two kernels agree to within a level or two on natural pictures; PIL rounds to uint8 between
its horizontal and vertical passes, torch does not, so on pixel noise they can differ more.

Decoding is sized for DataLoader workers: only the needed frames are converted to RGB, decoding
stops after the last needed frame, and a `video_start` seeks to the keyframe before it.

A video may also be a frames archive, `<name>.npz` holding `frames` (uint8 [T, H, W, 3], RGB) and `fps`
(the rate they were captured at): sampled and resized by the same rules, with no decoder. The synthetic
dataset writes them with `video_format="npz"`, so a machine without PyAV trains on it (scripts/gpu_check.sh);
PyAV is imported only when a container file is opened.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import os
import zipfile
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, UnidentifiedImageError

from cosmos_train.errors import MediaError
from cosmos_train.vision.layout import MERGE_SIZE, PATCH_SIZE, QWEN2_VL_LAYOUT, VisionLayout
from cosmos_train.vision.settings import VisionSettings, VisionSettingsError

if TYPE_CHECKING:
    import av

__all__ = [
    "QWEN2_VL_LAYOUT",
    "MediaError",
    "VisionInput",
    "VisionLayout",
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
    "sampled_frame_times",
    "sampled_frames",
]

# Frames resized per interpolate call: bounds the kernel's working buffers for long high-resolution clips.
_RESIZE_CHUNK = 16
# The suffix of a frames archive (np.savez: uint8 `frames` [T, H, W, 3] and `fps`), read without a decoder.
FRAMES_ARCHIVE_SUFFIX = ".npz"
# Frames the container may over-report (edit lists, a truncated tail) before a shortfall is an error.
_FRAME_COUNT_SLACK = 2

MediaSource = str | os.PathLike
# What load_image opens: a file, an image already in memory, or its encoded bytes.
ImageSource = MediaSource | Image.Image | bytes


@dataclasses.dataclass
class VisionInput:
    """One image or video, ready for the model.

    pixel_values: float32 [grid_t * grid_h * grid_w, 3 * temporal_patch * patch * patch].
    grid_thw: int64 [3] = (grid_t, grid_h, grid_w) in patches (grid_t in temporal patches).
    second_per_grid_t: seconds covered by one temporal patch (videos); None for images.
    timestamps: videos of a frame-timestamp layout: the time in seconds of each temporal patch (the mean of
        its first and last frame's time in the source video), written into the prompt; None otherwise.
    """

    pixel_values: torch.Tensor
    grid_thw: torch.Tensor
    second_per_grid_t: float | None
    timestamps: tuple[float, ...] | None = None
    merge_size: int = MERGE_SIZE

    @property
    def num_tokens(self) -> int:
        """LLM tokens after the spatial merge: the count of vision pad tokens in the prompt."""
        return int(self.grid_thw.prod()) // (self.merge_size * self.merge_size)


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


def _av() -> ModuleType:
    """PyAV, imported when a container file is opened."""
    # why: PyAV bundles ffmpeg (~36 MB); frames archives and images never need it, so a training machine fed
    # those runs without it (scripts/gpu_check.sh ships no PyAV wheel).
    import av

    return av


def _count_packets(path: Path) -> int:
    """Frame count by reading packets (no decoding), for containers that do not record it
    (mkv, webm). A separate open, because seeking back to the start is not always allowed."""
    with _av().open(str(path)) as container:
        return sum(1 for packet in container.demux(video=0) if packet.size > 0)


def _frame_index(pts: int, start_time: int, time_base: float, fps: float) -> int:
    return round((pts - start_time) * time_base * fps)


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
    av = _av()
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
    out: list[np.ndarray] = []  # out[k] is the frame for indices[k], filled in order
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
        if not use_pts:
            index = counter
        elif frame.pts is None:
            raise MediaError(path, "frames carry no timestamps, so video_start cannot be honoured")
        else:
            index = _frame_index(frame.pts, start_time, time_base, fps)
        last_index, last_frame = index, frame
        # A frame serves every wanted index up to it: exact for constant frame rate, and the
        # nearest later frame where a variable-rate stream skips a number. (Without a seek,
        # frames are numbered by decode count, exactly as decord/torchcodec index them.)
        while wanted < len(indices) and indices[wanted] <= index:
            if index not in arrays:
                arrays[index] = frame.to_ndarray(format="rgb24")
            out.append(arrays[index])
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
        out.extend([tail] * (len(indices) - wanted))
    return np.stack(out)


@dataclasses.dataclass(frozen=True)
class _Sampling:
    indices: list[int]  # frame numbers in presentation order
    fps: float  # the stream's frame rate
    total_frames: int
    sample_fps: float


def _sampling(local: Path, stream: av.video.stream.VideoStream, settings: VisionSettings) -> _Sampling:
    """Which frames qwen-vl-utils' fetch_video samples from `stream` under `settings`."""
    total_frames = stream.frames or _count_packets(local)
    fps = float(stream.average_rate or stream.guessed_rate or 0)
    return _sampling_of(local, total_frames, fps, settings)


def _sampling_of(local: Path, total_frames: int, fps: float, settings: VisionSettings) -> _Sampling:
    """Which of `total_frames` frames at `fps` qwen-vl-utils' fetch_video samples under `settings`."""
    if total_frames <= 0:
        raise MediaError(local, "the video stream has no frames")
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
    return _Sampling(indices, fps, total_frames, nframes / max(last - first + 1, 1e-6) * fps)


def _read_archive(local: Path) -> tuple[np.ndarray, float]:
    """(uint8 frames [T, H, W, 3], fps) of a frames archive."""
    try:
        with np.load(local, allow_pickle=False) as archive:
            frames, fps = archive["frames"], float(archive["fps"])
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile) as error:
        raise MediaError(
            local, f"not a frames archive (an .npz with uint8 'frames' [T, H, W, 3] and 'fps'): {error}"
        ) from error
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise MediaError(local, f"'frames' must be uint8 [T, H, W, 3], got {frames.dtype} {list(frames.shape)}")
    if not np.isfinite(fps):
        raise MediaError(local, f"'fps' must be a finite number, got {fps}")
    return frames, fps


def _open_video(local: Path) -> av.container.InputContainer:
    container = _av().open(str(local))
    if not container.streams.video:
        container.close()
        raise MediaError(local, "no video stream")
    return container


def sampled_frames(path: MediaSource, settings: VisionSettings | None = None) -> tuple[list[int], float, int]:
    """(frame numbers, the stream's frame rate, its frame count) of the frames `read_video(path, settings)`
    samples, read from the container without decoding: the video metadata transformers' processors take."""
    settings = settings or VisionSettings()
    local = _local_path(path)
    if local.suffix.lower() == FRAMES_ARCHIVE_SUFFIX:
        frames, fps = _read_archive(local)
        sampling = _sampling_of(local, len(frames), fps, settings)
        return sampling.indices, sampling.fps, sampling.total_frames
    try:
        with _open_video(local) as container:
            sampling = _sampling(local, container.streams.video[0], settings)
    except _av().FFmpegError as error:
        raise MediaError(local, f"cannot decode: {error}") from error
    return sampling.indices, sampling.fps, sampling.total_frames


def sampled_frame_times(path: MediaSource, settings: VisionSettings | None = None) -> list[float]:
    """Times in seconds (frame number / frame rate) of the frames `read_video(path, settings)` samples:
    what Qwen3-VL's processor computes its timestamps from."""
    indices, fps, _ = sampled_frames(path, settings)
    return [index / fps for index in indices]


def read_video(path: MediaSource, settings: VisionSettings | None = None) -> tuple[torch.Tensor, float]:
    """Decode, sample and resize a video as qwen-vl-utils' fetch_video does.

    Returns (frames uint8 [T, 3, H, W] with H, W multiples of settings.factor, sample_fps): the frames the
    model sees and the rate they were sampled at. Raises MediaError naming the file when it is
    missing, unreadable, has no video stream or too few frames for the requested sampling.
    """
    settings = settings or VisionSettings()
    local = _local_path(path)
    if local.suffix.lower() == FRAMES_ARCHIVE_SUFFIX:
        archived, fps = _read_archive(local)
        sampling = _sampling_of(local, len(archived), fps, settings)
        rgb = archived[sampling.indices]
    else:
        try:
            with _open_video(local) as container:
                stream = container.streams.video[0]
                sampling = _sampling(local, stream, settings)
                rgb = _decode_indices(local, container, stream, sampling.indices, sampling.fps, sampling.total_frames)
        except _av().FFmpegError as error:
            raise MediaError(local, f"cannot decode: {error}") from error
    nframes, sample_fps = len(sampling.indices), sampling.sample_fps
    frames = torch.from_numpy(rgb).permute(0, 3, 1, 2)
    height, width = settings.video_size(frames.shape[2], frames.shape[3], nframes)
    return resize_frames(frames, height, width), sample_fps


# ---------------------------------------------------------------- resizing and patchify


def resize_frames(frames: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Bicubic, antialiased resize of uint8 [T, C, H, W] frames to uint8: torchvision's tensor resize of
    uint8 frames (used by qwen-vl-utils and the Qwen-VL video processors), in plain torch."""
    if frames.shape[-2:] == (height, width):
        return frames
    chunks = [
        F.interpolate(
            frames[start : start + _RESIZE_CHUNK].contiguous(),
            size=(height, width),
            mode="bicubic",
            align_corners=False,
            antialias=True,
        )
        for start in range(0, frames.shape[0], _RESIZE_CHUNK)
    ]
    return torch.cat(chunks)


def normalize_frames(frames: torch.Tensor, layout: VisionLayout = QWEN2_VL_LAYOUT) -> torch.Tensor:
    """uint8 [T, C, H, W] -> float32, rescaled by 1/255 then normalised with the layout's mean/std
    (the processors' do_rescale + do_normalize)."""
    mean = torch.tensor(layout.image_mean, dtype=torch.float32).view(1, -1, 1, 1)
    std = torch.tensor(layout.image_std, dtype=torch.float32).view(1, -1, 1, 1)
    # In place after the one float copy: same arithmetic, faster than out-of-place broadcasts.
    return frames.to(torch.float32, copy=True).mul_(1.0 / 255.0).sub_(mean).div_(std)


def patchify(frames: torch.Tensor, layout: VisionLayout = QWEN2_VL_LAYOUT) -> tuple[torch.Tensor, torch.Tensor]:
    """float [T, C, H, W] (H, W multiples of layout.factor) -> (pixel_values [grid_t*grid_h*grid_w,
    C*temporal*patch*patch], grid_thw [3]); T is padded to a multiple of the temporal patch by repeating the
    last frame.

    Rows run over (t, h/m, w/m, m, m) for merge size m: the patches of each merge group are adjacent,
    which is what the vision tower's patch merger expects. Each row is (C, temporal, patch, patch), as
    Qwen2VLVideoProcessor.patchify and Qwen3VLVideoProcessor.patchify lay them out, or (patch, patch, C,
    temporal) for channels-last layouts (Cosmos3EdgeImageProcessor.patchify).
    """
    patch, merge, temporal = layout.patch_size, layout.merge_size, layout.temporal_patch_size
    num_frames, channels, height, width = frames.shape
    if height % layout.factor or width % layout.factor:
        raise ValueError(f"frame size {height}x{width} is not a multiple of {layout.factor}")
    if pad := -num_frames % temporal:
        frames = torch.cat([frames, frames[-1:].expand(pad, -1, -1, -1)])
        num_frames += pad
    grid_t = num_frames // temporal
    grid_h, grid_w = height // patch, width // patch
    patches = frames.reshape(grid_t, temporal, channels, grid_h // merge, merge, patch, grid_w // merge, merge, patch)
    # -> (grid_t, h/m, w/m, m, m) then each patch's values: (C, temporal, patch, patch) or (patch, patch, C, temporal)
    inner = (5, 8, 2, 1) if layout.channels_last_patches else (2, 1, 5, 8)
    patches = patches.permute(0, 3, 6, 4, 7, *inner)
    pixel_values = patches.reshape(grid_t * grid_h * grid_w, channels * temporal * patch * patch)
    return pixel_values, torch.tensor([grid_t, grid_h, grid_w], dtype=torch.long)


def patch_timestamps(frame_times: list[float], temporal_patch_size: int) -> tuple[float, ...]:
    """One time per temporal patch: the mean of its first and last frame's time, the last frame repeated to
    fill the final patch (transformers' Qwen3VLProcessor._calculate_timestamps)."""
    times = list(frame_times)
    if pad := -len(times) % temporal_patch_size:
        times += [times[-1]] * pad
    return tuple((times[i] + times[i + temporal_patch_size - 1]) / 2 for i in range(0, len(times), temporal_patch_size))


def _is_sized(height: int, width: int, factor: int = PATCH_SIZE * MERGE_SIZE) -> bool:
    return height % factor == 0 and width % factor == 0


def _check_frames(frames: torch.Tensor, what: str) -> None:
    if not isinstance(frames, torch.Tensor) or frames.dtype != torch.uint8:
        raise TypeError(f"{what} must be a uint8 torch tensor, got {getattr(frames, 'dtype', type(frames))}")


def preprocess_video(
    frames: torch.Tensor,
    settings: VisionSettings | None,
    sample_fps: float,
    layout: VisionLayout = QWEN2_VL_LAYOUT,
    frame_times: list[float] | None = None,
) -> VisionInput:
    """uint8 [T, 3, H, W] frames sampled at `sample_fps` -> VisionInput in `layout`.

    frame_times: each frame's time in seconds in its source video (`sampled_frame_times`), for layouts with
    frame timestamps; None takes the frames as a clip starting at 0 s, `1 / sample_fps` apart.
    Frames whose sides are multiples of layout.factor are taken as sized (read_video's output) and are
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
    num_frames = frames.shape[0]
    if not _is_sized(frames.shape[2], frames.shape[3], layout.factor):
        height, width = layout.settings(settings).video_size(frames.shape[2], frames.shape[3], num_frames)
        frames = resize_frames(frames, height, width)
    pixel_values, grid_thw = patchify(normalize_frames(frames, layout), layout)
    timestamps = None
    if layout.frame_timestamps:
        if frame_times is None:
            frame_times = [i / sample_fps for i in range(num_frames)]
        if len(frame_times) != num_frames:
            raise ValueError(f"{len(frame_times)} frame times for {num_frames} frames")
        timestamps = patch_timestamps(frame_times, layout.temporal_patch_size)
    return VisionInput(pixel_values, grid_thw, layout.temporal_patch_size / sample_fps, timestamps, layout.merge_size)


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


def load_image(source: ImageSource, settings: VisionSettings | None = None) -> torch.Tensor:
    """Open an image (path, PIL image or encoded bytes), convert to RGB and resize as
    qwen-vl-utils' fetch_image does. Returns uint8 [3, H, W], H and W multiples of settings.factor."""
    settings = settings or VisionSettings()
    name: str | Path
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
    image: torch.Tensor | Image.Image, settings: VisionSettings | None = None, layout: VisionLayout = QWEN2_VL_LAYOUT
) -> VisionInput:
    """An image (uint8 [3, H, W] or PIL) -> VisionInput with grid_t = 1: the frame is repeated
    over the temporal patch, as the Qwen2-VL / Qwen3-VL image processors do.

    As in preprocess_video, an image with sides multiples of layout.factor (load_image's output) is
    taken as sized; a PIL image or other sizes are resized per `settings`."""
    settings = layout.settings(settings)
    if isinstance(image, Image.Image):
        image = load_image(image, settings)
    _check_frames(image, "image")
    if image.ndim != 3 or image.shape[0] != 3:
        raise ValueError(f"an image must be [3, H, W], got {list(image.shape)}")
    if not _is_sized(image.shape[1], image.shape[2], layout.factor):
        pil = _resize_image(Image.fromarray(image.permute(1, 2, 0).numpy()), settings)
        image = torch.from_numpy(np.asarray(pil).copy()).permute(2, 0, 1)
    frames = normalize_frames(image.unsqueeze(0), layout)
    pixel_values, grid_thw = patchify(frames.expand(layout.temporal_patch_size, -1, -1, -1), layout)
    return VisionInput(pixel_values, grid_thw, None, None, layout.merge_size)


def prepare_video(
    path: MediaSource, settings: VisionSettings | None = None, layout: VisionLayout = QWEN2_VL_LAYOUT
) -> VisionInput:
    """read_video + preprocess_video (with the frames' times when the layout writes timestamps)."""
    settings = layout.settings(settings)
    frames, sample_fps = read_video(path, settings)
    times = sampled_frame_times(path, settings) if layout.frame_timestamps else None
    return preprocess_video(frames, settings, sample_fps, layout, times)


def prepare_image(
    source: MediaSource | Image.Image | bytes,
    settings: VisionSettings | None = None,
    layout: VisionLayout = QWEN2_VL_LAYOUT,
) -> VisionInput:
    """load_image + preprocess_image."""
    settings = layout.settings(settings)
    return preprocess_image(load_image(source, settings), settings, layout)
