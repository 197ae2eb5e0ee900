"""Dataset sources: every layout users bring, read into chat samples (offline: the hub is monkeypatched)."""

from __future__ import annotations

import io
import json
import multiprocessing as mp
import shutil
import tarfile
from pathlib import Path

import pytest

from cosmos_train.config import config_from_dict
from cosmos_train.data.sources import DatasetError, RowError, detect_source, load_samples
from cosmos_train.data.sources import cosmos as cosmos_src
from cosmos_train.data.sources.holdout import split_by_row
from cosmos_train.data.sources.script import script_reward_functions

ROOT = Path(__file__).resolve().parents[2]


def make_cfg(dataset: dict, **tp) -> object:
    return config_from_dict({"train": {"train_policy": {"dataset": dataset, **tp}}})


def cosmos_row(video: str, question: str = "What happens?", system: bool = False) -> dict:
    conv = ([{"role": "system", "content": "You are a robot."}] if system else []) + [
        {"role": "user", "content": question},
        {"role": "assistant", "content": "<answer>B</answer>"},
    ]
    return {"video": video, "conversations": conv}


def user_parts(sample: dict) -> list[dict]:
    return next(m["content"] for m in sample["messages"] if m["role"] == "user")


# ------------------------------------------------------------------------------ detection
def test_detect_source_by_what_name_points_at(tmp_path: Path, synthetic_dir: Path) -> None:
    import datasets

    (tmp_path / "rows.jsonl").write_text("{}\n")
    (tmp_path / "vf" / "videos").mkdir(parents=True)
    (tmp_path / "vf" / "metas").mkdir()
    disk = tmp_path / "disk"
    datasets.Dataset.from_list([{"conversations": "[]"}]).save_to_disk(str(disk))
    (tmp_path / "s.py").write_text("def get_dataset(config):\n    return []\n")
    cases = {
        str(synthetic_dir): "synthetic",
        str(disk): "hf",
        str(tmp_path / "rows.jsonl"): "hf",
        str(tmp_path / "*.jsonl"): "hf",
        str(tmp_path / "vf"): "video_folder",
        str(tmp_path / "s.py"): "script",
        "someorg/some-data": "hf",
        "nvidia/Cosmos-Reason1-SFT-Dataset": "cosmos",
        "nvidia/Cosmos-Reason1-RL-Dataset": "cosmos",
    }
    for name, want in cases.items():
        assert detect_source(make_cfg({"name": name}).train.train_policy.dataset) == want, name
    ds = make_cfg({"name": "", "annotation_path": str(tmp_path / "a.json")}).train.train_policy.dataset
    assert detect_source(ds) == "llava"
    assert detect_source(make_cfg({"name": "x/y", "source": "cosmos"}).train.train_policy.dataset) == "cosmos"
    with pytest.raises(DatasetError, match="no such file or folder"):
        detect_source(make_cfg({"name": str(tmp_path / "nope" / "x.json")}).train.train_policy.dataset)
    with pytest.raises(DatasetError, match="is empty"):
        detect_source(make_cfg({"name": ""}).train.train_policy.dataset)


def test_local_copy_of_cosmos_dataset_is_detected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, synthetic_dir: Path
) -> None:
    import datasets
    import huggingface_hub

    monkeypatch.setenv("COSMOS_CACHE", str(tmp_path / "cache"))
    refuse = lambda *a, **k: (_ for _ in ()).throw(AssertionError("hub called for a local copy"))  # noqa: E731
    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    monkeypatch.setattr(datasets, "load_dataset", refuse)
    copy = tmp_path / "cr1-sft"  # as `hf download --local-dir` leaves it: card + <subset>/clips/*.tar.gz
    make_archive(copy / "robovqa" / "clips" / "part0.tar.gz", ["clips/aa.mp4"])
    (copy / "robovqa" / "robovqa_understanding.json").write_text(json.dumps([cosmos_row("clips/aa.mp4")]))
    (copy / "README.md").write_text("# mirror\n")
    extracted = tmp_path / "by-hand"  # clips already extracted by the user
    (extracted / "av" / "clips").mkdir(parents=True)
    (extracted / "av" / "clips" / "c1.mp4").write_bytes(b"\x00")
    ds = lambda name, **kw: make_cfg({"name": str(name), **kw}).train.train_policy.dataset  # noqa: E731
    assert detect_source(ds(copy)) == "cosmos" and detect_source(ds(extracted)) == "cosmos"
    [s] = load_samples(make_cfg({"name": str(copy), "subset": "robovqa", "split": "understanding"}), "train")
    assert user_parts(s)[0]["video"].endswith("clips/aa.mp4") and user_parts(s)[0]["fps"] == 1

    # Other layouts keep their source even with a <x>/clips/ folder inside.
    shutil.copytree(synthetic_dir, tmp_path / "syn")
    make_archive(tmp_path / "syn" / "extra" / "clips" / "p.tar.gz", ["clips/x.mp4"])
    vf = tmp_path / "vf"
    for sub in ("videos", "metas", "old/clips"):
        (vf / sub).mkdir(parents=True)
    (vf / "old" / "clips" / "v.mp4").write_bytes(b"\x00")
    rows = tmp_path / "rows"
    (rows / "media" / "clips").mkdir(parents=True)
    (rows / "media" / "clips" / "v.mp4").write_bytes(b"\x00")
    (rows / "train.jsonl").write_text("{}\n")
    assert [detect_source(ds(d)) for d in (tmp_path / "syn", vf, rows)] == ["synthetic", "video_folder", "hf"]
    # A clips/ folder with neither archives nor videos is not a copy of the dataset.
    (tmp_path / "notes" / "sub" / "clips").mkdir(parents=True)
    (tmp_path / "notes" / "sub" / "clips" / "readme.txt").write_text("x")
    with pytest.raises(DatasetError, match=r"none of: .*Cosmos-Reason dataset"):
        detect_source(ds(tmp_path / "notes"))


# ------------------------------------------------------------------------------ hf
def test_json_file_with_string_conversations_and_vision_merge(tmp_path: Path) -> None:
    (tmp_path / "clips").mkdir()
    (tmp_path / "clips" / "a.mp4").write_bytes(b"x")
    row = cosmos_row("clips/a.mp4")
    row["conversations"] = json.dumps(row["conversations"])  # a JSON string column
    row["fps"] = 4  # the row's own setting wins over [dataset.vision]
    (tmp_path / "rows.json").write_text(json.dumps([row]))
    cfg = make_cfg(
        {"name": str(tmp_path / "rows.json"), "vision": {"fps": 1, "max_pixels": 3136}}, system_prompt="Be brief."
    )
    [s] = load_samples(cfg, "train")
    assert s["origin"] == f"{tmp_path / 'rows.json'}:0"
    assert s["messages"][0] == {"role": "system", "content": "Be brief."}
    video, text = user_parts(s)
    assert video == {
        "type": "video",
        "video": str((tmp_path / "clips" / "a.mp4").resolve()),
        "fps": 4,
        "max_pixels": 3136,
    }
    assert text == {"type": "text", "text": "What happens?"}
    assert s["messages"][-1] == {"role": "assistant", "content": "<answer>B</answer>"}


def test_parquet_and_save_to_disk_with_split_list(tmp_path: Path) -> None:
    import datasets

    rows = [cosmos_row(f"/abs/{i}.mp4", question=f"q{i}") for i in range(3)]
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "d.parquet"))
    got = load_samples(make_cfg({"allow_media_outside_root": True, "name": str(tmp_path / "d.parquet")}), "train")
    assert [user_parts(s)[1]["text"] for s in got] == ["q0", "q1", "q2"]
    assert user_parts(got[2])[0]["video"] == "/abs/2.mp4"

    dd = datasets.DatasetDict({"a": datasets.Dataset.from_list(rows[:1]), "b": datasets.Dataset.from_list(rows[1:])})
    dd.save_to_disk(str(tmp_path / "disk"))
    got = load_samples(
        make_cfg({"allow_media_outside_root": True, "name": str(tmp_path / "disk"), "split": ["b", "a"]}), "train"
    )
    assert [user_parts(s)[1]["text"] for s in got] == ["q1", "q2", "q0"]
    assert got[0]["origin"].endswith("[b]:0")
    with pytest.raises(DatasetError, match="'zz' is not in"):
        load_samples(
            make_cfg({"allow_media_outside_root": True, "name": str(tmp_path / "disk"), "split": "zz"}), "train"
        )


def test_hub_id_goes_through_load_dataset(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    calls = []

    def fake_load_dataset(name, subset=None, split=None, revision=None):
        calls.append((name, subset, split, revision))
        return datasets.Dataset.from_list([cosmos_row(f"/v/{split}.mp4", question=split)])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    cfg = make_cfg(
        {"allow_media_outside_root": True, "name": "org/data", "subset": "sub", "split": ["x", "y"], "revision": "v1"}
    )
    got = load_samples(cfg, "train")
    assert calls == [("org/data", "sub", "x", "v1"), ("org/data", "sub", "y", "v1")]
    assert [user_parts(s)[1]["text"] for s in got] == ["x", "y"]
    assert got[0]["origin"] == "org/data/sub[x]:0"

    def failing(*a, **k):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", failing)
    with pytest.raises(DatasetError, match="org/data.*ConnectionError: no network"):
        load_samples(cfg, "train")


def test_hub_rows_media_come_from_the_same_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets
    import huggingface_hub

    rows = [cosmos_row("clips/a.mp4"), cosmos_row("clips/[b].mp4"), cosmos_row("/abs/c.mp4"), cosmos_row("clips/a.mp4")]
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: datasets.Dataset.from_list(rows))
    snapshots = []

    def fake_snapshot(repo_id, repo_type=None, revision=None, allow_patterns=None, **kw):
        snapshots.append((repo_id, repo_type, revision, allow_patterns))
        folder = tmp_path / "hub-cache" / "snapshot"
        for name in ["clips/a.mp4", "clips/[b].mp4"]:  # what the repo holds
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(b"mp4")
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    got = load_samples(make_cfg({"allow_media_outside_root": True, "name": "org/videos", "revision": "v2"}), "train")
    # one snapshot for the table, with only the relative files the rows name (patterns escaped)
    assert snapshots == [("org/videos", "dataset", "v2", ["clips/[[]b].mp4", "clips/a.mp4"])]
    videos = [user_parts(s)[0]["video"] for s in got]
    snap = tmp_path / "hub-cache" / "snapshot"
    assert videos == [str(snap / "clips/a.mp4"), str(snap / "clips/[b].mp4"), "/abs/c.mp4", str(snap / "clips/a.mp4")]

    # found locally (dataset.media_path): no download
    snapshots.clear()
    local = tmp_path / "local"
    (local / "clips").mkdir(parents=True)
    for name in ["a.mp4", "[b].mp4"]:
        (local / "clips" / name).write_bytes(b"mp4")
    got = load_samples(
        make_cfg({"allow_media_outside_root": True, "name": "org/videos", "media_path": str(local)}), "train"
    )
    assert snapshots == [] and user_parts(got[0])[0]["video"] == str(local / "clips" / "a.mp4")

    def offline(*a, **k):
        raise huggingface_hub.errors.LocalEntryNotFoundError("offline and not in the cache")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(
        DatasetError,
        match=r"'org/videos': 2 media file\(s\).*clips/\[b\]\.mp4, clips/a\.mp4.*"
        r"LocalEntryNotFoundError.*dataset\.media_path",
    ):
        load_samples(make_cfg({"allow_media_outside_root": True, "name": "org/videos"}), "train")


def test_test_size_holds_out_the_last_rows_of_an_hf_file(tmp_path: Path) -> None:
    """cosmos-rl's rule for a dataset the datasets library reads (tests/unit/test_cosmos_rl_splits.py runs it beside
    cosmos-rl's own split): the last rows are held out, only when validation is on, and never train."""
    rows = [cosmos_row(f"/v/{i}.mp4", question=str(i)) for i in range(20)]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def job(validation: bool = True, **ds: object) -> object:
        dataset = {"allow_media_outside_root": True, "name": str(tmp_path / "r.jsonl"), **ds}
        return config_from_dict({"train": {"train_policy": {"dataset": dataset}}, "validation": {"enable": validation}})

    row = lambda ss: [int(s["origin"].rsplit(":", 1)[1]) for s in ss]  # noqa: E731
    cfg = job(test_size=0.25)
    train, val = load_samples(cfg, "train"), load_samples(cfg, "val")
    assert row(val) == list(range(15, 20)) and row(train) == list(range(15))
    assert row(load_samples(job(test_size=3), "val")) == [17, 18, 19]
    # unset: cosmos-rl passes None to train_test_split, which holds out 0.25 (a file has no validation split)
    assert row(load_samples(job(), "val")) == list(range(15, 20))
    assert len(load_samples(job(), "train")) == 15
    # validation off: cosmos-rl does not split, every row trains
    assert len(load_samples(job(validation=False, test_size=0.25), "train")) == 20
    with pytest.raises(DatasetError, match=r"test_size = 20 with 20 rows: .*a count from 1 to 19"):
        load_samples(job(test_size=20), "val")
    with pytest.raises(DatasetError, match="needs at least 2"):
        split_by_row(train[:1], 0.5, "map", "val", "dataset")


def test_unknown_column_names_file_and_row(tmp_path: Path) -> None:
    (tmp_path / "r.json").write_text(json.dumps([cosmos_row("/v/a.mp4"), {"video": "/v/b.mp4", "chat": []}]))
    cfg = make_cfg({"allow_media_outside_root": True, "name": str(tmp_path / "r.json")})
    with pytest.raises(RowError, match=r"r\.json:1: row has none of the columns \['conversations'.*'chat'"):
        load_samples(cfg, "train")
    got = load_samples(cfg, "train", keep_errors=True)
    assert got[1]["error"]["reason"] == "unknown_column"
    # The column name is configurable.
    cfg = make_cfg(
        {"allow_media_outside_root": True, "name": str(tmp_path / "r.json")}, conversation_column_name="chat"
    )
    assert load_samples(cfg, "train", keep_errors=True)[0]["error"]["reason"] == "unknown_column"


# ------------------------------------------------------------------------------ llava
def test_llava_placeholders_multi_turn_and_video_rows(tmp_path: Path) -> None:
    media = tmp_path / "media"
    rows = [
        {
            "id": "one",
            "image": "a.png",
            "conversations": [{"from": "human", "value": "<image>\nWhat is this?"}, {"from": "gpt", "value": "A cat."}],
        },
        {
            "id": "two",
            "images": ["a.png", "b.png"],
            "conversations": [
                {"from": "human", "value": "First <image> then <image> compare."},
                {"from": "gpt", "value": "Same."},
                {"from": "human", "value": "Sure?"},
                {"from": "gpt", "value": "Yes."},
            ],
        },
        {
            "id": "vid",
            "video": "v.mp4",
            "conversations": [{"from": "human", "value": "Describe."}, {"from": "gpt", "value": "Rain."}],
        },
        {
            "id": "bad",
            "images": ["a.png"],
            "conversations": [{"from": "human", "value": "<image><image> two?"}, {"from": "gpt", "value": "No."}],
        },
    ]
    ann = tmp_path / "llava.json"
    ann.write_text(json.dumps(rows))
    cfg = make_cfg({"annotation_path": str(ann), "media_path": str(media), "vision": {"max_pixels": 3136, "fps": 2}})
    one, two, vid, bad = load_samples(cfg, "train", keep_errors=True)
    assert one["messages"][1]["content"] == [
        {"type": "image", "image": str(media / "a.png"), "max_pixels": 3136},  # fps is not an image setting
        {"type": "text", "text": "What is this?"},
    ]
    assert [p.get("text", p.get("image")) for p in two["messages"][1]["content"]] == [
        "First ",
        str(media / "a.png"),
        " then ",
        str(media / "b.png"),
        " compare.",
    ]
    assert [m["role"] for m in two["messages"]] == ["system", "user", "assistant", "user", "assistant"]
    assert two["messages"][3]["content"] == "Sure?"
    assert vid["messages"][1]["content"][0] == {
        "type": "video",
        "video": str(media / "v.mp4"),
        "max_pixels": 3136,
        "fps": 2,
    }
    assert bad["id"] == "bad" and bad["error"]["reason"] == "placeholder_mismatch"
    assert f"{ann}:3" in bad["error"]["message"] and "2 <image> placeholder(s)" in bad["error"]["message"]
    with pytest.raises(RowError, match=r"llava\.json:3: 2 <image> placeholder"):
        load_samples(cfg, "train")


# ------------------------------------------------------------------------------ video folder
def test_video_folder_captions(tmp_path: Path) -> None:
    (tmp_path / "videos").mkdir()
    (tmp_path / "metas").mkdir()
    suffix = ".camera_front_wide_120fov"
    for vid in ("a", "b", "c"):
        (tmp_path / "videos" / f"{vid}{suffix}.mp4").write_bytes(b"x")
    (tmp_path / "metas" / "a.label.json").write_text(json.dumps({"caption": "A car turns left."}))
    (tmp_path / "metas" / "b.txt").write_text("Rain on the road.\n")
    cfg = make_cfg({"name": str(tmp_path), "video_suffix": suffix, "caption_prompt": "Caption it."})
    a, b, c = load_samples(cfg, "train", keep_errors=True)
    assert a["messages"] == [
        {"role": "system", "content": "You are a helpful assistant."},  # the default, written out
        {
            "role": "user",
            "content": [
                {"type": "video", "video": str(tmp_path / "videos" / f"a{suffix}.mp4")},
                {"type": "text", "text": "Caption it."},
            ],
        },
        {"role": "assistant", "content": "A car turns left."},
    ]
    assert b["messages"][2]["content"] == "Rain on the road."
    assert c["error"]["reason"] == "missing_caption"


# ------------------------------------------------------------------------------ synthetic
def test_synthetic_folder_sft_and_grpo(synthetic_dir: Path) -> None:
    cfg = make_cfg({"name": str(synthetic_dir)})
    train, val = load_samples(cfg, "train"), load_samples(cfg, "val")
    assert len(train) == 48 and len(val) == 8
    video = user_parts(train[0])[0]["video"]
    assert Path(video).is_file() and "/videos/train/" in video
    assert train[0]["messages"][0]["role"] == "system" and train[0]["messages"][-1]["role"] == "assistant"
    letters = load_samples(make_cfg({"name": str(synthetic_dir), "split": "train_letter"}), "train")
    assert letters[0]["messages"][-1]["content"] in "ABCD"

    grpo = make_cfg({"name": str(synthetic_dir)}, type="grpo", reward_function=["format", "single_choice"])
    rl = load_samples(grpo, "train")
    text = user_parts(rl[0])[1]["text"]
    assert rl[0]["reference"] in "ABCD" and "\n(A) " in text and "<think> your reasoning </think>" in text
    assert [m["role"] for m in rl[0]["messages"]] == ["system", "user"]
    # Without the format reward, the prompt asks for the letter only.
    letter_only = load_samples(make_cfg({"name": str(synthetic_dir)}, type="grpo"), "train")
    assert "<think>" not in user_parts(letter_only[0])[1]["text"]


# ------------------------------------------------------------------------------ cosmos
def make_archive(path: Path, names: list[str], payload: bytes = b"\x00" * 64) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))


def test_cosmos_source_extracts_once_and_maps_by_basename(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets
    import huggingface_hub

    monkeypatch.setenv("COSMOS_CACHE", str(tmp_path / "cache"))
    hub = tmp_path / "hub"
    make_archive(hub / "robovqa" / "clips" / "part0.tar.gz", ["clips/aa.mp4", "clips/bb.mp4"])
    downloads = []

    def fake_snapshot(repo_id, repo_type, revision=None, allow_patterns=None, local_dir=None):
        downloads.append((repo_id, repo_type, allow_patterns))
        return str(hub)

    sft_rows = [cosmos_row("clips/aa.mp4", system=True), cosmos_row("bb.mp4")]
    rl_rows = [
        {
            "video": "clips/bb.mp4",
            "qa_pairs": {"question": "Next?", "index2ans": {"A": "stop", "B": "go"}, "correct_answer": "go"},
        }
    ]
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_snapshot)
    monkeypatch.setattr(
        datasets,
        "load_dataset",
        lambda name, subset, split, revision: datasets.Dataset.from_list(rl_rows if "RL" in name else sft_rows),
    )
    cfg = make_cfg({"name": "nvidia/Cosmos-Reason1-SFT-Dataset", "subset": "robovqa", "split": "understanding"})
    a, b = load_samples(cfg, "train")
    clips = tmp_path / "cache" / "datasets" / "nvidia" / "Cosmos-Reason1-SFT-Dataset" / "robovqa" / "video_clips"
    assert (clips / ".prepared").is_file()
    assert a["messages"][0] == {"role": "system", "content": "You are a robot."}
    assert user_parts(a) == [
        {"type": "video", "video": str(clips / "clips" / "aa.mp4"), "fps": 1, "max_pixels": 81920},
        {"type": "text", "text": "What happens?"},
    ]
    assert user_parts(b)[0]["video"] == str(clips / "clips" / "bb.mp4")
    assert downloads == [("nvidia/Cosmos-Reason1-SFT-Dataset", "dataset", ["robovqa/clips/*"])]
    load_samples(cfg, "train")
    assert len(downloads) == 1  # prepared: no second download or extraction

    rl_cfg = make_cfg(
        {"name": "nvidia/Cosmos-Reason1-RL-Dataset", "subset": "robovqa", "vision": {"fps": 2}}, type="grpo"
    )
    [r] = load_samples(rl_cfg, "train")
    assert r["reference"] == "B"  # the answer text mapped to its letter
    video, text = user_parts(r)
    assert video["fps"] == 2 and video["max_pixels"] == 81920
    assert text["text"] == "Next?\n(A) stop\n(B) go\nAnswer with the option's letter from the given choices directly."

    with pytest.raises(DatasetError, match="set dataset.subset"):
        load_samples(make_cfg({"name": "nvidia/Cosmos-Reason1-SFT-Dataset"}), "train")


def _extract_worker(archive: str, dest: str, barrier, out) -> None:  # a spawned process
    barrier.wait()
    out.put(cosmos_src.extract_archives([Path(archive)], Path(dest)))


def test_two_processes_extract_at_once(tmp_path: Path) -> None:
    names = [f"clips/{i:03d}.mp4" for i in range(50)]
    make_archive(tmp_path / "a.tar.gz", names, payload=b"\x01" * 20_000)
    dest = tmp_path / "cache" / "video_clips"
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [
        ctx.Process(target=_extract_worker, args=(str(tmp_path / "a.tar.gz"), str(dest), barrier, out))
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert sorted([out.get(timeout=5), out.get(timeout=5)]) == [False, True]  # exactly one extracted
    files = sorted((dest / "clips").iterdir())
    assert len(files) == 50 and all(f.stat().st_size == 20_000 for f in files)
    assert cosmos_src.extract_archives([tmp_path / "a.tar.gz"], dest) is False


def test_extraction_refuses_paths_out_of_the_cache(tmp_path: Path) -> None:
    make_archive(tmp_path / "evil.tar.gz", ["../escaped.mp4"])
    with pytest.raises(DatasetError, match="cannot extract"):
        cosmos_src.extract_archives([tmp_path / "evil.tar.gz"], tmp_path / "cache" / "video_clips")
    assert not (tmp_path / "cache" / "escaped.mp4").exists()
    assert not (tmp_path / "cache" / "video_clips" / ".prepared").exists()


# ------------------------------------------------------------------------------ script
def test_example_script_train_val_and_rewards(tmp_path: Path) -> None:
    script = ROOT / "examples" / "my_dataset.py"
    cfg = config_from_dict({"custom": {"my_dataset": {"root": str(tmp_path / "clips"), "n_train": 4, "n_val": 2}}})
    train = load_samples(cfg, "train", script=script)
    val = load_samples(cfg, "val", script=script)
    assert len(train) == 4 and len(val) == 2
    assert train[0]["origin"] == f"{script}:get_dataset:0"
    assert Path(user_parts(train[0])[0]["video"]).is_file()
    assert train[0]["reference"] == "B" and "<answer>B</answer>" in train[0]["messages"][-1]["content"]
    grpo = config_from_dict(
        {
            "train": {"train_policy": {"type": "grpo"}},
            "custom": {"my_dataset": {"root": str(tmp_path / "clips"), "n_train": 2}},
        }
    )
    rl = load_samples(grpo, "train", script=script)
    assert rl[1]["reference"] == "A" and "(B) right" in user_parts(rl[1])[1]["text"]
    rewards = script_reward_functions(script)
    assert rewards["direction_word"]("<answer>right</answer>", "B", rl[0]) == 1.0
    assert rewards["direction_word"]("<answer>left</answer>", "B", rl[0]) == 0.0


def test_script_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "nofactory.py"
    bad.write_text("X = 1\n")
    cfg = config_from_dict({})
    with pytest.raises(DatasetError, match="nofactory.py: defines no get_dataset"):
        load_samples(cfg, "train", script=bad)
    only_train = tmp_path / "only_train.py"
    only_train.write_text("def get_dataset(config):\n    return [{'messages': [{'role': 'user', 'content': 'hi'}]}]\n")
    assert len(load_samples(cfg, "train", script=only_train)) == 1
    # no get_val_dataset: cosmos-rl's default part of get_dataset's rows, which one row cannot give
    with pytest.raises(DatasetError, match=r"1 row\(s\) to split for validation.*get_val_dataset"):
        load_samples(cfg, "val", script=only_train)
    boom = tmp_path / "boom.py"
    boom.write_text("def get_dataset(config):\n    raise KeyError('root')\n")
    with pytest.raises(DatasetError, match=r"boom.py:get_dataset\(config\) failed: KeyError"):
        load_samples(cfg, "train", script=boom)
    # dataset.source = "script" / a .py name works without the positional argument too.
    via_name = config_from_dict({"train": {"train_policy": {"dataset": {"name": str(only_train)}}}})
    assert load_samples(via_name, "train")[0]["origin"] == f"{only_train}:get_dataset:0"


# ------------------------------------------------------------------------------ empty datasets
def test_a_dataset_without_rows_names_what_was_read(tmp_path: Path) -> None:
    empty = tmp_path / "rows.jsonl"
    empty.write_text("\n")
    with pytest.raises(
        DatasetError,
        match=rf"train\.train_policy\.dataset: hf dataset {empty}, split 'train' "
        "yielded no rows",
    ):
        load_samples(make_cfg({"name": str(empty)}), "train")
    ann = tmp_path / "llava.json"
    ann.write_text("[]")
    with pytest.raises(DatasetError, match=rf"LLaVA file {ann} yielded no rows"):
        load_samples(make_cfg({"annotation_path": str(ann), "test_size": 0.5}), "val")


# ------------------------------------------------------------------------------ media outside the root
def llava_rows(tmp_path: Path, videos: list[str], **ds) -> list[dict]:
    ann = tmp_path / "data" / "llava.json"
    ann.parent.mkdir(exist_ok=True)
    ann.write_text(
        json.dumps(
            [
                {
                    "id": str(i),
                    "video": v,
                    "conversations": [{"from": "human", "value": "Describe."}, {"from": "gpt", "value": "Rain."}],
                }
                for i, v in enumerate(videos)
            ]
        )
    )
    return load_samples(make_cfg({"annotation_path": str(ann), **ds}), "train", keep_errors=True)


def test_media_outside_the_roots_is_a_bad_row(tmp_path: Path) -> None:
    media = tmp_path / "media"
    media.mkdir()
    (media / "ok.mp4").write_bytes(b"x")
    secret = tmp_path / "elsewhere" / "secret.mp4"
    secret.parent.mkdir()
    secret.write_bytes(b"x")
    (media / "link.mp4").symlink_to(secret)  # a symlink out of the media folder
    rows = ["ok.mp4", "../elsewhere/secret.mp4", str(secret), "link.mp4", str(media / "ok.mp4"), "sub/../ok.mp4"]
    samples = llava_rows(tmp_path, rows, media_path=str(media))
    assert [s.get("error", {}).get("reason") for s in samples] == [
        None,
        "media_outside_root",
        "media_outside_root",
        "media_outside_root",
        None,
        None,
    ]
    message = samples[3]["error"]["message"]
    assert f"llava.json:3: media 'link.mp4' resolves to {secret}" in message
    assert "allow_media_outside_root = true" in message
    ann = tmp_path / "data" / "llava.json"
    with pytest.raises(RowError, match=r"llava\.json:1: media '\.\./elsewhere/secret\.mp4' resolves to"):
        load_samples(make_cfg({"annotation_path": str(ann), "media_path": str(media)}), "train")
    # Rows that point elsewhere on purpose: the flag reads them as before.
    allowed = llava_rows(tmp_path, rows, media_path=str(media), allow_media_outside_root=True)
    assert not any("error" in s for s in allowed)
    assert user_parts(allowed[2])[0]["video"] == str(secret)


def test_absolute_paths_with_empty_media_path_stay_under_the_annotation_folder(tmp_path: Path) -> None:
    inside = tmp_path / "data" / "clips" / "a.mp4"
    outside = tmp_path / "b.mp4"
    samples = llava_rows(tmp_path, [str(inside), str(outside)], media_path="")
    assert [s.get("error", {}).get("reason") for s in samples] == [None, "media_outside_root"]


def test_hf_file_and_video_folder_roots(tmp_path: Path) -> None:
    data = tmp_path / "hf"
    data.mkdir()
    (data / "rows.jsonl").write_text("\n".join(json.dumps(cosmos_row(v)) for v in ("a.mp4", "../x/b.mp4")) + "\n")
    a, b = load_samples(make_cfg({"name": str(data / "rows.jsonl")}), "train", keep_errors=True)
    assert "error" not in a and b["error"]["reason"] == "media_outside_root"

    folder = tmp_path / "vf"
    (folder / "videos").mkdir(parents=True)
    (folder / "metas").mkdir()
    (tmp_path / "outside.mp4").write_bytes(b"x")
    (folder / "videos" / "a.mp4").write_bytes(b"x")
    (folder / "videos" / "b.mp4").symlink_to(tmp_path / "outside.mp4")
    for vid in ("a", "b"):
        (folder / "metas" / f"{vid}.txt").write_text("A caption.")
    a, b = load_samples(make_cfg({"name": str(folder)}), "train", keep_errors=True)
    assert "error" not in a and b["error"]["reason"] == "media_outside_root"
    assert len(load_samples(make_cfg({"name": str(folder), "allow_media_outside_root": True}), "train")) == 2


def test_hub_cache_snapshot_symlinks_into_blobs_are_inside(tmp_path: Path) -> None:
    repo = tmp_path / "hub" / "datasets--org--videos"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "0123abcd").write_bytes(b"x")
    snapshot = repo / "snapshots" / "rev1"
    (snapshot / "clips").mkdir(parents=True)
    (snapshot / "clips" / "a.mp4").symlink_to(repo / "blobs" / "0123abcd")  # how huggingface_hub lays it out
    samples = llava_rows(tmp_path, ["clips/a.mp4"], media_path=str(snapshot))
    assert "error" not in samples[0]


def test_response_column_names_the_reference_answer(tmp_path: Path) -> None:
    """train_policy.response_column_name (cosmos-rl's key): the reference answer rewards score against comes from
    that column; a row without it is a bad row naming the column."""
    rows = [{"id": "a", "question": "How many?", "result": 4, "answer": "not this"}, {"id": "b", "question": "Q"}]
    (tmp_path / "r.json").write_text(json.dumps(rows))
    cfg = make_cfg(
        {"name": str(tmp_path / "r.json")}, type="grpo", prompt_column_name="question", response_column_name="result"
    )
    got = load_samples(cfg, "train", keep_errors=True)
    assert got[0]["reference"] == "4" and got[0]["messages"][-1]["content"] == "How many?"
    assert got[1]["error"]["reason"] == "missing_reference" and "column 'result'" in got[1]["error"]["message"]
    default = make_cfg({"name": str(tmp_path / "r.json")}, type="grpo", prompt_column_name="question")
    assert load_samples(default, "train", keep_errors=True)[0]["reference"] == "not this"  # reference/answer/...
