"""`hf` source: Hugging Face hub datasets, `save_to_disk` folders and json/jsonl/parquet/arrow files.

    [train.train_policy.dataset]
    name = "data/train.parquet"       # or "org/name" (+ subset, split, revision), or a save_to_disk folder

A folder of data files is split as the Hugging Face datasets library splits it (`splits.py`):
`train.json` + `val.json` is a "train" and a "validation" split, `dataset.split` picks one (`"val"`,
`"valid"`, `"dev"` name "validation"), and a split no file is named after is an error listing the
folder's files by split. A folder whose files name no split is the one split "train". With validation
on and no `[validation.dataset]`, the folder's (or a save_to_disk DatasetDict's) validation split is
the validation set. A single file or a glob is read whole, whatever `dataset.split` says.

Relative media paths in rows are resolved against `dataset.media_path` when set, then the
folder of the data file, then the dataset folder, then `dataset.local_dir`. Images held in the
rows (an `Image` column: PIL images, or {"bytes", "path"} structs in parquet) are written once to
`dataset.cache_dir/embedded_media` (default `$COSMOS_CACHE/embedded_media`) and used by path;
`messages` rows may leave media parts empty ({"type": "image"}) and give the images in an
`images` column, as TRL datasets do. For a hub dataset, media the rows name by a relative path
that is not found locally are downloaded from the same dataset repo (one snapshot with just
those files, in the Hugging Face cache; offline mode uses the cache). Media resolving outside all
of those folders is a bad row (`media_outside_root`) unless `dataset.allow_media_outside_root`.
"""

from __future__ import annotations

import glob
import json
import logging
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from cosmos_train.config import DatasetConfig, TrainPolicyConfig
from cosmos_train.data.sources.common import (
    ROW_FILE_SUFFIXES,
    DatasetError,
    RowContext,
    context_for,
    cosmos_cache,
    map_rows,
    read_rows,
)
from cosmos_train.data.sources.registry import register_source
from cosmos_train.data.sources.splits import RULES, SPLIT_KEYWORDS, VALIDATION_SPLIT, folder_splits

logger = logging.getLogger(__name__)


def split_names(ds: DatasetConfig) -> list[str]:
    return [ds.split] if isinstance(ds.split, str) else list(ds.split)


def _media_roots(ds: DatasetConfig, data_dir: Path | None) -> list[Path]:
    roots = [Path(ds.media_path).expanduser()] if ds.media_path else []
    if data_dir is not None:
        roots.append(data_dir)
        folder = Path(ds.name).expanduser()
        if folder.is_dir() and folder != data_dir:  # a data file in a split folder (train/rows.json)
            roots.append(folder)
    if ds.local_dir:
        roots.append(Path(ds.local_dir).expanduser())
    return roots


def _embedded_store(ds: DatasetConfig) -> Path:
    """Where images held in the rows (datasets Image columns) are written as files."""
    return (Path(ds.cache_dir).expanduser() if ds.cache_dir else cosmos_cache()) / "embedded_media"


def _data_files(name: str) -> list[Path]:
    """A file, or the files a glob matches (a folder is read by split: `_folder_files`)."""
    path = Path(name).expanduser()
    if path.is_file():
        return [path]
    files = sorted(Path(p) for p in glob.glob(str(path)) if Path(p).suffix.lower() in ROW_FILE_SUFFIXES)
    if not files:
        raise DatasetError(f"dataset.name {name}: no json/jsonl/parquet/arrow files found")
    return files


def _folder_files(folder: Path, splits: list[str]) -> list[Path]:
    """The data files of `splits` in a folder, split as the datasets library splits it (no file twice)."""
    layout = folder_splits(folder)
    files: list[Path] = []
    for split in splits:
        mine = layout.files_for(split)
        logger.info(
            "dataset %s: split %r reads %s (the folder's files by split, %s: %s)",
            folder,
            split,
            ", ".join(str(f.relative_to(folder)) for f in mine),
            RULES[layout.rule],
            layout.describe(),
        )
        files += [f for f in mine if f not in files]
    return files


def _is_save_to_disk(path: Path) -> bool:
    return path.is_dir() and ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file())


def held_out_split(ds: DatasetConfig) -> str | None:
    """The validation split of a local dataset folder (a file or folder named val / valid / validation / dev,
    or a save_to_disk DatasetDict's split of such a name): what validation reads when no [validation.dataset]
    is set. None when it has none. DatasetError when `dataset.split` itself names it (train = validation)."""
    path = Path(ds.name).expanduser()
    if not path.is_dir():
        return None
    trained: set[str | None]  # the splits training reads; None where a name resolves to none
    if _is_save_to_disk(path):
        if not (path / "dataset_dict.json").is_file():
            return None
        have = json.loads((path / "dataset_dict.json").read_text(encoding="utf-8")).get("splits", [])
        found = next((s for s in SPLIT_KEYWORDS[VALIDATION_SPLIT] if s in have), None)
        trained = set(split_names(ds))
    else:
        layout = folder_splits(path)
        found = VALIDATION_SPLIT if VALIDATION_SPLIT in layout.splits else None
        trained = {layout.resolve(s) for s in split_names(ds)}
    if found is not None and found in trained:
        raise DatasetError(
            f"train.train_policy.dataset.split = {ds.split!r} of {ds.name} is its validation split, so validation "
            "would read the training rows: train on the training split, or set a [validation.dataset] (or "
            "dataset.test_size)"
        )
    return found


def _from_disk(ds: DatasetConfig, splits: list[str]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(origin label, rows) per split of a datasets.save_to_disk folder."""
    import datasets  # why: datasets takes seconds to import; only hub / parquet / arrow datasets need it

    loaded = datasets.load_from_disk(str(Path(ds.name).expanduser()))
    if isinstance(loaded, datasets.DatasetDict):
        for split in splits:
            if split not in loaded:
                raise DatasetError(f"dataset.split {split!r} is not in {ds.name} (splits: {', '.join(loaded)})")
            yield f"{ds.name}[{split}]", list(loaded[split])
    else:
        yield ds.name, list(loaded)


def _from_hub(ds: DatasetConfig, splits: list[str]) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    import datasets  # why: datasets takes seconds to import; only hub / parquet / arrow datasets need it

    for split in splits:
        try:
            rows = datasets.load_dataset(ds.name, ds.subset, split=split, revision=ds.revision)
        except Exception as e:  # the hub raises many types; the user needs the name and the cause
            raise DatasetError(
                f"dataset {ds.name!r} (subset {ds.subset!r}, split {split!r}, revision {ds.revision!r}) "
                f"could not be loaded: {type(e).__name__}: {e}"
            ) from e
        label = f"{ds.name}{'/' + ds.subset if ds.subset else ''}[{split}]"
        yield label, list(rows)


def iter_tables(
    ds: DatasetConfig, splits: list[str] | None = None
) -> Iterator[tuple[str, list[dict[str, Any]], Path | None]]:
    """(origin label, rows, folder of the file) for each table of `splits` (default: the dataset's `split`)."""
    path = Path(ds.name).expanduser()
    splits = split_names(ds) if splits is None else splits
    if _is_save_to_disk(path):
        for label, rows in _from_disk(ds, splits):
            yield label, rows, path
    elif path.is_dir():
        for f in _folder_files(path, splits):
            yield str(f), read_rows(f), f.parent
    elif path.exists() or any(c in ds.name for c in "*?["):
        for f in _data_files(ds.name):
            yield str(f), read_rows(f), f.parent
    else:
        for label, rows in _from_hub(ds, splits):
            yield label, rows, None


def _unresolved_media(rows: list[dict[str, Any]], label: str, ctx: RowContext) -> list[str]:
    """Relative media paths of `rows` found under none of ctx.media_roots (a dry run of the mapping)."""
    missing: set[str] = set()

    def note(value: str) -> None:
        path = Path(value)
        if not value.startswith(("http://", "https://", "file://")) and not path.is_absolute():
            if not any((root / path).exists() for root in ctx.media_roots):
                missing.add(value)
        return None  # let resolve_media go on as usual

    for _ in map_rows(rows, label, replace(ctx, media_lookup=note, write_embedded=False)):
        pass
    return sorted(missing)


def _hub_media(ds: DatasetConfig, files: list[str]) -> Path:
    """Download `files` from the dataset repo in one snapshot; returns its local folder."""
    from huggingface_hub import snapshot_download  # why: the hub client only when downloading

    try:
        folder = snapshot_download(
            ds.name, repo_type="dataset", revision=ds.revision, allow_patterns=[glob.escape(f) for f in files]
        )
    except Exception as e:  # the hub raises many types; the user needs the repo, the files and the cause
        shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        raise DatasetError(
            f"dataset {ds.name!r}: {len(files)} media file(s) the rows name ({shown}) are not local and could "
            f"not be downloaded from the dataset repo: {type(e).__name__}: {e}. Set dataset.media_path to a "
            "local copy, or allow hub access"
        ) from e
    return Path(folder)


@register_source("hf")
def hf_source(ds: DatasetConfig, train_policy: TrainPolicyConfig, split_role: str, custom: dict) -> Iterator[dict]:
    splits = None
    if split_role == "val":
        held_out = held_out_split(ds)
        if held_out is None:
            raise DatasetError(
                f"dataset {ds.name!r} has no held-out split of its own (a local folder's val / valid / validation "
                "/ dev file or folder): set dataset.test_size, or a [validation.dataset] naming the validation split"
            )
        logger.info("validation rows: split %r of %s (no [validation.dataset] set)", held_out, ds.name)
        splits = [held_out]
    for label, rows, folder in iter_tables(ds, splits):
        ctx = context_for(
            train_policy,
            ds.vision.as_part_defaults(),
            media_roots=_media_roots(ds, folder),
            embedded_store=_embedded_store(ds),
            allow_outside_root=ds.allow_media_outside_root,
        )
        if folder is None:  # a hub dataset: media its rows name by relative path live in the same repo
            files = _unresolved_media(rows, label, ctx)
            if files:
                ctx.media_roots.append(_hub_media(ds, files))
        yield from map_rows(rows, label, ctx)
