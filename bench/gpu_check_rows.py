"""The dataset script of bench/gpu_check.py's GRPO step: the synthetic RL rows, and a reward a random model earns.

The 3B-size model of the check has random weights, so it answers noise: `single_choice` would score every
completion 0, every group's reward spread would be 0 and GRPO would skip the update the check times. The reward
here, the parity of the completion's length in characters, differs inside a group of noise completions, so the
update has real advantages (its value means nothing else).

    [custom.gpu_check]
    rows = "/path/to/synthetic/rl/train.json"     # video paths relative to the dataset folder
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def get_dataset(config: Any) -> list[dict[str, Any]]:
    """The synthetic dataset's RL rows, their video paths made absolute."""
    rows_file = Path(config.custom["gpu_check"]["rows"])
    root = rows_file.parent.parent  # <dataset>/rl/train.json: videos are relative to <dataset>
    rows = json.loads(rows_file.read_text(encoding="utf-8"))
    return [{**row, "video": str(root / row["video"])} for row in rows]


def length_parity(completion: str, reference: str | None, sample: dict[str, Any]) -> float:
    """1 for a completion of odd length in characters, else 0."""
    return float(len(completion) % 2)


REWARD_FUNCTIONS = {"gpu_check_length_parity": length_parity}
