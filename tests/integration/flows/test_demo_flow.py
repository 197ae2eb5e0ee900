"""The demo flow's wiring on a very short run: assets, base score, SFT, SFT score, GRPO, GRPO score,
summary.json. (Learning itself is shown by `make demo`; here each run is 2 steps, so only the shape is checked.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]


def test_demo_writes_summary(tmp_path: Path) -> None:
    from flows.demo import demo

    out = tmp_path / "demo"
    summary = demo(
        output_dir=str(out),
        n_train=32,
        n_test=8,
        sft_steps=2,
        grpo_steps=2,
        sft_overrides=[
            "train.train_batch_per_replica=8",
            "train.train_policy.micro_batch=8",
            "train.ckpt.save_freq=1000",
        ],
        grpo_overrides=[
            "rollout.n_generation=4",
            "train.train_batch_per_replica=8",
            "train.train_policy.micro_batch=8",
            "train.ckpt.save_freq=1000",
            "validation.freq=1",
        ],
    )
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk == summary
    stages = on_disk["stages"]
    assert [s["name"] for s in stages] == ["base", "sft", "grpo"]
    for s in stages:
        assert s["n"] == 8 and 0.0 <= s["accuracy"] <= 1.0 and 0 <= s["unanswered"] <= 8
        assert s["ci95"][0] <= s["accuracy"] <= s["ci95"][1]
    assert stages[1]["checkpoint"].endswith("safetensors/final")
    assert Path(stages[1]["checkpoint"], "config.json").exists()
    assert (Path(on_disk["pipeline"]) / "eval" / "base" / "letter" / "results.json").exists()
    # GRPO started from the SFT export and the demo scored the export validation chose
    best = on_disk["grpo_best"]
    assert best["metric"] == "accuracy" and best["step"] in (0, 1, 2)
    assert stages[2]["checkpoint"] == best["path"] and best["path"].endswith("safetensors/best")
    grpo_config = (Path(on_disk["grpo_run_dir"]) / "config.toml").read_text()
    assert stages[1]["checkpoint"] in grpo_config
    # the GRPO stage's run-health verdicts, as its result.json holds them (what `cosmos-train demo` ends with)
    assert set(on_disk["health"]) == {"grpo"}
    assert (
        on_disk["health"]["grpo"] == json.loads((Path(on_disk["grpo_run_dir"]) / "result.json").read_text())["health"]
    )
