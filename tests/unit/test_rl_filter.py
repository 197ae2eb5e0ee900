"""RL data filtering (cosmos_train/train/rl_filter.py) with the real tiny model and HF engine: rewards whose
outcome per prompt the test fixes (a pass count per sample id), so the pass rates, the counts and the written
rows are known by hand; the written file loads as a GRPO dataset with the overrides the run returns.

    .venv/bin/python -m pytest -q tests/unit/test_rl_filter.py
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from cosmos_train.config import Config, load_config
from cosmos_train.data.sources import load_samples
from cosmos_train.errors import ConfigError, ModelError
from cosmos_train.rewards import ACCURACY_REWARDS, REWARDS, register_reward
from cosmos_train.train.rl_filter import (
    FilterSettings,
    PromptScore,
    check_model_path,
    decide,
    filter_rl_data,
    pass_rates_markdown,
)
from tests.conftest import write_tiny_grpo_config

SAMPLES = 4
# passes out of SAMPLES per prompt (sample id); r4 is one row holding two qa_pairs
PASSES = {"r0": 0, "r1": 4, "r2": 2, "r3": 1, "r4#0": 0, "r4#1": 3}
REWARD = "test_pass_by_id"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def qa(question: str, answer: str) -> dict[str, Any]:
    return {"question": question, "index2ans": {"A": "left", "B": "right"}, "answer": answer}


def write_rows(folder: Path, synthetic_dir: Path) -> Path:
    """Five RL rows (the last with two qa_pairs) in folder/rows.json, clips by paths relative to it."""
    (folder / "clips").mkdir(parents=True)
    for i, clip in enumerate(sorted((synthetic_dir / "videos" / "train").glob("*.mp4"))[:5]):
        shutil.copy(clip, folder / "clips" / f"c{i}.mp4")
    rows: list[dict[str, Any]] = [
        {"id": f"r{i}", "video": f"clips/c{i}.mp4", "qa_pairs": qa(f"Where does square {i} go?", "A"), "note": i}
        for i in range(4)
    ]
    rows.append({"id": "r4", "video": "clips/c4.mp4", "qa_pairs": [qa("First?", "A"), qa("Second?", "B")], "note": 4})
    path = folder / "rows.json"
    path.write_text(json.dumps(rows))
    return path


def pass_by_id(passes: Mapping[str, int], right: float = 1.0, wrong: float = 0.0) -> Any:
    """A reward giving each prompt's first passes[id] completions `right`, the rest `wrong` (whatever the text)."""
    calls: Counter[str] = Counter()

    def reward(completion: str, sample: Mapping[str, Any]) -> float:
        calls[sample["id"]] += 1
        return right if calls[sample["id"]] <= passes[sample["id"]] else wrong

    return reward


@pytest.fixture
def accuracy_by_id() -> Iterator[str]:
    register_reward(REWARD, accuracy=True)(pass_by_id(PASSES))
    yield REWARD
    REWARDS.pop(REWARD, None)
    ACCURACY_REWARDS.discard(REWARD)


def job(tmp_path: Path, model: Path, rows: Path, reward: str, **keys: object) -> Path:
    """A GRPO job on `rows` scored by `reward` (the tests' tiny GRPO config, validation off)."""
    return write_tiny_grpo_config(
        tmp_path / "job.toml",
        model,
        rows.parent,
        tmp_path / "runs",
        **{
            "train.train_policy.dataset.name": str(rows),
            "train.train_policy.dataset.media_path": "",
            "train.train_policy.reward_function": [reward],
            "validation.enable": False,
            **keys,
        },
    )


def config(path: Path, overrides: list[str] | None = None) -> Config:
    return load_config(path, overrides or [], env={})


def test_counts_rows_and_report_match_the_hand_computed_case(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path, accuracy_by_id: str
) -> None:
    rows_file = write_rows(tmp_path / "data", synthetic_dir)
    path = job(tmp_path, tiny_model_dir, rows_file, accuracy_by_id)
    out = tmp_path / "elsewhere" / "kept.json"
    result = filter_rl_data(config(path), FilterSettings(samples=SAMPLES), out)

    assert {p.id: p.passes for p in result.prompts} == PASSES
    assert all(p.samples == SAMPLES for p in result.prompts)
    assert result.pass_rule == f"{REWARD} = 1"
    # 0 < p < 1: r2 (2/4), r3 (1/4), r4#1 (3/4) kept; r0 and r4#0 all fail, r1 all pass
    assert (result.kept, result.dropped) == (3, 3)
    assert result.counts() == {
        "kept": 3,
        "all fail": 2,
        "all pass": 1,
        "at or below min_pass": 0,
        "at or above max_pass": 0,
    }
    assert {p.id for p in result.prompts if p.kept} == {"r2", "r3", "r4#1"}

    # the input's rows, every field kept; the relative clip made absolute; r4 keeps its one kept pair
    original = {r["id"]: r for r in json.loads(rows_file.read_text())}
    written = json.loads(out.read_text())
    assert [r["id"] for r in written] == ["r2", "r3", "r4"] and result.row_format == "rows"
    for row in written:
        want = {**original[row["id"]], "video": str(rows_file.parent / original[row["id"]]["video"])}
        if row["id"] == "r4":
            want["qa_pairs"] = [qa("Second?", "B")]
        assert row == want

    report = json.loads(result.report.read_text())
    assert result.report == out.with_name("kept_report.json")
    assert {p["id"]: (p["pass_rate"], p["kept"]) for p in report["prompts_scored"]} == {
        i: (n / SAMPLES, 0 < n < SAMPLES) for i, n in PASSES.items()
    }
    assert (report["kept"], report["dropped"]) == (3, 3)
    assert result.histogram.read_bytes().startswith(PNG_MAGIC)
    assert "3 of 6 prompts kept" in pass_rates_markdown(result)

    # the written file is a GRPO dataset: the same job, with the returned overrides, reads the kept prompts
    samples = load_samples(config(path, result.overrides), "train")
    assert [s["id"] for s in samples] == ["r2", "r3", "r4#0"]
    assert "Second?" in json.dumps(samples[2]["messages"]) and samples[2]["reference"] == "B"
    parts = [p for s in samples for m in s["messages"] if isinstance(m["content"], list) for p in m["content"]]
    videos = [p["video"] for p in parts if p.get("type") == "video"]
    assert len(videos) == 3 and all(Path(v).is_file() for v in videos)


def test_a_narrower_band_drops_the_rates_on_its_bounds(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path, accuracy_by_id: str
) -> None:
    rows_file = write_rows(tmp_path / "data", synthetic_dir)
    path = job(tmp_path, tiny_model_dir, rows_file, accuracy_by_id)
    settings = FilterSettings(samples=SAMPLES, min_pass=0.25, max_pass=0.75)
    result = filter_rl_data(config(path), settings, tmp_path / "kept.jsonl")
    why = {p.id: p.why for p in result.prompts}
    assert why == {
        "r0": "all fail",
        "r1": "all pass",
        "r2": "kept",
        "r3": "at or below min_pass",
        "r4#0": "all fail",
        "r4#1": "at or above max_pass",
    }
    lines = (tmp_path / "kept.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["r2"]


SCRIPT = """\
import json
from collections import Counter
from pathlib import Path

PASSES = {passes}
CALLS = Counter()


def get_dataset(config):
    return json.loads(Path({rows!r}).read_text())


def graded(completion, reference, sample):
    CALLS[sample["id"]] += 1
    return 0.7 if CALLS[sample["id"]] <= PASSES[sample["id"]] else 0.2


REWARD_FUNCTIONS = {{"test_graded": graded}}
"""


def test_without_an_accuracy_reward_the_threshold_decides_and_script_rows_are_written_as_chat_samples(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    rows_file = write_rows(tmp_path / "data", synthetic_dir)
    script = tmp_path / "data" / "my_rows.py"  # beside the clips: its rows' relative paths resolve there
    script.write_text(SCRIPT.format(passes=PASSES, rows=str(rows_file)))
    path = job(tmp_path, tiny_model_dir, rows_file, "test_graded")
    try:
        settings = FilterSettings(samples=SAMPLES, threshold=0.5, dataset_script=str(script))
        result = filter_rl_data(config(path), settings, tmp_path / "out" / "kept.json")
    finally:
        REWARDS.pop("test_graded", None)
    assert result.pass_rule == "reward >= 0.5"
    assert {p.id: p.passes for p in result.prompts} == PASSES
    assert result.row_format == "chat samples"  # a script's rows have no row file to copy from
    written = json.loads((tmp_path / "out" / "kept.json").read_text())
    assert [r["id"] for r in written] == ["r2", "r3", "r4#1"]
    assert all(set(r) == {"id", "messages", "reference", "options"} for r in written)
    samples = load_samples(config(path, result.overrides), "train")
    assert [(s["id"], s["reference"]) for s in samples] == [("r2", "A"), ("r3", "A"), ("r4#1", "B")]


def test_decisions_by_hand() -> None:
    def why(passes: int, lo: float = 0.0, hi: float = 1.0) -> tuple[bool, str]:
        s = decide(PromptScore("x", "f:0", passes, 8), lo, hi)
        return s.kept, s.why

    assert why(0) == (False, "all fail") and why(8) == (False, "all pass") and why(1) == (True, "kept")
    assert why(2, lo=0.25) == (False, "at or below min_pass") and why(3, lo=0.25) == (True, "kept")
    assert why(6, hi=0.75) == (False, "at or above max_pass") and why(5, hi=0.75) == (True, "kept")


def test_bad_options_are_named() -> None:
    with pytest.raises(ConfigError) as e:
        FilterSettings(samples=0, min_pass=0.9, max_pass=1.5).check(Path("x.csv"))
    text = str(e.value)
    assert "--samples 0" in text and "--max-pass 1.5" in text and "--out x.csv" in text
    with pytest.raises(ConfigError, match="--min-pass 0.6 >= --max-pass 0.4"):
        FilterSettings(min_pass=0.6, max_pass=0.4).check()
    FilterSettings().check(Path("a.jsonl"))
    with pytest.raises(ModelError, match="--model ./no/such/model"):
        check_model_path("./no/such/model")
    check_model_path("org/name")  # a hub id: loading says whether it exists
