"""Images held inside dataset rows (datasets `Image` columns, their parquet structs, TRL layout)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cosmos_train.config import config_from_dict
from cosmos_train.data.sources import RowError, load_samples
from cosmos_train.data.sources.embedded import is_embedded, store_embedded


def picture(seed: int, size: tuple[int, int] = (56, 42)) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))


def jpeg_bytes(seed: int) -> bytes:
    buffer = io.BytesIO()
    picture(seed).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def cfg_for(name: Path, cache: Path, **tp: object) -> object:
    dataset = {"name": str(name), "cache_dir": str(cache), "vision": {"min_pixels": 3136, "max_pixels": 3136}}
    return config_from_dict({"train": {"train_policy": {"dataset": dataset, **tp}}})


def llava_row(image: object, question: str) -> dict:
    return {
        "image": image,
        "conversations": [{"from": "human", "value": f"<image>\n{question}"}, {"from": "gpt", "value": "A square."}],
    }


def test_store_is_content_addressed_and_lossless(tmp_path: Path) -> None:
    image = picture(0)
    first = store_embedded(image, tmp_path)
    assert store_embedded(picture(0), tmp_path) == first  # same pixels, same file
    assert first.suffix == ".png" and store_embedded(picture(1), tmp_path) != first
    assert np.array_equal(np.asarray(Image.open(first)), np.asarray(image))
    raw = jpeg_bytes(2)
    stored = store_embedded({"bytes": raw, "path": "cam0/frame.jpeg"}, tmp_path)
    assert stored.read_bytes() == raw and stored.suffix == ".jpg"  # original bytes, not re-encoded
    assert not list(tmp_path.glob(".tmp-*"))
    assert not is_embedded({"bytes": None, "path": "a.png"}) and not is_embedded("a.png")


def test_image_column_of_a_saved_dataset(tmp_path: Path) -> None:
    import datasets

    images = [picture(i) for i in range(3)]
    rows = [llava_row(images[i % 2], f"q{i}") for i in range(3)]  # rows 0 and 2 share a picture
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "conversations": [{"from": datasets.Value("string"), "value": datasets.Value("string")}],
        }
    )
    datasets.Dataset.from_list(rows, features=features).save_to_disk(str(tmp_path / "disk"))

    got = load_samples(cfg_for(tmp_path / "disk", tmp_path / "cache"), "train")
    parts = [s["messages"][1]["content"] for s in got]
    paths = [Path(p[0]["image"]) for p in parts]
    assert all(p.parent == tmp_path / "cache" / "embedded_media" for p in paths)
    assert paths[0] == paths[2] != paths[1]
    assert parts[0][0]["max_pixels"] == 3136 and parts[1][1] == {"type": "text", "text": "q1"}
    for path, i in zip(paths, [0, 1, 0]):
        assert np.array_equal(np.asarray(Image.open(path).convert("RGB")), np.asarray(images[i]))


def test_parquet_image_structs_keep_their_bytes(tmp_path: Path) -> None:
    import datasets

    raw = [jpeg_bytes(i) for i in range(2)]
    rows = [llava_row({"bytes": raw[i], "path": f"img{i}.jpg"}, f"q{i}") for i in range(2)]
    # a row whose struct holds only a path is a plain file reference
    picture(9).save(tmp_path / "on_disk.png")
    rows.append(llava_row({"bytes": None, "path": str(tmp_path / "on_disk.png")}, "q2"))
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "conversations": [{"from": datasets.Value("string"), "value": datasets.Value("string")}],
        }
    )
    datasets.Dataset.from_list(rows, features=features).to_parquet(str(tmp_path / "d.parquet"))

    got = load_samples(cfg_for(tmp_path / "d.parquet", tmp_path / "cache"), "train")
    stored = [Path(s["messages"][1]["content"][0]["image"]) for s in got]
    assert [p.read_bytes() for p in stored[:2]] == raw
    assert stored[2] == tmp_path / "on_disk.png"


def test_trl_messages_with_an_images_column(tmp_path: Path) -> None:
    import datasets

    pics = [picture(7), picture(8)]
    rows = [
        {
            "images": pics,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image"},
                        {"type": "text", "text": "Left"},
                        {"type": "image"},
                        {"type": "text", "text": "right. Same?"},
                    ],
                },
                {"role": "assistant", "content": [{"type": "text", "text": "No."}]},
            ],
        },
        {
            "images": pics,
            "messages": [  # two images, one slot: the second would be lost
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What?"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "A square."}]},
            ],
        },
    ]
    # from_list unifies the parts into one struct: every part gets "type", "text", None where unset
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "disk"))

    cfg = cfg_for(tmp_path / "disk", tmp_path / "cache")
    ok, bad = load_samples(cfg, "train", keep_errors=True)
    content = ok["messages"][1]["content"]
    assert [p["type"] for p in content] == ["image", "text", "image", "text"]
    assert content[1] == {"type": "text", "text": "Left"}  # no "image": None left on text parts
    for part, pic in zip([content[0], content[2]], pics):
        assert np.array_equal(np.asarray(Image.open(part["image"])), np.asarray(pic))
        assert part["max_pixels"] == 3136
    assert ok["messages"][2]["content"] == [{"type": "text", "text": "No."}]
    assert bad["error"]["reason"] == "placeholder_mismatch"
    assert ":1" in bad["error"]["message"] and "2 image(s)" in bad["error"]["message"]
    with pytest.raises(RowError, match=r"disk:1: the row has 2 image"):
        load_samples(cfg, "train")


def test_embedded_images_pass_data_prep(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The stored files decode and fit: data prep keeps every row."""
    import datasets

    from cosmos_train.data.prepare import prepare_split
    from cosmos_train.models.load import load_processor

    rows = [llava_row(picture(i), f"q{i}") for i in range(4)]
    datasets.Dataset.from_list(
        rows,
        features=datasets.Features(
            {
                "image": datasets.Image(),
                "conversations": [{"from": datasets.Value("string"), "value": datasets.Value("string")}],
            }
        ),
    ).save_to_disk(str(tmp_path / "disk"))
    report = prepare_split(
        cfg_for(tmp_path / "disk", tmp_path / "cache"), "train", tmp_path / "run", load_processor(tiny_model_dir)
    )
    assert report.rows_kept == 4
