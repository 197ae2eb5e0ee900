"""Under cosmos-rl's keys, cosmos-rl's rollout shaping: ours run beside cosmos-rl 0.4.7's own code.

- min_filter_prefix_tokens: which completions leave a shared prefix out of the loss, and how many tokens. The
  oracle is cosmos-rl's `LocalRewardCalculator.compute_rewards` (the shared-prefix pass of its reward calculator,
  with `find_maximal_prefix_groups` and its trie), compiled from the installed source, fed the same completions,
  rewards and filter rewards; ours is the real `collect_rollouts` over a scripted engine.
- validation sampling: `validation_sampling(cfg)` against the `val_sampling_params` cosmos-rl's vLLM rollout
  builds from the same keys (its expression, read from the installed source).

Each comparison returns what differs, so the mutation checks at the end show a deliberate change of ours is caught.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from cosmos_train.config import config_from_dict
from cosmos_train.generation import Completion, SamplingParams
from cosmos_train.rewards import REWARDS, combine, register_reward
from cosmos_train.train.rollout import groups as rollout_module
from cosmos_train.train.rollout.groups import Shaping, collect_rollouts, validation_sampling
from tests.cosmos_rl_oracle import oracle_assignment, oracle_config, oracle_function

EOS = 9  # the stop token of these completions; tokens 0-3 are the letters a-d
LETTERS = "abcd"


def _decode(ids: Sequence[int]) -> str:
    return "".join(LETTERS[i] for i in ids if i != EOS)


@pytest.fixture(scope="module")
def scripted_reward() -> Iterator[str]:
    """A reward that reads the completion's score from the row (`scores[text]`): the test sets every reward."""

    def reward(completion: str, sample: Mapping[str, Any]) -> float:
        return float(sample["scores"][completion])

    register_reward("scripted_score")(reward)
    yield "scripted_score"
    REWARDS.pop("scripted_score", None)


class _Engine:
    """Answers each row with the completions it carries (token ids with or without a stop token)."""

    name = "scripted"
    weight_version = 0

    def __init__(self, rows: Sequence[Mapping[str, Any]]):
        self.by_question = {r["messages"][-1]["content"]: r["seqs"] for r in rows}

    def generate(self, requests: Sequence[list[dict]], sampling: SamplingParams) -> list[list[Completion]]:
        out = []
        for chat in requests:
            seqs = self.by_question[chat[-1]["content"]]
            out.append(
                [
                    Completion(_decode(s), list(s), [0.0] * len(s), "stop" if s and s[-1] == EOS else "length")
                    for s in seqs
                ]
            )
        return out


def _group(rng: random.Random, n: int) -> tuple[list[list[int]], list[float]]:
    """n completions over a 4-letter alphabet that share prefixes often (one may be another's whole prefix, two
    may be equal), each ending with the stop token or not; rewards 0 / 1 / 0.5 per distinct text."""
    stems = [[rng.randrange(4) for _ in range(rng.randint(1, 4))] for _ in range(2)]
    seqs = []
    for _ in range(n):
        stem = list(rng.choice(stems))
        tail = [rng.randrange(4) for _ in range(rng.choice([0, 0, 1, 2]))]
        seqs.append(stem + tail + ([EOS] if rng.random() < 0.7 else []))
    texts = {_decode(s) for s in seqs}
    score = {t: rng.choice([0.0, 1.0, 0.5]) for t in texts}
    return seqs, [score[_decode(s)] for s in seqs]


def ours_ignore(seqs: list[list[int]], rewards: list[float], min_tokens: int, reward_name: str) -> list[int]:
    row = {
        "id": "r0",
        "messages": [{"role": "user", "content": "Q0"}],
        "reference": "a",
        "seqs": seqs,
        "scores": {_decode(s): r for s, r in zip(seqs, rewards)},
    }
    got = collect_rollouts(
        _Engine([row]),
        [row],
        combine(reward_name),
        SamplingParams(n=len(seqs)),
        shaping=Shaping(min_filter_prefix_tokens=min_tokens),
    )
    return got.groups[0].ignore_prefix


def theirs_ignore(seqs: list[list[int]], rewards: list[float], min_tokens: int) -> list[int]:
    """cosmos-rl's compute_rewards on one payload of these completions (rollout_as_token_ids: their token ids)."""
    util = SimpleNamespace(
        find_maximal_prefix_groups=oracle_function("cosmos_rl.utils.util", "find_maximal_prefix_groups")
    )
    rollouts = [
        SimpleNamespace(
            completion=_decode(s),
            completion_token_ids=[[t] for t in s],
            reward=r,
            filter_reward=r,  # no filter_reward_metric: the filter reward is the total, as in cosmos-rl
            n_ignore_prefix_tokens=0,
        )
        for s, r in zip(seqs, rewards)
    ]

    class RolloutGroup:  # the payload's rollouts, already scored
        def __init__(self, payload: Any, **_: Any):
            self.payload = payload

        def compute_rollouts(self, algo: Any) -> list[Any]:
            return self.payload.rollouts

    def training_payload(payload: Any, group: Any, rollouts: list[Any], *, valid: bool) -> Any:
        return SimpleNamespace(valid=valid, ignore=[r.n_ignore_prefix_tokens for r in rollouts])

    compute = oracle_function(
        "cosmos_rl.reward.local_calculator",
        "LocalRewardCalculator.compute_rewards",
        RolloutGroup=RolloutGroup,
        util=util,
        _training_payload_from_rollouts=training_payload,
    )
    cfg = oracle_config()
    cfg.train.train_policy.min_filter_prefix_tokens = min_tokens
    cfg.train.train_policy.rollout_as_token_ids = True
    tokenizer = SimpleNamespace(eos_token_id=EOS, decode=_decode)
    this = SimpleNamespace(config=cfg, tokenizer=tokenizer, rl_algo=None)
    payload = SimpleNamespace(prompt_idx=0, reference_answer="a", rollouts=rollouts)
    out, _, _ = compute(this, [payload], False, 0)
    return out[0].ignore if out[0].valid else [0] * len(seqs)


def prefix_cases(count: int, seed: int = 0) -> list[tuple[list[list[int]], list[float], int]]:
    rng = random.Random(seed)
    return [(*_group(rng, rng.randint(2, 6)), rng.randint(1, 3)) for _ in range(count)]


def prefix_differences(reward_name: str, count: int = 150) -> list[tuple[Any, ...]]:
    """The cases where ours and cosmos-rl's leave different prefixes out."""
    out = []
    for seqs, rewards, n in prefix_cases(count):
        ours, theirs = ours_ignore(seqs, rewards, n, reward_name), theirs_ignore(seqs, rewards, n)
        if ours != theirs:
            out.append((seqs, rewards, n, ours, theirs))
    return out


def test_prefix_filtering_equals_cosmos_rl(scripted_reward: str) -> None:
    theirs = [theirs_ignore(s, r, n) for s, r, n in prefix_cases(150)]
    masked = sum(any(t) for t in theirs)
    partly = sum(any(t) and 0 in t for t in theirs)  # some completions masked, others (all prefix, or apart) not
    assert masked >= 30 and partly >= 20  # the cases reach both sides of the rule
    assert prefix_differences(scripted_reward) == []


def test_a_completion_that_is_the_whole_prefix_keeps_its_tokens(scripted_reward: str) -> None:
    """The case found different before: "ab" + stop is all of "abc"'s shared prefix; their rewards differ."""
    seqs, rewards = [[0, 1, EOS], [0, 1, 2, EOS]], [1.0, 0.0]
    assert theirs_ignore(seqs, rewards, 1) == [0, 2]
    assert ours_ignore(seqs, rewards, 1, scripted_reward) == [0, 2]


# ------------------------------------------------------------------------------------ validation sampling
VALIDATION_CASES: list[dict[str, dict[str, Any]]] = [
    {},
    {"rollout": {"sampling_config": {"top_p": 0.7}}},  # validation.top_p unset: the rollout's
    {"rollout": {"sampling_config": {"top_p": 0.7}}, "validation": {"top_p": 0.9}},
    {"validation": {"temperature": 0.6, "top_k": -1, "n_generation": 3, "repetition_penalty": 1.1}},
    {"validation": {"max_response_length": 17}, "rollout": {"max_response_length": 33}},
    {"rollout": {"max_response_length": 33, "sampling_config": {"top_p": 0.5, "top_k": 7}}},
]


def _theirs_validation(case: dict[str, dict[str, Any]]) -> dict[str, Any]:
    cfg = oracle_config()
    for section, keys in case.items():
        for key, value in keys.items():
            if key == "sampling_config":
                for k, v in value.items():
                    setattr(cfg.rollout.sampling_config, k, v)
            else:
                setattr(getattr(cfg, section), key, value)
    made = oracle_assignment(
        "cosmos_rl.rollout.vllm_rollout.vllm_rollout",
        "self.val_sampling_params",
        self=SimpleNamespace(config=cfg, eos_token_ids=[EOS]),
        SamplingParams=dict,
    )
    return {k: made[k] for k in ("n", "top_p", "top_k", "temperature", "repetition_penalty", "max_tokens")}


def _ours_validation(case: dict[str, dict[str, Any]]) -> dict[str, Any]:
    cfg = config_from_dict({"train": {"train_policy": {"type": "grpo"}}, **case})
    s = validation_sampling(cfg, seed=0)
    return {
        "n": s.n,
        "top_p": s.top_p,
        "top_k": s.top_k,
        "temperature": s.temperature,
        "repetition_penalty": s.repetition_penalty,
        "max_tokens": s.max_new_tokens,
    }


def validation_differences() -> list[tuple[Any, ...]]:
    out = []
    for case in VALIDATION_CASES:
        ours, theirs = _ours_validation(case), _theirs_validation(case)
        if ours != theirs:
            out.append((case, ours, theirs))
    return out


def test_validation_sampling_equals_cosmos_rl() -> None:
    assert validation_differences() == []


# ------------------------------------------------------------------------------------------------ mutations
def test_mutations_of_ours_are_caught(scripted_reward: str) -> None:
    """The rule before this issue (a completion that is all prefix but for its stop token trains on the stop token
    alone) and a validation top_p of 1.0 when unset: both are caught."""
    original = rollout_module.shared_prefix_ignore

    def stop_blind(seqs: Any, rewards: Any, min_tokens: int, stopped: Any = None) -> list[int]:
        return original(seqs, rewards, min_tokens, None)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(rollout_module, "shared_prefix_ignore", stop_blind)
        assert prefix_differences(scripted_reward, 60)
    real = rollout_module.validation_sampling

    def fixed_top_p(cfg: Any, seed: int) -> SamplingParams:
        s = real(cfg, seed)
        return s if cfg.validation.top_p is not None else SamplingParams(**{**vars(s), "top_p": 1.0})

    with pytest.MonkeyPatch.context() as m:
        m.setattr(sys.modules[__name__], "validation_sampling", fixed_top_p)
        assert validation_differences()
