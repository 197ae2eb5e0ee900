"""The `cosmos` source on a copy of the hub dataset already on disk: no hub call at all."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from cosmos_train.config import config_from_dict
from cosmos_train.data.sources import DatasetError, load_samples
from cosmos_train.data.sources import cosmos as cosmos_src


def make_cfg(dataset: dict) -> object:
    return config_from_dict({"train": {"train_policy": {"dataset": {"source": "cosmos", **dataset}}}})


def row(video: str, question: str) -> dict:
    return {
        "video": video,
        "conversations": [
            {"role": "user", "content": question},
            {"role": "assistant", "content": "<answer>B</answer>"},
        ],
    }


def archive(path: Path, names: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = 8
            tar.addfile(info, io.BytesIO(b"\x00" * 8))


@pytest.fixture
def no_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import datasets
    import huggingface_hub

    def refuse(*a, **k):
        raise AssertionError("the hub was called for a local copy")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    monkeypatch.setattr(datasets, "load_dataset", refuse)
    monkeypatch.setenv("COSMOS_CACHE", str(tmp_path / "cache"))


def test_local_copy_extracts_once_and_reads_split_files(tmp_path: Path, no_hub: None) -> None:
    copy = tmp_path / "copy"
    archive(copy / "robovqa" / "clips" / "part0.tar.gz", ["clips/aa.mp4"])
    archive(copy / "robovqa" / "clips" / "part1.tar.gz", ["clips/bb.mp4"])
    (copy / "robovqa" / "robovqa_understanding.json").write_text(json.dumps([row("clips/aa.mp4", "u")]))
    (copy / "robovqa" / "reasoning-00000-of-00001.jsonl").write_text(json.dumps(row("bb.mp4", "r")) + "\n")
    (copy / "robovqa" / "misunderstanding.json").write_text("[]")  # not the split: must not be read
    cfg = make_cfg({"name": str(copy), "subset": "robovqa", "split": ["understanding", "reasoning"]})
    a, b = load_samples(cfg, "train")
    dest = cosmos_src.local_clips_dir(copy.absolute(), "robovqa")
    assert dest.is_relative_to(tmp_path / "cache" / "datasets" / "local") and (dest / ".prepared").is_file()
    assert a["messages"][1]["content"][0] == {
        "type": "video",
        "video": str(dest / "clips" / "aa.mp4"),
        "fps": 1,
        "max_pixels": 81920,
    }
    assert b["messages"][1]["content"][0]["video"] == str(dest / "clips" / "bb.mp4")
    assert a["origin"] == f"{copy / 'robovqa' / 'robovqa_understanding.json'}:0"
    assert a["id"] == "robovqa/0" and b["id"] == "robovqa/0"  # "<subset>/<row>", as docs/INTERFACES.md says
    (dest / "clips" / "aa.mp4").unlink()
    load_samples(cfg, "train")
    assert not (dest / "clips" / "aa.mp4").exists()  # prepared: not extracted again


def test_local_copy_with_extracted_clips_and_errors(tmp_path: Path, no_hub: None) -> None:
    copy = tmp_path / "copy"
    (copy / "av" / "clips").mkdir(parents=True)
    (copy / "av" / "clips" / "c1.mp4").write_bytes(b"\x00")
    (copy / "av" / "train.json").write_text(json.dumps([row("clips/c1.mp4", "q")]))
    [s] = load_samples(make_cfg({"name": str(copy), "subset": "av"}), "train")
    assert s["messages"][1]["content"][0]["video"] == str(copy.absolute() / "av" / "clips" / "c1.mp4")
    with pytest.raises(DatasetError, match=r"no row file for split 'reasoning' under .*copy/av"):
        load_samples(make_cfg({"name": str(copy), "subset": "av", "split": "reasoning"}), "train")
    with pytest.raises(DatasetError, match=r"no bridgev2/clips/ folder"):
        load_samples(make_cfg({"name": str(copy), "subset": "bridgev2"}), "train")


def test_local_copy_uses_its_readme_configs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A mirror made with `hf download` keeps the dataset card: its configs say where each split is."""
    monkeypatch.setenv("COSMOS_CACHE", str(tmp_path / "cache"))
    copy = tmp_path / "mirror"
    archive(copy / "holoassist" / "clips" / "p.tar.gz", ["clips/h1.mp4"])
    (copy / "holoassist" / "data").mkdir()
    (copy / "holoassist" / "data" / "ha.json").write_text(json.dumps([row("clips/h1.mp4", "hq")]))
    (copy / "README.md").write_text(
        "---\nconfigs:\n- config_name: holoassist\n  data_files:\n  - split: understanding\n"
        "    path: holoassist/data/ha.json\n---\n# mirror\n"
    )
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    [s] = load_samples(make_cfg({"name": str(copy), "subset": "holoassist", "split": "understanding"}), "train")
    assert s["messages"][1]["content"][1]["text"] == "hq"
    assert s["messages"][1]["content"][0]["video"].endswith("clips/h1.mp4")


def test_hub_id_with_downloaded_local_dir_skips_the_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets
    import huggingface_hub

    monkeypatch.setenv("COSMOS_CACHE", str(tmp_path / "cache"))
    archive(tmp_path / "dl" / "robovqa" / "clips" / "part0.tar.gz", ["clips/aa.mp4"])
    monkeypatch.setattr(
        huggingface_hub, "snapshot_download", lambda *a, **k: (_ for _ in ()).throw(AssertionError("downloaded again"))
    )
    monkeypatch.setattr(
        datasets,
        "load_dataset",
        lambda name, subset, split, revision: datasets.Dataset.from_list([row("clips/aa.mp4", "q")]),
    )
    cfg = make_cfg(
        {"name": "nvidia/Cosmos-Reason1-SFT-Dataset", "subset": "robovqa", "local_dir": str(tmp_path / "dl")}
    )
    [s] = load_samples(cfg, "train")
    assert s["messages"][1]["content"][0]["video"] == str(
        cosmos_src.clips_dir("nvidia/Cosmos-Reason1-SFT-Dataset", "robovqa") / "clips" / "aa.mp4"
    )
