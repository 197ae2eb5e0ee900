"""Which data files of a local folder make which split: the Hugging Face datasets library's rules
(`datasets.data_files`, 5.x), so a folder reads here as `datasets.load_dataset(folder)` reads it.

    layout = folder_splits(Path("data"))          # FolderSplits: split -> files, how they were told apart
    layout.files_for("val")                       # the files of split "validation" (val / valid / dev alias it)

The rules, in the library's order; the first that matches a file decides the layout:
1. sharded names under `data/`: `data/<split>-00000-of-00003.<ext>`, each <split> a split of that name;
2. a folder below the dataset folder named after a split (`train/`, `val_2024/`, `my-test/`);
3. a file named after a split (`train.json`, `val.jsonl`, `robovqa_test-1.parquet`);
4. otherwise every file is the one split "train".
A split keyword counts as a word of the name: the whole name, or bounded by one of the separators
`-`, `.`, `_`, space or a digit (so `training.json` is train, `trainer.json` is nothing). The
keywords (SPLIT_KEYWORDS): train / training; validation / valid / dev / val; test / testing / eval /
evaluation. Under rules 2 and 3 a file that names no split belongs to none (the library leaves it out
too; `FolderSplits.unassigned` lists it). Unlike the library, a file that names two splits
(`train_val.json`) is refused rather than read into both: held-out rows would leak into training.
Files and folders starting with "." or "__", and the library's metadata files (README.md,
dataset_info.json, ...), are never data. tests/unit/test_splits.py compares these rules with the library's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from cosmos_train.data.sources.common import ROW_FILE_SUFFIXES, DatasetError

# datasets.data_files.SPLIT_KEYWORDS / NON_WORDS_CHARS / FILES_TO_IGNORE (pinned equal by the tests).
SPLIT_KEYWORDS: dict[str, tuple[str, ...]] = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "dev", "val"),
    "test": ("test", "testing", "eval", "evaluation"),
}
NON_WORDS_CHARS = "-._ 0-9"
FILES_TO_IGNORE = (
    "README.md",
    "config.json",
    "dataset_info.json",
    "dataset_infos.json",
    "dummy_data.zip",
    "dataset_dict.json",
)
# Every keyword -> its split: `split = "val"` asks for the split the library calls "validation".
SPLIT_ALIASES = {keyword: split for split, keywords in SPLIT_KEYWORDS.items() for keyword in keywords}
VALIDATION_SPLIT = "validation"

_SEP = f"[{NON_WORDS_CHARS}]"
# datasets.data_files.KEYWORDS_IN_FILENAME_BASE_PATTERNS ("**/{kw}[sep]*", "**/*[sep]{kw}[sep]*") on the name,
# KEYWORDS_IN_DIR_NAME_BASE_PATTERNS ("**/{kw}/**", "**/{kw}[sep]*/**", "**/*[sep]{kw}/**",
# "**/*[sep]{kw}[sep]*/**") on each folder of the path.
_FILE_NAME = {
    split: re.compile(rf"^(?:.*{_SEP})?(?:{'|'.join(kws)}){_SEP}.*$") for split, kws in SPLIT_KEYWORDS.items()
}
_DIR_NAME = {
    split: re.compile(rf"^(?:.*{_SEP})?(?:{'|'.join(kws)})(?:{_SEP}.*)?$") for split, kws in SPLIT_KEYWORDS.items()
}
# datasets.data_files.SPLIT_PATTERN_SHARDED, split names as datasets.naming._split_re allows.
_SHARDED = re.compile(r"^data/(?P<split>\w+(?:\.\w+)*)-[0-9]{5}-of-[0-9]{5}[^/]*\.[^/]*$")

RULES = {
    "sharded": "sharded file names (data/<split>-00000-of-0000N)",
    "folder": "folder names",
    "file": "file names",
    "none": "no file or folder names a split: all files are the one split 'train'",
}


class SplitNotFound(DatasetError):
    """A split no data file of a folder belongs to; `named(where)` says which config block asked for it."""

    def __init__(self, layout: FolderSplits, requested: str, where: str = "dataset"):
        self.layout, self.requested = layout, requested
        super().__init__(
            f"{where}.split = {requested!r}: no data file of {layout.root} belongs to that split. The folder's "
            f"files by split ({RULES[layout.rule]}): {layout.describe()}. Set {where}.split to one of "
            f"{', '.join(repr(s) for s in layout.splits)}, name the files of that split after it (e.g. "
            f"{requested}.json, or a {requested}/ folder), or point {where}.name at the file(s)"
        )

    def named(self, where: str) -> SplitNotFound:
        return SplitNotFound(self.layout, self.requested, where)


@dataclass
class FolderSplits:
    """The data files of `root` by split (paths relative to root, posix), and the rule that told them apart."""

    root: Path
    splits: dict[str, list[str]]
    rule: str
    unassigned: list[str] = field(default_factory=list)

    def resolve(self, requested: str) -> str | None:
        """The split a requested name means here: itself, its library name (val -> validation), or None."""
        if requested in self.splits:
            return requested
        alias = SPLIT_ALIASES.get(requested)
        return alias if alias in self.splits else None

    def files_for(self, requested: str) -> list[Path]:
        """The files of split `requested`; a name no split has is still the files whose name is exactly it
        (`train_letter.json` for "train_letter"); else SplitNotFound naming the split, the folder and its files."""
        split = self.resolve(requested)
        if split is not None:
            return [self.root / rel for rel in self.splits[split]]
        exact = [rel for rel in self.all_files() if _stem(rel) == requested]
        if exact:
            return [self.root / rel for rel in exact]
        raise SplitNotFound(self, requested)

    def all_files(self) -> list[str]:
        return sorted({rel for files in self.splits.values() for rel in files} | set(self.unassigned))

    def describe(self) -> str:
        """`train: train.json; validation: val.json; in no split: notes.json`, for messages and logs."""
        parts = [f"{split}: {_listed(files)}" for split, files in self.splits.items()]
        if self.unassigned:
            parts.append(f"in no split (left out): {_listed(self.unassigned)}")
        return "; ".join(parts)


def _listed(files: list[str], shown: int = 5) -> str:
    more = f" and {len(files) - shown} more" if len(files) > shown else ""
    return ", ".join(files[:shown]) + more


def _stem(rel: str) -> str:
    name = PurePosixPath(rel).name
    return name[: -len(PurePosixPath(name).suffix)] if PurePosixPath(name).suffix else name


def data_files(root: Path) -> list[str]:
    """The row files (json / jsonl / parquet / arrow) under `root`, relative posix paths, hidden and
    metadata files left out."""
    out = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or any(part.startswith("__") for part in rel.parts[:-1]):
            continue
        if path.suffix.lower() in ROW_FILE_SUFFIXES and path.name not in FILES_TO_IGNORE and path.is_file():
            out.append(rel.as_posix())
    return sorted(out)


def _by_rule(named: dict[str, list[str]]) -> dict[str, list[str]]:
    """The library's default splits in its order (train, validation, test), then other names sorted."""
    order = [s for s in SPLIT_KEYWORDS if s in named] + sorted(s for s in named if s not in SPLIT_KEYWORDS)
    return {s: named[s] for s in order}


def folder_splits(root: Path) -> FolderSplits:
    """The split layout of the data files under `root` (see the module docstring)."""
    files = data_files(root)
    if not files:
        raise DatasetError(f"dataset.name {root}: no json/jsonl/parquet/arrow files found")
    sharded: dict[str, list[str]] = {}
    for rel in files:
        m = _SHARDED.match(rel)
        if m:
            sharded.setdefault(m.group("split"), []).append(rel)
    if sharded:
        taken = {rel for group in sharded.values() for rel in group}
        return FolderSplits(root, _by_rule(sharded), "sharded", [f for f in files if f not in taken])
    for rule, patterns, part in (("folder", _DIR_NAME, _dirs), ("file", _FILE_NAME, _name)):
        named: dict[str, list[str]] = {}
        for rel in files:
            hits = [split for split, pattern in patterns.items() if any(pattern.match(p) for p in part(rel))]
            if len(hits) > 1:
                raise DatasetError(
                    f"dataset.name {root}: {rel} is named after two splits ({' and '.join(hits)}), so its rows "
                    "would be read as both (held-out rows in training); rename it or its folder to name one split"
                )
            if hits:
                named.setdefault(hits[0], []).append(rel)
        if named:
            taken = {rel for group in named.values() for rel in group}
            return FolderSplits(root, _by_rule(named), rule, [f for f in files if f not in taken])
    return FolderSplits(root, {"train": files}, "none")


def _dirs(rel: str) -> list[str]:
    return list(PurePosixPath(rel).parts[:-1])


def _name(rel: str) -> list[str]:
    return [PurePosixPath(rel).name]
