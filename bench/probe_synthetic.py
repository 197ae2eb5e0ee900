"""Learnability probe for the synthetic dataset: can the answer be read from the pixels?

    .venv/bin/python bench/probe_synthetic.py [--difficulty easy] [--n-train 400] [--steps 300] [--families size count]

Generates a dataset (into a temporary folder), decodes the clips back with PyAV (what a model
sees after the mp4 round trip), and trains two small probes from pixels to each clip's label
(the option text; with the options shown, the letter follows from it one to one; for
"which square moves" the probe predicts the moving colour, as it cannot read the question):
a linear classifier on raw pixels, and a ~0.1M-parameter CNN over the frames stacked as
channels. Prints held-out (benchmark split) accuracy per family (default: every family, the
dataset's default four and the opt-in ones); chance is 25%.
Not part of the test suite: it takes a minute or so on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from cosmos_train.data.synthetic import make_synthetic_dataset
from cosmos_train.data.synthetic_families import FAMILIES
from cosmos_train.data.synthetic_video import read_mp4

LABELS: list[tuple[str, str]] = []  # (family, label) classes, filled from the training split


def pixel_label(row: dict) -> tuple[str, str]:
    """The label as the pixels alone show it. "first_only" depends on which colour the question
    names first, which a pixels-only probe cannot see, so it becomes the moving square's colour."""
    if row["label"] in ("first_only", "second_only"):
        obj = row["params"]["objects"][0 if row["label"] == "first_only" else 1]
        return row["family"], f"only_{obj['color']}"
    return row["family"], row["label"]


def load_split(root: Path, split: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Decoded clips [N, T*3, H, W] in [0, 1], class index, family index."""
    rows = [json.loads(line) for line in (root / "meta" / f"{split}.jsonl").read_text().splitlines()]
    if not LABELS:
        LABELS.extend(sorted({pixel_label(r) for r in rows}, key=lambda fl: (list(FAMILIES).index(fl[0]), fl[1])))
    clips = np.stack([read_mp4(root / r["video"]) for r in rows])  # [N, T, H, W, 3]
    n, t, h, w, c = clips.shape
    x = torch.from_numpy(clips).permute(0, 1, 4, 2, 3).reshape(n, t * c, h, w).float() / 255
    y = torch.tensor([LABELS.index(pixel_label(r)) for r in rows])
    fam = torch.tensor([list(FAMILIES).index(r["family"]) for r in rows])
    return x, y, fam


def family_mask(fam: torch.Tensor) -> torch.Tensor:
    """-inf on the labels of other families: the question tells the model which family it is."""
    allowed = torch.tensor([[list(FAMILIES).index(f) for f, _ in LABELS]]) == fam[:, None]
    return torch.where(allowed, 0.0, float("-inf"))


def cnn(in_channels: int, size: int) -> nn.Module:
    feat = size
    for k, s in ((5, 2), (3, 2), (3, 2)):
        feat = (feat - k) // s + 1
    return nn.Sequential(
        nn.Conv2d(in_channels, 32, 5, stride=2),
        nn.ReLU(),
        nn.Conv2d(32, 48, 3, stride=2),
        nn.ReLU(),
        nn.Conv2d(48, 48, 3, stride=2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(48 * feat * feat, len(LABELS)),
    )


def train_and_score(model: nn.Module, train, test, steps: int, lr: float, seed: int) -> dict[str, float]:
    torch.manual_seed(seed)
    (x, y, fam), (xt, yt, famt) = train, test
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    for _ in range(steps):
        idx = torch.randint(0, len(x), (32,))
        loss = nn.functional.cross_entropy(model(x[idx]) + family_mask(fam[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        pred = (model(xt) + family_mask(famt)).argmax(-1)
    scores = {
        f: (pred[famt == i] == yt[famt == i]).float().mean().item() for i, f in enumerate(FAMILIES) if (famt == i).any()
    }
    scores["all"] = (pred == yt).float().mean().item()
    return scores


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--difficulty", default="easy")
    p.add_argument("--n-train", type=int, default=400)
    p.add_argument("--n-test", type=int, default=200)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES), metavar="FAMILY")
    args = p.parse_args()
    if "OMP_NUM_THREADS" not in os.environ:  # a shared machine sets it lower
        torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        root = make_synthetic_dataset(
            Path(tmp) / "d",
            n_train=args.n_train,
            n_val=0,
            n_test=args.n_test,
            seed=args.seed,
            difficulty=args.difficulty,
            families=args.families,
        )
        made = time.perf_counter() - start
        train, test = load_split(root, "train"), load_split(root, "test")
    _, c, h, _ = train[0].shape
    print(
        f"{args.difficulty}: generated {args.n_train}+{args.n_test} clips in {made:.1f}s; "
        f"{args.steps} steps of batch 32, held-out accuracy (chance 0.25):"
    )
    probes = {
        "linear": (nn.Sequential(nn.Flatten(), nn.Linear(c * h * h, len(LABELS))), 1e-3),
        "cnn": (cnn(c, h), 1e-3),
    }
    for name, (model, lr) in probes.items():
        start = time.perf_counter()
        scores = train_and_score(model, train, test, args.steps, lr, args.seed)
        params = sum(q.numel() for q in model.parameters())
        cols = "  ".join(f"{k} {v:.2f}" for k, v in scores.items())
        print(f"  {name:6s} ({params / 1e3:.0f}k params, {time.perf_counter() - start:.0f}s): {cols}")


if __name__ == "__main__":
    main()
