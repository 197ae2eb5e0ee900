"""Reward functions: values of each built-in, weighted combinations, unknown names, script rewards."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosmos_train.errors import ConfigError
from cosmos_train.rewards import (
    ACCURACY_REWARDS,
    REWARDS,
    accuracy_reward,
    combine,
    register_script_rewards,
    weights_of,
)

OPTIONS = {"A": "It moves left", "B": "It moves right", "C": "It stays", "D": "It falls"}
ROW = {"messages": [{"role": "user", "content": "Which way?"}], "reference": "B", "options": OPTIONS}


@pytest.mark.parametrize(
    ("text", "value", "lenient"),
    [
        ("<think>It slides to the right.</think>\n\n<answer>B</answer>", 1.0, 1.0),
        ("<think>It slides to the right.</think>\n\n<answer>B</answer>\n", 1.0, 1.0),  # one final newline
        ("  <think>a</think><answer>B</answer>\n", 0.0, 1.0),  # cosmos-rl's: exactly a blank line between
        ("<think>a</think>\n<answer>B</answer>", 0.0, 1.0),
        ("<answer>B</answer>", 0.0, 0.0),  # no reasoning
        ("<think>a</think> so <answer>B</answer>", 0.0, 0.0),  # text between the blocks
        ("<think>a</think>\n<answer>B</answer> trailing words", 0.0, 0.0),
        ("<think>a\n\nb</think>\n\n<answer>B</answer>", 1.0, 1.0),  # reasoning spans lines
        ("<think>a <think>b</think>\n\n<answer>B</answer>", 0.0, 1.0),  # a nested <think>: not cosmos-rl's format
    ],
)
def test_format(text: str, value: float, lenient: float) -> None:
    assert REWARDS["format"](text, ROW) == value
    assert REWARDS["format_lenient"](text, ROW) == lenient


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("B", 1.0),
        ("<think>it goes right</think><answer>B</answer>", 1.0),
        ("<answer> b </answer>", 1.0),  # case and spaces
        ("<think>maybe A</think>\n<answer>(b)</answer>", 0.0),  # cosmos-rl's: the whole answer, not a letter in it
        ("The answer is B.", 0.0),
        ("It moves right", 0.0),
        ("<answer>B</answer><answer>A</answer>", 1.0),  # the first answer block
        ("A", 0.0),
        ("", 0.0),
    ],
)
def test_single_choice(text: str, value: float) -> None:
    assert REWARDS["single_choice"](text, ROW) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("B", 1.0),
        ("<think>it goes right</think><answer>B</answer>", 1.0),
        ("<think>maybe A</think>\n<answer>(b)</answer>", 1.0),  # case and brackets
        ("The answer is B.", 1.0),  # not "T" as the reference tool's first-capital rule reads it
        ("Ｂ", 1.0),  # full width, NFKC
        ("It moves right", 1.0),  # the option's text
        ("A", 0.0),
        ("A or B", 0.0),  # two letters: no answer
        ("<answer>not A</answer>", 0.0),
        ("", 0.0),
    ],
)
def test_choice_letter(text: str, value: float) -> None:
    assert REWARDS["choice_letter"](text, ROW) == value


def test_single_choice_reads_the_reference_from_the_answer_turn_without_options() -> None:
    sft_like = {"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": "C"}]}
    for name in ("single_choice", "choice_letter"):
        assert REWARDS[name]("<answer>C</answer>", sft_like) == 1.0
        assert REWARDS[name]("D", sft_like) == 0.0
        assert REWARDS[name]("C", {"messages": []}) == 0.0  # nothing to compare with


def test_exact_match() -> None:
    row = {"messages": [], "reference": "A red box."}
    assert REWARDS["exact_match"]("<think>x</think><answer>a red  box</answer>", row) == 1.0
    assert REWARDS["exact_match"]("A blue box.", row) == 0.0
    assert REWARDS["exact_match"]("anything", {"messages": []}) == 0.0


def test_weighted_combination_and_parts() -> None:
    assert weights_of("format") == {"format": 1.0}
    assert weights_of(["format", "single_choice"]) == {"format": 1.0, "single_choice": 1.0}
    score = combine({"format": 0.2, "single_choice": 1.0})
    total, parts = score("<think>r</think>\n\n<answer>B</answer>", ROW)
    assert parts == {"format": 1.0, "single_choice": 1.0} and total == pytest.approx(1.2)
    total, parts = score("<think>r</think>\n\n<answer>A</answer>", ROW)
    assert parts == {"format": 1.0, "single_choice": 0.0} and total == pytest.approx(0.2)
    batch = score.score_batch(["B", "A"], [ROW, ROW])
    assert [t for t, _ in batch] == [1.0, 0.0]
    with pytest.raises(ValueError, match="2 completions for 1 samples"):
        score.score_batch(["B", "A"], [ROW])


def test_unknown_reward_names_the_key_and_the_known_ones() -> None:
    with pytest.raises(ConfigError) as e:
        combine(["format", "single_choise"])
    assert "train.train_policy.reward_function: 'single_choise' is not a registered reward" in str(e.value)
    known = (
        "boxed_math, choice_letter, direct_math, exact_match, format, format_lenient, gsm8k, overlong, single_choice"
    )
    assert known in str(e.value)
    with pytest.raises(ConfigError, match="names no reward"):
        combine([])


def test_dataset_script_rewards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "my_grpo.py"
    script.write_text(
        "def get_dataset(config):\n    return []\n\n"
        "def length_bonus(completion, reference, sample):\n"
        "    return 1.0 if reference in completion else -len(completion) / 100\n\n"
        "REWARD_FUNCTIONS = {'contains_reference': length_bonus}\n"
    )
    monkeypatch.setattr("cosmos_train.rewards.REWARDS", dict(REWARDS))
    assert register_script_rewards(script) == ["contains_reference"]
    score = combine({"contains_reference": 2.0, "single_choice": 1.0})
    assert score("B", ROW) == (3.0, {"contains_reference": 1.0, "single_choice": 1.0})
    assert score("xxxx", ROW)[1]["contains_reference"] == pytest.approx(-0.04)


def test_accuracy_rewards_are_the_right_or_wrong_ones() -> None:
    # 1 for a right answer, 0 for a wrong one: their mean is an accuracy; format, direct_math (+1 / -1) are not
    assert {"single_choice", "choice_letter", "exact_match", "boxed_math", "gsm8k"} <= ACCURACY_REWARDS
    assert not {"format", "format_lenient", "direct_math", "overlong"} & ACCURACY_REWARDS
    assert accuracy_reward(["format", "boxed_math"]) == "boxed_math"
    assert accuracy_reward(["format", "single_choice", "exact_match"]) == "single_choice"
    assert accuracy_reward(["format", "direct_math"]) is None


def test_a_script_reward_replacing_a_builtin_is_no_accuracy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "my_grpo.py"
    script.write_text(
        "def get_dataset(config):\n    return []\n\n"
        "REWARD_FUNCTIONS = {'exact_match': lambda completion, reference, sample: 0.5}\n"
    )
    monkeypatch.setattr("cosmos_train.rewards.REWARDS", dict(REWARDS))
    monkeypatch.setattr("cosmos_train.rewards.ACCURACY_REWARDS", set(ACCURACY_REWARDS))
    register_script_rewards(script)
    assert accuracy_reward(["exact_match"]) is None  # its values are the script's own
