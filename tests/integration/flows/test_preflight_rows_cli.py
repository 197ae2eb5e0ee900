"""`cosmos-train sft` / `grpo` on a local dataset with fewer usable rows than one step: the preflight answers in
seconds, before Prefect starts and before any run folder is made: one paragraph naming the dataset, the row count
and the batch key, exit 2. (It used to be the trainer's sampler ~20-36 s in, after Prefect, the run folder, data
preparation and the model load.)"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.cli_inprocess import RunCli
from tests.conftest import ROOT, write_tiny_sft_config

pytestmark = pytest.mark.slow

# measured 4-5 s as its own process (imports included), well under 1 s in this one; the bound leaves room for a
# loaded CI machine (the old path took 20-36 s)
ANSWER_S = 30


def _llava(tmp_path: Path, synthetic_dir: Path, n: int) -> Path:
    """A LLaVA annotation file of the synthetic clips' first `n` training rows (media under synthetic_dir)."""
    rows = json.loads((synthetic_dir / "sft" / "train_letter.json").read_text())[:n]
    llava = [
        {
            "id": r["id"],
            "video": r["video"],
            "conversations": [
                {"from": "human", "value": "<video>\n" + r["conversations"][1]["content"]},
                {"from": "gpt", "value": r["conversations"][2]["content"]},
            ],
        }
        for r in rows
    ]
    path = tmp_path / "llava.json"
    path.write_text(json.dumps(llava))
    return path


@pytest.mark.parametrize("case", ["sft folder", "sft llava", "grpo folder"])
def test_too_few_rows_for_one_step_is_said_before_prefect(
    case: str, tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path, run_cli: RunCli
) -> None:
    out = tmp_path / "out"
    if case == "grpo folder":
        command = "grpo"
        config = ROOT / "configs" / "tiny-grpo.toml"
        sets = [  # 512 completions / 8 per prompt = 64 prompts a step; rl/train.json has 48
            f'train.train_policy.dataset.name="{synthetic_dir}"',
            f'policy.model_name_or_path="{tiny_model_dir}"',
            f'train.output_dir="{out}"',
            "train.train_batch_per_replica=512",
        ]
        named, rows, key = f"({synthetic_dir}, split 'train')", 48, "train.train_batch_per_replica = 512 completions"
    else:
        command = "sft"
        config = write_tiny_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, out)
        if case == "sft folder":
            sets, rows, named = ["train.train_batch_per_replica=64"], 48, f"({synthetic_dir}, split 'train_letter')"
        else:
            llava = _llava(tmp_path, synthetic_dir, 3)
            sets = [
                f'train.train_policy.dataset.annotation_path="{llava}"',
                f'train.train_policy.dataset.media_path="{synthetic_dir}"',
                'train.train_policy.dataset.name=""',
            ]
            rows, named = 3, f"({llava})"
        key = "train.train_batch_per_replica = " + ("64" if case == "sft folder" else "4")
    started = time.monotonic()
    # in this process: run_cli fails the test if the command reaches Prefect
    done = run_cli(command, "--config", config, *[a for s in sets for a in ("--set", s)])
    seconds = time.monotonic() - started
    assert done.returncode == 2, done.stderr[-3000:]
    text = done.stdout + done.stderr
    assert "Traceback" not in text and "temporary server" not in text  # no Prefect server was started
    assert done.stderr.startswith("error: train.train_policy.dataset ") and done.stderr.strip().count("\n") == 0
    assert f"{named}: {rows} usable training row(s), fewer than" in done.stderr
    assert key in done.stderr and "add rows" in done.stderr
    assert not out.exists()  # no run folder
    assert seconds < ANSWER_S, seconds
