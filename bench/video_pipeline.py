"""Throughput of the video input pipeline: ours against decoding every frame and resizing naively.

    .venv/bin/python bench/video_pipeline.py [--seconds 10] [--only clips|workers] [--repeats 3]

Both pipelines produce the same model input (same sampled frames, same target size, same
normalise + patchify); they differ in decoding and resizing:
- ours (cosmos_train.data.media.prepare_video): RGB-convert only the sampled frames, stop after
  the last one, seek for video_start, one batched torch bicubic resize.
- naive: decode and RGB-convert every frame, keep the sampled ones, PIL bicubic per frame.
Clips are synthesised (moving texture, libx264) in a temporary folder.

Two tables:
- clips: one clip at a time, single-threaded torch (as in a DataLoader worker): ms/clip, clips/s
  and sampled frames/s per clip and vision settings.
- workers: a torch DataLoader over the same clips at the Cosmos-Reason settings (fps 1, max_pixels
  81920), set up as the SFT trainer does (batches of one row, collate_fn=list, prefetch_factor 2,
  workers not persistent, so each pass pays the worker start-up as each epoch does), with 0, 1 and
  2 workers: "ours" (a Dataset running read_video + preprocess_video), "trainer" (the trainer's
  SFTDataset: encode_chat on chat rows, tokenising with the offline tiny model's processor) and
  "naive" (with 0 and 2 workers). Every configuration reads the same rows; the configurations run
  interleaved, pass after pass, and the table shows the median pass (clips/s, sampled frames/s)
  with its CPU use (this process and its workers, in % of one core) so a loaded machine shows.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av
import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from cosmos_train.data.media import (
    VisionInput,
    VisionSettings,
    normalize_frames,
    patchify,
    prepare_video,
)

COSMOS = VisionSettings(fps=1, max_pixels=81920)  # the Cosmos-Reason SFT / RL default


def write_clip(path: Path, seconds: float, fps: int, height: int, width: int) -> Path:
    """A textured pattern drifting one pixel per frame: cheap to make, realistic to decode."""
    n_frames = round(seconds * fps)
    rng = np.random.default_rng(0)
    texture = rng.integers(0, 256, (height // 8 + 2, (width + n_frames) // 8 + 2, 3), dtype=np.uint8)
    texture = np.asarray(Image.fromarray(texture).resize((texture.shape[1] * 8, texture.shape[0] * 8), Image.BILINEAR))
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


def standard_clips(root: Path, seconds: float) -> dict[str, Path]:
    """The benchmark clips, by label: a short small one, and `seconds`-long VGA and HD ones."""
    return {
        "2s 112x112 30fps": write_clip(root / "small.mp4", 2, 30, 112, 112),
        f"{seconds:g}s 480x640 30fps": write_clip(root / "vga.mp4", seconds, 30, 480, 640),
        f"{seconds:g}s 720x1280 30fps": write_clip(root / "hd.mp4", seconds, 30, 720, 1280),
    }


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
    resized = [np.asarray(Image.fromarray(every[i]).resize((width, height), Image.Resampling.BICUBIC)) for i in indices]
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


class ClipDataset(Dataset):
    """Row i: the clip `paths[i]` through `prepare` at `settings`; returns (pixel_values, grid_thw)."""

    def __init__(
        self, paths: list[Path], settings: VisionSettings, prepare: Callable[[Path, VisionSettings], VisionInput]
    ):
        self.paths, self.settings, self.prepare = paths, settings, prepare

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        item = self.prepare(self.paths[i], self.settings)
        return item.pixel_values, item.grid_thw


def trainer_dataset(paths: list[Path], settings: VisionSettings, model_dir: Path) -> Dataset:
    """The trainer's SFTDataset over one Cosmos-style chat row per clip (video + question + answer)."""
    from cosmos_train.models.load import load_processor
    from cosmos_train.train.data import SFTDataset

    video = {"fps": settings.fps, "max_pixels": settings.max_pixels}
    rows = [
        {
            "id": str(i),
            "origin": f"bench:{i}",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "video", "video": str(p), **video},
                        {"type": "text", "text": "What happens next?"},
                    ],
                },
                {"role": "assistant", "content": "<answer>B</answer>"},
            ],
        }
        for i, p in enumerate(paths)
    ]
    return SFTDataset(rows, load_processor(model_dir), 32768, "error")


def frames_of(batch: list[Any]) -> int:
    """Sampled frames in a batch of one row (grid t counts pairs of frames)."""
    (item,) = batch
    grid = item[1] if isinstance(item, tuple) else item.video_grid_thw
    return int(grid[..., 0].sum()) * 2


def cpu_seconds() -> float:
    """CPU time of this process and of its reaped children (the DataLoader workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def one_pass(dataset: Dataset, workers: int, prefetch: int) -> tuple[float, int, float]:
    """(wall seconds, sampled frames, CPU seconds) of one epoch, set up as SFTTrainer does."""
    kwargs: dict[str, Any] = {}
    if workers > 0:
        kwargs = {"num_workers": workers, "persistent_workers": False, "prefetch_factor": prefetch}
    loader = DataLoader(dataset, batch_size=1, shuffle=False, collate_fn=list, **kwargs)
    cpu, start, frames = cpu_seconds(), time.perf_counter(), 0
    for batch in loader:  # the loader joins its workers when exhausted, so their CPU time is counted
        frames += frames_of(batch)
    return time.perf_counter() - start, frames, cpu_seconds() - cpu


def worker_table(clips: dict[str, Path], args: argparse.Namespace, root: Path) -> None:
    from cosmos_train.models.tiny import make_tiny_model

    paths = [path for _ in range(args.rows_per_clip) for path in clips.values()]
    datasets = {
        "ours": ClipDataset(paths, COSMOS, prepare_video),  # read_video + preprocess_video
        "trainer": trainer_dataset(paths, COSMOS, make_tiny_model(root / "tiny-model")),
        "naive": ClipDataset(paths, COSMOS, naive_prepare),
    }
    configs = [
        ("ours", 0),
        ("ours", 1),
        ("ours", 2),
        ("trainer", 0),
        ("trainer", 1),
        ("trainer", 2),
        ("naive", 0),
        ("naive", 2),
    ]
    runs: dict[tuple[str, int], list[tuple[float, int, float]]] = {c: [] for c in configs}
    for name in datasets:  # warm-up: page cache, lazy imports, tokenizer
        datasets[name][0]
    for _ in range(args.repeats):  # interleaved, so load that comes and goes hits every config alike
        for name, workers in configs:
            runs[name, workers].append(one_pass(datasets[name], workers, args.prefetch))
    print(
        f"\n{len(paths)} rows per pass ({args.rows_per_clip} x each clip), fps 1, max_pixels 81920, "
        f"prefetch_factor {args.prefetch}, median of {args.repeats} passes"
    )
    header = (
        f"{'pipeline':<8} {'workers':>7} {'s/pass':>7} {'clips/s':>8} {'frames/s':>9} {'CPU %':>6} {'vs naive 0w':>11}"
    )
    print(header)
    print("-" * len(header))
    naive0 = statistics.median(r[0] for r in runs["naive", 0])
    for (name, workers), results in runs.items():
        wall = statistics.median(r[0] for r in results)
        frames = results[0][1]
        cpu = statistics.median(r[2] / r[0] for r in results) * 100
        print(
            f"{name:<8} {workers:>7} {wall:>7.2f} {len(paths) / wall:>8.2f} {frames / wall:>9.1f} "
            f"{cpu:>6.0f} {naive0 / wall:>10.2f}x"
        )


def clip_table(clips: dict[str, Path], args: argparse.Namespace) -> None:
    cases = [
        ("tiny: fps 2, <=112x112", VisionSettings(fps=2, min_pixels=28 * 28, max_pixels=112 * 112)),
        ("cosmos: fps 1, max 81920 px", COSMOS),
        ("cosmos, last 2 s", VisionSettings(fps=1, max_pixels=81920, video_start=args.seconds - 2)),
    ]
    header = (
        f"{'clip':<22} {'settings':<28} {'pipeline':<7} {'frames':>6} {'size':>9} "
        f"{'ms/clip':>8} {'clips/s':>8} {'frames/s':>9}"
    )
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the long clips")
    parser.add_argument("--only", choices=("clips", "workers"), help="run one of the two tables")
    parser.add_argument("--repeats", type=int, default=3, help="passes per DataLoader configuration")
    parser.add_argument("--rows-per-clip", type=int, default=3, help="rows per clip in a DataLoader pass")
    parser.add_argument("--prefetch", type=int, default=2, help="DataLoader prefetch_factor (trainer default 2)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as in a DataLoader worker; the 0-worker rows run the same way
    print(f"load average at start: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        clips = standard_clips(root, args.seconds)
        if args.only != "workers":
            clip_table(clips, args)
        if args.only != "clips":
            worker_table(clips, args, root)
    print(
        f"\nload average at end: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}; "
        f"{time.perf_counter() - start:.0f} s wall"
    )


if __name__ == "__main__":
    main()
