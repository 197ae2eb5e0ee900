"""Benchmark loading: any dataset name, dict or list qa_pairs, answer or correct_answer, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cosmos_train.evaluation.benchmark import BenchmarkError, load_benchmark
from cosmos_train.evaluation.prompts import (
    LETTER_INSTRUCTION,
    REASONING_INSTRUCTION,
    SYSTEM_PROMPT,
    build_messages,
    question_text,
)

OPTS = {"A": "left", "B": "right"}


def make_bench(root: Path, name: str, rows: list, clips: list[str]) -> Path:
    folder = root / "benchmark" / name
    (folder / "clips").mkdir(parents=True)
    for c in clips:
        (folder / "clips" / c).write_bytes(b"not decoded here")
    (folder / f"{name}_benchmark_qa_pairs.json").write_text(json.dumps(rows))
    return folder


def test_rows_dict_and_list(tmp_path: Path) -> None:
    rows = [
        {"video": "clips/v1.mp4", "qa_pairs": {"question": "Where?", "index2ans": OPTS, "answer": "B"}},
        {
            "video": "clips/v2.mp4",
            "qa_pairs": [
                {"question": "Q1", "index2ans": OPTS, "correct_answer": "a"},
                {"question": "Q2", "index2ans": OPTS, "answer": "B"},
            ],
        },
        {"video": "clips/v1.mp4", "qa_pairs": {"question": "Again?", "index2ans": OPTS, "answer": "A"}},
    ]
    make_bench(tmp_path, "my_robots", rows, ["v1.mp4", "v2.mp4"])
    videos = load_benchmark(tmp_path, "my_robots")
    assert [v.video_id for v in videos] == ["v1", "v2"]
    assert [q.answer for q in videos[0].questions] == ["B", "A"]  # same video merged, in order
    assert [q.index for q in videos[0].questions] == [0, 1]
    assert videos[1].questions[0].answer == "A"  # correct_answer, upper-cased
    assert videos[1].video_path == tmp_path / "benchmark" / "my_robots" / "clips" / "v2.mp4"
    # limit counts questions, whole videos at a time (the reference's behaviour)
    assert [v.video_id for v in load_benchmark(tmp_path, "my_robots", limit=1)] == ["v1"]
    assert len(load_benchmark(tmp_path, "my_robots", limit=2)) == 2
    # a data_dir that already is the benchmark folder works too
    assert len(load_benchmark(tmp_path / "benchmark", "my_robots")) == 2


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            {"video": "clips/missing.mp4", "qa_pairs": {"question": "Q", "index2ans": OPTS, "answer": "A"}},
            r"row 0: video file .*missing\.mp4 does not exist",
        ),
        (
            {"video": "", "qa_pairs": {"question": "Q", "index2ans": OPTS, "answer": "A"}},
            r"row 0: 'video' must name a clip .*leave the key out for a text-only question",
        ),
        (
            {"video": "clips/v.mp4", "qa_pairs": {"question": "Q", "index2ans": OPTS}},
            r"row 0 qa_pairs\[0\]: missing 'answer'",
        ),
        (
            {"video": "clips/v.mp4", "qa_pairs": {"question": "Q", "index2ans": OPTS, "answer": "C"}},
            r"answer 'C' is not one of the options",
        ),
        ({"video": "clips/v.mp4", "qa_pairs": {"index2ans": OPTS, "answer": "A"}}, r"missing 'question'"),
        ({"video": "clips/v.mp4", "qa_pairs": {"question": "Q", "answer": "A"}}, r"missing 'index2ans'"),
        ({"video": "clips/v.mp4", "qa_pairs": []}, r"'qa_pairs' must be"),
    ],
)
def test_bad_rows_name_file_and_row(tmp_path: Path, row: dict, message: str) -> None:
    make_bench(tmp_path, "ds", [row], ["v.mp4"])
    with pytest.raises(BenchmarkError, match=message) as err:
        load_benchmark(tmp_path, "ds")
    assert "ds_benchmark_qa_pairs.json" in str(err.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(BenchmarkError, match=r"benchmark 'nope'.*nope_benchmark_qa_pairs\.json does not exist"):
        load_benchmark(tmp_path, "nope")


def test_freeform_without_options(tmp_path: Path) -> None:
    make_bench(
        tmp_path, "ff", [{"video": "clips/v.mp4", "qa_pairs": {"question": "What?", "answer": "pick cup"}}], ["v.mp4"]
    )
    (q,) = load_benchmark(tmp_path, "ff", require_options=False)[0].questions
    assert q.options == {} and q.answer == "pick cup"


def test_prompt_text_exact() -> None:
    text = question_text("Where does it go?", OPTS, "letter")
    assert (
        text
        == "Where does it go?\n(A) left\n(B) right\nAnswer with the option's letter from the given choices directly."
    )
    assert question_text("Where does it go?", OPTS, "reasoning") == text + "\n" + REASONING_INSTRUCTION
    assert REASONING_INSTRUCTION == (
        "Please answer the question in the following format: "
        "<think> your reasoning </think> <answer> your answer </answer>."
    )
    assert question_text("Describe it.", {}, "freeform") == "Describe it."


def test_messages_and_training_prompt_agree(tmp_path: Path) -> None:
    make_bench(
        tmp_path,
        "ds",
        [{"video": "clips/v.mp4", "qa_pairs": {"question": "Q", "index2ans": OPTS, "answer": "A"}}],
        ["v.mp4"],
    )
    (video,) = load_benchmark(tmp_path, "ds")
    msgs = build_messages(
        video.questions[0], str(video.video_path), "reasoning", 4, {"max_pixels": 3136, "max_frames": None}
    )
    assert msgs[0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert msgs[1]["content"][0] == {"type": "video", "video": str(video.video_path), "fps": 4, "max_pixels": 3136}
    assert msgs[1]["content"][1]["text"].endswith(LETTER_INSTRUCTION + "\n" + REASONING_INSTRUCTION)
    # The synthetic training rows are prompted with the same words the benchmark is evaluated with.
    from cosmos_train.data import synthetic

    assert synthetic.choice_question_text("Q", OPTS, True) == question_text("Q", OPTS, "reasoning")
    assert synthetic.QUESTION_SYSTEM_PROMPT == SYSTEM_PROMPT


@pytest.mark.parametrize("rows", [[], {}])
def test_empty_benchmark_is_an_error(tmp_path: Path, rows: list | dict) -> None:
    make_bench(tmp_path, "empty", rows, [])
    with pytest.raises(
        BenchmarkError,
        match=r"benchmark 'empty': .*empty_benchmark_qa_pairs\.json holds no questions.*"
        r"remove 'empty' from datasets",
    ):
        load_benchmark(tmp_path, "empty")


def test_limit_zero_is_an_error(tmp_path: Path) -> None:
    rows = [{"video": "clips/v.mp4", "qa_pairs": {"question": "Q", "index2ans": OPTS, "answer": "A"}}]
    make_bench(tmp_path, "ds", rows, ["v.mp4"])
    with pytest.raises(
        BenchmarkError, match=r"benchmark 'ds': limit = 0 leaves none of the questions of .*ds_benchmark"
    ):
        load_benchmark(tmp_path, "ds", limit=0)
