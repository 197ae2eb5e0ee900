"""cosmos-rl's mock video dataset: what a world-model recipe of `dataloader_train.type = "web"` trains on when its
video loader's `dataloader.dataset.len_t5` is set (cosmos-rl's configs/cosmos-predict2-5/*-mock-data.toml).

    rows = MockVideoRows(MockVideo(num_frames=93, width=768, height=432, len_t5=512, t5_dim=1024), seed=0)
    rows[0]                    # {"name": "mock_video_0", "prompt": "placeholder", "mock_index": 0}
    rows.clip(rows[0])         # uint8 [3, 93, 432, 768]
    rows.embedding(rows[0])    # float32 [512, 1024]

How cosmos-rl 0.4.7 selects it (tools/dataset/wfm/cached_replay_dataloader.py, get_cached_replay_dataloader): each
loader of a type = "web" [dataloader_train] builds its dataset from `dataloader.dataset`; when that table's len_t5 is
set (any value but 0 / unset) the dataset is the mock one (data_sources/mock_data.py, get_video_dataset), whatever
`webdataset` says (it only picks which DataLoader class iterates the dataset) and whatever else the table names
(the mock ignores dataset_name, caption_type, augmentor_name, ...). Without len_t5 it is the webdataset of a
dataset registered in cosmos-rl's code; here that is type = "web" with s3:// shards at dataset_dir (web_data.py).

What a row is, there and here (equal):
- the clip: uint8 [3, num_video_frames, H, W], every value uniform in 0..254 (torch.randint(0, 255)); H x W is the
  resolution's "9,16" entry of cosmos-rl's VIDEO_RES_SIZE_INFO read as (height, width), so a landscape clip
  (VIDEO_SIZES below, as (width, height): our video_size's order); here num_frames / video_size of
  [dataloader_train.video_dataloader], which the config fills from num_video_frames / resolution;
- the prompt embedding: float32 [len_t5, t5_dim], standard normal (the batch's t5_text_embeddings, which the
  recipe's text_attr conditioner reads), so the model's text encoder is not used: the DiT must take t5_dim-wide
  embeddings (cosmos-rl's default net: 1024 wide, no cross-attention projection);
- the prompt the rewards get: "placeholder" (its ai_caption);
- how many: 32768 rows (1 << 15, the length of its LambdaDataset), batch_size per rank per iteration.
What a row of cosmos-rl's holds besides and no step reads here: t5_text_mask (random 0 / 1; the text conditioner
reads t5_text_embeddings alone), fps 24 and padding_mask zeros (the conditioner entries that are said to have no
effect), image_size, num_frames, chunk_index, frame_start / frame_end, __url__ / __key__ (metadata).

Ours: row i's clip and embedding are drawn from generators seeded by (trainer.seed, i) alone, so a run is the same
resumed or not and on any number of ranks, and a row taken again (a later pass) is the same row. cosmos-rl draws
each item from the global generator of the loader process that reads it: anew at every read, and what a run sees
depends on num_workers and the worker seeds. Rows are drawn when taken (a 480p clip is 93 MB), and the
data-parallel ranks take different rows (the trainer's rows_for), where each of cosmos-rl's ranks iterates its own
draws. cosmos-rl's replay cache (use_cache = true: cache_augment_fn repeats and reshuffles batches) is refused, and
so are image batches (such a recipe's image loader has ratio 0: cosmos-rl builds it and never samples it). The
trainer takes these rows as it takes the prompts of type = "mock" (ours: text prompts for the model's text encoder,
no videos; wfm/data.py): rows_for picks each iteration's, and [evaluation] (ours; cosmos-rl's
trainer.run_validation is off by default) samples the first num_prompts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

import torch

MOCK_ROWS = 1 << 15  # cosmos-rl's mock LambdaDataset length (MAX_LENGTH)
MOCK_CAPTION = "placeholder"  # its ai_caption: the prompt every mock row's rewards get
# (width, height) of cosmos-rl's mock clip per resolution name: its VIDEO_RES_SIZE_INFO[name]["9,16"] read as (h, w)
VIDEO_SIZES: dict[str, tuple[int, int]] = {
    "1080": (1920, 1072),
    "1024": (1280, 768),
    "720": (1280, 704),
    "512": (640, 384),
    "480": (768, 432),
    "480p": (832, 480),
    "720p": (1280, 720),
    "720robocasa": (1280, 720),
    "256": (320, 192),
}
KEY = "dataloader_train.video_dataloader"
# the keys cosmos-rl's mock reads: the loader's batch_size and these of its dataset table (the rest it ignores)
READ_DATASET_KEYS = ("resolution", "num_video_frames", "len_t5", "t5_dim")
# our keys the mock's fill: ours -> cosmos-rl's (under KEY.dataloader)
FILLED = {"num_frames": "dataset.num_video_frames", "video_size": "dataset.resolution", "batch_size": "batch_size"}
LOADER_NO_EFFECT = {
    "webdataset": "which DataLoader class iterates the mock (webdataset's or torch's): the same rows",
    "num_workers": "loader processes: speed (the rows are drawn by seed and index here)",
    "pin_memory": "speed only",
    "prefetch_factor": "speed only",
    "shuffle": "the mock's rows are independent draws: an order changes nothing",
    "drop_last": "the mock's 32768 rows: a short last batch changes nothing here",
    "cache_size": "the replay cache's size (use_cache = false: no cache)",
    "concat_size": "the replay cache's concatenation (use_cache = false: no cache)",
    "cache_augment_fn": "the replay cache's augmentation (use_cache = false: no cache)",
    "cache_replay_name": "the replay cache's thread name",
}


@dataclass(frozen=True)
class MockVideo:
    """The shapes of cosmos-rl's mock rows: clips of num_frames x height x width, embeddings [len_t5, t5_dim]."""

    num_frames: int
    width: int
    height: int
    len_t5: int
    t5_dim: int


def mock_dataset(dl_type: str, loader: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The `dataloader.dataset` table of a video loader when cosmos-rl reads it as its mock dataset (type "web" and
    len_t5 set), else None."""
    dataset = (loader or {}).get("dataset") if dl_type == "web" else None
    return dict(dataset) if isinstance(dataset, Mapping) and dataset.get("len_t5") else None


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _fill(video: dict[str, Any], ours: str, theirs: Any, where: str) -> list[str]:
    """Our key `ours` takes cosmos-rl's value; both set to different values is one problem naming both."""
    mine = video.get(ours)
    if isinstance(mine, list | tuple):  # video_size: a TOML array or the tuple a written config holds
        mine = list(mine)
    if ours in video and mine != theirs:
        return [
            f"{KEY}.{ours} = {video[ours]!r} and {KEY}.dataloader.{where} (= {theirs!r} for cosmos-rl's mock "
            f"dataset): the same setting twice, with different values; keep cosmos-rl's key (drop {ours}) or make "
            "them agree"
        ]
    video[ours] = theirs
    return []


def read_mock_video(raw: dict[str, Any]) -> list[str]:
    """A raw config whose video loader is cosmos-rl's mock dataset: our num_frames / video_size / batch_size from its
    num_video_frames / resolution / batch_size (in place), and the problems: a key the mock needs that is missing or
    wrong, a replay cache, a dataset_dir beside it, ours and cosmos-rl's key both set differently."""
    dl = raw.get("dataloader_train")
    video = dl.get("video_dataloader") if isinstance(dl, dict) else None
    if not isinstance(video, dict) or not isinstance(dl, dict):
        return []
    loader = video.get("dataloader") if isinstance(video.get("dataloader"), dict) else None
    dataset = mock_dataset(str(dl.get("type")), loader)
    if dataset is None or loader is None:
        return []
    here = f"{KEY}.dataloader"
    out = [
        f"{here}.dataset.{k} = {dataset.get(k)!r}: cosmos-rl's mock dataset (len_t5 is set) needs a whole number >= 1"
        for k in ("num_video_frames", "len_t5", "t5_dim")
        if not _positive_int(dataset.get(k))
    ]
    resolution = dataset.get("resolution")
    if resolution not in VIDEO_SIZES:
        out.append(
            f"{here}.dataset.resolution = {resolution!r}: not a resolution of cosmos-rl's mock clips (one of "
            f"{', '.join(VIDEO_SIZES)})"
        )
    if not _positive_int(loader.get("batch_size")):
        out.append(f"{here}.batch_size = {loader.get('batch_size')!r}: required, a whole number >= 1 (cosmos-rl's)")
    if loader.get("use_cache"):
        out.append(
            f"{here}.use_cache = true: cosmos-rl's replay cache repeats and reshuffles batches (cache_augment_fn); "
            "it is not implemented here: set use_cache = false"
        )
    if video.get("dataset_dir"):
        out.append(
            f"{KEY}.dataset_dir = {video['dataset_dir']!r} and {here}.dataset.len_t5 = {dataset['len_t5']!r}: "
            "len_t5 makes the loader cosmos-rl's mock dataset (random clips and embeddings), dataset_dir names "
            "shards; remove len_t5 to read the shards, or dataset_dir for the mock"
        )
    if out:
        return out
    w, h = VIDEO_SIZES[str(resolution)]
    for ours, theirs, where in (
        ("num_frames", dataset["num_video_frames"], FILLED["num_frames"]),
        ("video_size", [w, h], FILLED["video_size"]),
        ("batch_size", loader["batch_size"], FILLED["batch_size"]),
    ):
        out += _fill(video, ours, theirs, where)
    return out


def width_problem(t5_dim: int, width: int, model: str) -> str | None:
    """The problem of mock embeddings t5_dim wide for a DiT (of `model`) that takes `width`-wide ones; None if equal."""
    if t5_dim == width:
        return None
    return (
        f"{KEY}.dataloader.dataset.t5_dim = {t5_dim}: cosmos-rl's mock prompt embeddings are that wide, and the DiT "
        f"of {model} takes {width}-wide ones; set t5_dim = {width}, or train a model whose DiT takes {t5_dim}"
    )


def mock_no_effect(loader: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    """(key, value, why) of each key of a mock video loader's table that changes nothing here."""
    here = f"{KEY}.dataloader"
    out = [(f"{here}.{k}", v, LOADER_NO_EFFECT[k]) for k, v in loader.items() if k in LOADER_NO_EFFECT]
    dataset = loader.get("dataset") or {}
    ignored = {k: v for k, v in dataset.items() if k not in READ_DATASET_KEYS}
    if ignored:
        why = "cosmos-rl's mock dataset ignores these (it reads resolution, num_video_frames, len_t5, t5_dim)"
        out.append((f"{here}.dataset.{' / '.join(ignored)}", list(ignored.values()), why))
    return out


def _generator(seed: int, index: int, what: str) -> torch.Generator:
    """A CPU generator seeded by (seed, row, what) alone: the same row is the same on any rank, run or device."""
    digest = hashlib.sha256(f"{seed}:{index}:{what}".encode()).digest()[:8]
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))


class MockVideoRows(Sequence[dict[str, Any]]):
    """cosmos-rl's mock video rows (see the module docstring): row i's clip and embedding drawn from (seed, i)."""

    def __init__(self, spec: MockVideo, seed: int):
        self.spec, self.seed = spec, seed

    def __len__(self) -> int:
        return MOCK_ROWS

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(MOCK_ROWS))]
        if not -MOCK_ROWS <= index < MOCK_ROWS:
            raise IndexError(f"mock row {index} of {MOCK_ROWS}")
        i = index % MOCK_ROWS
        return {"name": f"mock_video_{i}", "prompt": MOCK_CAPTION, "mock_index": i}

    def clip(self, row: Mapping[str, Any]) -> torch.Tensor:
        """uint8 [3, num_frames, height, width], each value uniform in 0..254."""
        s = self.spec
        gen = _generator(self.seed, row["mock_index"], "video")
        return torch.randint(0, 255, (3, s.num_frames, s.height, s.width), generator=gen).to(torch.uint8)

    def embedding(self, row: Mapping[str, Any]) -> torch.Tensor:
        """float32 [len_t5, t5_dim], standard normal."""
        gen = _generator(self.seed, row["mock_index"], "t5_text_embeddings")
        return torch.randn((self.spec.len_t5, self.spec.t5_dim), generator=gen)
