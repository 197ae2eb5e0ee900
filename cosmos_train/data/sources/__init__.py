"""Dataset sources: every dataset users bring, read into chat samples.

    from cosmos_train.data.sources import load_samples
    samples = load_samples(cfg, "train")                   # the train rows of cfg's dataset
    samples = load_samples(cfg, "val", script="my_data.py")

Contract of a source
--------------------
A source is a plain function registered by name::

    @register_source("llava")
    def llava_source(dataset_cfg: DatasetConfig, train_policy: TrainPolicyConfig,
                     split_role: Literal["train", "val"], custom: dict) -> Iterable[ChatSample]

It yields chat samples as in docs/INTERFACES.md: ``{"id", "origin": "file:row", "messages": [...],
"reference"?}``; video / image parts carry the dataset's vision settings (``[dataset.vision]``)
merged *under* the row's own. A row that cannot be mapped is yielded as an error sample
(``"error": {"reason", "message"}``, see `common.error_sample`) so `dataset.on_bad_row` decides;
a dataset that cannot be read at all raises `DatasetError`.

``split_role == "train"`` asks for the rows the dataset config names (its ``split``);
``split_role == "val"`` asks for the source's own held-out rows (synthetic ``sft/val.json``, a
script's ``get_val_dataset``, a local folder's ``val.json``); a source without one raises `DatasetError`.

Which rows validation reads, and which train (`split_plan`), as cosmos-rl 0.4.7 decides (its SFT worker and GRPO
data fetcher call `split_train_n_val_dataset` when validation is on and no validation dataset is given):
``[validation.dataset]`` when set (all training rows train); else a script's ``get_val_dataset``; else, with
``dataset.test_size`` set, that part of the training rows, held out of training (`holdout`: cosmos-rl's first or
last rows by the kind of dataset); else a local folder's or synthetic dataset's own validation split; else
cosmos-rl's default part of the training rows (test_size unset: 0.1, or 0.25 for an `hf` dataset). With
validation off nothing is held out. Held-out rows never train.

Sources (``dataset.source``)
----------------------------
- ``hf``: a hub id (subset / split / revision; ``split`` may be a list, concatenated), a
  ``datasets.save_to_disk`` folder, or json / jsonl / parquet / arrow file(s) (a file, a folder of
  them or a glob). A folder's files are split as the datasets library splits them (`splits.py`:
  ``train.json`` / ``val.json``, ``train/`` / ``val/``, ``data/train-00000-of-00001.parquet``), and
  its validation split is role "val"'s rows. The conversation column is a list of turns or that list
  as a JSON string.
- ``cosmos``: the Cosmos-Reason SFT / RL hub datasets (``nvidia/Cosmos-Reason1-*``); clips are
  downloaded as ``<subset>/clips/*.tar.gz`` and extracted once into ``$COSMOS_CACHE``.
- ``llava``: ``dataset.annotation_path`` + ``dataset.media_path``; single and multi-turn;
  image / images / video rows; ``<image>`` / ``<video>`` placeholders placed where they stand.
- ``video_folder``: ``videos/<id><video_suffix>.mp4`` + ``metas/<id>.label.json`` or ``.txt`` ->
  caption chats prompted by ``dataset.caption_prompt``.
- ``synthetic``: the folder `cosmos_train.data.synthetic` writes (``dataset_info.json``).
- ``webdataset``: LLaVA-style rows (``<key>.json``) and their media in tar shards on S3 (``name =
  "s3://bucket/prefix/"`` or a brace pattern), streamed shard by shard (`webdataset.py`).
- ``script``: a user's Python file (see `cosmos_train.data.sources.script` for its contract).
- ``auto`` (default) picks by what ``dataset.name`` points at, see `detect_source`: a hub id
  ``nvidia/Cosmos-Reason*`` or a local folder in the hub layout (``<subset>/clips/*.tar.gz`` or
  extracted videos, row files under ``<subset>/`` or a README with configs) is ``cosmos``; a folder
  that matches another layout first (save_to_disk, synthetic, video folder, row files at its top)
  keeps that source.

Rows are mapped by `common.row_to_samples`: Cosmos rows (``conversations`` + ``video``: the video
goes in front of every user turn), LLaVA rows (``from``/``value`` turns, placeholders), chat
samples (``messages``), RL rows (``qa_pairs`` -> option-lettered prompt + ``reference``).
Samples without a system turn get ``train_policy.system_prompt``, else the default one, written out
(`cosmos_train.data.prompt.with_system_prompt`: the one prompt builder).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cosmos_train.config import Config, DatasetConfig
from cosmos_train.data.prompt import with_system_prompt
from cosmos_train.data.shards import is_shard_url

# The built-in sources register themselves in `registry` on import; nothing below imports them otherwise.
from cosmos_train.data.sources import cosmos, hf, llava, synthetic, video_folder, webdataset  # noqa: F401
from cosmos_train.data.sources import script as script_mod
from cosmos_train.data.sources.common import ROW_FILE_SUFFIXES, DatasetError, RowError
from cosmos_train.data.sources.cosmos import VIDEO_SUFFIXES
from cosmos_train.data.sources.hf import held_out_split
from cosmos_train.data.sources.holdout import kind_of_rows, kind_of_source, split_by_row
from cosmos_train.data.sources.registry import SOURCES, SourceFn, SplitRole, get_source, register_source
from cosmos_train.data.sources.splits import SplitNotFound, data_files

COSMOS_HUB_ID = re.compile(r"^nvidia/Cosmos-Reason\d*[-_]", re.IGNORECASE)

__all__ = [
    "SOURCES",
    "DatasetError",
    "RowError",
    "SourceFn",
    "SplitPlan",
    "SplitRole",
    "cosmos_subsets",
    "detect_source",
    "get_source",
    "load_samples",
    "register_source",
    "split_plan",
]


def detect_source(ds: DatasetConfig) -> str:
    """The source `auto` means for this dataset config (see the module docstring)."""
    if ds.source != "auto":
        return ds.source
    if ds.annotation_path:
        return "llava"
    name = ds.name.strip()
    if not name:
        raise DatasetError("train.train_policy.dataset.name is empty: set a hub id, a file or a folder")
    if is_shard_url(name):
        return "webdataset"
    path = Path(name).expanduser()
    if path.is_dir():
        if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
            return "hf"  # datasets.save_to_disk
        if (path / "dataset_info.json").is_file() and ((path / "sft").is_dir() or (path / "rl").is_dir()):
            return "synthetic"
        if (path / "videos").is_dir() and (path / "metas").is_dir():
            return "video_folder"
        if any(p.suffix.lower() in ROW_FILE_SUFFIXES for p in path.iterdir()):
            return "hf"
        if cosmos_subsets(path):
            return "cosmos"
        if data_files(path):  # row files in subfolders only: a hub download (data/train-00000-of-00001.parquet)
            return "hf"
        raise DatasetError(
            f"dataset.name {name}: a folder that is none of: a datasets.save_to_disk folder, a synthetic "
            "dataset (dataset_info.json + sft/), a video folder (videos/ + metas/), json/jsonl/parquet/arrow "
            "files, or a copy of a Cosmos-Reason dataset (<subset>/clips/*.tar.gz or videos)"
        )
    if path.is_file():
        if path.suffix.lower() == ".py":
            return "script"
        if path.suffix.lower() in ROW_FILE_SUFFIXES:
            return "hf"
        raise DatasetError(f"dataset.name {name}: unsupported file type (json, jsonl, parquet, arrow or a .py script)")
    if any(c in name for c in "*?["):
        return "hf"
    if re.fullmatch(r"[\w.-]+/[\w.-]+", name) and not name.startswith((".", "/")):
        return "cosmos" if COSMOS_HUB_ID.match(name) else "hf"
    raise DatasetError(f"dataset.name {name}: no such file or folder, and not a hub id (org/name)")


def cosmos_subsets(folder: Path) -> list[str]:
    """The subsets of a local copy of a Cosmos-Reason hub dataset: subfolders holding a `clips/` folder
    with clip archives (*.tar.gz) or extracted videos, the layout the `cosmos` source reads locally."""

    def has_clips(clips: Path) -> bool:
        # any() stops at the first hit: an extracted subset holds many thousands of clips.
        return clips.is_dir() and any(
            p.name.endswith(".tar.gz") or p.suffix.lower() in VIDEO_SUFFIXES for p in clips.rglob("*")
        )

    return sorted(d.name for d in folder.iterdir() if d.is_dir() and has_clips(d / "clips"))


@dataclass(frozen=True)
class SplitPlan:
    """What role `split_role` reads: `dataset` (named `where` in messages), the source's `read_role` rows of it, and
    whether a test_size part of them is held out (`hold_out`; the dataset's test_size, unset: cosmos-rl's default)."""

    dataset: DatasetConfig
    where: str
    read_role: SplitRole
    hold_out: bool


def _has_own_val_split(ds: DatasetConfig) -> bool:
    """A local folder's validation split (hf) or a synthetic folder's val file: what validation reads when
    test_size is unset (DatasetError from `held_out_split` when training reads that split itself)."""
    source = detect_source(ds)
    return source == "synthetic" or (source == "hf" and held_out_split(ds) is not None)


def split_plan(cfg: Config, split_role: SplitRole, script: str | Path | None = None) -> SplitPlan:
    """Which rows role `split_role` reads (module docstring). Role "val" is planned as if validation were on."""
    policy, where = cfg.train.train_policy.dataset, "train.train_policy.dataset"
    if split_role == "val" and cfg.validation.dataset is not None:
        # ours (cosmos-rl never reads validation.dataset.test_size): its split, or the part test_size holds out
        val = cfg.validation.dataset
        return SplitPlan(val, "validation.dataset", "train", val.test_size is not None)
    if split_role == "train" and (not cfg.validation.enable or cfg.validation.dataset is not None):
        # cosmos-rl splits the training rows only for a validation that has no dataset of its own
        return SplitPlan(policy, where, "train", False)
    if script is None and detect_source(policy) == "script":
        script = policy.name
    if script is not None and script_mod.has_val_dataset(script):
        return SplitPlan(policy, where, split_role, False)  # cosmos-rl's val_dataset: test_size is not read
    if script is None and policy.test_size is None and _has_own_val_split(policy):
        return SplitPlan(policy, where, split_role, False)
    return SplitPlan(policy, where, "train", True)


def _describe(ds: DatasetConfig, script: str | Path | None, role: SplitRole) -> str:
    """What was read, for messages: the file / folder / hub id, its source, subset and split."""
    if script is not None:
        return f"dataset script {script} ({role} rows)"
    source = detect_source(ds)
    if source == "llava":
        return f"LLaVA file {ds.annotation_path}"
    if source in ("video_folder", "synthetic", "script"):
        return f"{source} dataset {ds.name} ({role} rows)"
    subset = f", subset {ds.subset!r}" if ds.subset else ""
    return f"{source} dataset {ds.name}{subset}, split {ds.split!r}"


def _with_system_prompt(sample: dict, system_prompt: str | None) -> dict:
    if sample.get("messages"):
        sample["messages"] = with_system_prompt(sample["messages"], system_prompt)
    return sample


def load_samples(
    cfg: Config, split_role: SplitRole, script: str | Path | None = None, *, keep_errors: bool = False
) -> list[dict[str, Any]]:
    """Read the train or val rows of `cfg` as chat samples.

    Which dataset and which of its rows: `split_plan` (the module docstring). `script` (a dataset script path) overrides
    `dataset.source`. A row that cannot be mapped raises RowError naming its file and row, unless
    `keep_errors` (data preparation applies `dataset.on_bad_row` to those error samples).
    """
    if split_role not in ("train", "val"):
        raise ValueError(f"split_role must be 'train' or 'val', got {split_role!r}")
    policy_cfg = cfg.train.train_policy
    plan = split_plan(cfg, split_role, script)
    ds, where = plan.dataset, plan.where
    if script is None and detect_source(ds) == "script":
        script = ds.name  # with the whole job config, not the registry entry's partial one
    returned: list[Any] = []  # what a script's function returned: its kind decides which rows test_size holds out
    if script is not None:
        reader: Callable[[SplitRole], Iterable[dict]] = lambda role: script_mod.script_samples(  # noqa: E731
            Path(script), cfg, role, on_rows=returned.append
        )
    else:
        source = get_source(detect_source(ds))
        reader = lambda role: source(ds, policy_cfg, role, dict(cfg.custom))  # noqa: E731
    try:
        samples = list(reader(plan.read_role))
    except SplitNotFound as e:
        raise e.named(where) from None
    if not samples:
        raise DatasetError(
            f"{where}: {_describe(ds, script, plan.read_role)} yielded no rows; check the file is not "
            "empty and that subset / split name the rows you mean"
        )
    if plan.hold_out:
        kind = kind_of_rows(returned[0]) if returned else kind_of_source(detect_source(ds))
        samples = split_by_row(samples, ds.test_size, kind, split_role, where, ds.test_split_shuffle)
    if not keep_errors:
        for s in samples:
            if "error" in s:
                raise RowError(s["error"]["reason"], s["error"]["message"])
    return [_with_system_prompt(s, policy_cfg.system_prompt) for s in samples]
