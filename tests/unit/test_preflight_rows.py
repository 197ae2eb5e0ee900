"""The preflight's row count (`preflight.check_job` -> `check_one_step`): a training command whose local dataset has
fewer usable rows than one step takes is refused before anything starts, with the numbers the trainer's sampler
would use (global batch = train_batch_per_replica x dp_replicate_size for SFT; prompts_per_step for GRPO); a
dataset that fills one step exactly, `dataloader_drop_last = false` and `prepare-data` pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cosmos_train.errors import DataError
from cosmos_train.preflight import check_job
from tests.conftest import write_tiny_sft_config

GRPO = [
    'train.train_policy.type="grpo"',
    "rollout.n_generation=4",
    "train.train_policy.micro_batch=4",
    'rollout.backend="hf"',
    "rollout.batch_size=4",
    'train.train_policy.dataset.split="train"',
]


@pytest.fixture
def job(tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path) -> Path:
    """The tiny SFT job on the synthetic folder: 48 training rows (split train_letter; GRPO reads rl/train.json: 48)."""
    return write_tiny_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, tmp_path / "out")


def test_sft_rows_against_the_global_batch(job: Path) -> None:
    check_job(job, ["train.train_batch_per_replica=48"], policy_type="sft")  # exactly one step
    with pytest.raises(DataError) as refused:
        check_job(job, ["train.train_batch_per_replica=50"], policy_type="sft")
    text = str(refused.value)
    assert "\n" not in text and "split 'train_letter'" in text
    assert "48 usable training row(s), fewer than one global batch of 50 (train.train_batch_per_replica = 50" in text
    assert "lower train.train_batch_per_replica to at most 48" in text
    # the trainer then takes the last, partial batch: one step
    check_job(
        job, ["train.train_batch_per_replica=50", "train.train_policy.dataloader_drop_last=false"], policy_type="sft"
    )
    check_job(job, ["train.train_batch_per_replica=50"])  # prepare-data (no trainer): its rows are fine


def test_replicas_multiply_the_global_batch(job: Path) -> None:
    sets = ["train.train_batch_per_replica=26", "policy.parallelism.dp_replicate_size=2", "launch.nproc_per_node=2"]
    with pytest.raises(DataError, match=r"fewer than one global batch of 52 .* at most 24, "):
        check_job(job, sets, policy_type="sft")


def test_the_held_out_part_and_skipped_rows_do_not_count(job: Path, tmp_path: Path, synthetic_dir: Path) -> None:
    # test_size holds rows out for validation (as cosmos-rl: only when validation is on)
    held_out = [
        "train.train_batch_per_replica=32",
        "train.train_policy.dataset.test_size=0.5",
        "validation.enable=true",
    ]
    with pytest.raises(DataError, match=r"24 usable training row\(s\), fewer than one global batch of 32"):
        check_job(job, held_out, policy_type="sft")
    rows = json.loads((synthetic_dir / "sft" / "train_letter.json").read_text())[:6]
    for row in rows[:3]:
        row["video"] = "/etc/hostname"  # outside the media roots: a bad row (media_outside_root), skipped
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sets = [
        f'train.train_policy.dataset.name="{data}"',
        'train.train_policy.dataset.split="train"',
        f'train.train_policy.dataset.media_path="{synthetic_dir}"',
        'train.train_policy.dataset.on_bad_row="skip"',
        "train.train_batch_per_replica=4",
    ]
    with pytest.raises(DataError, match=rf"\({data}, split 'train'\): 3 usable training row\(s\)"):
        check_job(job, sets, policy_type="sft")


def test_grpo_rows_against_the_prompts_of_a_step(job: Path) -> None:
    check_job(job, [*GRPO, "train.train_batch_per_replica=192"], policy_type="grpo")  # 48 prompts: exactly one step
    with pytest.raises(DataError) as refused:
        check_job(job, [*GRPO, "train.train_batch_per_replica=200"], policy_type="grpo")
    text = str(refused.value)
    assert "48 usable training row(s), fewer than the 50 prompts one GRPO step samples" in text
    assert "train.train_batch_per_replica = 200 completions / rollout.n_generation = 4" in text
    assert "lower train.train_batch_per_replica to at most 192" in text
