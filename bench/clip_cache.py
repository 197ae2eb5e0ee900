"""What the clip cache saves: a cold read (decode + resize + store) against a hit (read the entry),
each followed by the same normalise + patchify, on the clips of bench/video_pipeline.py.

    .venv/bin/python bench/clip_cache.py [--seconds 10]

Single-threaded torch, as in a DataLoader worker. "uncached" is `prepare_video` (what a run without
`dataset.cache_dir` does every epoch), "miss" the first epoch with the cache (decode + hash + write),
"hit" every later epoch or run. Prints ms/clip and the entry size on disk.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from video_pipeline import standard_clips  # noqa: E402  (the same synthetic clips)

from cosmos_train.data.clip_cache import ClipCache  # noqa: E402
from cosmos_train.data.media import VisionSettings, prepare_video, preprocess_video  # noqa: E402


def timed(fn, repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the long clips")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = VisionSettings(fps=1, max_pixels=81920)  # the Cosmos-Reason default
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        clips = standard_clips(root, args.seconds)
        header = (
            f"{'clip (fps 1, max 81920 px)':<28} {'uncached ms':>11} {'miss ms':>8} {'hit ms':>7} "
            f"{'speedup':>8} {'entry KiB':>9}"
        )
        print(header)
        print("-" * len(header))
        for name, path in clips.items():
            uncached = timed(lambda path=path: prepare_video(path, settings), args.repeats)

            def miss(path: Path = path) -> None:
                shutil.rmtree(root / "cache", ignore_errors=True)
                cache = ClipCache(root / "cache")  # fresh: no memoised file digest either
                frames, fps = cache.read_video(path, settings)
                preprocess_video(frames, settings, fps)

            miss_s = timed(miss, args.repeats)

            def hit(path: Path = path) -> None:
                cache = ClipCache(root / "cache")  # a new worker / run: hashes the file, reads the entry
                frames, fps = cache.read_video(path, settings)
                preprocess_video(frames, settings, fps)
                assert cache.hits == 1

            hit_s = timed(hit, args.repeats)
            size = sum(p.stat().st_size for p in (root / "cache").rglob("*.clip")) / 1024
            print(
                f"{name:<28} {uncached * 1e3:>11.1f} {miss_s * 1e3:>8.1f} {hit_s * 1e3:>7.1f} "
                f"{uncached / hit_s:>7.1f}x {size:>9.0f}"
            )


if __name__ == "__main__":
    main()
