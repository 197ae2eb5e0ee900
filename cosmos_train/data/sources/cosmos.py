"""`cosmos` source: the Cosmos-Reason SFT / RL datasets (nvidia/Cosmos-Reason1-SFT-Dataset, ...-RL-Dataset).

    [train.train_policy.dataset]
    name = "nvidia/Cosmos-Reason1-SFT-Dataset"
    subset = "robovqa"
    split = "understanding"

Rows come from `datasets.load_dataset(name, subset, split=..., revision=...)`. The clips ship as
`<subset>/clips/*.tar.gz`; they are downloaded with `huggingface_hub.snapshot_download` and
extracted once into `$COSMOS_CACHE` (default ~/.cache/cosmos) under
`datasets/<org>/<name>/<subset>/video_clips/`. A file lock plus a `.prepared` marker make this
safe when several ranks or runs start at once: the first extracts, the others wait and reuse.
A row's `video` is mapped to the extracted file by basename.

A copy already on disk (`hf download --repo-type dataset nvidia/Cosmos-Reason1-SFT-Dataset
--local-dir /data/cr1-sft`, or the same layout made by hand) works without the hub:

    name = "/data/cr1-sft"          # <name>/<subset>/clips/*.tar.gz (or already extracted clips/*.mp4)
    subset = "robovqa"              # (source = "auto" recognises this layout; "cosmos" says it outright)
    split = "understanding"         # rows: <name>/<subset>/ files named <split>, *_<split> or <split>-*

The rows of a local copy come from its README's `configs` (as the hub reads them) when it has one,
else from the row files (json / jsonl / parquet / arrow) under `<name>/<subset>/` named after the
split. Its archives are extracted once into `$COSMOS_CACHE/datasets/local/<folder>-<hash>/`. A hub
id with `dataset.local_dir` already holding `<subset>/clips/*.tar.gz` skips the clip download.

Each user turn becomes [video part, text part] (fps 1, max_pixels 81920 unless `[dataset.vision]`
or the row says otherwise); a system turn in the data is kept. RL rows (`qa_pairs`) become an
option-lettered prompt with the answer letter as `reference`.
"""

from __future__ import annotations

import hashlib
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from filelock import FileLock

from cosmos_train.atomic import write_atomic
from cosmos_train.config import DatasetConfig, TrainPolicyConfig
from cosmos_train.data.sources.common import (
    ROW_FILE_SUFFIXES,
    DatasetError,
    context_for,
    cosmos_cache,
    map_rows,
    read_rows,
)
from cosmos_train.data.sources.hf import iter_tables, split_names
from cosmos_train.data.sources.registry import register_source

# What the Cosmos-Reason reference uses for its SFT / RL videos.
COSMOS_VISION_DEFAULTS = {"fps": 1, "max_pixels": 81920}
PREPARED_MARKER = ".prepared"
VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".webm", ".avi")


def clips_dir(name: str, subset: str) -> Path:
    """$COSMOS_CACHE/datasets/<org>/<name>/<subset>/video_clips."""
    return cosmos_cache() / "datasets" / name / subset / "video_clips"


def _safe_extract(archive: Path, dest: Path) -> None:
    with tarfile.open(archive, "r:*") as tar:
        # The "data" filter refuses absolute paths, links out of dest and device files.
        tar.extractall(dest, filter="data")


def extract_archives(archives: list[Path], dest: Path) -> bool:
    """Extract every archive into `dest` once; True when this call did the extraction.

    Concurrent callers (ranks, runs) serialise on `dest.parent/<dest.name>.lock`; the marker is
    written last, so an interrupted extraction is redone rather than half-trusted.
    """
    marker = dest / PREPARED_MARKER
    if marker.is_file():
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest.parent / f"{dest.name}.lock")):
        if marker.is_file():
            return False
        if not archives:
            raise DatasetError(f"no clip archives (*.tar.gz) to extract into {dest}")
        dest.mkdir(parents=True, exist_ok=True)
        for archive in sorted(archives):
            try:
                _safe_extract(archive, dest)
            except (tarfile.TarError, OSError) as e:
                raise DatasetError(f"{archive}: cannot extract clips: {e}") from e
        write_atomic(marker, "\n".join(str(a.name) for a in sorted(archives)) + "\n")
        return True


def index_clips(folder: Path) -> dict[str, Path]:
    """basename -> path of every video under `folder`."""
    return {p.name: p for p in sorted(folder.rglob("*")) if p.suffix.lower() in VIDEO_SUFFIXES and p.is_file()}


def local_copy(ds: DatasetConfig) -> Path | None:
    """The folder when `dataset.name` is a local copy of the hub dataset, else None (a hub id)."""
    path = Path(ds.name).expanduser()
    return path.absolute() if path.is_dir() else None


def local_clips_dir(root: Path, subset: str) -> Path:
    """Where a local copy's archives are extracted: keyed by its absolute path, so two copies never mix."""
    tag = hashlib.sha1(str(root).encode()).hexdigest()[:10]
    return cosmos_cache() / "datasets" / "local" / f"{root.name}-{tag}" / subset / "video_clips"


def _prepare_local_clips(root: Path, subset: str) -> Path:
    folder = root / subset / "clips"
    if not folder.is_dir():
        raise DatasetError(f"dataset.name {root}: no {subset}/clips/ folder (the hub layout <subset>/clips/*.tar.gz)")
    archives = sorted(folder.glob("*.tar.gz"))
    if archives:
        dest = local_clips_dir(root, subset)
        extract_archives(archives, dest)
        return dest
    if any(p.suffix.lower() in VIDEO_SUFFIXES for p in folder.rglob("*")):
        return folder  # clips already extracted by the user
    raise DatasetError(f"dataset.name {root}: {folder} holds neither *.tar.gz archives nor videos")


def prepare_clips(ds: DatasetConfig) -> Path:
    """Download (once) and extract (once) the subset's clips; returns the clips folder."""
    if not ds.subset:
        raise DatasetError(f"dataset {ds.name!r}: set dataset.subset (e.g. robovqa, av, bridgev2, agibot, holoassist)")
    root = local_copy(ds)
    if root is not None:
        return _prepare_local_clips(root, ds.subset)
    dest = clips_dir(ds.name, ds.subset)
    if (dest / PREPARED_MARKER).is_file():
        return dest  # no hub call at all once prepared: works offline afterwards
    if ds.local_dir:
        downloaded = sorted((Path(ds.local_dir).expanduser() / ds.subset / "clips").glob("*.tar.gz"))
        if downloaded:  # already downloaded there: no hub call
            extract_archives(downloaded, dest)
            return dest
    from huggingface_hub import snapshot_download  # why: the hub client only when downloading

    try:
        root = Path(
            snapshot_download(
                repo_id=ds.name,
                repo_type="dataset",
                revision=ds.revision,
                allow_patterns=[f"{ds.subset}/clips/*"],
                local_dir=ds.local_dir,
            )
        )
    except Exception as e:  # network, auth, missing repo: name them all the same way
        raise DatasetError(f"dataset {ds.name!r}: downloading {ds.subset}/clips failed: {type(e).__name__}: {e}") from e
    archives = sorted((root / ds.subset / "clips").glob("*.tar.gz"))
    if not archives:
        raise DatasetError(f"dataset {ds.name!r}: no {ds.subset}/clips/*.tar.gz in the download at {root}")
    extract_archives(archives, dest)
    return dest


def _split_files(folder: Path, split: str) -> list[Path]:
    """Row files under `folder` named after the split: <split>.json, robovqa_<split>.parquet,
    <split>-00000-of-00001.parquet."""

    def named(p: Path) -> bool:
        stem = p.name[: -len(p.suffix)]
        return stem == split or stem.endswith(f"_{split}") or stem.startswith((f"{split}-", f"{split}_"))

    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in ROW_FILE_SUFFIXES and p.is_file() and named(p))


def _has_readme_configs(root: Path) -> bool:
    readme = root / "README.md"
    return readme.is_file() and "\nconfigs:" in readme.read_text(encoding="utf-8", errors="replace")


def local_tables(ds: DatasetConfig, root: Path) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(origin label, rows) per split of a local copy (see the module docstring)."""
    subset = str(ds.subset)
    for split in split_names(ds):
        if _has_readme_configs(root):
            import datasets  # why: datasets takes seconds to import; only hub / parquet / arrow datasets need it

            try:
                rows = list(datasets.load_dataset(str(root), subset, split=split))
            except Exception as e:  # datasets raises many types; name the folder, subset and split
                raise DatasetError(
                    f"dataset.name {root}: loading subset {subset!r} split {split!r} through its README configs "
                    f"failed: {type(e).__name__}: {e}"
                ) from e
            yield f"{root}/{subset}[{split}]", rows
            continue
        files = _split_files(root / subset, split)
        if not files:
            raise DatasetError(
                f"dataset.name {root}: no row file for split {split!r} under {root / subset} (expected e.g. "
                f"{split}.json or {subset}_{split}.parquet), and no README.md with configs"
            )
        for f in files:
            yield str(f), read_rows(f)


@register_source("cosmos")
def cosmos_source(ds: DatasetConfig, train_policy: TrainPolicyConfig, split_role: str, custom: dict) -> Iterator[dict]:
    if split_role == "val":
        raise DatasetError(
            f"dataset {ds.name!r} has no held-out split of its own: set dataset.test_size, or a "
            "[validation.dataset] naming another split"
        )
    folder = prepare_clips(ds)
    clips = index_clips(folder)
    ctx = context_for(
        train_policy,
        {**COSMOS_VISION_DEFAULTS, **ds.vision.as_part_defaults()},
        media_roots=[folder],
        media_lookup=lambda value: clips.get(Path(value).name),
        media_every_user_turn=True,
        allow_outside_root=ds.allow_media_outside_root,
    )
    root = local_copy(ds)
    tables = local_tables(ds, root) if root is not None else ((label, rows) for label, rows, _ in iter_tables(ds))
    for label, rows in tables:
        # Ids name the subset ("robovqa/17"): rows of different subsets share the same numbers.
        yield from map_rows(rows, label, ctx, id_prefix=f"{ds.subset}/")
