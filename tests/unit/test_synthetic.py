"""Tests for the synthetic physical-reasoning dataset (cosmos_train/data/synthetic*.py).

The ground truth is re-derived here from the simulated tracks and from the decoded pixels with
code independent of the generator, so a generator that labels a clip wrongly fails.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from cosmos_train.data.synthetic import (
    LETTERS,
    SPLIT_SEEDS,
    build_arg_parser,
    generate_split,
    main,
    make_synthetic_dataset,
    plan_split,
)
from cosmos_train.data.synthetic_families import DEFAULT_FAMILIES, FAMILIES
from cosmos_train.data.synthetic_render import COLORS, DIFFICULTIES, Canvas
from cosmos_train.data.synthetic_video import read_mp4

SMALL = {"n_train": 24, "n_val": 8, "n_test": 12}


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_synthetic_dataset(tmp_path_factory.mktemp("syn") / "out", seed=3, **SMALL)


def load(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))


def meta(ds: Path, split: str) -> list[dict]:
    return [json.loads(line) for line in (ds / "meta" / f"{split}.jsonl").read_text().splitlines()]


# ---------------------------------------------------------------- independent ground truth


def steps(values: list[int]) -> list[int]:
    return [b - a for a, b in zip(values, values[1:])]


def pattern(st: list[int]) -> str:
    mags = [abs(s) for s in st]
    if not any(st):
        return "not_moving"
    assert all(s > 0 for s in st) or all(s < 0 for s in st), f"mixed directions {st}"
    if len(set(mags)) == 1:
        return "constant"
    if all(b > a for a, b in zip(mags, mags[1:])):
        return "speeding_up"
    if all(b < a for a, b in zip(mags, mags[1:])):
        return "slowing_down"
    raise AssertionError(f"ambiguous steps {st}")


def true_label(family: str, params: dict, size: int) -> str:
    objs = params["objects"]
    if family == "count":
        lane = params["lane_px"]
        for o in objs:
            assert len(set(o["y"])) == 1, "counted squares only move sideways"
            assert all(0 <= x and x + o["size"] <= size for x in o["x"]), "a counted square leaves the frame"
        rows = [o["y"][0] // lane for o in objs]
        assert len(set(rows)) == len(rows), f"two squares share a lane: {rows}"
        assert all(o["y"][0] + o["size"] + 2 <= (r + 1) * lane for o, r in zip(objs, rows)), "squares nearly touch"
        moving = sum(o["x"][0] != o["x"][-1] for o in objs)
        return ("one", "two", "three", "four")[moving - 1]
    if family == "two_objects":
        moving = tuple(o["x"][0] != o["x"][-1] for o in objs)
        for o in objs:
            assert len(set(o["y"])) == 1, "two_objects squares only move sideways"
        return {
            (True, False): "first_only",
            (False, True): "second_only",
            (True, True): "both",
            (False, False): "neither",
        }[moving]
    (o,) = objs
    if family == "size":
        sides = o["size"]
        centres = {(x + s / 2, y + s / 2) for x, y, s in zip(o["x"], o["y"], sides)}
        assert len(centres) == 1, "a square changing size keeps its centre"
        assert all(0 <= v and v + s <= size for s, x, y in zip(sides, o["x"], o["y"]) for v in (x, y))
        changes = steps(sides)
        if not any(changes):
            return "same_size"
        signs = [d > 0 for d in changes]
        assert all(changes), f"a size that pauses {sides}"
        if all(signs):
            return "growing"
        if not any(signs):
            return "shrinking"
        assert signs == sorted(signs, reverse=True), f"shrinks before it grows: {sides}"
        return "grows_then_shrinks"
    dx, dy = steps(o["x"]), steps(o["y"])
    if family == "direction":
        ex, ey = o["x"][-1] - o["x"][0], o["y"][-1] - o["y"][0]
        assert (ex == 0) != (ey == 0), "direction clips move along exactly one axis"
        return ("right" if ex > 0 else "left") if ex else ("down" if ey > 0 else "up")
    if family == "speed":
        assert not any(dy)
        return pattern(dx)
    if family == "gravity":
        ground_top = size - params["ground_px"]
        assert all(y + o["size"] <= ground_top for y in o["y"]), "the ball never sinks into the ground"
        if any(dy):
            assert not any(dx)
            p = pattern(dy)
            if dy[0] > 0 and p == "speeding_up":
                return "falling"
            if dy[0] < 0 and p == "slowing_down":
                return "rising"
            raise AssertionError(f"vertical motion that is neither falling nor rising: {dy}")
        if any(dx):
            assert pattern(dx) == "constant"
            return "sideways"
        assert o["y"][0] + o["size"] == ground_top, "a ball at rest lies on the ground"
        return "at_rest"
    raise AssertionError(family)


def expected_option(family: str, label: str, params: dict) -> str:
    if family == "two_objects":
        a, b = (o["color"] for o in params["objects"])
        return {
            "first_only": f"Only the {a} square",
            "second_only": f"Only the {b} square",
            "both": "Both squares",
            "neither": "Neither square",
        }[label]
    return {
        "left": "It moves to the left",
        "right": "It moves to the right",
        "up": "It moves up",
        "down": "It moves down",
        "speeding_up": "It speeds up",
        "slowing_down": "It slows down",
        "constant": "It moves at a constant speed",
        "not_moving": "It does not move",
        "falling": "It falls toward the ground",
        "rising": "It rises away from the ground",
        "sideways": "It moves sideways",
        "at_rest": "It stays at rest",
        "growing": "It grows",
        "shrinking": "It shrinks",
        "same_size": "It keeps the same size",
        "grows_then_shrinks": "It grows, then shrinks",
        "one": "One square moves",
        "two": "Two squares move",
        "three": "Three squares move",
        "four": "Four squares move",
    }[label]


# ---------------------------------------------------------------- formats


def check_qa(qa: dict, where: str) -> None:
    assert set(qa) == {"question", "index2ans", "answer"}, where
    assert list(qa["index2ans"]) == list(LETTERS), where
    assert len(set(qa["index2ans"].values())) == 4, f"{where}: options repeat"
    assert qa["answer"] in LETTERS, where


def test_sft_rows_format(ds: Path) -> None:
    for split in ("train", "val"):
        rows, letter_rows = load(ds / "sft" / f"{split}.json"), load(ds / "sft" / f"{split}_letter.json")
        rl = {r["id"]: r for r in load(ds / "rl" / f"{split}.json")}
        truth = {m["id"]: m for m in meta(ds, split)}
        assert len(rows) == len(letter_rows) == len(rl) == SMALL[f"n_{split}"]
        for row, lrow in zip(rows, letter_rows):
            where = f"sft/{split}.json id={row.get('id')}"
            assert set(row) == {"id", "video", "conversations"}, where
            assert (ds / row["video"]).is_file(), where
            roles = [t["role"] for t in row["conversations"]]
            assert roles == ["system", "user", "assistant"], where
            assert all(isinstance(t["content"], str) for t in row["conversations"]), where
            user, answer = row["conversations"][1]["content"], row["conversations"][2]["content"]
            qa = rl[row["id"]]["qa_pairs"]
            check_qa(qa, where)
            option_lines = "\n".join(f"({k}) {v}" for k, v in qa["index2ans"].items())
            assert user.startswith(qa["question"] + "\n" + option_lines + "\n"), where
            assert "Answer with the option's letter from the given choices directly." in user
            assert "<think> your reasoning </think> <answer> your answer </answer>" in user
            m = re.fullmatch(r"<think>(.+)</think>\n\n<answer>([A-D])</answer>", answer, re.S)
            assert m, f"{where}: assistant turn {answer!r}"
            assert m.group(2) == qa["answer"] == truth[row["id"]]["answer"], where
            # the letter-only variant: same video and question, no format instruction, bare letter
            assert lrow["id"] == row["id"] and lrow["video"] == row["video"]
            assert lrow["conversations"][2]["content"] == qa["answer"]
            assert "<think>" not in lrow["conversations"][1]["content"]
            assert rl[row["id"]]["video"] == row["video"]


def test_benchmark_layout(ds: Path) -> None:
    bench = ds / "benchmark" / "synthetic"
    rows = load(bench / "synthetic_benchmark_qa_pairs.json")
    assert len(rows) == SMALL["n_test"]
    for i, row in enumerate(rows):
        assert set(row) == {"video", "qa_pairs"}, f"row {i}"
        assert row["video"].startswith("clips/") and row["video"].endswith(".mp4")
        assert (bench / row["video"]).is_file()
        check_qa(row["qa_pairs"], f"benchmark row {i}")
    assert sorted(p.name for p in (bench / "clips").iterdir()) == sorted(Path(r["video"]).name for r in rows)
    info = load(ds / "dataset_info.json")
    assert info["splits"]["test"]["count"] == SMALL["n_test"] and info["seed"] == 3
    assert info["difficulty"] == "easy" and info["families"] == list(DEFAULT_FAMILIES)


def test_answers_follow_the_simulation(ds: Path) -> None:
    rl = {r["id"]: r["qa_pairs"] for s in ("train", "val") for r in load(ds / "rl" / f"{s}.json")}
    bench = load(ds / "benchmark" / "synthetic" / "synthetic_benchmark_qa_pairs.json")
    rl.update({Path(r["video"]).stem: r["qa_pairs"] for r in bench})
    for split in ("train", "val", "test"):
        for m in meta(ds, split):
            label = true_label(m["family"], m["params"], 56)
            assert m["label"] == label, m["id"]
            qa = rl[m["id"]]
            assert qa["answer"] == m["answer"]
            assert qa["index2ans"][qa["answer"]] == expected_option(m["family"], label, m["params"]), m["id"]
            # the three wrong options are the family's other answers, never a second right one
            others = {expected_option(m["family"], lab, m["params"]) for lab in FAMILIES[m["family"]].labels} - {
                qa["index2ans"][qa["answer"]]
            }
            assert {v for k, v in qa["index2ans"].items() if k != qa["answer"]} == others


@pytest.mark.parametrize("difficulty", sorted(DIFFICULTIES))
def test_every_difficulty_is_labelled_by_its_physics(difficulty: str) -> None:
    canvas = Canvas(size=56, n_frames=4, difficulty=DIFFICULTIES[difficulty])
    items = list(generate_split("train", 64, 11, canvas, list(FAMILIES), set()))
    for it in items:
        assert it.clip.frames.shape == (4, 56, 56, 3) and it.clip.frames.dtype == np.uint8
        assert it.clip.label == true_label(it.clip.family, it.clip.params, 56), it.id
        assert it.index2ans[it.answer] == expected_option(it.clip.family, it.clip.label, it.clip.params)
    assert Counter(it.answer for it in items) == {x: 16 for x in LETTERS}


def test_more_frames_and_larger_canvas() -> None:
    canvas = Canvas(size=112, n_frames=7, difficulty=DIFFICULTIES["medium"])
    for it in generate_split("val", 16, 0, canvas, list(FAMILIES), set()):
        assert it.clip.frames.shape == (7, 112, 112, 3)
        assert it.clip.label == true_label(it.clip.family, it.clip.params, 112), it.id


# ---------------------------------------------------------------- size and count


NEW_FAMILIES = ["size", "count"]


@pytest.mark.parametrize("difficulty", sorted(DIFFICULTIES))
@pytest.mark.parametrize("family", NEW_FAMILIES)
def test_each_new_label_is_drawn_as_itself(family: str, difficulty: str) -> None:
    canvas = Canvas(size=56, n_frames=4, difficulty=DIFFICULTIES[difficulty])
    rng = np.random.default_rng(5)
    for label in FAMILIES[family].labels:
        for _ in range(12):
            clip = FAMILIES[family].make(rng, label, canvas)
            assert clip.family == family and clip.label == label
            assert true_label(family, clip.params, 56) == label
            assert clip.options[label] == expected_option(family, label, clip.params)
            assert clip.frames.shape == (4, 56, 56, 3)
            if family == "size":
                # The smallest change a difficulty makes: 8 px of side per frame at easy, 4 at medium and hard
                # (2 px more on every side), on a square never under 4 px.
                sides = clip.params["objects"][0]["size"]
                assert min(sides) >= 4
                assert all(abs(c) >= (8 if difficulty == "easy" else 4) for c in steps(sides) if c), sides


@pytest.fixture(scope="module")
def new_ds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The new families at the demo's settings (easy, 56 px, 4 frames), encoded to mp4."""
    return make_synthetic_dataset(
        tmp_path_factory.mktemp("syn") / "new", seed=7, n_train=24, n_val=0, n_test=16, families=NEW_FAMILIES
    )


def colour_mask(frame: np.ndarray, rgb: tuple[int, int, int]) -> np.ndarray:
    return np.abs(frame.astype(int) - np.array(rgb)).max(axis=-1) < 60


def components(mask: np.ndarray) -> list[tuple[int, int, int, int]]:
    """Bounding boxes (x0, y0, x1, y1) of the 4-connected regions of `mask`."""
    todo, boxes = set(zip(*np.nonzero(mask))), []
    while todo:
        stack = [todo.pop()]
        ys, xs = [], []
        while stack:
            y, x = stack.pop()
            ys.append(y)
            xs.append(x)
            for q in ((y + 1, x), (y - 1, x), (y, x + 1), (y, x - 1)):
                if q in todo:
                    todo.remove(q)
                    stack.append(q)
        boxes.append((min(xs), min(ys), max(xs) + 1, max(ys) + 1))
    return sorted(boxes, key=lambda b: b[1])


def test_size_change_shows_in_the_decoded_pixels(new_ds: Path) -> None:
    rows = [m for s in ("train", "test") for m in meta(new_ds, s) if m["family"] == "size"]
    assert Counter(m["label"] for m in rows) == {label: 5 for label in FAMILIES["size"].labels}
    for m in rows:
        frames = read_mp4(new_ds / m["video"])
        (obj,) = m["params"]["objects"]
        masks = [colour_mask(f, COLORS[obj["color"]]) for f in frames]
        widths = []
        for t, mask in enumerate(masks):
            ys, xs = np.nonzero(mask)
            width, height = int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)
            assert abs(width - obj["size"][t]) <= 1 and abs(height - obj["size"][t]) <= 1, (m["id"], t)
            assert mask.sum() >= 0.9 * width * height, f"{m['id']}: frame {t} is not a filled square"
            widths.append(width)
        areas = [int(mask.sum()) for mask in masks]
        # What a model sees: the label follows from the measured widths, and every change is at least
        # 7 px of side and 100 px of area from one frame to the next (8 px and 192 px as drawn).
        assert true_label("size", {"objects": [{**obj, "size": widths}]}, 56) == m["label"], (m["id"], widths)
        for a, b, wa, wb in zip(areas, areas[1:], widths, widths[1:]):
            assert wa == wb or (abs(wb - wa) >= 7 and abs(b - a) >= 100), (m["id"], widths, areas)


def test_count_shows_in_the_decoded_pixels(new_ds: Path) -> None:
    rows = [m for s in ("train", "test") for m in meta(new_ds, s) if m["family"] == "count"]
    assert Counter(m["label"] for m in rows) == {label: 5 for label in FAMILIES["count"].labels}
    for m in rows:
        frames = read_mp4(new_ds / m["video"])
        k = ("one", "two", "three", "four").index(m["label"]) + 1
        # Easy draws on black: every lit pixel belongs to a counted square.
        first, last = (components(frames[t].max(axis=-1) > 60) for t in (0, -1))
        assert len(first) == len(last) == k, (m["id"], first, last)
        for a, b in zip(first, last):
            assert abs(a[1] - b[1]) <= 1, f"{m['id']}: a square changed rows"
            assert a[2] - a[0] >= 10 and a[3] - a[1] >= 10, f"{m['id']}: a square under 10 px"
            assert abs(b[0] - a[0]) >= 20, f"{m['id']}: a square moved only {abs(b[0] - a[0])} px"


def test_new_families_are_balanced_and_seeded(new_ds: Path, tmp_path: Path) -> None:
    info = load(new_ds / "dataset_info.json")
    assert info["families"] == NEW_FAMILIES
    for split, n in (("train", 24), ("test", 16)):
        summary = info["splits"][split]
        per_label = n // 2 // 4
        assert summary["families"] == {
            f: {label: per_label for label in FAMILIES[f].labels} for f in sorted(NEW_FAMILIES)
        }
        assert summary["answer_letters"] == {x: n // 4 for x in LETTERS}
    for m in meta(new_ds, "train") + meta(new_ds, "test"):
        assert m["label"] == true_label(m["family"], m["params"], 56), m["id"]
    canvas = Canvas(size=56, n_frames=4, difficulty=DIFFICULTIES["medium"])
    hashes = [
        [it.content_sha256 for it in generate_split("train", 16, s, canvas, NEW_FAMILIES, set())] for s in (7, 7, 8)
    ]
    assert hashes[0] == hashes[1] and len(set(hashes[0]) & set(hashes[2])) < 4


def test_default_families_are_the_first_four() -> None:
    assert list(FAMILIES)[:4] == list(DEFAULT_FAMILIES) and set(NEW_FAMILIES) <= set(FAMILIES) - set(DEFAULT_FAMILIES)
    assert "size" in build_arg_parser().format_help() and "count" in build_arg_parser().format_help()


# ---------------------------------------------------------------- video


def object_box(frame: np.ndarray, rgb: tuple[int, int, int]) -> tuple[int, int]:
    close = np.abs(frame.astype(int) - np.array(rgb)).max(axis=-1) < 60
    ys, xs = np.nonzero(close)
    assert len(xs), f"colour {rgb} not found"
    return int(xs.min()), int(ys.min())


def test_clips_decode_to_the_simulated_frames(ds: Path) -> None:
    canvas = Canvas(size=56, n_frames=4, difficulty=DIFFICULTIES["easy"])
    seen: set[str] = set()
    drawn = {}
    for split, n in (("test", 12), ("val", 8), ("train", 24)):  # the generator's order, same seed
        drawn.update(
            {it.id: it for it in generate_split(split, n, 3, canvas, list(DEFAULT_FAMILIES), seen, fixed_options=True)}
        )
    for split in ("train", "val", "test"):
        for m in meta(ds, split):
            frames = read_mp4(ds / m["video"])
            assert frames.shape == (4, 56, 56, 3), m["id"]
            it = drawn[m["id"]]
            assert it.content_sha256 == m["content_sha256"]
            err = np.abs(frames.astype(int) - it.clip.frames.astype(int))
            assert err.mean() < 2.0 and err.max() < 60, f"{m['id']}: mean {err.mean():.2f} max {err.max()}"
            # the objects are where the simulation put them, in every decoded frame
            for obj in m["params"]["objects"]:
                for t in range(4):
                    x, y = object_box(frames[t], COLORS[obj["color"]])
                    assert abs(x - obj["x"][t]) <= 1 and abs(y - obj["y"][t]) <= 1, (m["id"], t)


def test_splits_share_no_clip(ds: Path) -> None:
    ids, hashes, pixels = set(), set(), set()
    for split in ("train", "val", "test"):
        rows = meta(ds, split)
        assert all(r["id"].startswith(split + "-") for r in rows)
        ids |= {r["id"] for r in rows}
        hashes |= {r["content_sha256"] for r in rows}
        pixels |= {hashlib.sha256(read_mp4(ds / r["video"]).tobytes()).hexdigest() for r in rows}
    total = sum(SMALL.values())
    assert len(ids) == len(hashes) == len(pixels) == total


# ---------------------------------------------------------------- determinism, balance


def json_files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.json*"))}


def test_same_seed_same_dataset_other_seed_differs(ds: Path, tmp_path: Path) -> None:
    again = make_synthetic_dataset(tmp_path / "again", seed=3, **SMALL)
    assert json_files(again) == json_files(ds)
    for p in sorted(ds.rglob("*.mp4")):
        assert np.array_equal(read_mp4(p), read_mp4(again / p.relative_to(ds))), p.name
    other = make_synthetic_dataset(tmp_path / "other", seed=4, **SMALL)
    assert load(other / "sft" / "train.json") != load(ds / "sft" / "train.json")
    hashes = {m["content_sha256"] for s in ("train", "val", "test") for m in meta(ds, s)}
    other_hashes = {m["content_sha256"] for s in ("train", "val", "test") for m in meta(other, s)}
    assert len(hashes & other_hashes) < len(hashes) // 4


def test_held_out_splits_do_not_depend_on_n_train(ds: Path, tmp_path: Path) -> None:
    bigger = make_synthetic_dataset(tmp_path / "bigger", seed=3, n_train=40, n_val=8, n_test=12)
    bench = "benchmark/synthetic/synthetic_benchmark_qa_pairs.json"
    assert (bigger / bench).read_bytes() == (ds / bench).read_bytes()
    assert (bigger / "sft/val.json").read_bytes() == (ds / "sft/val.json").read_bytes()


def test_answer_letters_and_labels_are_balanced() -> None:
    rng = np.random.default_rng(0)
    for n in (1, 7, 40, 401):
        plan = plan_split(rng, n, list(FAMILIES))
        letters = Counter(letter for _, _, letter in plan)
        assert sum(letters.values()) == n
        assert max(letters.values()) - min(letters.get(x, 0) for x in LETTERS) <= 1, (n, letters)
        for fam in FAMILIES:
            labels = Counter(lab for f, lab, _ in plan if f == fam)
            if labels:
                assert max(labels.values()) - min(labels.get(x, 0) for x in FAMILIES[fam].labels) <= 1
    # each label is answered under every letter in a large split: the letter says nothing
    plan = plan_split(np.random.default_rng(1), 800, ["direction"])
    assert all(len({letter for _, lab, letter in plan if lab == label}) == 4 for label in FAMILIES["direction"].labels)


def test_family_subset(tmp_path: Path) -> None:
    out = make_synthetic_dataset(tmp_path / "d", n_train=8, n_val=0, n_test=0, families=["gravity"])
    assert {m["family"] for m in meta(out, "train")} == {"gravity"}
    assert not (out / "benchmark").exists() and not (out / "sft" / "val.json").exists()


def test_four_hundred_clips_take_seconds(tmp_path: Path) -> None:
    start = time.perf_counter()
    make_synthetic_dataset(tmp_path / "d", n_train=400, n_val=0, n_test=0)
    assert time.perf_counter() - start < 30
    assert len(list((tmp_path / "d" / "videos" / "train").iterdir())) == 400


# ---------------------------------------------------------------- errors and CLI


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"families": ["direction", "bouncing"]}, "bouncing"),
        ({"families": []}, "non-empty"),
        ({"difficulty": "extreme"}, "extreme"),
        ({"n_train": -1}, "n_train"),
        ({"n_val": 2.5}, "n_val"),
        ({"size": 55}, "size"),
        ({"n_frames": 2}, "n_frames"),
        ({"fps": 0}, "fps"),
        ({"seed": -3}, "seed"),
        ({"n_frames": 16}, "does not fit on the canvas"),
    ],
)
def test_bad_arguments_are_named(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_synthetic_dataset(tmp_path / "d", **kwargs)
    assert not (tmp_path / "d").exists()


def test_output_folder_handling(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="foreign"):
        make_synthetic_dataset(foreign, n_train=4, n_val=0, n_test=0)
    assert (foreign / "keep.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir()] == ["foreign"], "no temporary folder is left behind"

    out = make_synthetic_dataset(tmp_path / "d", n_train=8, n_val=4, n_test=4)
    make_synthetic_dataset(out, n_train=4, n_val=0, n_test=0)  # a synthetic dataset is replaced whole
    assert len(list((out / "videos" / "train").iterdir())) == 4
    assert not (out / "videos" / "val").exists() and not (out / "benchmark").exists()


def test_cli_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                str(tmp_path / "c"),
                "--n-train",
                "4",
                "--n-val",
                "0",
                "--n-test",
                "4",
                "--seed",
                "2",
                "--difficulty",
                "hard",
            ]
        )
        == 0
    )
    assert "train 4" in capsys.readouterr().out
    info = load(tmp_path / "c" / "dataset_info.json")
    assert (info["seed"], info["difficulty"], info["splits"]["test"]["count"]) == (2, "hard", 4)
    assert SPLIT_SEEDS.keys() == info["splits"].keys()


def test_easy_keeps_each_familys_options_in_one_order(ds: Path, tmp_path: Path) -> None:
    rows = json.loads((ds / "rl" / "train.json").read_text())
    letter_of: dict[tuple[str, str], set[str]] = {}
    for r, m in zip(rows, meta(ds, "train")):
        assert r["id"] == m["id"]
        letter_of.setdefault((m["family"], m["label"]), set()).add(r["qa_pairs"]["answer"])
    # the answer letter is a function of what the clip shows (each family's labels in one order)
    assert all(len(v) == 1 for v in letter_of.values()), letter_of
    by_family = {family for family, _ in letter_of}
    letters = {r["qa_pairs"]["answer"] for r in rows}
    assert letters == set("ABCD")  # labels are balanced, so letters still are
    assert json.loads((ds / "dataset_info.json").read_text())["option_order"] == "fixed"
    shuffled = make_synthetic_dataset(tmp_path / "s", seed=3, option_order="shuffled", **SMALL)
    orders = {json.dumps(r["qa_pairs"]["index2ans"]) for r in json.loads((shuffled / "rl" / "train.json").read_text())}
    assert len(orders) > len(by_family)
    with pytest.raises(ValueError, match="option_order"):
        make_synthetic_dataset(tmp_path / "x", option_order="sorted", **SMALL)
