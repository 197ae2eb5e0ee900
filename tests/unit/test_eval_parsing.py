"""Answer parsing: a table of realistic model responses and the option each one chooses."""

from __future__ import annotations

import pytest

from cosmos_train.rewards.parsing import (
    answer_tag,
    freeform_equal,
    is_correct,
    parse_letter,
    parse_response,
    split_reasoning,
)

OPTIONS = {
    "A": "The robot moves left",
    "B": "The robot moves right",
    "C": "The robot stays still",
    "D": "The robot moves left and up",
}

# (response, expected letter or None when it cannot be read)
TABLE: list[tuple[str, str | None]] = [
    ("B", "B"),
    ("b", "B"),
    (" C\n", "C"),
    ("(B)", "B"),
    ("B.", "B"),
    ("B)", "B"),
    ("[D]", "D"),
    ("**C**", "C"),
    ("The answer is B", "B"),  # the reference reads "T"
    ("The answer is B.", "B"),
    ("The correct answer is (C).", "C"),
    ("Answer: D", "D"),
    ("answer: (a)", "A"),
    ("Option B", "B"),
    ("I choose C because the robot does not move.", "C"),
    ("I would go with option (D).", "D"),
    ("B. The robot moves right", "B"),
    ("(A) The robot moves left", "A"),
    ("C: the robot stays still", "C"),
    ("D - The robot moves left and up", "D"),
    ("The robot moves right.", "B"),
    ("the robot stays still", "C"),
    ("The robot moves left and up", "D"),  # contains option A's text too: the longer option wins
    ("Looking at the frames, (B) fits best.", "B"),
    ("Based on the video, B is correct.", "B"),
    ("A robot arm is visible. It moves to the right, so B", "B"),  # "A robot": the article
    ("<think>The arm goes right.</think>\n\n<answer>B</answer>", "B"),
    ("<think>It moves left; not B.</think>\n<answer>(A)</answer>", "A"),
    ("<think>hmm</think> <answer> c </answer>", "C"),
    ("<think>Frame 1 the cube is left.</think><answer>The robot moves right</answer>", "B"),
    ("<think>reasoning</think>\n\n<answer>B", "B"),  # truncated before </answer>
    ("<think>The answer is not A. The answer is D.</think>", None),  # truncated: no answer part
    ("Not A. The answer is D.", "D"),  # the last stated answer wins
    ("", None),
    ("   ", None),
    ("The video is too dark to tell.", None),
    ("A or B", None),  # two lone letters: ambiguous
    ("(A) and (C) both look possible", None),
    ("<answer></answer>", None),
    ("<answer>I am not sure</answer>", None),
    ("E", None),  # not an option
    ("The answer is E.", None),
    ("I think the answer is a robot moving.", None),  # "a" is an article here
    ("The", None),  # the reference would say "T"
]


@pytest.mark.parametrize(("response", "expected"), TABLE)
def test_letter_table(response: str, expected: str | None) -> None:
    assert parse_letter(response, OPTIONS).answer == expected


def test_table_is_large() -> None:
    assert len(TABLE) >= 30
    assert {e for _, e in TABLE} >= {"A", "B", "C", "D", None}


def test_reasoning_text_comes_from_think() -> None:
    parsed = parse_response("<think>The cube slides right.</think>\n\n<answer>B</answer>", "reasoning", OPTIONS)
    assert (parsed.answer, parsed.reasoning) == ("B", "The cube slides right.")
    assert split_reasoning("plain") == ("", "plain")
    assert split_reasoning("why</think>B") == ("why", "B")


def test_answer_tag_last_wins() -> None:
    assert answer_tag("<answer>A</answer> wait <answer>C</answer>") == "C"
    assert answer_tag("no tag") is None


def test_freeform() -> None:
    parsed = parse_response("<think>x</think><answer>Pick up the cup.</answer>", "freeform", {})
    assert parsed.answer == "Pick up the cup."
    assert freeform_equal(parsed.answer, "pick up the cup")
    assert not freeform_equal("pick up the mug", "pick up the cup")
    assert is_correct("pick up the CUP", "Pick up the cup", "freeform", {})


def test_is_correct_letters() -> None:
    assert is_correct("b", "B", "letter", OPTIONS)
    assert not is_correct(None, "B", "letter", OPTIONS)
    assert not is_correct("A", "B", "reasoning", OPTIONS)


def test_unknown_answer_type() -> None:
    with pytest.raises(ValueError, match="no answer parser"):
        parse_response("B", "essay", OPTIONS)
