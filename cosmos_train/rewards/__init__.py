"""Reward functions for RL: a registry of plain functions and their weighted combination.

    from cosmos_train.rewards import combine
    score = combine(["format", "single_choice"])          # or {"format": 0.2, "single_choice": 1.0}
    total, parts = score(completion_text, sample)        # parts: {"format": 1.0, "single_choice": 0.0}

A reward is `fn(completion: str, sample: dict) -> float`, where the sample is the RL row the
completion answers (its `reference`, `options` and messages; `cosmos_train.data.prompt.
reference_answer(sample)` reads the reference). Built-ins (reference semantics in
docs/FACTS.md, answers read with the evaluation's parser so a reward and a benchmark
score the same text alike):
- format: 1 when the whole completion is <think>...</think> then <answer>...</answer>, else 0;
- single_choice: 1 when the option letter read from the completion is the reference letter;
- exact_match: 1 when the <answer> content (else the text after the reasoning) equals the
  reference, ignoring case, punctuation and spacing;
- boxed_math, gsm8k, direct_math: cosmos-rl's math rewards of its text recipes (`cosmos_train.rewards.math`:
  the last \\boxed{} or number, GSM8K's "#### N", an "Answer: ..." line).
`register_reward(name)` adds one; a dataset script's REWARD_FUNCTIONS (`fn(completion, reference,
sample)`) go in through `register_script_rewards(path)`.

Scoring a batch goes through `RewardSet.score_batch(completions, samples)`: local rewards map over
it; the remote reward service plugs in there as a batch scorer (`remote.RemoteScorer`, built by
`combine(spec, remote=cfg.train.train_policy.remote_reward)` when use_remote_reward is set): its parts,
weighted, summed and clipped to [reward_clip_min, reward_clip_max], times scale, add to the local total.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from cosmos_train.data.prompt import reference_answer
from cosmos_train.data.sources.script import script_reward_functions
from cosmos_train.errors import ConfigError
from cosmos_train.rewards.math import boxed_math_reward, direct_math_reward, gsm8k_reward
from cosmos_train.rewards.parsing import freeform_equal, parse_freeform, parse_letter
from cosmos_train.rewards.remote import RemoteScorer

RewardFn = Callable[[str, Mapping[str, Any]], float]
REWARDS: dict[str, RewardFn] = {}
# Rewards that are 1 for a right answer and 0 for a wrong one, so their mean over answers is an accuracy: the
# trainer logs it as "accuracy" and validation keeps the best weights by it. A format reward, a weighted mix or
# a +1 / -1 rule (direct_math) is no accuracy; a dataset script's reward is not one either (its values are its own).
ACCURACY_REWARDS: set[str] = set()
WHERE = "train.train_policy.reward_function"
_FORMAT = re.compile(r"\s*<think>.*?</think>\s*<answer>.*?</answer>\s*", re.DOTALL)
LETTERS = "ABCDEFGHIJ"


def register_reward(name: str, *, accuracy: bool = False) -> Callable[[RewardFn], RewardFn]:
    """Register `fn(completion, sample) -> float` as `name` (replacing one of that name); `accuracy`: it is 1 for a
    right answer and 0 otherwise (ACCURACY_REWARDS)."""

    def deco(fn: RewardFn) -> RewardFn:
        REWARDS[name] = fn
        if accuracy:
            ACCURACY_REWARDS.add(name)
        else:
            ACCURACY_REWARDS.discard(name)
        return fn

    return deco


@register_reward("format")
def format_reward(completion: str, sample: Mapping[str, Any]) -> float:
    return 1.0 if _FORMAT.fullmatch(completion) else 0.0


def _options(sample: Mapping[str, Any], reference: str) -> dict[str, str]:
    options = sample.get("options")
    if isinstance(options, Mapping) and options:
        return {str(k): str(v) for k, v in options.items()}
    # A row that kept only its letter: the letters up to the reference's, with no option text.
    last = max(LETTERS.index(reference) if reference in LETTERS else 3, 3)
    return dict.fromkeys(LETTERS[: last + 1], "")


@register_reward("single_choice", accuracy=True)
def single_choice_reward(completion: str, sample: Mapping[str, Any]) -> float:
    reference = (reference_answer(sample) or "").strip().upper()
    if not reference:
        return 0.0
    answer = parse_letter(completion, _options(sample, reference)).answer
    return 1.0 if answer is not None and answer.strip().upper() == reference else 0.0


@register_reward("exact_match", accuracy=True)
def exact_match_reward(completion: str, sample: Mapping[str, Any]) -> float:
    reference = reference_answer(sample)
    if reference is None:
        return 0.0
    return 1.0 if freeform_equal(parse_freeform(completion, {}).answer, reference) else 0.0


def _math(rule: Callable[[str, str], float]) -> RewardFn:
    """A `cosmos_train.rewards.math` rule as a reward of the row's reference (0 for a row without one)."""

    def reward(completion: str, sample: Mapping[str, Any]) -> float:
        reference = reference_answer(sample)
        return 0.0 if reference is None else rule(completion, reference)

    return reward


register_reward("boxed_math", accuracy=True)(_math(boxed_math_reward))
register_reward("gsm8k", accuracy=True)(_math(gsm8k_reward))
register_reward("direct_math")(_math(direct_math_reward))


def _script_reward(fn: Callable[..., float]) -> RewardFn:
    """A dataset script's `fn(completion, reference, sample)` as a reward of (completion, sample)."""

    def reward(completion: str, sample: Mapping[str, Any]) -> float:
        return float(fn(completion, reference_answer(sample), sample))

    return reward


def register_script_rewards(path: str | Path) -> list[str]:
    """Register a dataset script's REWARD_FUNCTIONS (`fn(completion, reference, sample) -> float`);
    returns their names. A script's name replaces a built-in of the same name, as the script asks."""
    names = []
    for name, fn in script_reward_functions(path).items():
        register_reward(name)(_script_reward(fn))
        names.append(name)
    return names


def accuracy_reward(names: Iterable[str]) -> str | None:
    """The first of a reward set's names (`RewardSet.names`) whose mean is an accuracy (ACCURACY_REWARDS), if any."""
    return next((name for name in names if name in ACCURACY_REWARDS), None)


def weights_of(spec: str | Sequence[str] | Mapping[str, float]) -> dict[str, float]:
    """The TOML's reward_function (a name, a list of names, or {name = weight}) as {name: weight}."""
    if isinstance(spec, str):
        return {spec: 1.0}
    if isinstance(spec, Mapping):
        return {str(k): float(v) for k, v in spec.items()}
    return dict.fromkeys(spec, 1.0)


class BatchScorer(Protocol):
    """Rewards scored a batch at a time (the remote reward service): parts per completion, what they add to
    the total, and the weight each part counts for in it."""

    @property
    def weights(self) -> dict[str, float]: ...

    def score_batch(
        self, completions: Sequence[str], samples: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, float]]: ...

    def total(self, parts: Mapping[str, float]) -> float: ...


@dataclass
class RewardSet:
    """Weighted rewards: total = sum(weight * reward) per completion, with each part kept for logging.
    `remote` adds a batch scorer's parts with its own weights."""

    weights: dict[str, float]
    remote: BatchScorer | None = None

    @property
    def names(self) -> list[str]:
        """Every part a completion's score has: the local rewards', then the remote ones'."""
        return list(self.weights) + (list(self.remote.weights) if self.remote is not None else [])

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> tuple[float, dict[str, float]]:
        if self.remote is not None:
            return self.score_batch([completion], [sample])[0]
        return self._local(completion, sample)

    def _local(self, completion: str, sample: Mapping[str, Any]) -> tuple[float, dict[str, float]]:
        parts = {name: float(REWARDS[name](completion, sample)) for name in self.weights}
        return sum(self.weights[n] * v for n, v in parts.items()), parts

    def score_batch(
        self, completions: Sequence[str], samples: Sequence[Mapping[str, Any]]
    ) -> list[tuple[float, dict[str, float]]]:
        """One (total, parts) per completion; samples[i] is the row completions[i] answers."""
        if len(completions) != len(samples):
            raise ValueError(f"{len(completions)} completions for {len(samples)} samples")
        local = [self._local(c, s) for c, s in zip(completions, samples)]
        if self.remote is None:
            return local
        out = []
        for (total, parts), remote_parts in zip(local, self.remote.score_batch(completions, samples)):
            total += self.remote.total(remote_parts)
            out.append((total, {**parts, **remote_parts}))
        return out


def combine(
    spec: str | Sequence[str] | Mapping[str, float], remote: Any = None, env: Mapping[str, str] | None = None
) -> RewardSet:
    """The rewards `spec` names, weighted; ConfigError naming the unknown ones and the known names.
    `remote`: a `config.RemoteRewardConfig` whose rewards the service scores alongside (URLs and token
    from it or the environment `env`)."""
    weights = weights_of(spec)
    if remote is not None:
        clash = sorted(set(weights) & {f.name for f in remote.reward_fns})
        if clash:
            raise ConfigError(
                [
                    f"{WHERE}: {', '.join(clash)} is both a local reward and a remote_reward.reward_fns "
                    "name; score it in one place"
                ]
            )
        return RewardSet(_known(weights), RemoteScorer.from_config(remote, os.environ if env is None else env))
    if not weights:
        raise ConfigError([f"{WHERE}: names no reward; known: {', '.join(sorted(REWARDS))}"])
    return RewardSet(_known(weights))


def _known(weights: dict[str, float]) -> dict[str, float]:
    unknown = [n for n in weights if n not in REWARDS]
    if unknown:
        raise ConfigError(
            [
                f"{WHERE}: {n!r} is not a registered reward; known: {', '.join(sorted(REWARDS))} "
                "(a dataset script adds its own through REWARD_FUNCTIONS)"
                for n in unknown
            ]
        )
    return weights


__all__ = [
    "ACCURACY_REWARDS",
    "REWARDS",
    "accuracy_reward",
    "RewardFn",
    "RewardSet",
    "combine",
    "register_reward",
    "register_script_rewards",
    "weights_of",
]
