"""The demo flow's wiring on a very short run: assets, base score, SFT, SFT score, summary.json.
(Learning itself is shown by `make demo`; here the run is 2 steps, so only the shape is checked.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]


def test_demo_writes_summary(tmp_path: Path) -> None:
    from flows.demo import demo

    out = tmp_path / "demo"
    summary = demo(output_dir=str(out), n_train=32, n_test=8,
                   sft_overrides=["train.max_num_steps=2", "train.train_batch_per_replica=8",
                                  "train.train_policy.micro_batch=8", "train.ckpt.save_freq=1000"])
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk == summary
    stages = on_disk["stages"]
    assert [s["name"] for s in stages] == ["base", "sft"]
    for s in stages:
        assert s["n"] == 8 and 0.0 <= s["accuracy"] <= 1.0 and 0 <= s["unanswered"] <= 8
        assert s["ci95"][0] <= s["accuracy"] <= s["ci95"][1]
    assert stages[1]["checkpoint"].endswith("safetensors/final")
    assert Path(stages[1]["checkpoint"], "config.json").exists()
    assert (out / "eval" / "base" / "letter" / "results.json").exists()
