"""Under `train.train_policy.dataset.test_size`, the rows cosmos-rl 0.4.7 holds out: ours beside its own code.

The oracle (tests/cosmos_rl_oracle.py) is cosmos-rl's `split_train_n_val_dataset` (cosmos_rl/utils/util.py: the
first rows of a torch Dataset, or `datasets.Dataset.train_test_split(shuffle=False)`'s last rows) and the SFT
worker's `construct_dataset` (cosmos_rl/policy/worker/sft_worker.py), which decides when it splits: validation on,
and neither a user validation dataset (a script's `val_dataset`) nor `validation.dataset.name`. The GRPO data fetcher
(cosmos_rl/dispatcher/data/data_fetcher.py, `load_dataset`) calls the split under the same conditions. Row ids are
compared: which rows validate and which train. Every comparison returns what differs, so the mutation test can show
that a change of ours is caught.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import datasets
import pytest
import torch

from cosmos_train.config import config_from_dict
from cosmos_train.data import sources
from cosmos_train.data.sources import DatasetError, load_samples
from cosmos_train.data.sources import holdout as ours
from cosmos_train.data.sources.script import load_script
from tests.cosmos_rl_oracle import oracle_config, oracle_function, oracle_module

UTIL = "cosmos_rl.utils.util"
QUIET = logging.getLogger("cosmos_rl_oracle.splits")
QUIET.setLevel(logging.ERROR)  # the oracle warns at every split that it splits

# float and int test_size as cosmos-rl's TOML gives them (its pydantic keeps the type), and unset
TEST_SIZES: list[float | int | None] = [None, 0.01, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 1 / 3, 0.5, 0.55, 0.7]
TEST_SIZES += [0.9, 0.95, 0.99, 1.0, 1.5, 1, 2, 3, 5, 7, 10, 29, 30, 100, 999]
ROW_COUNTS = [*range(2, 31), 50, 97, 100, 101, 1000]

# a dataset script: n rows (custom.rows.n) as a torch Dataset, a datasets.Dataset or a list (custom.rows.kind)
SCRIPT = """
import datasets
import torch.utils.data


class Rows(torch.utils.data.Dataset):
    def __init__(self, rows):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def rows(prefix, n):
    return [{"id": f"{prefix}{i}", "messages": [{"role": "user", "content": f"q{i}"}]} for i in range(n)]


def wrap(kind, found):
    return {"torch": Rows, "datasets": datasets.Dataset.from_list, "list": list}[kind](found)


def get_dataset(config):
    return wrap(config.custom["rows"]["kind"], rows("r", config.custom["rows"]["n"]))
"""
VAL_FN = """

def get_val_dataset(config):
    return wrap(config.custom["rows"]["kind"], rows("v", 3))
"""


@cache
def oracle_split() -> Callable[..., tuple[Any, Any]]:
    return oracle_function(
        UTIL, "split_train_n_val_dataset", logger=QUIET, Dataset=torch.utils.data.Dataset, CosmosConfig=object
    )


class _Kept:
    """Stands for cosmos-rl's SFTDataset, which wraps the rows construct_dataset chose: here they are kept as ids."""

    def __init__(self, config: Any, dataset: Any, data_packer: Any, is_user_dataset: bool) -> None:
        self.ids = [dataset[i]["id"] for i in range(len(dataset))]


@cache
def oracle_construct_dataset() -> Callable[..., tuple[_Kept, _Kept]]:
    util = SimpleNamespace(
        load_data_from_disk_or_hf=oracle_function(UTIL, "load_data_from_disk_or_hf", logger=QUIET),
        split_train_n_val_dataset=oracle_split(),
    )
    return oracle_function(
        "cosmos_rl.policy.worker.sft_worker",
        "construct_dataset",
        util=util,
        logger=QUIET,
        SFTDataset=_Kept,
        DPODataset=_Kept,
        CosmosConfig=object,
        BaseDataPacker=object,
    )


def oracle_cfg(dataset: dict[str, Any], validation: bool = True, val_dataset: dict[str, Any] | None = None) -> Any:
    """cosmos-rl's own Config with its own DatasetConfig (its pydantic decides float or int, as from its TOML)."""
    dataset_cls = oracle_module("cosmos_rl.policy.config").DatasetConfig
    cfg = oracle_config()
    cfg.train.train_policy.dataset = dataset_cls.model_validate(dataset)
    cfg.validation.enable = validation
    if val_dataset is not None:
        cfg.validation.dataset = dataset_cls.model_validate(val_dataset)
    return cfg


def theirs_held_out(n: int, test_size: float | int | None, kind: str) -> list[int] | None:
    """The row indices cosmos-rl's split holds out of n rows of a torch Dataset ("map") or a datasets.Dataset;
    None where it refuses (train_test_split's ValueError)."""
    return _theirs_held_out(n, test_size, type(test_size).__name__, kind)  # 1 and 1.0 differ: a count, a fraction


@cache
def _theirs_held_out(n: int, test_size: float | int | None, type_name: str, kind: str) -> list[int] | None:
    rows: Any = (
        datasets.Dataset.from_dict({"i": list(range(n))})
        if kind == "datasets"
        else torch.utils.data.Subset(torch.arange(n), list(range(n)))  # a map-style torch Dataset of ids
    )
    try:
        _, test = oracle_split()(rows, oracle_cfg({"test_size": test_size}))
    except ValueError:
        return None
    return [int(i) for i in test["i"]] if kind == "datasets" else [int(test[j]) for j in range(len(test))]


def ours_held_out(n: int, test_size: float | int | None, kind: ours.HoldOutKind) -> list[int] | None:
    try:
        return ours.held_out_indices(n, test_size, kind, "train.train_policy.dataset")
    except DatasetError:
        return None


def held_out_differences() -> list[tuple[str, int, float | int | None, Any, Any]]:
    """(kind, rows, test_size, ours, theirs) wherever the held-out rows differ, over every size and count."""
    out = []
    for kind in ("map", "datasets"):
        for n in ROW_COUNTS:
            for test_size in TEST_SIZES:
                mine, theirs = ours_held_out(n, test_size, kind), theirs_held_out(n, test_size, kind)
                if mine != theirs:
                    out.append((kind, n, test_size, mine, theirs))
    return out


def test_held_out_rows_equal_cosmos_rls_split() -> None:
    """train.train_policy.dataset.test_size: the same rows as split_train_n_val_dataset for 2 to 1000 rows, float,
    int and unset test_size, both kinds (the first int(n x f) rows of a map-style dataset, clamped to [1, n - 1],
    0.1 unset; the last ceil(n x f) rows of a datasets.Dataset, 0.25 unset, and the same refusals)."""
    assert held_out_differences() == []
    # the counts the rules give, spelled out once
    assert ours.held_out_indices(10, 0.15, "map", "d") == [0] == theirs_held_out(10, 0.15, "map")
    assert ours.held_out_indices(10, 0.15, "datasets", "d") == [8, 9] == theirs_held_out(10, 0.15, "datasets")
    assert len(ours.held_out_indices(1000, None, "map", "d")) == 100
    assert len(ours.held_out_indices(1000, None, "datasets", "d")) == 250
    assert ours.held_out_indices(10, 1.5, "map", "d") == list(range(9))  # clamped to leave one row to train on
    assert theirs_held_out(10, 1.5, "datasets") is None and ours_held_out(10, 1.5, "datasets") is None


def test_each_source_holds_out_by_the_kind_cosmos_rl_would_hold(tmp_path: Path) -> None:
    """test_size by source: `hf` is what cosmos-rl reads from the TOML with the datasets library (last rows); a
    script by what it returns; every other source is rows a cosmos-rl launcher script wraps in a torch Dataset
    (first rows): a LLaVA file read whole, its first rows validate."""
    assert ours.kind_of_source("hf") == "datasets"
    for source in ("cosmos", "llava", "video_folder", "synthetic", "webdataset"):
        assert ours.kind_of_source(source) == "map", source
    rows = datasets.Dataset.from_dict({"i": [0, 1]})
    assert [ours.kind_of_rows(r) for r in (rows, torch.utils.data.TensorDataset(torch.arange(2)), [1], iter([1]))] == [
        "datasets",
        "map",
        "map",
        "map",
    ]
    ann = tmp_path / "llava.json"
    turns = [{"from": "human", "value": "q"}, {"from": "gpt", "value": "A"}]
    ann.write_text(json.dumps([{"id": f"l{i}", "conversations": turns} for i in range(10)]))
    cfg = config_from_dict(
        {
            "train": {"train_policy": {"dataset": {"annotation_path": str(ann), "test_size": 0.25}}},
            "validation": {"enable": True},
        }
    )
    held = theirs_held_out(10, 0.25, "map")
    assert [s["id"] for s in load_samples(cfg, "val")] == [f"l{i}" for i in held or []] == ["l0", "l1"]
    assert [s["id"] for s in load_samples(cfg, "train")] == [f"l{i}" for i in range(2, 10)]


# ------------------------------------------------------------------------------------------------ whole datasets
def _hf_folder(root: Path, prefix: str, n: int) -> Path:
    """A datasets.save_to_disk folder of n chat rows: what cosmos-rl's load_data_from_disk_or_hf and our hf source
    both read."""
    folder = root / f"{prefix}{n}"
    if not folder.is_dir():
        rows = [
            {
                "id": f"{prefix}{i}",
                "conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": "A"}],
            }
            for i in range(n)
        ]
        datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(folder))
    return folder


def _script(root: Path, with_val: bool) -> Path:
    path = root / ("with_val.py" if with_val else "train_only.py")
    if not path.is_file():
        path.write_text(SCRIPT + (VAL_FN if with_val else ""))
    return path


def sft_cases(root: Path) -> Iterator[dict[str, Any]]:
    """Jobs as both configs say them: the dataset, where it comes from, validation on or off, a validation dataset."""
    for n in (2, 7, 10, 21):
        for test_size in (None, 0.1, 0.3, 0.5, 0.9, 3, 10):
            yield {"hf": n, "test_size": test_size}
            for kind in ("torch", "datasets"):
                yield {"script": kind, "n": n, "test_size": test_size}
    for test_size in (None, 0.3):
        # validation off: no split; a validation dataset named, or a script's own: test_size is not read
        yield {"hf": 10, "test_size": test_size, "validation": False}
        yield {"script": "torch", "n": 10, "test_size": test_size, "validation": False}
        yield {"hf": 10, "test_size": test_size, "val_dataset": 4}
        yield {"script": "torch", "n": 10, "test_size": test_size, "with_val": True}
        yield {"script": "datasets", "n": 10, "test_size": test_size, "with_val": True}


def _ours_ids(cfg: Any, role: str, script: Path | None) -> list[str] | None:
    try:
        return [s["id"] for s in load_samples(cfg, role, script)]  # type: ignore[arg-type]
    except DatasetError:
        return None


def sft_differences(root: Path) -> list[tuple[dict[str, Any], Any, Any]]:
    """(case, ours, theirs) wherever the training or validation rows of a job differ from construct_dataset's."""
    out = []
    for case in sft_cases(root):
        validation = case.get("validation", True)
        dataset: dict[str, Any] = {"test_size": case["test_size"], "split": "train"}
        val_dataset = None
        if "val_dataset" in case:
            val_dataset = {"name": str(_hf_folder(root, "v", case["val_dataset"])), "split": "train"}
        user = user_val = script = None
        if "hf" in case:
            dataset["name"] = str(_hf_folder(root, "r", case["hf"]))
        else:
            script = _script(root, case.get("with_val", False))
        ours_cfg = config_from_dict(
            {
                "train": {"train_policy": {"dataset": dataset}},
                "validation": {"enable": validation, **({"dataset": val_dataset} if val_dataset else {})},
                "custom": {"rows": {"n": case.get("n", 0), "kind": case.get("script", "torch")}},
            }
        )
        if script is not None:
            module = load_script(script)
            user = module.get_dataset(ours_cfg)
            user_val = module.get_val_dataset(ours_cfg) if case.get("with_val") else None
        try:
            train, val = oracle_construct_dataset()(
                oracle_cfg(dataset, validation, val_dataset), None, user, None, user_val
            )
            theirs = (train.ids, val.ids if validation else None)
        except ValueError:  # train_test_split refused the size
            theirs = (None, None)
        mine = (_ours_ids(ours_cfg, "train", script), _ours_ids(ours_cfg, "val", script) if validation else None)
        if mine != theirs:
            out.append((case, mine, theirs))
    return out


def test_training_and_validation_rows_equal_cosmos_rls_sft_worker(tmp_path: Path) -> None:
    """test_size through load_samples, beside construct_dataset: an hf dataset (a save_to_disk folder both read), a
    dataset script returning a torch Dataset or a datasets.Dataset (cosmos-rl's user dataset), with and without
    get_val_dataset, validation off, a [validation.dataset]: the same row ids train and validate."""
    assert sft_differences(tmp_path) == []


# ------------------------------------------------------------------------------------------------ ours
def test_validation_dataset_test_size_holds_out_the_same_rows_of_that_dataset(tmp_path: Path) -> None:
    """validation.dataset.test_size (ours: cosmos-rl never reads it): validation reads the rows cosmos-rl's split
    would hold out of [validation.dataset] (the last rows of an hf dataset), and every training row trains."""
    train, val = _hf_folder(tmp_path, "r", 8), _hf_folder(tmp_path, "v", 10)
    for test_size in (0.3, 4, None):
        cfg = config_from_dict(
            {
                "train": {"train_policy": {"dataset": {"name": str(train), "test_size": 0.5}}},
                "validation": {"enable": True, "dataset": {"name": str(val), "test_size": test_size}},
            }
        )
        held = theirs_held_out(10, test_size, "datasets") if test_size is not None else list(range(10))
        assert [s["id"] for s in load_samples(cfg, "val")] == [f"v{i}" for i in held or []]
        assert len(load_samples(cfg, "train")) == 8


def test_test_split_shuffle_draws_as_many_rows_at_random(tmp_path: Path) -> None:
    """dataset.test_split_shuffle (ours, off by default): as many rows as cosmos-rl holds out, drawn with a fixed
    seed from the whole dataset, the same every run; held-out rows never train."""
    for kind in ("map", "datasets"):
        for n, test_size in ((10, 0.3), (40, None), (97, 5)):
            drawn = ours.held_out_indices(n, test_size, kind, "d", shuffle=True)
            assert len(drawn) == len(theirs_held_out(n, test_size, kind) or [])
            assert drawn == ours.held_out_indices(n, test_size, kind, "d", shuffle=True)
    assert ours.held_out_indices(40, None, "datasets", "d", shuffle=True) != list(range(30, 40))
    folder = _hf_folder(tmp_path, "r", 20)
    dataset = {"name": str(folder), "test_size": 0.25, "test_split_shuffle": True}
    cfg = config_from_dict({"train": {"train_policy": {"dataset": dataset}}, "validation": {"enable": True}})
    train, val = {s["id"] for s in load_samples(cfg, "train")}, {s["id"] for s in load_samples(cfg, "val")}
    assert len(val) == 5 and not train & val and len(train | val) == 20
    assert val != {f"r{i}" for i in range(15, 20)}
    assert config_from_dict({}).train.train_policy.dataset.test_split_shuffle is False


# ------------------------------------------------------------------------------------------------ mutations
@pytest.mark.parametrize(
    "mutation",
    [
        "hf_as_map_style",
        "script_rows_as_map_style",
        "round_instead_of_int",
        "floor_instead_of_ceil",
        "default_0_2",
        "split_when_off",
        "split_beside_a_scripts_own",
    ],
)
def test_a_changed_rule_of_ours_is_caught(mutation: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    held_out_count = ours.held_out_count

    def rounded(n: int, test_size: Any, kind: ours.HoldOutKind, where: str) -> int:
        count = held_out_count(n, test_size, kind, where)
        return max(min(round(n * test_size), n - 1), 1) if kind == "map" and isinstance(test_size, float) else count

    def floored(n: int, test_size: Any, kind: ours.HoldOutKind, where: str) -> int:
        count = held_out_count(n, test_size, kind, where)
        return max(math.floor(n * test_size), 1) if kind == "datasets" and isinstance(test_size, float) else count

    split_plan = sources.split_plan

    def splits_when_off(cfg: Any, role: Any, script: Any = None) -> sources.SplitPlan:
        on = cfg.model_copy(update={"validation": cfg.validation.model_copy(update={"enable": True})})
        return split_plan(on, role, script)

    if mutation == "hf_as_map_style":
        monkeypatch.setattr(sources, "kind_of_source", lambda source: "map")
    elif mutation == "script_rows_as_map_style":
        monkeypatch.setattr(sources, "kind_of_rows", lambda rows: "map")
    elif mutation == "split_beside_a_scripts_own":
        monkeypatch.setattr(sources.script_mod, "has_val_dataset", lambda path: False)
    elif mutation == "round_instead_of_int":
        monkeypatch.setattr(ours, "held_out_count", rounded)
    elif mutation == "floor_instead_of_ceil":
        monkeypatch.setattr(ours, "held_out_count", floored)
    elif mutation == "default_0_2":
        monkeypatch.setitem(ours.DEFAULT_TEST_SIZE, "datasets", 0.2)
    else:
        monkeypatch.setattr(sources, "split_plan", splits_when_off)
    if mutation in ("hf_as_map_style", "script_rows_as_map_style", "split_when_off", "split_beside_a_scripts_own"):
        assert sft_differences(tmp_path) != []
    else:
        assert held_out_differences() != []
