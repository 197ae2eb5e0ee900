"""Throughput of the video input pipeline: ours against decoding every frame and resizing naively.

    .venv/bin/python bench/video_pipeline.py [--seconds 10]

Both pipelines produce the same model input (same sampled frames, same target size, same
normalise + patchify); they differ in decoding and resizing:
- ours (cosmos_train.data.video.prepare_video): RGB-convert only the sampled frames, stop after
  the last one, seek for video_start, one batched torch bicubic resize.
- naive: decode and RGB-convert every frame, keep the sampled ones, PIL bicubic per frame.
Runs single-threaded in torch, as a DataLoader worker does. Clips are synthesised (moving
texture, libx264) in a temporary folder; prints a table of clips/s and sampled frames/s.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import av
import numpy as np
import torch
from PIL import Image

from cosmos_train.data.video import VisionInput, VisionSettings, normalize_frames, patchify, prepare_video


def write_clip(path: Path, seconds: float, fps: int, height: int, width: int) -> Path:
    """A textured pattern drifting one pixel per frame: cheap to make, realistic to decode."""
    n_frames = round(seconds * fps)
    rng = np.random.default_rng(0)
    texture = rng.integers(0, 256, (height // 8 + 2, (width + n_frames) // 8 + 2, 3), dtype=np.uint8)
    texture = np.asarray(
        Image.fromarray(texture).resize((texture.shape[1] * 8, texture.shape[0] * 8), Image.BILINEAR)
    )
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(n_frames):
            rgb = np.ascontiguousarray(texture[:height, i : i + width])
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def naive_prepare(path: Path, settings: VisionSettings) -> VisionInput:
    """Decode every frame to RGB, then sample and resize each kept frame with PIL."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        fps = float(stream.average_rate)
        every = [frame.to_ndarray(format="rgb24") for frame in container.decode(stream)]
    first, last = settings.frame_range(len(every), fps)
    nframes = settings.num_frames(last - first + 1, fps)
    indices = torch.linspace(first, last, nframes).round().long().tolist()
    height, width = settings.video_size(every[0].shape[0], every[0].shape[1], nframes)
    resized = [
        np.asarray(Image.fromarray(every[i]).resize((width, height), Image.Resampling.BICUBIC))
        for i in indices
    ]
    frames = torch.from_numpy(np.stack(resized)).permute(0, 3, 1, 2)
    pixel_values, grid_thw = patchify(normalize_frames(frames))
    sample_fps = nframes / (last - first + 1) * fps
    return VisionInput(pixel_values, grid_thw, 2 / sample_fps)


def measure(fn: Callable[[], VisionInput], min_seconds: float = 1.0) -> tuple[float, VisionInput]:
    result = fn()  # warm-up
    runs, start = 0, time.perf_counter()
    while time.perf_counter() - start < min_seconds or runs < 3:
        result = fn()
        runs += 1
    return (time.perf_counter() - start) / runs, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the long clips")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        clips = {
            "2s 112x112 30fps": write_clip(root / "small.mp4", 2, 30, 112, 112),
            f"{args.seconds:g}s 480x640 30fps": write_clip(root / "vga.mp4", args.seconds, 30, 480, 640),
            f"{args.seconds:g}s 720x1280 30fps": write_clip(root / "hd.mp4", args.seconds, 30, 720, 1280),
        }
        cases = [
            ("tiny: fps 2, <=112x112", VisionSettings(fps=2, min_pixels=28 * 28, max_pixels=112 * 112)),
            ("cosmos: fps 1, max 81920 px", VisionSettings(fps=1, max_pixels=81920)),
            ("cosmos, last 2 s", VisionSettings(fps=1, max_pixels=81920, video_start=args.seconds - 2)),
        ]
        header = f"{'clip':<22} {'settings':<28} {'pipeline':<7} {'frames':>6} {'size':>9} {'ms/clip':>8} {'clips/s':>8} {'frames/s':>9}"
        print(header)
        print("-" * len(header))
        for clip_name, path in clips.items():
            for case_name, settings in cases:
                if case_name.endswith("last 2 s") and "112x112" in clip_name:
                    continue
                results = {}
                for pipeline, fn in (("ours", prepare_video), ("naive", naive_prepare)):
                    seconds, item = measure(lambda fn=fn, path=path, settings=settings: fn(path, settings))
                    results[pipeline] = item
                    t, h, w = item.grid_thw.tolist()
                    n = 2 * t
                    print(
                        f"{clip_name:<22} {case_name:<28} {pipeline:<7} {n:>6} {f'{h * 14}x{w * 14}':>9} "
                        f"{seconds * 1000:>8.1f} {1 / seconds:>8.1f} {n / seconds:>9.1f}"
                    )
                # Same model input both ways, up to the resize kernel (torch vs PIL bicubic).
                ours, naive = results["ours"], results["naive"]
                assert torch.equal(ours.grid_thw, naive.grid_thw)
                assert (ours.pixel_values - naive.pixel_values).abs().mean() < 0.05


if __name__ == "__main__":
    main()
