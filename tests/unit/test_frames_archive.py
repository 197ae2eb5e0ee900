"""Frames archives (.npz videos read without PyAV) and the GPU path's imports (scripts/gpu_check.sh).

A lent GPU machine has torch, transformers, peft, safetensors and accelerate and no package index; the check
ships the other wheels it needs (scripts/gpu_wheels.txt), and PyAV, Prefect and matplotlib are not among them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from cosmos_train.data import media
from cosmos_train.data.synthetic_video import write_frames_archive, write_mp4
from cosmos_train.errors import MediaError
from cosmos_train.vision.settings import VisionSettings

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = VisionSettings.from_part({"type": "video", "video": "x", "fps": 2, "max_pixels": 56 * 56})


def _frames(n: int = 10, size: int = 56) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def test_archive_samples_as_the_video_would_and_keeps_exact_pixels(tmp_path: Path) -> None:
    frames = _frames()
    write_mp4(tmp_path / "clip.mp4", frames, fps=5)
    write_frames_archive(tmp_path / "clip.npz", frames, fps=5)
    assert media.sampled_frames(tmp_path / "clip.npz", SETTINGS) == media.sampled_frames(
        tmp_path / "clip.mp4", SETTINGS
    )
    got, sample_fps = media.read_video(tmp_path / "clip.npz", SETTINGS)
    _, mp4_fps = media.read_video(tmp_path / "clip.mp4", SETTINGS)
    indices, _, _ = media.sampled_frames(tmp_path / "clip.npz", SETTINGS)
    chosen = torch.from_numpy(frames[indices]).permute(0, 3, 1, 2)
    height, width = SETTINGS.video_size(56, 56, len(indices))
    assert sample_fps == mp4_fps
    assert torch.equal(got, media.resize_frames(chosen, height, width))


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not a zip", "not a frames archive"),
        ("float_frames", "'frames' must be uint8"),
        ("no_fps", "not a frames archive"),
    ],
)
def test_bad_archive_is_a_media_error_naming_the_file(tmp_path: Path, content: object, message: str) -> None:
    path = tmp_path / "bad.npz"
    if content == "float_frames":
        np.savez(path, frames=np.zeros((4, 8, 8, 3), np.float32), fps=4.0)
    elif content == "no_fps":
        np.savez(path, frames=np.zeros((4, 8, 8, 3), np.uint8))
    else:
        assert isinstance(content, bytes)
        path.write_bytes(content)
    with pytest.raises(MediaError, match=message) as info:
        media.read_video(path, SETTINGS)
    assert "bad.npz" in str(info.value)


# Run in a fresh interpreter where these packages cannot be imported (a None in sys.modules refuses the import).
_BLOCKED = ("av", "prefect", "matplotlib", "datasets", "vllm")
_PRELUDE = "import sys\n" + "".join(f"sys.modules[{name!r}] = None\n" for name in _BLOCKED)


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _PRELUDE + code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def test_gpu_path_imports_without_pyav_prefect_or_matplotlib(tmp_path: Path) -> None:
    proc = _run(
        "import cosmos_train.train.sft, cosmos_train.train.grpo, cosmos_train.train.linear_ce\n"
        "import bench.mfu, bench.gpu_check, bench.gpu_check_rows\n",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_synthetic_npz_dataset_is_made_and_read_without_pyav(tmp_path: Path) -> None:
    proc = _run(
        "import json\n"
        "from pathlib import Path\n"
        "from cosmos_train.data import media\n"
        "from cosmos_train.data.synthetic import make_synthetic_dataset\n"
        f"out = make_synthetic_dataset(Path({str(tmp_path)!r}) / 'ds', n_train=4, n_val=1, n_test=1,"
        " video_format='npz')\n"
        "row = json.loads((out / 'sft' / 'train.json').read_text())[0]\n"
        "assert row['video'].endswith('.npz'), row\n"
        "frames, fps = media.read_video(out / row['video'])\n"
        "bench = json.loads((out / 'benchmark/synthetic/synthetic_benchmark_qa_pairs.json').read_text())\n"
        "assert bench[0]['video'].endswith('.npz') and (out / 'benchmark/synthetic' / bench[0]['video']).is_file()\n"
        "info = json.loads((out / 'dataset_info.json').read_text())\n"
        "print(tuple(frames.shape), fps, info['codec'])\n",
        tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-1] == "npz-frames"
