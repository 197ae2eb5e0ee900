"""Answer parsing against a human grader: each row is a response, its options and the letter a careful
grader reads in it (None: the response chooses no option).

The rows cover what evaluation meets: plain and lower-case letters, markdown, full-width forms,
think/answer tags, option text, negations ("not A", "A is wrong"), several letters, letters that are
words ("A ball"), and the degenerate output of an untrained model (the demo's random base model
answers "ectectehind(A" and "(Aectehind(Aectehind(A", which used to read as A).
"""

from __future__ import annotations

import pytest

from cosmos_train.rewards.parsing import is_degenerate, parse_letter

ROBOT = {
    "A": "The robot moves left",
    "B": "The robot moves right",
    "C": "The robot stays still",
    "D": "The robot moves left and up",
}
BALL = {"A": "The ball rolls left", "B": "The ball falls", "C": "The ball bounces", "D": "The ball stays still"}
NONE: dict[str, str] = {}  # no options given: any capital letter is a choice

# (response, options, the grader's reading)
GRADED: list[tuple[str, dict[str, str], str | None]] = [
    # plain letters, any case
    ("C", ROBOT, "C"),
    ("d", ROBOT, "D"),
    ("(a)", ROBOT, "A"),
    ("B.\n", ROBOT, "B"),
    ("[C]", NONE, "C"),
    ("E", ROBOT, None),  # not one of the options
    ("E", NONE, "E"),
    ("The answer is F.", NONE, "F"),
    # markdown
    ("**B**", ROBOT, "B"),
    ("**Answer:** C", ROBOT, "C"),
    ("`D`", ROBOT, "D"),
    ("### Answer\nB", ROBOT, "B"),
    ("The correct option is **(A)**.", ROBOT, "A"),
    # full-width forms (NFKC)
    ("Ｂ", ROBOT, "B"),
    ("ｃ", ROBOT, "C"),
    ("（Ｄ）", ROBOT, "D"),
    ("Ａｎｓｗｅｒ：Ｂ", ROBOT, "B"),
    ("答案：Ｃ", ROBOT, "C"),
    ("答案是B", ROBOT, "B"),
    ("The answer is Ａ.", ROBOT, "A"),
    ("<answer>Ｄ</answer>", ROBOT, "D"),
    ("＜answer＞Ｂ＜/answer＞", ROBOT, "B"),
    ("Ｆ", NONE, "F"),
    # stated answers
    ("The answer is B", ROBOT, "B"),
    ("Answer: (C)", ROBOT, "C"),
    ("The correct option is D.", ROBOT, "D"),
    ("I choose A.", ROBOT, "A"),
    ("Option B", ROBOT, "B"),
    ("My final answer: c", ROBOT, "C"),
    ("the answer is (C)", ROBOT, "C"),
    ("So the answer would be D", ROBOT, "D"),
    ("Final Answer: B\n", ROBOT, "B"),
    ("the answer is b.", ROBOT, "B"),
    ("option c", ROBOT, "C"),
    ("The answer is A. Wait, no: the answer is C.", ROBOT, "C"),  # the model corrects itself
    ("$\\boxed{B}$", ROBOT, "B"),
    ("The final answer is $\\boxed{C}$.", ROBOT, "C"),
    ("The answer is: **B. The robot moves right**", ROBOT, "B"),
    ("Answer:\n\n(D) The robot moves left and up", ROBOT, "D"),
    # a leading letter
    ("B. the ball falls", BALL, "B"),
    ("C) The ball bounces", BALL, "C"),
    ("(D) The ball stays still.", BALL, "D"),
    ("A - The ball rolls left", BALL, "A"),
    # the text of an option
    ("The ball bounces.", BALL, "C"),
    ("the ball falls", BALL, "B"),
    ("It looks like the ball rolls left", BALL, "A"),
    ("The robot moves left and up.", ROBOT, "D"),  # holds option A's text too: the longer one
    ("b) the robot moves right", ROBOT, "B"),
    # think / answer tags
    ("<think>The ball drops to the floor.</think>\n<answer>B</answer>", BALL, "B"),
    ("<think>A is wrong because it rolls.</think><answer>C</answer>", BALL, "C"),
    ("<think>Not A, not B.</think>\n\nThe answer is D.", ROBOT, "D"),
    ("<think>Looking at frame 3 it could be A or C", ROBOT, None),  # cut off while reasoning
    ("<think>hmm</think>", ROBOT, None),
    ("<think>x</think><answer>The ball falls</answer>", BALL, "B"),
    ("the robot goes right</think>\n\nB", ROBOT, "B"),  # <think> was in the prompt
    ("<think>A A A A</think><answer>B</answer>", ROBOT, "B"),  # repetition inside the reasoning only
    # negations
    ("The answer is not A.", ROBOT, None),
    ("... not A", ROBOT, None),
    ("A is wrong", ROBOT, None),
    ("It can't be B.", ROBOT, None),
    ("Option A is incorrect.", ROBOT, None),
    ("I would not choose A.", ROBOT, None),
    ("Answer: not B", ROBOT, None),
    ("It isn't option D.", ROBOT, None),
    ("A can be ruled out.", ROBOT, None),
    ("The answer is definitely not C", ROBOT, None),
    ("Not A; the answer is C", ROBOT, "C"),
    ("Not A. The answer is D.", ROBOT, "D"),
    ("A is wrong, so the answer is B.", ROBOT, "B"),
    ("It is not A but B", ROBOT, "B"),
    ("The answer is C, not A.", ROBOT, "C"),
    ("We can rule out D, so B.", ROBOT, "B"),
    ("B isn't right; C fits", ROBOT, "C"),
    ("(A) is wrong and (B) is wrong, so (C).", ROBOT, "C"),
    ("Option A is wrong; option C is right.", ROBOT, "C"),
    ("not F", NONE, None),
    ("Neither A nor B; it is C.", ROBOT, "C"),
    ("B is not correct. A is not correct. D is not correct. So C.", ROBOT, "C"),
    ("The robot doesn't move left, so not A. It's B.", ROBOT, "B"),
    ("A is correct", ROBOT, "A"),  # the option as the subject, not the article
    ("B is the best answer", ROBOT, "B"),
    # degenerate output: repeated or garbage tokens
    ("AAAAAAAAAA", ROBOT, None),
    ("A A A A A A", ROBOT, None),
    ("B.B.B.B.B", ROBOT, None),
    ("C C C C C C C C C C C C", ROBOT, None),
    ("BBBB", ROBOT, None),
    ("AAAAAAA B", ROBOT, None),
    ("the the the the the the A", ROBOT, None),
    ("1 1 1 1 1 A", ROBOT, None),
    ("ectectehind(A", ROBOT, None),  # the demo's random base model
    ("(Aectehind(Aectehind(Aectehind(A", ROBOT, None),  # the demo's random base model
    ("\ufffdectehind(Aectehind(Aectehind(A", ROBOT, None),  # the demo's random base model
    ("#$%^&*( A )(*&^%", ROBOT, None),
    ("!!!!!!!!!!!!!!!B!!!!!!!", ROBOT, None),
    ("\ufffd\ufffd\ufffd B \ufffd\ufffd\ufffd", ROBOT, None),
    ("FFFFFF", NONE, None),
    ("(A)(A)(A)(A)", ROBOT, None),
    ("The answer is B B B B B B B B", ROBOT, "B"),  # stated, then repeated: the statement counts
    # several letters
    ("A or B", ROBOT, None),
    ("(A) and (C) both look possible", ROBOT, None),
    ("B, C", ROBOT, None),
    ("A/B", ROBOT, None),
    # letters that are words, or parts of words
    ("A ball rolls left in the video, so the answer is C.", BALL, "C"),
    ("A ball falls; I think B", BALL, "B"),
    ("I think the answer is a robot moving.", ROBOT, None),
    ("the answer is a robot", ROBOT, None),
    ("An A+ answer: D", ROBOT, "D"),
    ("I cannot tell from the video.", ROBOT, None),
    # empty or unreadable
    ("", ROBOT, None),
    ("   \n ", ROBOT, None),
    ("<answer></answer>", ROBOT, None),
    ("The video is too dark.", ROBOT, None),
]


@pytest.mark.parametrize(("response", "options", "expected"), GRADED)
def test_graded_response(response: str, options: dict[str, str], expected: str | None) -> None:
    assert parse_letter(response, options).answer == expected


def test_graded_table_covers_the_cases() -> None:
    assert len(GRADED) >= 80
    assert len({(r, tuple(o)) for r, o, _ in GRADED}) == len(GRADED)  # no row twice
    assert {e for _, _, e in GRADED} >= {"A", "B", "C", "D", None}


@pytest.mark.parametrize("text", ["B", "(B).", "Answer: B", "The robot moves left.", "A or B", "B...", "[B]!"])
def test_short_answers_are_not_degenerate(text: str) -> None:
    assert not is_degenerate(text)


def test_long_reasoning_is_not_degenerate() -> None:
    reasoning = "The robot starts at the left edge. In the next frames it moves to the right, " * 20
    assert not is_degenerate(reasoning + "so the answer is B.")
    assert parse_letter(reasoning + "so the answer is B.", ROBOT).answer == "B"
