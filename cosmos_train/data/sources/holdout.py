"""Which rows `dataset.test_size` holds out of the training rows for validation: cosmos-rl 0.4.7's rule.

    kind = kind_of_source("hf")                                  # "datasets"
    held_out_indices(10, 0.15, kind, "train.train_policy.dataset")  # [8, 9]: the last ceil(0.15 x 10) rows
    split_by_row(samples, 0.15, kind, "val", where)              # the samples of those rows

cosmos-rl splits the training rows in `split_train_n_val_dataset` (cosmos_rl/utils/util.py), by the kind of
object the rows are:

- ``"map"``: a map-style dataset (a torch Dataset, what its launcher scripts build) holds out its FIRST rows:
  int(n x test_size) for a float, the count for an int, at least 1 and at most n - 1; unset: 0.1.
- ``"datasets"``: a `datasets.Dataset` (a dataset the TOML names, read with the datasets library) holds out its
  LAST rows, as `Dataset.train_test_split(test_size, shuffle=False)` does: ceil(n x test_size) for a float, the
  count for an int; unset: the library's 0.25; a float outside (0, 1) or a count outside (0, n) is an error.

Here the `hf` source is the datasets library's kind; a dataset script counts by what its get_dataset returns (a
`datasets.Dataset` that is not a torch Dataset: "datasets", anything else: "map", see `kind_of_rows`); every other
source (cosmos, llava, video_folder, synthetic, webdataset: the rows a launcher script would wrap) is "map".

A row is an origin (``file:row``): all samples of a row stay on one side. With `shuffle`
(`dataset.test_split_shuffle`, ours) as many rows are held out, drawn at random with a fixed seed.
"""

from __future__ import annotations

import math
import random
import sys
from typing import Any, Literal

from cosmos_train.data.sources.common import DatasetError
from cosmos_train.data.sources.registry import SplitRole

HoldOutKind = Literal["map", "datasets"]

# What test_size unset means where cosmos-rl splits: its own 0.1 for a map-style dataset; for a datasets.Dataset it
# passes None on, and train_test_split holds out 0.25.
DEFAULT_TEST_SIZE: dict[HoldOutKind, float] = {"map": 0.1, "datasets": 0.25}
# The shuffled hold-out must not move between runs or with the training seed.
SPLIT_SEED = 1234


def kind_of_source(source: str) -> HoldOutKind:
    """The kind of rows a (non-script) source reads: the datasets library's for `hf`, map-style otherwise."""
    return "datasets" if source == "hf" else "map"


def kind_of_rows(rows: Any) -> HoldOutKind:
    """The kind of what a dataset script returned, by cosmos-rl's test: a torch Dataset is map-style, anything else
    with a `train_test_split` (a datasets.Dataset) is the library's. Lists and generators count as map-style."""
    torch_data = sys.modules.get("torch.utils.data")  # not imported: `rows` cannot be a torch Dataset
    if torch_data is not None and isinstance(rows, torch_data.Dataset):
        return "map"
    return "datasets" if callable(getattr(rows, "train_test_split", None)) else "map"


def _describe(test_size: float | int | None, kind: HoldOutKind) -> str:
    return f"unset ({DEFAULT_TEST_SIZE[kind]})" if test_size is None else repr(test_size)


def held_out_count(n: int, test_size: float | int | None, kind: HoldOutKind, where: str) -> int:
    """How many of `n` rows cosmos-rl holds out (module docstring). DatasetError naming `where` when the library's
    rule refuses the size, or when fewer than 2 rows leave a side empty."""
    if n < 2:
        raise DatasetError(
            f"{where}: {n} row(s) to split for validation: holding rows out (test_size "
            f"{_describe(test_size, kind)}) needs at least 2, one to train on and one to validate; add rows, or give "
            "validation rows of its own: a [validation.dataset] (or a dataset script's get_val_dataset)"
        )
    size = DEFAULT_TEST_SIZE[kind] if test_size is None else test_size
    if kind == "map":
        count = int(n * size) if isinstance(size, float) else int(size)
        return max(min(count, n - 1), 1)
    if isinstance(size, float):
        count = math.ceil(size * n) if 0 < size < 1 else n
    else:
        count = int(size)
    if not 0 < count < n:
        raise DatasetError(
            f"{where}.test_size = {_describe(test_size, kind)} with {n} rows: a dataset the datasets library reads "
            "is split as its train_test_split(shuffle=False) splits it (cosmos-rl's rule), which takes a fraction "
            f"in (0, 1) that leaves a row to train on, or a count from 1 to {n - 1}; set one of those"
        )
    return count


def held_out_indices(
    n: int, test_size: float | int | None, kind: HoldOutKind, where: str, shuffle: bool = False
) -> list[int]:
    """The row indices (0 .. n-1, in reading order) held out: cosmos-rl's first or last rows, or with `shuffle`
    as many rows drawn with SPLIT_SEED."""
    count = held_out_count(n, test_size, kind, where)
    if shuffle:
        order = list(range(n))
        random.Random(SPLIT_SEED).shuffle(order)
        return sorted(order[:count])
    return list(range(count)) if kind == "map" else list(range(n - count, n))


def split_by_row(
    samples: list[dict],
    test_size: float | int | None,
    kind: HoldOutKind,
    split_role: SplitRole,
    where: str,
    shuffle: bool = False,
) -> list[dict]:
    """The samples of the held-out rows (`split_role` "val") or of the others ("train"); a row is an origin."""
    origins = list(dict.fromkeys(s["origin"] for s in samples))
    held = {origins[i] for i in held_out_indices(len(origins), test_size, kind, where, shuffle)}
    want_held = split_role == "val"
    return [s for s in samples if (s["origin"] in held) == want_held]
