"""The world-model dataset: Cosmos-Predict2.5's local layout, or mock prompts.

    from cosmos_train.wfm.data import load_clip, load_text_embedding, mock_prompts, scan_dataset
    samples, report = scan_dataset("datasets/my_videos", on_bad_row="skip")
    print(report.summary())
    clip = load_clip(samples[0].video, num_frames=93, height=480, width=832)  # uint8 [3, T, H, W]
    samples, _ = scan_dataset("datasets/my_videos", offline_text_embedding=True)
    emb = load_text_embedding(samples[0].text_embedding, "datasets/my_videos")  # float32 [n_tokens, dim]
    prompts = mock_prompts(64, seed=0)  # type = "mock" (ours): prompts, no videos

cosmos-rl's own mock-data recipes (type = "web" with dataloader.dataset.len_t5: random clips and prompt embeddings)
read wfm/mock_data.py instead; type = "mock" is ours: text prompts for the model's text encoder, no videos.

Layout (docs/FACTS.md, "World-model"):

    <dataset>/videos/<stem>.mp4
    <dataset>/metas/<stem>.txt              one caption: the video's prompt
    <dataset>/text_embedding/<stem>.pickle  optional: float16 [n_tokens, dim], the prompt embedding

A row that cannot be used is named with its file and a reason, as the chat-sample sources do
(`cosmos_train.data.sources.common.RowError`): a video without a caption (`missing_caption`), a caption
without a video (`missing_video`), an empty or non-UTF-8 caption (`bad_caption`), a video that does not
open or has no frame (`bad_media`, probed by decoding its first frame only), fewer frames than asked
(`short_video`, when `min_frames` is given), a missing or escaping embedding (`missing_embedding`,
`embedding_outside_dataset`). on_bad_row = "fail" stops with one DataError listing them; "skip" leaves
them out, counted by reason in the report. Hidden files (`._clip.mp4` of macOS copies) are not rows.

Clips: `num_frames` frames evenly spaced over the whole video (first and last included), resized straight
to height x width with the repo's bicubic antialiased uint8 kernel (`cosmos_train.data.media.resize_frames`),
no crop: Cosmos-Predict2.5's own local loader resizes to video_size without cropping, and a crop would cut
off the part of the scene its caption may describe. Pick video_size with the videos' aspect.

A pickle runs code when it is loaded: embeddings are read only from `<dataset>/text_embedding/` of the
dataset the job names (a path resolving elsewhere, a symlink out included, is refused). Use only datasets
you trust.
"""

from __future__ import annotations

import json
import pickle
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import av
import numpy as np
import torch

from cosmos_train.atomic import write_json_atomic

# Private helpers of the VLM video reader, reused so that both readers open, count and decode frames the
# same way (one place for PyAV's quirks); its public read_video samples as qwen-vl-utils does, WFM clips not.
from cosmos_train.data.media import _count_packets, _decode_indices, _local_path, _open_video, resize_frames
from cosmos_train.data.sources.common import RowError
from cosmos_train.data.sources.video_folder import read_caption
from cosmos_train.errors import DataError, MediaError

OnBadRow = Literal["fail", "skip"]
SHOWN_PROBLEMS = 10  # a "fail" error and the summary list this many problems, then a count of the rest
EMBEDDING_KEYS = ("embeddings", "t5_text_embeddings")  # keys cosmos-predict2.5 pickles wrap the array in
LAYOUT = (
    "videos/<stem>.mp4 with a metas/<stem>.txt caption each (optional text_embedding/<stem>.pickle, "
    "float16 [n_tokens, dim])"
)
ON_BAD_ROW_KEY = "dataloader_train.video_dataloader.on_bad_row"
NUM_FRAMES_KEY = "dataloader_train.video_dataloader.num_frames"
REENCODE = "re-encode it (e.g. ffmpeg -i IN -c:v libx264 OUT.mp4) or remove the row"


@dataclass(frozen=True)
class WfmSample:
    """One usable row: its stem, its caption and where its video and (offline) embedding are."""

    name: str
    prompt: str
    video: Path | None  # None for mock prompts, which have no video
    text_embedding: Path | None  # set when offline_text_embedding


@dataclass
class WfmDatasetReport:
    """What scan_dataset kept and what it left out (on_bad_row = "skip"), each problem naming its file."""

    dataset_dir: str
    n_rows: int = 0
    n_skipped: int = 0
    problems: list[str] = field(default_factory=list)
    by_reason: dict[str, int] = field(default_factory=dict)  # skipped rows per reason (PrepReport.skipped)

    def summary(self) -> str:
        text = f"{self.dataset_dir}: {self.n_rows} rows"
        if not self.n_skipped:
            return text
        counts = sorted(self.by_reason.items(), key=lambda kv: (-kv[1], kv[0]))  # most first, then by name
        reasons = ", ".join(f"{reason} {n}" for reason, n in counts)
        skipped = f'{self.n_skipped} skipped ({reasons}; on_bad_row = "skip")'
        return f"{text}, {skipped}: {_listed(self.problems)}"


def _listed(problems: list[str]) -> str:
    shown = "; ".join(problems[:SHOWN_PROBLEMS])
    rest = len(problems) - SHOWN_PROBLEMS
    return shown + (f"; and {rest} more" if rest > 0 else "")


# ------------------------------------------------------------------------------------ scanning
def _read_prompt(path: Path) -> str:
    """A caption file's text, stripped (video_folder's reader); RowError "bad_caption" saying what to fix."""
    try:
        return read_caption(path)
    except UnicodeDecodeError:
        raise RowError("bad_caption", f"{path}: not UTF-8 text; save the caption as UTF-8") from None
    except RowError:
        raise RowError("bad_caption", f"{path}: empty caption; write the video's prompt in it") from None
    except OSError as e:
        raise RowError("bad_caption", f"{path}: cannot be read ({e.strerror or e})") from None


def _probe_video(path: Path, min_frames: int | None) -> None:
    """RowError unless the video opens and its first frame decodes (and it has min_frames frames): a cheap
    probe; the frames themselves are decoded when the clip is first used."""
    try:
        local = _local_path(path)
        with _open_video(local) as container:
            stream = container.streams.video[0]
            if next(container.decode(stream), None) is None:
                raise MediaError(local, "no decodable video frame")
            total = (stream.frames or _count_packets(local)) if min_frames else 0
    except MediaError as e:
        raise RowError("bad_media", f"{path}: {e.reason}; {REENCODE}") from None
    except av.FFmpegError as e:
        raise RowError("bad_media", f"{path}: cannot decode ({e}); {REENCODE}") from None
    if min_frames and total < min_frames:
        raise RowError(
            "short_video",
            f"{path}: {total} frames, fewer than num_frames = {min_frames}; lower {NUM_FRAMES_KEY} or remove the row",
        )


def _inside(path: Path, folder: Path) -> bool:
    """`path` lies under `folder` once `..` and symlinks are resolved."""
    return path.resolve().is_relative_to(folder.resolve())


def _embedding_for(root: Path, name: str) -> Path:
    path = root / "text_embedding" / f"{name}.pickle"
    if not path.is_file():
        why = "offline_text_embedding = true reads one per row (write it, or set it false)"
        raise RowError("missing_embedding", f"{path}: missing; {why}")
    if not _inside(path, root / "text_embedding"):
        why = "pickles are read only from the dataset's own text_embedding/"
        raise RowError("embedding_outside_dataset", f"{path}: resolves to {path.resolve()}; {why}")
    return path


def _row(
    root: Path,
    name: str,
    video: Path | None,
    meta: Path | None,
    offline_text_embedding: bool,
    check_media: bool,
    min_frames: int | None,
) -> WfmSample:
    """The sample of one stem, or RowError saying why it cannot be used."""
    if meta is None:
        raise RowError("missing_caption", f"{video}: no caption metas/{name}.txt; write the video's prompt in it")
    if video is None:
        raise RowError("missing_video", f"{meta}: no video videos/{name}.mp4 (only .mp4 files are read)")
    prompt = _read_prompt(meta)
    if check_media:
        _probe_video(video, min_frames)
    embedding = _embedding_for(root, name) if offline_text_embedding else None
    return WfmSample(name, prompt, video, embedding)


def _files(folder: Path, suffix: str) -> dict[str, Path]:
    """stem -> file; hidden files (macOS `._x.mp4`, editors' swap files) are not rows."""
    return {p.stem: p for p in folder.glob(f"*{suffix}") if not p.name.startswith(".")}


def _check_layout(root: Path) -> None:
    if not root.is_dir():
        raise DataError(f"{root}: the world-model dataset folder does not exist; it holds {LAYOUT}")
    missing = [f"{d}/" for d in ("videos", "metas") if not (root / d).is_dir()]
    if missing:
        raise DataError(f"{root}: no {' and no '.join(missing)} folder; a world-model dataset holds {LAYOUT}")


def _fail(root: Path, problems: list[str]) -> DataError:
    return DataError(
        f"{root}: {len(problems)} row(s) cannot be used: {_listed(problems)}. Fix them, or set "
        f'{ON_BAD_ROW_KEY} = "skip" to leave them out (counted in the report)'
    )


def scan_dataset(
    dataset_dir: str | Path,
    *,
    offline_text_embedding: bool = False,
    on_bad_row: OnBadRow = "fail",
    check_media: bool = True,
    min_frames: int | None = None,
) -> tuple[list[WfmSample], WfmDatasetReport]:
    """Every usable row of the dataset, sorted by name, and the report of what was left out.

    check_media: probe each video (it opens, its first frame decodes); min_frames: also refuse videos with
    fewer frames than this (the run's num_frames, by the container's count), so a short video fails here
    rather than mid-run in load_clip.
    """
    if on_bad_row not in ("fail", "skip"):
        raise ValueError(f'on_bad_row must be "fail" or "skip", got {on_bad_row!r}')
    root = Path(dataset_dir).expanduser()
    _check_layout(root)
    videos, metas = _files(root / "videos", ".mp4"), _files(root / "metas", ".txt")
    samples: list[WfmSample] = []
    problems: list[str] = []
    reasons: Counter[str] = Counter()
    for name in sorted(set(videos) | set(metas)):
        try:
            samples.append(
                _row(root, name, videos.get(name), metas.get(name), offline_text_embedding, check_media, min_frames)
            )
        except RowError as e:
            problems.append(str(e))
            reasons[e.reason] += 1
    if problems and on_bad_row == "fail":
        raise _fail(root, problems)
    if not samples:
        raise DataError(f"{root}: no usable rows ({len(problems)} left out); a world-model dataset holds {LAYOUT}")
    return samples, WfmDatasetReport(str(root), len(samples), len(problems), problems, dict(reasons))


SCAN_FILE = "data_scan.json"  # in the run folder: the flow's check-data scan, which the trainer's ranks reuse


def save_scan(path: Path, settings: dict[str, Any], samples: list[WfmSample], report: WfmDatasetReport) -> None:
    """Record a scan_dataset result and the keyword arguments it was made with (`settings`, dataset_dir among
    them) at `path`, so the trainer's ranks need not probe every video again."""
    rows = [
        {
            "name": s.name,
            "prompt": s.prompt,
            "video": s.video and str(s.video),
            "text_embedding": s.text_embedding and str(s.text_embedding),
        }
        for s in samples
    ]
    write_json_atomic(
        path, {"settings": {k: str(v) for k, v in settings.items()}, "rows": rows, "report": asdict(report)}
    )


def load_scan(path: Path, settings: dict[str, Any]) -> tuple[list[WfmSample], WfmDatasetReport] | None:
    """The scan `save_scan` recorded at `path` with these same `settings`; None when there is none (a trainer
    started by hand) or it was made with others (the config changed since): then scan again."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if saved.get("settings") != {k: str(v) for k, v in settings.items()}:
        return None
    samples = [
        WfmSample(
            r["name"], r["prompt"], r["video"] and Path(r["video"]), r["text_embedding"] and Path(r["text_embedding"])
        )
        for r in saved["rows"]
    ]
    return samples, WfmDatasetReport(**saved["report"])


# ------------------------------------------------------------------------------------ clips
def _even_indices(total: int, n: int) -> list[int]:
    """n frame numbers evenly spaced over 0 .. total - 1, first and last included (total >= n)."""
    return np.linspace(0, total - 1, n).round().astype(int).tolist()


def load_clip(path: str | Path, num_frames: int, height: int, width: int) -> torch.Tensor:
    """uint8 [3, num_frames, height, width]: num_frames frames evenly spaced over the whole video, resized
    (see the module docstring). Channels first: the diffusers VAE takes [B, C, T, H, W]. MediaError names
    the file when it cannot be decoded or has fewer than num_frames frames (never padded: a repeated last
    frame would teach a frozen scene)."""
    if num_frames < 1 or height < 1 or width < 1:
        raise ValueError(f"num_frames, height and width must be >= 1, got {num_frames}, {height}, {width}")
    local = _local_path(path)
    try:
        with _open_video(local) as container:
            stream = container.streams.video[0]
            total = stream.frames or _count_packets(local)
            if total < num_frames:
                raise MediaError(
                    local,
                    f"{total} frames, fewer than num_frames = {num_frames}; lower {NUM_FRAMES_KEY} or remove the video",
                )
            fps = float(stream.average_rate or stream.guessed_rate or 0)
            # Only the picked frames are converted to RGB: a long 720p video never sits in memory whole.
            rgb = _decode_indices(local, container, stream, _even_indices(total, num_frames), fps, total)
    except av.FFmpegError as e:
        raise MediaError(local, f"cannot decode: {e}") from e
    frames = torch.from_numpy(rgb).permute(0, 3, 1, 2)  # [T, 3, H, W], what resize_frames takes
    return resize_frames(frames, height, width).permute(1, 0, 2, 3).contiguous()


# ------------------------------------------------------------------------------------ embeddings
def _unwrap(obj: Any) -> Any:
    """The one array a pickle holds: itself, a dict's "embeddings" / "t5_text_embeddings" (or its only
    array value), or a one-element list's item; anything else as it is, for the caller to refuse."""
    if isinstance(obj, dict):
        named = [obj[k] for k in EMBEDDING_KEYS if k in obj]
        arrays = [v for v in obj.values() if isinstance(v, np.ndarray | torch.Tensor)]
        if len(named) == 1:
            return named[0]
        return arrays[0] if not named and len(arrays) == 1 else obj
    if isinstance(obj, list | tuple) and len(obj) == 1:
        return obj[0]
    return obj


def _described(obj: Any) -> str:
    if isinstance(obj, dict):
        return f"a dict with keys {sorted(map(str, obj))}"
    if isinstance(obj, list | tuple):
        return f"a {type(obj).__name__} of {len(obj)} items"
    return f"a {type(obj).__name__}"


def _as_float_matrix(obj: Any, path: Path) -> torch.Tensor:
    expected = (
        "expected a float array [n_tokens, dim] (numpy or torch; alone, in a one-element list, or "
        f"as {{{EMBEDDING_KEYS[0]!r}: array}})"
    )
    if not isinstance(obj, np.ndarray | torch.Tensor):
        raise DataError(f"{path}: holds {_described(obj)}; {expected}")
    if isinstance(obj, torch.Tensor):
        is_float = obj.is_floating_point()
    else:
        is_float = bool(np.issubdtype(obj.dtype, np.floating))
    if not is_float:
        raise DataError(f"{path}: an array of dtype {obj.dtype}; {expected} (token ids are not embeddings)")
    if obj.ndim != 2:
        raise DataError(f"{path}: an array of shape {tuple(obj.shape)}; {expected}")
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().float()
    return torch.from_numpy(np.ascontiguousarray(obj, dtype=np.float32))


def load_text_embedding(path: str | Path, dataset_dir: str | Path) -> torch.Tensor:
    """float32 [n_tokens, dim] from `<dataset_dir>/text_embedding/<stem>.pickle`, and from nowhere else: a
    pickle runs code when loaded, so a path resolving outside that folder (a symlink out included) is
    refused with a DataError before it is opened."""
    path = Path(path).expanduser()
    folder = Path(dataset_dir).expanduser() / "text_embedding"
    if not _inside(path, folder):
        raise DataError(
            f"{path}: resolves to {path.resolve()}, outside {folder.resolve()}; text embeddings "
            "are pickles (loading one runs code), so they are read only from the text_embedding/ "
            "folder of the dataset you named (use only datasets you trust)"
        )
    try:
        with path.open("rb") as f:
            obj = pickle.load(f)  # noqa: S301 - the dataset the user named; see the module docstring
    except FileNotFoundError:
        raise DataError(f"{path}: missing; write the row's embedding or set offline_text_embedding = false") from None
    except Exception as e:  # a corrupt or foreign pickle can fail with almost any exception type
        raise DataError(f"{path}: not a readable pickle ({type(e).__name__}: {e}); write it again") from None
    return _as_float_matrix(_unwrap(obj), path)


# ------------------------------------------------------------------------------------ mock data
_LIGHT = ("bright", "dark", "dim", "sunlit", "shadowy")
_THINGS = ("red ball", "blue cube", "wooden cart", "white drone", "robot arm", "green bottle")
_MOVES = ("rolls to the left", "slides to the right", "falls down", "rises up", "spins in place", "stops")
_PLACES = ("on a tiled floor", "across a table", "in a warehouse", "on a road", "in a kitchen")


def mock_prompts(n: int, seed: int = 0) -> list[str]:
    """n deterministic prompts of simple physical scenes (type = "mock", ours: prompts, no videos; cosmos-rl's
    mock dataset is wfm/mock_data.py's); the same seed gives the same list."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = np.random.default_rng(seed)
    return [
        f"a {rng.choice(_LIGHT)} scene: a {rng.choice(_THINGS)} {rng.choice(_MOVES)} {rng.choice(_PLACES)}"
        for _ in range(n)
    ]
