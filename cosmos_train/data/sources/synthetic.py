"""`synthetic` source: the folder `cosmos_train.data.synthetic.make_synthetic_dataset` writes.

SFT reads `sft/train.json` (role "train") or `sft/val.json` (role "val", or `dataset.split = "val"`);
GRPO reads `rl/train.json` / `rl/val.json`. `dataset.split = "train_letter"` picks the letter-only
SFT answers, and then role "val" reads `sft/val_letter.json`. Video paths in those files are relative to the folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from cosmos_train.config import DatasetConfig, GRPOPolicyConfig, TrainPolicyConfig
from cosmos_train.data.sources.common import DatasetError, context_for, map_rows, read_rows
from cosmos_train.data.sources.registry import register_source


def synthetic_file(root: Path, policy_type: str, split_role: str, split: str) -> Path:
    kind = "rl" if policy_type == "grpo" else "sft"
    if split_role == "val":
        # the held-out rows in the same answer format as the training split
        name = "val_letter" if split.endswith("_letter") and kind == "sft" else "val"
    else:
        name = split if split not in ("", "train") else "train"
    path = root / kind / f"{name}.json"
    if not path.is_file():
        have = sorted(p.name for p in (root / kind).glob("*.json")) if (root / kind).is_dir() else []
        raise DatasetError(f"synthetic dataset {root}: no {kind}/{name}.json (has {have or 'none'})")
    return path


@register_source("synthetic")
def synthetic_source(
    ds: DatasetConfig, train_policy: TrainPolicyConfig, split_role: str, custom: dict
) -> Iterator[dict]:
    root = Path(ds.name).expanduser()
    if not (root / "dataset_info.json").is_file():
        raise DatasetError(f"dataset.name {ds.name}: not a synthetic dataset folder (no dataset_info.json)")
    split = ds.split if isinstance(ds.split, str) else "train"
    policy_type = "grpo" if isinstance(train_policy, GRPOPolicyConfig) else "sft"
    path = synthetic_file(root, policy_type, split_role, split)
    ctx = context_for(
        train_policy,
        ds.vision.as_part_defaults(),
        media_roots=[root.absolute(), path.parent.absolute()],
        allow_outside_root=ds.allow_media_outside_root,
    )
    yield from map_rows(read_rows(path), str(path), ctx)
