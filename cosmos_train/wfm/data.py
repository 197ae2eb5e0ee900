"""The world-model dataset: Cosmos-Predict2.5's local layout, or mock prompts.

    samples, report = scan_dataset("datasets/my_videos", on_bad_row="skip")
    clip = load_clip(samples[0].video, num_frames=93, height=480, width=832)   # uint8 [3, T, H, W]
    emb = load_text_embedding(samples[0].text_embedding, "datasets/my_videos")

Layout (shared/reference/formats.md): `<dataset>/videos/<stem>.mp4`, `<dataset>/metas/<stem>.txt` (the caption),
optional `<dataset>/text_embedding/<stem>.pickle` (a float [n_tokens, dim] array: the prompt embedding the DiT
reads, precomputed). A row that cannot be used (a video without a caption, a caption without a video, an empty
or non-UTF-8 caption, an unreadable video, a missing embedding) is named with its file; on_bad_row = "fail" stops
with all of them listed, "skip" leaves them out and counts them in the report.

A pickle runs code when it is loaded: embeddings are read only from `<dataset>/text_embedding/` of the dataset
the job names (a path resolving elsewhere, a symlink out included, is refused). Use only datasets you trust.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import av
import numpy as np
import torch

from cosmos_train.data.video import resize_frames
from cosmos_train.errors import DataError, MediaError

SHOWN_PROBLEMS = 10
EMBEDDING_KEYS = ("embeddings", "t5_text_embeddings", "text_embeddings")


@dataclass(frozen=True)
class WfmSample:
    name: str
    prompt: str
    video: Path | None
    text_embedding: Path | None


@dataclass
class WfmDatasetReport:
    dataset_dir: str
    n_rows: int = 0
    n_skipped: int = 0
    problems: list[str] = field(default_factory=list)

    def summary(self) -> str:
        text = f"{self.dataset_dir}: {self.n_rows} rows"
        if self.n_skipped:
            text += f", {self.n_skipped} skipped (on_bad_row = \"skip\"): " + "; ".join(self.problems[:SHOWN_PROBLEMS])
            if len(self.problems) > SHOWN_PROBLEMS:
                text += f"; and {len(self.problems) - SHOWN_PROBLEMS} more"
        return text


def _has_frames(path: Path) -> bool:
    """The file opens and its first video frame decodes (a probe: the frames themselves are read when the clip is
    first used, where a video shorter than num_frames is a MediaError naming it)."""
    try:
        with av.open(str(path)) as container:
            return next(container.decode(video=0), None) is not None
    except (av.FFmpegError, IndexError, OSError):
        return False


def _caption(path: Path) -> tuple[str | None, str | None]:
    """(caption, problem)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except UnicodeDecodeError:
        return None, f"{path}: not UTF-8 text; save the caption as UTF-8"
    if not text:
        return None, f"{path}: empty caption; write the video's prompt in it"
    return text, None


def scan_dataset(dataset_dir: str | Path, *, offline_text_embedding: bool = False, on_bad_row: str = "fail",
                 check_media: bool = True) -> tuple[list[WfmSample], WfmDatasetReport]:
    """Every usable row of the dataset, sorted by name, and the report of what was left out."""
    root = Path(dataset_dir).expanduser()
    layout = "videos/*.mp4 with a metas/<same name>.txt caption each (optional text_embedding/<name>.pickle)"
    if not root.is_dir():
        raise DataError(f"{root}: the world-model dataset folder does not exist; it holds {layout}")
    missing = [d for d in ("videos", "metas") if not (root / d).is_dir()]
    if missing:
        raise DataError(f"{root}: no {' and no '.join(f'{d}/' for d in missing)} folder; a world-model dataset holds "
                        f"{layout}")
    videos = {p.stem: p for p in (root / "videos").glob("*.mp4")}
    metas = {p.stem: p for p in (root / "metas").glob("*.txt")}
    samples, problems = [], []
    for name in sorted(set(videos) | set(metas)):
        if name not in metas:
            problems.append(f"{videos[name]}: no caption metas/{name}.txt")
            continue
        if name not in videos:
            problems.append(f"{metas[name]}: no video videos/{name}.mp4")
            continue
        prompt, problem = _caption(metas[name])
        if problem is None and check_media and not _has_frames(videos[name]):
            problem = f"{videos[name]}: no decodable video frames"
        emb = root / "text_embedding" / f"{name}.pickle"
        if problem is None and offline_text_embedding and not emb.is_file():
            problem = f"{emb}: missing (offline_text_embedding = true reads each row's embedding)"
        if problem is not None:
            problems.append(problem)
            continue
        assert prompt is not None
        samples.append(WfmSample(name, prompt, videos[name], emb if offline_text_embedding else None))
    report = WfmDatasetReport(str(root), len(samples), len(problems), problems)
    if problems and on_bad_row != "skip":
        shown = "; ".join(problems[:SHOWN_PROBLEMS])
        more = f"; and {len(problems) - SHOWN_PROBLEMS} more" if len(problems) > SHOWN_PROBLEMS else ""
        raise DataError(f"{root}: {len(problems)} row(s) cannot be used: {shown}{more}. Fix them, or set "
                        "dataloader_train.video_dataloader.on_bad_row = \"skip\" to leave them out (counted in the "
                        "report)")
    if not samples:
        raise DataError(f"{root}: no usable rows ({len(problems)} left out); it needs {layout}")
    return samples, report


def load_clip(path: str | Path, num_frames: int, height: int, width: int) -> torch.Tensor:
    """uint8 [3, num_frames, height, width]: num_frames evenly spaced over the whole video, resized (bicubic,
    antialiased) to height x width without cropping (the aspect is the caller's choice, as video_size)."""
    path = Path(path)
    try:
        with av.open(str(path)) as container:
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    except (av.FFmpegError, IndexError, OSError) as e:
        raise MediaError(path, f"cannot decode: {e}") from e
    if len(frames) < num_frames:
        raise MediaError(path, f"{len(frames)} frames, fewer than num_frames = {num_frames}; lower "
                               "dataloader_train.video_dataloader.num_frames or leave the video out")
    index = np.linspace(0, len(frames) - 1, num_frames).round().astype(int)
    picked = torch.from_numpy(np.stack([frames[i] for i in index])).permute(0, 3, 1, 2)  # [T, 3, H, W]
    return resize_frames(picked, height, width).permute(1, 0, 2, 3).contiguous()


def _as_array(obj: Any) -> Any:
    if isinstance(obj, dict):
        found = [obj[k] for k in EMBEDDING_KEYS if k in obj]
        return found[0] if len(found) == 1 else (next(iter(obj.values())) if len(obj) == 1 else obj)
    if isinstance(obj, list | tuple) and len(obj) == 1:
        return obj[0]
    return obj


def load_text_embedding(path: str | Path, dataset_dir: str | Path) -> torch.Tensor:
    """float32 [n_tokens, dim] from `<dataset_dir>/text_embedding/<name>.pickle` (and nowhere else)."""
    folder = (Path(dataset_dir).expanduser() / "text_embedding").resolve()
    real = Path(path).expanduser().resolve()
    if folder not in real.parents:
        raise DataError(f"{path}: resolves to {real}, outside {folder}; text embeddings are pickles (loading one "
                        "runs code), so they are read only from the dataset's own text_embedding/ folder")
    with real.open("rb") as f:
        obj = _as_array(pickle.load(f))  # noqa: S301 - the dataset the user named; see the module docstring
    if isinstance(obj, torch.Tensor):
        array = obj.detach().float()
    elif isinstance(obj, np.ndarray):
        array = torch.from_numpy(np.asarray(obj, dtype=np.float32))
    else:
        raise DataError(f"{path}: holds a {type(obj).__name__}; expected a float array [n_tokens, dim] (numpy or "
                        f"torch, alone or as {{'embeddings': array}})")
    if array.dim() != 2:
        raise DataError(f"{path}: an array of shape {tuple(array.shape)}; expected [n_tokens, dim]")
    return array


def mock_prompts(n: int, seed: int = 0) -> list[str]:
    """n deterministic prompts of simple physical scenes (cosmos-rl's mock-data mode: prompts, no videos)."""
    rng = np.random.default_rng(seed)
    light = ("bright", "dark", "dim", "sunlit", "shadowy")
    things = ("red ball", "blue cube", "wooden cart", "white drone", "robot arm", "green bottle")
    moves = ("rolls to the left", "slides to the right", "falls down", "rises up", "spins in place", "stops")
    places = ("on a tiled floor", "across a table", "in a warehouse", "on a road", "in a kitchen")
    return [f"a {rng.choice(light)} scene: a {rng.choice(things)} {rng.choice(moves)} {rng.choice(places)}"
            for _ in range(n)]
