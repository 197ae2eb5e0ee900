"""Write and read back the short mp4 clips of the synthetic dataset with PyAV.

H.264 (libx264, High profile, crf 10, preset veryfast, one thread so the bytes do not depend on the machine's
core count, macroblock-tree rate control off so they do not depend on the process's memory) in yuv420p, which
every decoder handles; MPEG-4 part 2 when the bundled ffmpeg lacks libx264. Small flat-coloured clips come back
within a few grey levels of what was drawn.

Or, without PyAV, as frames archives (`write_frames_archive`: the exact pixels and the frame rate in an .npz),
which `cosmos_train.data.media` reads like a video. PyAV is imported only to encode or decode mp4.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from types import ModuleType

import numpy as np

# What dataset_info.json names as the codec of frames archives.
ARCHIVE_CODEC = "npz-frames"


def _av() -> ModuleType:
    # why: PyAV bundles ffmpeg (~36 MB); a synthetic dataset of frames archives is made without it (the GPU
    # check's machine has no PyAV: scripts/gpu_check.sh).
    import av

    return av


def pick_codec() -> str:
    return "libx264" if "libx264" in _av().codecs_available else "mpeg4"


def _check_frames(path: Path, frames: np.ndarray) -> None:
    if frames.dtype != np.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"{path}: frames must be uint8 [T, H, W, 3], got {frames.dtype} {frames.shape}")


def write_frames_archive(path: Path, frames: np.ndarray, fps: int) -> None:
    """Store uint8 RGB frames [T, H, W, 3] and their rate losslessly in `path` (.npz), readable without PyAV."""
    _check_frames(path, frames)
    with open(path, "wb") as f:
        np.savez_compressed(f, frames=frames, fps=np.float64(fps))


def write_mp4(path: Path, frames: np.ndarray, fps: int, codec: str | None = None) -> None:
    """Encode uint8 RGB frames [T, H, W, 3] (H and W even) into `path`."""
    _check_frames(path, frames)
    av = _av()
    t, h, w, _ = frames.shape
    if h % 2 or w % 2:
        raise ValueError(f"{path}: yuv420p needs an even frame size, got {w}x{h}")
    codec = codec or pick_codec()
    with av.open(str(path), mode="w", format="mp4") as container:
        stream = container.add_stream(codec, rate=Fraction(fps))
        if not isinstance(stream, av.VideoStream):
            raise ValueError(f"{codec} is not a video codec")
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        stream.thread_count = 1
        # mbtree=0: with x264's macroblock-tree on (preset veryfast and slower), the bytes depend on the process's
        # memory when a side is not a multiple of 16 (the 56 px clips): one clip encoded 200 times in one process
        # gave 6 different files, and one clip of a 68-clip dataset changed between two runs of the same seed.
        # With it off, all 200 were identical. 64 px clips were identical either way.
        x264 = {"crf": "10", "preset": "veryfast", "x264-params": "mbtree=0"}
        stream.options = x264 if codec == "libx264" else {"qscale": "2"}
        for frame in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def read_mp4(path: Path) -> np.ndarray:
    """Decode every frame of `path` into uint8 RGB [T, H, W, 3] (for checks and probes)."""
    with _av().open(str(path)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    if not frames:
        raise ValueError(f"{path}: no video frames decoded")
    return np.stack(frames)
