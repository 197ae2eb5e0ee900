"""Every dataset source trains through the `sft` flow (prepare-data -> torchrun, 1 process -> export)
on small data generated here.

A flow run costs ~10 s of CPU on its own (torchrun start, imports, model load, export), so the
sources share one run, the way users mixing datasets do it: a dataset script (the `script` source)
reads each [[custom.mix]] table through its own source and adds the rows of examples/my_dataset.py:
- `cosmos`: a local copy of the Cosmos-Reason hub layout (`<subset>/clips/*.tar.gz` + row file),
  extracted into $COSMOS_CACHE;
- `hf`: a `save_to_disk` folder whose conversation column ("chat") holds the turns as a JSON string;
- `llava`: multi-turn video rows (with and without a placeholder), an image row and an images row;
- `video_folder`: `videos/<id>.cam.mp4` + `metas/<id>.label.json`.
Rows are not shuffled, so the 6 steps of 2 go over every row once. The clip cache is on
(`dataset.cache_dir`): data prep fills it and the trainer reads from it; the test counts its entries.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.media import moving_square_mp4

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

ROOT = Path(__file__).resolve().parents[3]


def _clip(path: Path, shift: int) -> Path:
    return moving_square_mp4(path, shift, background=20)


def _image(path: Path, seed: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (56, 70, 3), dtype=np.uint8)).save(path)
    return path


def _turns(question: str, answer: str) -> list[dict]:
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


def _job(tmp: Path, model: Path, dataset: list[str], steps: int, *, top: tuple[str, ...] = ()) -> Path:
    """A 1-process SFT job on the tiny model with 56x56 clips, rows in file order; `dataset` lines go in its table."""
    lines = [
        *top,
        "[train]",
        f'output_dir = "{tmp / "out"}"',
        f"max_num_steps = {steps}",
        "epoch = 4",
        "train_batch_per_replica = 2",
        "optm_lr = 1e-3",
        "optm_warmup_steps = 1",
        'param_dtype = "float32"',
        "[train.ckpt]",
        "enable_checkpoint = false",
        "export_safetensors = true",
        "[train.train_policy]",
        'type = "sft"',
        "micro_batch = 2",
        "dataloader_shuffle = false",
        "[train.train_policy.dataset]",
        *dataset,
        "[train.train_policy.dataset.vision]",
        "min_pixels = 3136",
        "max_pixels = 3136",
        "[policy]",
        f'model_name_or_path = "{model}"',
        "model_max_length = 1024",
        "model_gradient_checkpointing = false",
        "[policy.parallelism]",
        "dp_shard_size = 1",
        "[launch]",
        "nproc_per_node = 1",
        "[logging]",
        'logger = ["console"]',
    ]
    path = tmp / "job.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _train(config: Path, rows: int, steps: int, *, script: Path | None = None) -> Path:
    """Run the sft flow; check it completed, the manifest kept `rows`, `steps` steps logged, an export."""
    from flows.sft import SFTParams, sft

    params = SFTParams(config=str(config), dataset_script=str(script) if script else None, train_retries=0)
    state = sft(params, return_state=True)
    assert state.is_completed(), state
    result = state.result()
    run = Path(result["run_dir"])
    report = json.loads((run / "prep_report.json").read_text())
    assert (report["rows_read"], report["rows_kept"], report["rows_skipped"]) == (rows, rows, 0), report
    kept = [json.loads(x) for x in (run / "manifest.jsonl").read_text().splitlines()]
    assert len(kept) == rows
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [m for m in metrics if m["kind"] == "train"]
    assert [m["step"] for m in train] == list(range(1, steps + 1))
    assert all(np.isfinite(m["loss"]) and m["label_tokens"] > 0 for m in train)
    final = Path(result["final"])
    assert result["step"] == steps and (final / "config.json").is_file() and any(final.glob("*.safetensors"))
    return run


def _cosmos_copy(tmp: Path) -> Path:
    """A local copy of the hub layout: robovqa/clips/part{0,1}.tar.gz + robovqa/robovqa_understanding.json."""
    copy = tmp / "Cosmos-Reason1-SFT-Dataset"
    (copy / "robovqa" / "clips").mkdir(parents=True)
    rows = []
    for i in range(2):
        clip = _clip(tmp / "staging" / "clips" / f"ep{i}.mp4", shift=4 * i)
        with tarfile.open(copy / "robovqa" / "clips" / f"part{i}.tar.gz", "w:gz") as tar:
            tar.add(clip, arcname=f"clips/ep{i}.mp4")
        rows.append(
            {
                "id": f"ep{i}",
                "video": f"clips/ep{i}.mp4",
                "conversations": [
                    {"role": "system", "content": "You are a helpful assistant."},
                    *_turns("What does the robot do?", f"<think>It pushes.</think>\n\n<answer>push {i}</answer>"),
                ],
            }
        )
    (copy / "robovqa" / "robovqa_understanding.json").write_text(json.dumps(rows))
    return copy


def _hf_folder(tmp: Path) -> tuple[Path, Path]:
    import datasets

    media = tmp / "hf-media"
    rows = [
        {
            "id": f"r{i}",
            "video": f"v{i}.mp4",
            "chat": json.dumps(_turns(f"Where does the box go? ({i})", "It moves to the right.")),
        }
        for i in range(2)
    ]
    for i in range(2):
        _clip(media / f"v{i}.mp4", shift=3 * i)
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp / "hf"))
    return tmp / "hf", media


def _llava(tmp: Path) -> tuple[Path, Path]:
    media = tmp / "llava-media"
    rows = [
        {
            "id": "v0",
            "video": "v0.mp4",
            "conversations": [
                {"from": "human", "value": "<video>\nWhat moves?"},
                {"from": "gpt", "value": "A red box."},
                {"from": "human", "value": "Which way?"},
                {"from": "gpt", "value": "To the right."},
            ],
        },
        {
            "id": "v1",
            "video": "v1.mp4",
            "conversations": [
                {"from": "human", "value": "Describe the clip."},
                {"from": "gpt", "value": "A box slides."},
            ],
        },
        {
            "id": "i0",
            "image": "i0.png",
            "conversations": [
                {"from": "human", "value": "What is in <image> here?"},
                {"from": "gpt", "value": "Noise."},
            ],
        },
        {
            "id": "i1",
            "images": ["i1.png", "i2.png"],
            "conversations": [
                {"from": "human", "value": "<image> and <image>: same?"},
                {"from": "gpt", "value": "No."},
                {"from": "human", "value": "Sure?"},
                {"from": "gpt", "value": "Yes."},
            ],
        },
    ]
    _clip(media / "v0.mp4", 0)
    _clip(media / "v1.mp4", 7)
    for i in range(3):
        _image(media / f"i{i}.png", seed=i)
    (tmp / "llava.json").write_text(json.dumps(rows))
    return tmp / "llava.json", media


def _video_folder(tmp: Path) -> Path:
    folder = tmp / "captions"
    (folder / "metas").mkdir(parents=True)
    for i in range(2):
        _clip(folder / "videos" / f"c{i}.cam.mp4", shift=5 * i)
        (folder / "metas" / f"c{i}.label.json").write_text(json.dumps({"caption": f"A box moves, take {i}."}))
    return folder


MIX_SCRIPT = """
\"\"\"A dataset script that mixes datasets: each [[custom.mix]] table is read by its own source.\"\"\"
from cosmos_train.config import DatasetConfig
from cosmos_train.data.sources import load_samples
from cosmos_train.data.sources.script import load_script


def get_dataset(config):
    rows = []
    for entry in config.custom["mix"]:
        entry = dict(entry)
        label = entry.pop("label")
        job = config.model_copy(deep=True)
        policy = job.train.train_policy
        policy.conversation_column_name = entry.pop("conversation_column_name", "conversations")
        policy.dataset = DatasetConfig(**entry, vision=policy.dataset.vision)
        for sample in load_samples(job, "train"):
            rows.append({**sample, "id": f"{label}/{sample['id']}"})
    example = load_script(config.custom["example_script"])
    rows += [{**r, "id": f"script/{r['id']}"} for r in example.get_dataset(config)]
    return rows
"""


def test_every_source_trains_through_the_sft_flow(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COSMOS_CACHE", str(tmp_path / "cosmos-cache"))
    cosmos = _cosmos_copy(tmp_path)
    hf, hf_media = _hf_folder(tmp_path)
    llava, llava_media = _llava(tmp_path)
    folder = _video_folder(tmp_path)
    script = tmp_path / "mix_sources.py"
    script.write_text(MIX_SCRIPT)
    mix = [
        (
            "[[custom.mix]]",
            'label = "cosmos"',
            f'name = "{cosmos}"',
            'source = "cosmos"',
            'subset = "robovqa"',
            'split = "understanding"',
        ),
        (
            "[[custom.mix]]",
            'label = "hf"',
            f'name = "{hf}"',
            f'media_path = "{hf_media}"',
            'conversation_column_name = "chat"',
        ),
        ("[[custom.mix]]", 'label = "llava"', f'annotation_path = "{llava}"', f'media_path = "{llava_media}"'),
        (
            "[[custom.mix]]",
            'label = "video_folder"',
            f'name = "{folder}"',
            'video_suffix = ".cam"',
            'caption_prompt = "What happens?"',
        ),
    ]
    top = (
        "[custom]",
        f'example_script = "{ROOT / "examples" / "my_dataset.py"}"',
        "[custom.my_dataset]",
        f'root = "{tmp_path / "example-clips"}"',
        "n_train = 2",
        "n_val = 1",
        *[line for table in mix for line in table],
    )
    cache = tmp_path / "clip-cache"
    cfg = _job(tmp_path, tiny_model_dir, [f'name = "{script}"', f'cache_dir = "{cache}"'], steps=6, top=top)
    run = _train(cfg, rows=12, steps=6, script=script)

    kept = {r["id"]: r for r in map(json.loads, (run / "manifest.jsonl").read_text().splitlines())}
    by_source: dict[str, list[str]] = {}
    for rid in kept:
        by_source.setdefault(rid.split("/")[0], []).append(rid)
    assert {k: len(v) for k, v in by_source.items()} == {
        "cosmos": 2,
        "hf": 2,
        "llava": 4,
        "video_folder": 2,
        "script": 2,
    }
    cosmos0 = kept["cosmos/robovqa/ep0"]["messages"]  # Cosmos-Reason row ids are "<subset>/<row id>"
    assert cosmos0[0]["role"] == "system" and cosmos0[1]["content"][0]["fps"] == 1  # the Cosmos default
    video = Path(cosmos0[1]["content"][0]["video"])
    assert video.is_relative_to(tmp_path / "cosmos-cache") and video.is_file()
    hf0 = kept["hf/r0"]["messages"][1]["content"]
    assert hf0[0]["video"] == str(hf_media / "v0.mp4") and hf0[1]["text"] == "Where does the box go? (0)"
    assert [p["type"] for p in kept["llava/i1"]["messages"][1]["content"]] == ["image", "text", "image", "text"]
    assert len(kept["llava/v0"]["messages"]) == 5  # with the system turn written out
    assert kept["video_folder/c0"]["messages"][1]["content"][1]["text"] == "What happens?"
    assert kept["video_folder/c0"]["messages"][2]["content"] == "A box moves, take 0."
    assert {kept[r]["reference"] for r in by_source["script"]} <= {"A", "B"}
    # every row went through the trainer once, its media through the clip cache: 13 files, but hf v0,
    # llava v0 and video_folder c0 are the same clip (shift 0) read with the same settings, and the
    # cache is keyed by content, so they share one entry (cosmos ep0 is that clip too, at fps 1)
    assert len(list(cache.rglob("*.clip"))) == 11
