"""Seeded synthetic physical-reasoning video QA: the dataset every CPU path trains on.

    python -m cosmos_train.data.synthetic OUT [--n-train 400] [--seed 0] [--difficulty easy]

Writes short mp4 clips of simple physics (motion direction, speed change, gravity, which of two
objects moves by default; size change and counting moving squares on request with `--families`;
see `synthetic_families.py`) with 4-option multiple-choice questions, in the formats the
Cosmos-Reason tools use:

    OUT/videos/{train,val}/<id>.mp4
    OUT/sft/{train,val}.json         SFT rows {"id", "video", "conversations"}; the assistant turn is
                                     "<think>reasoning</think>\\n\\n<answer>B</answer>" (the default)
    OUT/sft/{train,val}_letter.json  the same rows answering with the letter only ("B")
    OUT/rl/{train,val}.json          RL rows {"id", "video", "qa_pairs": {question, index2ans, answer}}
    OUT/benchmark/synthetic/synthetic_benchmark_qa_pairs.json + clips/<id>.mp4   (the test split)
    OUT/meta/{train,val,test}.jsonl  per clip: family, label, answer, simulated tracks, content hash
    OUT/dataset_info.json            seed, difficulty, counts per split / family / label / letter

`video` paths in sft/, rl/ and meta/ are relative to OUT; benchmark rows use "clips/<id>.mp4",
relative to their own folder, as the Cosmos-Reason benchmark does. The same arguments give
byte-identical JSON and identical clips. Held-out splits are drawn first (test, then val, then
train) from their own seeds, and a clip whose pixels equal one already drawn is redrawn, so no
split shares a clip with another and changing n_train leaves val and test unchanged.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from cosmos_train.data.prompt import QUESTION_SYSTEM_PROMPT, choice_question_text
from cosmos_train.data.synthetic_families import DEFAULT_FAMILIES, FAMILIES, Clip
from cosmos_train.data.synthetic_render import DIFFICULTIES, Canvas
from cosmos_train.data.synthetic_video import ARCHIVE_CODEC, pick_codec, write_frames_archive, write_mp4

GENERATOR = "cosmos_train.data.synthetic"  # not __name__: that is "__main__" under python -m
GENERATOR_VERSION = "1"
BENCHMARK_NAME = "synthetic"
LETTERS = ("A", "B", "C", "D")
SPLIT_SEEDS = {"train": 0, "val": 1, "test": 2}  # mixed with the user seed: each split its own stream
GENERATION_ORDER = ("test", "val", "train")  # held-out first, so n_train never changes them
MAX_DUPLICATE_REDRAWS = 100


@dataclass
class Item:
    """A clip placed in a split, with its shuffled options and answer letter."""

    id: str
    split: str
    clip: Clip
    index2ans: dict[str, str]
    answer: str
    content_sha256: str


def content_hash(frames: np.ndarray) -> str:
    h = hashlib.sha256(repr(frames.shape).encode())
    h.update(np.ascontiguousarray(frames).tobytes())
    return h.hexdigest()


def _balanced(values: Sequence[str], count: int, offset: int = 0) -> list[str]:
    return [values[(offset + i) % len(values)] for i in range(count)]


def plan_split(rng: np.random.Generator, n: int, families: Sequence[str]) -> list[tuple[str, str, str]]:
    """(family, label, answer letter) per row, shuffled.

    Families get n // F rows each (the first n % F one more); inside a family labels cycle, so
    each label count is within one of the others. Letters cycle across the concatenated families,
    so the split's letter histogram is balanced to within one and each family's nearly so; the
    two cycles are shuffled independently so a label does not predict its letter.
    """
    plan: list[tuple[str, str, str]] = []
    for k, name in enumerate(families):
        count = n // len(families) + (1 if k < n % len(families) else 0)
        labels = _balanced(FAMILIES[name].labels, count)
        letters = _balanced(LETTERS, count, offset=len(plan))
        rng.shuffle(labels)
        rng.shuffle(letters)
        plan.extend((name, label, letter) for label, letter in zip(labels, letters))
    return [plan[i] for i in rng.permutation(len(plan))]


def place_options(rng: np.random.Generator, clip: Clip, letter: str, fixed: bool = False) -> tuple[dict[str, str], str]:
    """(index2ans, answer letter). Shuffled: the clip's true option at `letter`, the three others
    shuffled around it. Fixed: the family's options in their canonical order (A is always the first
    label), so the answer letter is a function of what the clip shows."""
    if fixed:
        labels = list(clip.options)
        return {x: clip.options[label] for x, label in zip(LETTERS, labels)}, LETTERS[labels.index(clip.label)]
    others = [label for label in clip.options if label != clip.label]
    rng.shuffle(others)
    slots = [x for x in LETTERS if x != letter]
    by_letter = {letter: clip.options[clip.label], **{s: clip.options[o] for s, o in zip(slots, others)}}
    return {x: by_letter[x] for x in LETTERS}, letter


def generate_split(
    split: str, n: int, seed: int, canvas: Canvas, families: Sequence[str], seen: set[str], fixed_options: bool = False
) -> Iterator[Item]:
    """Draw the split's clips one at a time (so memory stays flat however many are asked for).

    `seen` holds the content hashes of every clip drawn so far, in any split; it is extended, and
    a clip already in it is redrawn.
    """
    rng = np.random.default_rng(np.random.SeedSequence([seed, SPLIT_SEEDS[split]]))
    for i, (family, label, letter) in enumerate(plan_split(rng, n, families)):
        for _ in range(MAX_DUPLICATE_REDRAWS):
            clip = FAMILIES[family].make(rng, label, canvas)
            digest = content_hash(clip.frames)
            if digest not in seen:
                break
        else:
            raise ValueError(
                f"split {split!r}: could not draw a new {family}/{label} clip after {MAX_DUPLICATE_REDRAWS} "
                f"tries (difficulty {canvas.difficulty.name!r}, {canvas.size}px); ask for fewer clips"
            )
        seen.add(digest)
        index2ans, answer = place_options(rng, clip, letter, fixed_options)
        yield Item(f"{split}-{i:05d}-{family}", split, clip, index2ans, answer, digest)


# ---------------------------------------------------------------- rows


def sft_row(item: Item, video: str, reasoning: bool) -> dict[str, Any]:
    if reasoning:
        answer = f"<think>{item.clip.reasoning} That is option {item.answer}.</think>\n\n<answer>{item.answer}</answer>"
    else:
        answer = item.answer
    return {
        "id": item.id,
        "video": video,
        "conversations": [
            {"role": "system", "content": QUESTION_SYSTEM_PROMPT},
            {"role": "user", "content": choice_question_text(item.clip.question, item.index2ans, reasoning)},
            {"role": "assistant", "content": answer},
        ],
    }


def qa_pairs(item: Item) -> dict[str, Any]:
    return {"question": item.clip.question, "index2ans": item.index2ans, "answer": item.answer}


def meta_row(item: Item, video: str) -> dict[str, Any]:
    return {
        "id": item.id,
        "video": video,
        "family": item.clip.family,
        "label": item.clip.label,
        "answer": item.answer,
        "answer_text": item.index2ans[item.answer],
        "reasoning": item.clip.reasoning,
        "content_sha256": item.content_sha256,
        "params": item.clip.params,
    }


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def _split_summary(metas: list[dict[str, Any]]) -> dict[str, Any]:
    per_family: dict[str, Counter] = {}
    for m in metas:
        per_family.setdefault(m["family"], Counter())[m["label"]] += 1
    letters = Counter(m["answer"] for m in metas)
    return {
        "count": len(metas),
        "families": {f: dict(sorted(c.items())) for f, c in sorted(per_family.items())},
        "answer_letters": {x: letters.get(x, 0) for x in LETTERS},
    }


def write_split(root: Path, split: str, items: Iterable[Item], fps: int, codec: str) -> dict[str, Any]:
    """Encode the split's clips as they are drawn and write its JSON files under `root`.

    codec: an mp4 codec (pick_codec), or ARCHIVE_CODEC for .npz frames archives (no PyAV needed).
    Returns the split's summary for dataset_info.json (counts and the files written, by role).
    The test split becomes the benchmark folder; train and val get sft/, rl/ and videos/.
    """
    bench = root / "benchmark" / BENCHMARK_NAME
    clip_dir = bench / "clips" if split == "test" else root / "videos" / split
    rows: list[tuple[Item, str]] = []  # (item without frames, video path relative to root)
    for it in items:
        if not rows:
            clip_dir.mkdir(parents=True, exist_ok=True)
        if codec == ARCHIVE_CODEC:
            path = clip_dir / f"{it.id}.npz"
            write_frames_archive(path, it.clip.frames, fps)
        else:
            path = clip_dir / f"{it.id}.mp4"
            write_mp4(path, it.clip.frames, fps, codec)
        it.clip.frames = it.clip.frames[:0]  # encoded: drop the pixels, keep the rows small
        rows.append((it, path.relative_to(root).as_posix()))
    if not rows:
        return {**_split_summary([]), "files": {}}

    metas = [meta_row(it, video) for it, video in rows]
    files: dict[str, str] = {"meta": f"meta/{split}.jsonl"}
    _write_jsonl(root / files["meta"], metas)
    if split == "test":
        files["benchmark"] = f"benchmark/{BENCHMARK_NAME}/{BENCHMARK_NAME}_benchmark_qa_pairs.json"
        _write_json(
            root / files["benchmark"],
            [{"video": f"clips/{Path(video).name}", "qa_pairs": qa_pairs(it)} for it, video in rows],
        )
    else:
        files.update(sft=f"sft/{split}.json", sft_letter=f"sft/{split}_letter.json", rl=f"rl/{split}.json")
        _write_json(root / files["sft"], [sft_row(it, video, reasoning=True) for it, video in rows])
        _write_json(root / files["sft_letter"], [sft_row(it, video, reasoning=False) for it, video in rows])
        _write_json(root / files["rl"], [{"id": it.id, "video": video, "qa_pairs": qa_pairs(it)} for it, video in rows])
    return {**_split_summary(metas), "files": files}


# ---------------------------------------------------------------- entry point


def _check_args(
    counts: dict[str, int], difficulty: str, families: Sequence[str] | None, size: int, n_frames: int, fps: int
) -> list[str]:
    for key, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{key} must be a non-negative integer, got {value!r}")
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"unknown difficulty {difficulty!r}; choose one of {sorted(DIFFICULTIES)}")
    chosen = list(DEFAULT_FAMILIES) if families is None else list(families)
    unknown = [f for f in chosen if f not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown famil{'y' if len(unknown) == 1 else 'ies'} {unknown}; choose from {list(FAMILIES)}")
    if not chosen or len(set(chosen)) != len(chosen):
        raise ValueError(f"families must be a non-empty list without repeats, got {chosen}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 28 or size > 1024 or size % 2:
        raise ValueError(f"size must be an even integer in [28, 1024] (yuv420p), got {size!r}")
    if isinstance(n_frames, bool) or not isinstance(n_frames, int) or not 3 <= n_frames <= 256:
        raise ValueError(f"n_frames must be an integer in [3, 256] (speed needs two steps), got {n_frames!r}")
    if isinstance(fps, bool) or not isinstance(fps, int) or not 1 <= fps <= 120:
        raise ValueError(f"fps must be an integer in [1, 120], got {fps!r}")
    return chosen


def _install(tmp: Path, out: Path) -> None:
    """Move the finished dataset into place; an older synthetic dataset there is replaced."""
    if out.exists():
        if out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        elif (out / "dataset_info.json").is_file() and json.loads(
            (out / "dataset_info.json").read_text(encoding="utf-8")
        ).get("generator") == GENERATOR:
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old)
            return
        else:
            raise FileExistsError(f"{out} exists and is not a synthetic dataset; refusing to overwrite it")
    tmp.rename(out)


def make_synthetic_dataset(
    out_dir: str | os.PathLike[str],
    *,
    n_train: int = 400,
    n_val: int = 40,
    n_test: int = 100,
    seed: int = 0,
    difficulty: str = "easy",
    families: Sequence[str] | None = None,
    size: int = 56,
    n_frames: int = 4,
    fps: int = 4,
    option_order: str | None = None,
    video_format: str = "mp4",
) -> Path:
    """Generate the dataset into `out_dir` (layout in the module docstring) and return its path.

    option_order: "shuffled" (each question's options in a random order, the answer letter balanced
    and independent of what the clip shows: the model must read the options) or "fixed" (each
    family's options always in the same order). Default: fixed at "easy", the curriculum a ~1M
    parameter model learns on a CPU in minutes (it maps what it sees straight to a letter); shuffled
    at "medium" and "hard".

    families: names from FAMILIES (default DEFAULT_FAMILIES, the first four), rows split evenly between them.
    size: square frame side in px (even); n_frames frames at `fps` per clip. Accelerating motion
    needs room: all difficulties fit up to 6 frames at 56 px, 9 at 112 px, 12 at 224 px (more
    raises a ValueError saying the motion does not fit). A reader that samples 4 of n frames
    keeps the steps evenly spaced when n is 4, 7 or 10, which the speed questions rely on.
    Distinct clips are finite at "easy" (one object size, three colours): about 2,500 in all; the
    scarcest labels are gravity's at_rest (~190) and count's one (~230), which bound a one-family dataset.
    video_format: "mp4" (PyAV encodes them) or "npz" (frames archives: the exact pixels, read by
    cosmos_train.data.media without PyAV, larger files; for machines without PyAV).
    The folder is written next to `out_dir` and renamed into place when complete; an existing
    synthetic dataset there is replaced, any other non-empty folder is an error.
    """
    if option_order is None:
        option_order = "fixed" if difficulty == "easy" else "shuffled"
    if option_order not in ("fixed", "shuffled"):
        raise ValueError(f"option_order must be 'fixed' or 'shuffled', got {option_order!r}")
    if video_format not in ("mp4", "npz"):
        raise ValueError(f"video_format must be 'mp4' or 'npz', got {video_format!r}")
    counts = {"n_train": n_train, "n_val": n_val, "n_test": n_test}
    chosen = _check_args(counts, difficulty, families, size, n_frames, fps)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    out = Path(out_dir)
    canvas = Canvas(size=size, n_frames=n_frames, difficulty=DIFFICULTIES[difficulty])
    sizes = {"train": n_train, "val": n_val, "test": n_test}

    codec = pick_codec() if video_format == "mp4" else ARCHIVE_CODEC
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        seen: set[str] = set()  # content hashes of every clip so far: no clip is in two splits
        summaries = {
            name: write_split(
                tmp,
                name,
                generate_split(name, sizes[name], seed, canvas, chosen, seen, option_order == "fixed"),
                fps,
                codec,
            )
            for name in GENERATION_ORDER
        }
        assert len(seen) == sum(sizes.values()), "a clip was drawn twice despite the duplicate check"
        info = {
            "generator": GENERATOR,
            "version": GENERATOR_VERSION,
            "seed": seed,
            "difficulty": difficulty,
            "option_order": option_order,
            "families": chosen,
            "size": size,
            "n_frames": n_frames,
            "fps": fps,
            "codec": codec,
            "benchmark": BENCHMARK_NAME,
            "video_paths": "sft/, rl/, meta/: relative to this folder; benchmark rows: relative to benchmark/synthetic",
            "sft_default": "sft/<split>.json: <think>reasoning</think>\\n\\n<answer>X</answer>; "
            "sft/<split>_letter.json: the letter only",
            "splits": {name: summaries[name] for name in ("train", "val", "test")},
        }
        _write_json(tmp / "dataset_info.json", info)
        _install(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return out


def build_arg_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The command-line options (also usable to fill a `cosmos-train make-synthetic-data` subparser)."""
    p = parser or argparse.ArgumentParser(
        prog="python -m cosmos_train.data.synthetic",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("out_dir", type=Path, help="output folder")
    p.add_argument("--n-train", type=int, default=400)
    p.add_argument("--n-val", type=int, default=40)
    p.add_argument("--n-test", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--difficulty", default="easy", choices=sorted(DIFFICULTIES))
    p.add_argument(
        "--families",
        nargs="+",
        default=None,
        metavar="FAMILY",
        help=f"any of {list(FAMILIES)} (default: {' '.join(DEFAULT_FAMILIES)})",
    )
    p.add_argument("--size", type=int, default=56)
    p.add_argument("--n-frames", type=int, default=4)
    p.add_argument("--fps", type=int, default=4)
    p.add_argument(
        "--option-order",
        choices=["fixed", "shuffled"],
        default=None,
        help="default: fixed at easy, shuffled at medium/hard",
    )
    p.add_argument(
        "--video-format",
        choices=["mp4", "npz"],
        default="mp4",
        help="npz: frames archives, read without PyAV (for a machine that has none)",
    )
    return p


def run_from_args(args: argparse.Namespace) -> Path:
    return make_synthetic_dataset(
        args.out_dir,
        n_train=args.n_train,
        n_val=args.n_val,
        n_test=args.n_test,
        seed=args.seed,
        difficulty=args.difficulty,
        families=args.families,
        size=args.size,
        n_frames=args.n_frames,
        fps=args.fps,
        option_order=args.option_order,
        video_format=args.video_format,
    )


def main(argv: Sequence[str] | None = None) -> int:
    out = run_from_args(build_arg_parser().parse_args(argv))
    info = json.loads((out / "dataset_info.json").read_text(encoding="utf-8"))
    counts = ", ".join(f"{k} {v['count']}" for k, v in info["splits"].items())
    print(f"wrote {out} ({counts}; difficulty {info['difficulty']}, seed {info['seed']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
