"""A dataset script: how to bring a dataset no built-in source reads.

    cosmos-train prepare-data --config configs/tiny-sft.toml examples/my_dataset.py
    cosmos-train sft --config configs/tiny-sft.toml examples/my_dataset.py
    python examples/my_dataset.py [CONFIG.toml]          # print the first chat samples

The contract (cosmos_train/data/sources/script.py):
- `get_dataset(config) -> Iterable[dict]` (required): the training rows.
- `get_val_dataset(config) -> Iterable[dict]` (optional): held-out rows.
- `REWARD_FUNCTIONS = {"name": fn}` (optional, GRPO): fn(completion, reference, sample) -> float.

`config` is the whole job config (cosmos_train.config.Config); the TOML's free-form `[custom]`
table is `config.custom`, here `[custom.my_dataset] root = "...", n_train = 16`. Rows may be chat
samples (`messages`) or Cosmos-Reason / LLaVA / RL rows; relative media paths are resolved against
this file's folder. This example makes its own clips (a square moving left or right) so it runs
anywhere; a real script would read your annotation files instead.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import av
import numpy as np

SIZE, FRAMES, FPS = 56, 4, 4
QUESTION = "Which way does the square move?"
OPTIONS = {"A": "left", "B": "right"}


def _write_clip(path: Path, direction: str, seed: int) -> None:
    """A white square crossing a dark frame; the kind of clip your camera would give you."""
    rng = np.random.default_rng(seed)
    y = int(rng.integers(8, SIZE - 24))
    xs = np.linspace(6, SIZE - 22, FRAMES).astype(int)
    if direction == "left":
        xs = xs[::-1]
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=FPS)
        stream.width = stream.height = SIZE
        stream.pix_fmt = "yuv420p"
        for x in xs:
            frame = np.full((SIZE, SIZE, 3), 20, np.uint8)
            frame[y : y + 16, x : x + 16] = 235
            out.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
        out.mux(stream.encode())


def _settings(config: Any) -> tuple[Path, int, int]:
    mine = (config.custom or {}).get("my_dataset", {})
    root = Path(mine.get("root", Path(config.train.output_dir) / "my_dataset_clips")).expanduser().resolve()
    return root, int(mine.get("n_train", 16)), int(mine.get("n_val", 4))


def _rows(root: Path, split: str, n: int, policy_type: str) -> list[dict]:
    rows = []
    for i in range(n):
        direction = "left" if i % 2 else "right"
        letter = "A" if direction == "left" else "B"
        clip = root / split / f"{i:04d}.mp4"
        if not clip.is_file():
            _write_clip(clip, direction, seed=i + (0 if split == "train" else 100_000))
        if policy_type == "grpo":
            # An RL row: the source builds the lettered prompt and keeps the answer as reference.
            rows.append(
                {
                    "id": f"{split}-{i}",
                    "video": str(clip),
                    "qa_pairs": {"question": QUESTION, "index2ans": OPTIONS, "answer": letter},
                }
            )
        else:
            # A chat sample written out in full; any vision setting on the part wins over [dataset.vision].
            rows.append(
                {
                    "id": f"{split}-{i}",
                    "messages": [
                        {
                            "role": "user",
                            "content": [
                                {"type": "video", "video": str(clip), "nframes": FRAMES},
                                {"type": "text", "text": f"{QUESTION}\n(A) left\n(B) right"},
                            ],
                        },
                        {
                            "role": "assistant",
                            "content": f"<think>The square ends further {direction}.</think>\n\n"
                            f"<answer>{letter}</answer>",
                        },
                    ],
                    "reference": letter,
                }
            )
    return rows


def get_dataset(config: Any) -> list[dict]:
    root, n_train, _ = _settings(config)
    return _rows(root, "train", n_train, config.policy_type)


def get_val_dataset(config: Any) -> list[dict]:
    root, _, n_val = _settings(config)
    return _rows(root, "val", n_val, config.policy_type)


def direction_word(completion: str, reference: str | None, sample: dict) -> float:
    """1 when the answer names the right direction in words instead of the letter."""
    if reference is None:
        return 0.0
    m = re.search(r"<answer>(.*?)</answer>", completion, re.S)
    said = (m.group(1) if m else completion).strip().lower()
    return float(said in (reference.lower(), OPTIONS.get(reference.upper(), "")))


REWARD_FUNCTIONS = {"direction_word": direction_word}


if __name__ == "__main__":
    from cosmos_train.config import load_config
    from cosmos_train.data.sources import load_samples

    cfg = load_config(sys.argv[1] if len(sys.argv) > 1 else None, sys.argv[2:], check_paths=False)
    for sample in load_samples(cfg, "train", script=__file__)[:2]:
        print(sample)
