"""A local folder's files by split, as the Hugging Face datasets library splits them: held-out rows never
train, `val` is the validation split, a split no file names is an error, the data report names the files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cosmos_train.config import config_from_dict
from cosmos_train.data.prepare import prepare_split, report_markdown
from cosmos_train.data.sources import DatasetError, detect_source, load_samples
from cosmos_train.data.sources import splits as our

LAYOUTS = [
    ["train.json", "val.json"],
    ["train.json", "validation.jsonl", "test.json", "notes.json"],
    ["rows.json", "more.jsonl"],
    ["my_train-1.json", "dev.json", "trainer.json"],
    ["training.json", "eval.json"],
    [
        "data/train-00000-of-00002.parquet",
        "data/train-00001-of-00002.parquet",
        "data/test-00000-of-00001.parquet",
        "data/extra-00000-of-00001.parquet",
    ],
    ["train/a.json", "val/b.json", "c.json"],
    ["sub/train_x.json", "sub/valid.json"],
    ["2024_val.json", "2024_train.json"],
    ["Train.json", "x.json"],
    [".hidden/train.json", "val.json", "train.json", "__pycache__/test.json", "dataset_info.json"],
    ["train_letter.json", "train.json", "val.json", "val_letter.json"],
]
# GRPO's step checks, satisfied: 8 completions per step, whole groups of 2.
GRPO = {"train": {"train_batch_per_replica": 8}, "rollout": {"n_generation": 2, "batch_size": 4}}


def make_folder(root: Path, files: dict[str, int]) -> Path:
    """Data files of text-only chat rows (`n` rows each; the question names the file and row)."""
    for name, n in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                [
                    {
                        "id": f"{name}-{i}",
                        "conversations": [
                            {"from": "human", "value": f"{name} question {i}"},
                            {"from": "gpt", "value": "B"},
                        ],
                    }
                    for i in range(n)
                ]
            )
        )
    return root


def job(dataset: dict, validation: dict | None = None, grpo: bool = False) -> object:
    raw: dict = {"train": {"train_policy": {"dataset": dataset}}}
    if grpo:
        raw = {
            **GRPO,
            "train": {
                **GRPO["train"],
                "train_policy": {"dataset": dataset, "type": "grpo", "reward_function": ["single_choice"]},
            },
        }
    if validation is not None:
        raw["validation"] = validation
    return config_from_dict(raw)


def test_the_rules_are_the_datasets_librarys(tmp_path: Path) -> None:
    from datasets import data_files as hf

    assert our.SPLIT_KEYWORDS == {str(k): tuple(v) for k, v in hf.SPLIT_KEYWORDS.items()}
    assert our.NON_WORDS_CHARS == hf.NON_WORDS_CHARS and set(our.FILES_TO_IGNORE) == set(hf.FILES_TO_IGNORE)
    for n, files in enumerate(LAYOUTS):
        root = make_folder(tmp_path / str(n), dict.fromkeys(files, 1))
        patterns = hf.get_data_patterns(str(root))
        theirs = {
            str(split): sorted(Path(f).relative_to(root).as_posix() for f in found)
            for split, found in hf.DataFilesDict.from_patterns(patterns, base_path=str(root)).items()
        }
        assert our.folder_splits(root).splits == theirs, files


def test_held_out_rows_do_not_leak_into_training(tmp_path: Path) -> None:
    """The reported case, small: train.json (8 rows) + val.json (2) with split = "train" read all 10 rows."""
    folder = make_folder(tmp_path / "data", {"train.json": 8, "val.json": 2})
    for grpo in (False, True):
        cfg = job({"name": str(folder), "split": "train"}, {"enable": True}, grpo=grpo)
        train = load_samples(cfg, "train")
        assert len(train) == 8 and all(s["origin"].startswith(str(folder / "train.json")) for s in train)
        # validation on, no [validation.dataset]: the folder's validation split (item 3 of the issue)
        val = load_samples(cfg, "val")
        assert len(val) == 2 and all(s["origin"].startswith(str(folder / "val.json")) for s in val)
    for alias in ("val", "valid", "validation", "dev"):
        named = job({"name": str(folder)}, {"enable": True, "dataset": {"name": str(folder), "split": alias}})
        assert [s["id"] for s in load_samples(named, "val")] == ["val.json-0", "val.json-1"], alias
    # a split folder's files, and a name no default split has but a file has exactly (train_letter.json)
    nested = make_folder(tmp_path / "nested", {"train/a.json": 3, "val/b.json": 1, "train_letter.json": 5})
    assert len(load_samples(job({"name": str(nested)}), "train")) == 3
    assert len(load_samples(job({"name": str(nested), "split": "train_letter"}), "train")) == 5


def test_a_split_no_file_names_is_an_error(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "data", {"train.json": 2, "val.json": 1, "notes.json": 1})
    with pytest.raises(DatasetError) as e:
        load_samples(job({"name": str(folder), "split": "test"}), "train")
    msg = str(e.value)
    for part in (
        "dataset.split = 'test'",
        str(folder),
        "train: train.json",
        "validation: val.json",
        "in no split (left out): notes.json",
        "Set train.train_policy.dataset.split to one of 'train', 'validation'",
    ):
        assert part in msg, part
    # files named after no split are the one split "train"; held-out rows cannot come from them
    plain = make_folder(tmp_path / "plain", {"a.json": 2, "b.json": 1})
    assert len(load_samples(job({"name": str(plain)}), "train")) == 3
    with pytest.raises(DatasetError, match=r"split = 'val'.*no file or folder names a split"):
        load_samples(job({"name": str(plain), "split": "val"}), "train")
    # no validation split of its own: cosmos-rl's default part of the training rows (the last 0.25: b.json's row)
    with_val = job({"name": str(plain)}, {"enable": True})
    assert [s["id"] for s in load_samples(with_val, "val")] == ["b.json-0"]
    assert [s["id"] for s in load_samples(with_val, "train")] == ["a.json-0", "a.json-1"]
    # training on the validation split would make validation read the training rows
    with pytest.raises(DatasetError, match="is its validation split"):
        load_samples(job({"name": str(folder), "split": "val"}, {"enable": True}), "val")
    # a file named after two splits would feed both
    make_folder(folder, {"train_val.json": 1})
    with pytest.raises(DatasetError, match="train_val.json is named after two splits"):
        load_samples(job({"name": str(folder)}), "train")


def test_hub_download_layout_and_save_to_disk_validation(tmp_path: Path) -> None:
    import datasets

    rows = [{"conversations": [{"from": "human", "value": f"q{i}"}, {"from": "gpt", "value": "A"}]} for i in range(3)]
    hub = tmp_path / "hub"
    (hub / "data").mkdir(parents=True)
    datasets.Dataset.from_list(rows[:2]).to_parquet(str(hub / "data" / "train-00000-of-00001.parquet"))
    datasets.Dataset.from_list(rows[2:]).to_parquet(str(hub / "data" / "validation-00000-of-00001.parquet"))
    cfg = job({"name": str(hub)}, {"enable": True})
    assert detect_source(cfg.train.train_policy.dataset) == "hf"
    assert (len(load_samples(cfg, "train")), len(load_samples(cfg, "val"))) == (2, 1)
    disk = tmp_path / "disk"
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows[:2]), "valid": datasets.Dataset.from_list(rows[2:])}
    ).save_to_disk(str(disk))
    val = load_samples(job({"name": str(disk)}, {"enable": True}), "val")
    assert len(val) == 1 and val[0]["origin"].endswith("[valid]:0")


def test_the_data_report_names_the_files_of_each_split(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "data", {"train.json": 4, "val.json": 2})
    cfg = job({"name": str(folder)}, {"enable": True})
    run = tmp_path / "run"
    prepare_split(cfg, "train", run, None)
    val = prepare_split(cfg, "val", run, None)
    train_report = json.loads((run / "prep_report.json").read_text())
    val_report = json.loads((run / "prep_report_val.json").read_text())
    assert train_report["split"] == "'train'" and train_report["files"] == {str(folder / "train.json"): 4}
    assert val_report["files"] == {str(folder / "val.json"): 2}
    assert val_report["split"] == "the train dataset's own validation split (no [validation.dataset] set)"
    assert f"| `{folder / 'val.json'}` | 2 |" in report_markdown(val, embed_png=False)


def test_the_error_names_the_config_block_that_asked(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "data", {"train.json": 2, "val.json": 1})
    cfg = job({"name": str(folder)}, {"enable": True, "dataset": {"name": str(folder), "split": "test"}})
    with pytest.raises(DatasetError, match=r"^validation\.dataset\.split = 'test': .*Set validation\.dataset\.split"):
        load_samples(cfg, "val")
