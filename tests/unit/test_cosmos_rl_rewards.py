"""cosmos-rl's rewards under its names: ours scored beside cosmos-rl 0.4.7's own reward functions.

The oracle is the installed cosmos-rl (tests/cosmos_rl_oracle.py): `cosmos_rl/dispatcher/algo/reward.py`'s
format, single_choice, gsm8k, boxed_math, direct_math and overlong functions and its `Reward` class (the total and
the filter value dynamic sampling reads). Every comparison returns the rows where ours and theirs differ, so the
mutation test at the end can show that a deliberate change of ours is caught.
"""

from __future__ import annotations

import sys
import threading
import time
import types
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from math_verify.metric import math_metric
from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig
from transformers import AutoTokenizer

import cosmos_train.rewards as rewards_module
from cosmos_train.config import RemoteRewardConfig, RemoteRewardFn, config_from_dict
from cosmos_train.errors import ConfigError
from cosmos_train.rewards import CONTEXT_REWARDS, REWARDS, RewardContext, RewardSet, combine, overlong_reward
from cosmos_train.rewards import math as math_module
from tests.cosmos_rl_oracle import oracle_config, oracle_module

REWARD_MODULE = "cosmos_rl.dispatcher.algo.reward"
RULES = ("format", "single_choice", "gsm8k", "boxed_math", "direct_math")

# (completion, reference): tags, whitespace, nesting, free-form and SFT-style references, GSM8K, LaTeX
TABLE: list[tuple[str, str]] = [
    # the format and the <answer> block
    ("<think>It slides right.</think>\n\n<answer>B</answer>", "B"),
    ("<think>It slides right.</think>\n\n<answer>B</answer>\n", "B"),  # one final newline
    ("<think>It slides right.</think>\n\n<answer>B</answer>\n\n", "B"),
    ("  <think>a</think><answer>B</answer>\n", "B"),  # leading spaces, no blank line
    ("<think>a</think>\n<answer>B</answer>", "B"),  # one newline between the blocks
    ("<think>a</think>\n\n<answer>B</answer> trailing words", "B"),
    ("Sure. <think>a</think>\n\n<answer>B</answer>", "B"),  # text before
    ("<think>a <think>b</think>\n\n<answer>B</answer>", "B"),  # a nested <think>
    ("<think>a</think> more</think>\n\n<answer>B</answer>", "B"),  # a second </think>
    ("<think>a\n\nb</think>\n\n<answer>B</answer>", "B"),  # reasoning over lines
    ("<think></think>\n\n<answer></answer>", "B"),  # empty blocks
    ("<think>x</think>\n\n<answer>A</answer>\n\n<answer>B</answer>", "B"),  # two answers: the first counts
    ("<think>x</think>\n\n<answer>B</answer></answer>", "B"),
    ("<THINK>x</THINK>\n\n<ANSWER>B</ANSWER>", "B"),  # tags in capitals
    ("<think>x < y and <thinking> too</think>\n\n<answer>B</answer>", "B"),  # a tag that is not <think>
    ("<think>a</think>\n\n<answer>B", "B"),  # unclosed answer
    ("<think>a</think>\r\n\r\n<answer>B</answer>", "B"),  # Windows newlines
    # single-choice answers
    ("<answer>B</answer>", "B"),
    ("B", "B"),
    ("b", "B"),
    (" B \n", "B"),
    ("(B)", "B"),
    ("B. It moves right", "B"),  # a letter with its option text
    ("The answer is B.", "B"),
    ("<answer> b </answer>", "B"),
    ("<answer>B</answer>", "<answer>B</answer>"),  # a reference in <answer> tags
    ("<think>r</think>\n\n<answer>C</answer>", "<think>because</think>\n\n<answer>C</answer>"),  # an SFT turn
    ("<think>r</think>\n\n<answer>D</answer>", "<think>because</think>\n\n<answer>C</answer>"),
    ("<answer>A</answer>", "  <answer> a </answer> and more"),
    ("<answer>B</answer> then <answer>C</answer>", "C"),
    ("<answer>B", "B"),  # unclosed: the whole completion
    ("It moves right", "B. It moves right"),
    ("B. It moves right", "B. It moves right"),
    ("", "B"),
    ("", ""),
    # free-form references
    ("<answer>Yes</answer>", "Yes"),
    ("yes", "Yes"),
    ("<answer>Yes.</answer>", "Yes"),
    ("<answer>\nNo\n</answer>", "no"),
    ("The car turns left at the junction.", "the car turns left at the junction."),
    # GSM8K
    ("5 + 7 = 12\n#### 12", "5 + 7 = 12\n#### 12"),
    ("so\n#### 1,234", "#### 1234"),
    ("#### 1234", "Natalia sold 48 clips in April.\n#### 1,234"),
    ("the answer is 12", "#### 12"),
    ("the answer is 12", "12"),  # neither has "####": None == None
    ("no number at all", "Yes"),
    ("#### -5", "#### -5"),
    ("#### 3.50", "#### 3.5"),
    ("#### 12 and later #### 13", "#### 13"),  # the first "####" counts
    ("####12", "#### 12"),  # no space
    ("#### $12", "#### 12"),
    ("#### 12.", "#### 12"),
    ("#### ,", "#### ,"),
    ("#### 1,000,000", "#### 1000000"),
    # LaTeX and math_verify
    (r"so \boxed{\frac{1}{2}}", r"$\frac{1}{2}$"),
    (r"\boxed{0.5}", r"$\frac{1}{2}$"),
    (r"\boxed{1/2}", r"\boxed{\frac{1}{2}}"),
    (r"\boxed{\sqrt{2}/2}", r"$\frac{\sqrt2}{2}$"),
    (r"\boxed{\frac{\sqrt{2}}{2}}", r"$\sqrt{2}/2$"),
    (r"\boxed{x^{2}+1}", r"$x^2 + 1$"),
    (r"\boxed{x^2+2}", r"$x^2 + 1$"),
    (r"\boxed{12}", "12"),  # a reference without LaTeX: nothing to compare with
    (r"\boxed{12}", r"$\boxed{12}$"),
    ("The answer is 12 dollars", r"$\boxed{12}$"),
    (r"\boxed{1,000}", r"$1000$"),
    (r"\boxed{-3}", r"$-3$"),
    (r"\boxed{3}", r"$-3$"),
    (r"first \boxed{2} then \boxed{3}", r"$3$"),
    (r"\boxed{2} \boxed{3}", r"$2$"),
    (r"\boxed{10\text{ cm}}", r"$10$"),
    (r"\boxed{90^\circ}", r"$90$"),
    (r"\boxed{\frac{3}{4}}", r"$0.75$"),
    (r"\boxed{(1,2)}", r"$(1, 2)$"),
    (r"\boxed{\{1,2\}}", r"$\{1,2\}$"),
    (r"\boxed{\pi}", r"$\pi$"),
    (r"\boxed{3.14159}", r"$\pi$"),
    (r"\boxed{5", r"$5$"),  # an unclosed box
    ("x = 5", r"$5$"),
    (r"$$x = 5$$", r"$5$"),
    ("<think>x</think>\n\n<answer>\\boxed{5}</answer>", r"<answer>$5$</answer>"),
    # "Answer:" lines (direct_math)
    ("Answer: 12", "12"),
    ("work...\nAnswer: $12$ dollars", "12"),
    ("work\nAnswer: 13\nAnswer: 12", "12"),
    ("answer : \\frac12", "\\frac{1}{2}"),
    ("Answer: 1,000", "1000"),
    ("12", "12"),
    ("Answer: \\text{(B)}", "(B)"),
]


# --------------------------------------------------------------------------------------------------- the oracle
def _reward_module() -> types.ModuleType:
    """cosmos-rl's reward.py, imported with a stand-in for its data packer (whose package needs msgpack)."""
    if REWARD_MODULE not in sys.modules:
        oracle_module("cosmos_rl.dispatcher.data.schema")  # leaves cosmos_rl.dispatcher.data's __init__ unrun
        packer = types.ModuleType("cosmos_rl.dispatcher.data.packer")
        packer.BaseDataPacker = type("BaseDataPacker", (), {})  # type: ignore[attr-defined]
        with pytest.MonkeyPatch.context() as mp:
            mp.setitem(sys.modules, packer.__name__, packer)
            return oracle_module(REWARD_MODULE)
    return sys.modules[REWARD_MODULE]


def theirs(name: str) -> Any:
    return getattr(_reward_module(), f"{name}_reward_fn")


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


# ------------------------------------------------------------------------------------------------- rule rewards
def rule_differences(names: Sequence[str] = RULES) -> list[tuple[str, str, str, float, float]]:
    """(reward, completion, reference, ours, theirs) wherever they differ over TABLE."""
    out = []
    for name in names:
        fn = theirs(name)
        for completion, reference in TABLE:
            mine = REWARDS[name](completion, {"reference": reference})
            other = fn(completion, reference)
            if mine != other or type(mine) is not float:
                out.append((name, completion, reference, mine, other))
    return out


def test_the_table_is_varied() -> None:
    assert len(TABLE) >= 60
    # every rule both pays and withholds somewhere in it, so no rule is compared on one value alone
    for name in RULES:
        values = {theirs(name)(c, r) for c, r in TABLE}
        assert len(values) > 1, name


def test_rule_rewards_equal_cosmos_rls() -> None:
    assert rule_differences() == []


def test_a_row_without_a_reference_scores_0_as_there() -> None:
    row = {"messages": [{"role": "user", "content": "Q"}]}  # no reference, no answer turn
    for name in ("single_choice", "gsm8k", "boxed_math"):
        assert REWARDS[name]("#### 12 <answer>B</answer>", row) == theirs(name)("#### 12 <answer>B</answer>", None)
        assert REWARDS[name]("#### 12 <answer>B</answer>", row) == 0.0
    # cosmos-rl's direct_math raises on a missing reference; ours scores it 0 (neither right nor wrong)
    assert REWARDS["direct_math"]("Answer: 12", row) == 0.0


def test_the_reference_of_an_sft_row_is_its_answer_turn() -> None:
    turn = "<think>the car turns</think>\n\n<answer>C</answer>"
    sft_like = {"messages": [{"role": "user", "content": "Q"}, {"role": "assistant", "content": turn}]}
    for completion in ("<answer>C</answer>", "c", "<answer>D</answer>"):
        assert REWARDS["single_choice"](completion, sft_like) == theirs("single_choice")(completion, turn)


def _boxed_rows() -> list[tuple[str, str]]:
    return [(c, r) for c, r in TABLE if "boxed" in c + r or "$" in r][:14]


def test_boxed_math_off_the_main_thread_scores_as_on_it() -> None:
    rows = _boxed_rows()
    expected = [theirs("boxed_math")(c, r) for c, r in rows]  # the main thread: math_verify's alarms work
    assert 0.0 in expected and 1.0 in expected
    with ThreadPoolExecutor(2) as pool:  # the reward service's worker threads
        got = list(pool.map(lambda row: REWARDS["boxed_math"](row[0], {"reference": row[1]}), rows))
    assert got == expected
    # why the child process: in a thread, math_verify refuses to set its alarm and cosmos-rl's own function,
    # catching that, scores every completion 0
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(theirs("boxed_math"), r"\boxed{0.5}", r"$\frac{1}{2}$").result() == 0.0


def test_a_comparison_past_its_deadline_scores_0_and_the_next_one_works(monkeypatch: pytest.MonkeyPatch) -> None:
    # the short deadline only for the stuck comparison: starting a child (importing sympy) may take longer than it on
    # a loaded machine
    monkeypatch.setattr(math_module, "COMPARE_DEADLINE_S", 60.0)
    comparer = math_module._OFF_THREAD
    out: list[Any] = []

    def score() -> None:
        out.append(math_module.boxed_math_reward(r"\boxed{0.5}", r"$\frac{1}{2}$"))  # the child started
        assert comparer._child is not None
        out.append(comparer._child.pid)
        monkeypatch.setattr(math_module, "COMPARE_DEADLINE_S", 0.5)
        start = time.monotonic()
        out.append(math_module.boxed_math_reward(r"\boxed{10^{10^{10^{10}}}}", r"$2$"))  # sympy's work of seconds
        out.append(time.monotonic() - start)
        monkeypatch.setattr(math_module, "COMPARE_DEADLINE_S", 60.0)
        out.append(math_module.boxed_math_reward(r"\boxed{0.5}", r"$\frac{1}{2}$"))
        out.append(comparer._child.pid)

    thread = threading.Thread(target=score)
    thread.start()
    thread.join(timeout=120)
    first, pid, stuck, waited, then, new_pid = out
    assert (first, stuck, then) == (1.0, 0.0, 1.0) and waited < 4.0 and new_pid != pid  # killed, a new one started


# ------------------------------------------------------------------------------------------------------ overlong
MAX_LEN, BUFFER, FACTOR = 40, 16, 0.75


def _their_config(**train_policy: Any) -> Any:
    """cosmos-rl's Config() with these length settings and train_policy keys."""
    cfg = oracle_config()
    cfg.rollout.max_response_length = MAX_LEN
    policy = cfg.train.train_policy
    policy.overlong_reward.buffer_length, policy.overlong_reward.penalty_factor = BUFFER, FACTOR
    for key, value in train_policy.items():
        setattr(policy, key, value)
    return cfg


def _our_config() -> Any:
    overlong = {"buffer_length": BUFFER, "penalty_factor": FACTOR}
    return config_from_dict(
        {
            "rollout": {"max_response_length": MAX_LEN},
            "train": {"train_policy": {"type": "grpo", "overlong_reward": overlong}},
        }
    )


def overlong_differences(tokenizer: Any) -> list[tuple[int, float, float]]:
    """(tokens, ours, theirs) wherever they differ, over texts below, at and past the buffer and the limit."""
    ours_cfg, their_cfg = _our_config(), _their_config()
    score = combine({"overlong": 1.0}, context=RewardContext.from_config(ours_cfg, tokenizer))
    ids = tokenizer.encode("The car turns left at the junction, then stops. " * 12, add_special_tokens=False)
    out, lengths = [], set()
    for n in range(MAX_LEN + 20):
        text = tokenizer.decode(ids[:n])
        tokens = len(tokenizer.encode(text, add_special_tokens=False))
        lengths.add(tokens)
        mine = score(text, {})[1]["overlong"]
        other = theirs("overlong")(text, None, config=their_cfg, tokenizer=tokenizer)
        if mine != other:
            out.append((tokens, mine, other))
    # no penalty, the ramp (its start, the limit) and past the limit
    assert {0, MAX_LEN - BUFFER, MAX_LEN - BUFFER + 1, MAX_LEN, MAX_LEN + 10} <= lengths
    return out


def test_overlong_equals_cosmos_rls(tokenizer: Any) -> None:
    assert overlong_differences(tokenizer) == []


def test_overlong_without_a_context_names_the_key() -> None:
    with pytest.raises(ConfigError, match=r"train.train_policy.reward_function: 'overlong' counts a completion's"):
        combine({"format": 1.0, "overlong": 1.0})
    with pytest.raises(ConfigError, match=r"train.train_policy.filter_reward_metric: 'overlong' counts"):
        combine("format", filter_metrics="overlong")


def test_the_context_loads_its_tokenizer_at_the_first_count(tokenizer: Any) -> None:
    loads: list[int] = []

    def load() -> Any:
        loads.append(1)
        return tokenizer

    context = RewardContext.from_config(_our_config(), load)
    combine("format", context=context)("<answer>B</answer>", {})
    assert loads == []  # no reward counted tokens
    assert combine("overlong", context=context)("word " * 60, {})[1]["overlong"] < 0 and loads == [1]


# --------------------------------------------------------------------------------------------- dynamic sampling
COMPLETIONS = [
    "<think>it moves right</think>\n\n<answer>B</answer>",
    "<think>it moves left</think>\n\n<answer>A</answer>",
    "B",
    "<answer>b</answer> " + "and on " * 30,
    "",
    "<think>x</think><answer>B</answer>",
]
FILTER_CASES: list[tuple[dict[str, float], list[str] | str]] = [
    ({"single_choice": 1.0}, "format"),  # a filter metric reward_function does not name
    ({"single_choice": 2.0, "overlong": 0.5}, ["format", "single_choice"]),  # two: their sum
    ({"single_choice": 1.0, "format": 0.5}, []),  # none: the total
    ({"format": 1.0}, ["overlong", "single_choice"]),
    ({"single_choice": 1.0}, ["format", "format"]),  # listed twice, unweighed: counted twice there
    ({"format": 0.3, "single_choice": 1.0}, ["single_choice", "gsm8k"]),
]


def _their_reward(reward_function: Mapping[str, float], filters: list[str] | str, tokenizer: Any) -> Any:
    cfg = _their_config(reward_function=dict(reward_function), filter_reward_metric=filters)
    return _reward_module().Reward(cfg, tokenizer)


def filter_differences(tokenizer: Any) -> list[tuple[Any, ...]]:
    """(case, totals, filters) of ours and theirs wherever they differ."""
    out = []
    context = RewardContext.from_config(_our_config(), tokenizer)
    for reward_function, filters in FILTER_CASES:
        total_theirs, filter_theirs, _ = _their_reward(reward_function, filters, tokenizer).compute_reward(
            COMPLETIONS, "B"
        )
        rewards = combine(reward_function, context=context, filter_metrics=filters)
        scored = rewards.score_batch(COMPLETIONS, [{"reference": "B"}] * len(COMPLETIONS))
        total_ours = [t for t, _ in scored]
        filter_ours = [rewards.filter_value(t, p) for t, p in scored]
        if (total_ours, filter_ours) != (total_theirs, filter_theirs):
            out.append(((reward_function, filters), total_ours, total_theirs, filter_ours, filter_theirs))
    return out


def test_filter_values_and_totals_equal_cosmos_rls(tokenizer: Any) -> None:
    assert filter_differences(tokenizer) == []


def test_filter_metrics_are_parts_and_unknown_ones_name_the_key() -> None:
    rewards = combine("single_choice", filter_metrics=["format"])
    assert rewards.names == ["single_choice", "format"]
    total, parts = rewards("<think>x</think>\n\n<answer>A</answer>", {"reference": "B"})
    assert (total, parts, rewards.filter_value(total, parts)) == (0.0, {"single_choice": 0.0, "format": 1.0}, 1.0)
    with pytest.raises(ConfigError, match=r"train.train_policy.filter_reward_metric: 'acuracy' is not a registered"):
        combine("single_choice", filter_metrics=["acuracy"])


class _Remote:
    """A stand-in for the reward service's scorer: a 'judge' part of 0.25 per completion."""

    weights = {"judge": 2.0}

    def score_batch(self, completions: Sequence[str], samples: Sequence[Mapping[str, Any]]) -> list[dict[str, float]]:
        return [{"judge": 0.25} for _ in completions]

    def total(self, parts: Mapping[str, float]) -> float:
        return 2.0 * parts["judge"]


def test_a_filter_metric_the_service_scores_counts_from_its_parts() -> None:
    remote = RemoteRewardConfig(
        reward_fns=[RemoteRewardFn(name="judge")], enqueue_url="http://h/e", fetch_url="http://h/f"
    )
    rewards = combine("format", remote=remote, env={}, filter_metrics=["judge", "single_choice"])
    assert rewards.filter_only == ["single_choice"]  # judge is not scored here
    rewards.remote = _Remote()
    [(total, parts)] = rewards.score_batch(["<answer>B</answer>"], [{"reference": "B"}])
    assert parts == {"format": 0.0, "single_choice": 1.0, "judge": 0.25} and total == 0.5
    assert rewards.filter_value(total, parts) == 1.25


# ------------------------------------------------------------------------------------------------------ mutations
def test_mutations_of_ours_are_caught(monkeypatch: pytest.MonkeyPatch, tokenizer: Any) -> None:
    """Each comparison fails when ours is changed on purpose, each change a plausible past or future difference."""
    with monkeypatch.context() as m:  # our old, lenient format under cosmos-rl's name
        m.setitem(REWARDS, "format", REWARDS["format_lenient"])
        assert rule_differences(["format"])
    with monkeypatch.context() as m:  # the last <answer> block instead of the first
        m.setattr(rewards_module, "first_answer_block", lambda t: t.rpartition("<answer>")[2].split("</answer>")[0])
        assert rule_differences(["single_choice"])
    with monkeypatch.context() as m:  # our old single_choice: the letter parser
        m.setitem(REWARDS, "single_choice", REWARDS["choice_letter"])
        assert rule_differences(["single_choice"])
    with monkeypatch.context() as m:  # the last "####" instead of the first
        m.setattr(math_module, "_gsm8k_number", lambda t: [None, *math_module._GSM8K.findall(t)][-1])

        assert rule_differences(["gsm8k"])
    with monkeypatch.context() as m:  # a plain-expression reference read too
        lenient = math_metric(
            gold_extraction_target=(LatexExtractionConfig(), ExprExtractionConfig()),
            pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()),
        )
        m.setattr(math_module, "_COMPARE", lenient)
        assert rule_differences(["boxed_math"])
    with monkeypatch.context() as m:  # no normalisation of "Answer:" lines
        m.setattr(math_module, "normalize_final_answer", str.strip)
        assert rule_differences(["direct_math"])
    with monkeypatch.context() as m:  # the penalty from one token later
        m.setitem(
            CONTEXT_REWARDS, "overlong", lambda c, s, ctx: overlong_reward(c, s, replace(ctx, buffer_length=BUFFER - 1))
        )
        assert overlong_differences(tokenizer)
    with monkeypatch.context() as m:  # the largest filter part instead of their sum
        m.setattr(RewardSet, "filter_value", lambda self, t, p: max([p[n] for n in self.filter_metrics], default=t))
        assert filter_differences(tokenizer)


@pytest.fixture(autouse=True, scope="module")
def _stop_the_comparison_process() -> Iterator[None]:
    yield
    math_module._OFF_THREAD.close()


def test_enable_overlong_penalty_changes_no_reward_there_or_here(tokenizer: Any) -> None:
    """cosmos-rl 0.4.7 never reads train_policy.overlong_reward.enable_overlong_penalty: its Reward scores the same
    with the flag on or off, and so do ours (the rewards a GRPO step builds from the config), which `config check`
    lists as having no effect."""
    from cosmos_train.train.rollout.groups import training_rewards

    reward_function = {"single_choice": 1.0, "format": 0.5}
    theirs = []
    for flag in (False, True):
        cfg = _their_config(reward_function=dict(reward_function))
        cfg.train.train_policy.overlong_reward.enable_overlong_penalty = flag
        theirs.append(_reward_module().Reward(cfg, tokenizer).compute_reward(COMPLETIONS, "B")[0])
    ours = []
    for flag in (False, True):
        raw = {
            "rollout": {"max_response_length": MAX_LEN},
            "train": {
                "train_policy": {
                    "type": "grpo",
                    "reward_function": reward_function,
                    "overlong_reward": {
                        "buffer_length": BUFFER,
                        "penalty_factor": FACTOR,
                        "enable_overlong_penalty": flag,
                    },
                }
            },
        }
        cfg = config_from_dict(raw)
        scored = training_rewards(cfg, tokenizer).score_batch(COMPLETIONS, [{"reference": "B"}] * len(COMPLETIONS))
        ours.append([t for t, _ in scored])
        flagged = [n.key for n in cfg.no_effect]
        assert ("train.train_policy.overlong_reward.enable_overlong_penalty" in flagged) is flag
    assert theirs[0] == theirs[1] == ours[0] == ours[1]
