"""Reward functions for RL: a registry of plain functions and their weighted combination.

    from cosmos_train.rewards import combine
    score = combine(["format", "single_choice"])          # or {"format": 0.2, "single_choice": 1.0}
    total, parts = score(completion_text, sample)        # parts: {"format": 1.0, "single_choice": 0.0}

A reward is `fn(completion: str, sample: dict) -> float`, where the sample is the RL row the
completion answers (its `reference`, `options` and messages; `cosmos_train.data.prompt.
reference_answer(sample)` reads the reference; a row without one scores 0). cosmos-rl 0.4.7's rewards, under its
names and with its meaning (`cosmos_rl/dispatcher/algo/reward.py`; tests/unit/test_cosmos_rl_rewards.py runs them
beside cosmos-rl's own functions):
- format: 1 when the whole completion is exactly "<think>...</think>\\n\\n<answer>...</answer>" (no <think> or
  </think> inside the reasoning, nothing before, nothing after but one final newline), else 0;
- single_choice: 1 when the content of the completion's first <answer>...</answer> (else the whole completion),
  stripped, equals the reference's (its first <answer> content, else the whole reference, stripped), ignoring case;
- boxed_math, gsm8k, direct_math: cosmos-rl's math rewards of its text recipes (`cosmos_train.rewards.math`:
  math_verify's comparison, GSM8K's "#### N", an "Answer: ..." line);
- overlong: DAPO's soft length penalty, min(0, -(tokens - (max_response_length - buffer_length)) / buffer_length
  x penalty_factor), the completion's tokens counted with the policy's tokenizer; it needs a `RewardContext`
  (`combine(..., context=RewardContext.from_config(cfg, tokenizer))`; the settings are
  train.train_policy.overlong_reward and rollout.max_response_length).
Ours, off unless reward_function names them:
- choice_letter: 1 when the option letter read from the completion is the reference letter, read as the evaluation
  reads it (`parsing.parse_letter`: "B. The car", "The answer is B", "(B)", an option's text, a full-width letter);
- format_lenient: `format` that allows whitespace around and between the two blocks (one newline, none, spaces);
- exact_match: 1 when the <answer> content (else the text after the reasoning) equals the reference, ignoring
  case, punctuation and spacing.
`register_reward(name)` adds one; a dataset script's REWARD_FUNCTIONS (`fn(completion, reference,
sample)`) go in through `register_script_rewards(path)`.

Dynamic sampling (DAPO) reads a completion's filter value, `RewardSet.filter_value(total, parts)`: the sum of its
train.train_policy.filter_reward_metric parts (`combine(..., filter_metrics=names)`: a name reward_function does
not weigh is scored too, weight 0 in the total), else its total, as cosmos-rl's `Reward.compute_reward`.

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

from cosmos_train.config import Config, GRPOPolicyConfig
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
FILTER_WHERE = "train.train_policy.filter_reward_metric"
_LENIENT_FORMAT = re.compile(r"\s*<think>.*?</think>\s*<answer>.*?</answer>\s*", re.DOTALL)
LETTERS = "ABCDEFGHIJ"


@dataclass(frozen=True)
class RewardContext:
    """What a reward needs beyond (completion, sample), from the run: the policy's token count of a text and the
    length settings of the `overlong` reward."""

    count_tokens: Callable[[str], int]
    max_response_length: int  # rollout.max_response_length
    buffer_length: int  # train.train_policy.overlong_reward.buffer_length
    penalty_factor: float  # train.train_policy.overlong_reward.penalty_factor

    @classmethod
    def from_config(cls, cfg: Config, tokenizer: Any) -> RewardContext:
        """The context of a GRPO job. `tokenizer`: the policy's (anything with `encode(text,
        add_special_tokens=...)`), or a function of no arguments that loads it, called at the first count (so a
        run whose rewards count no tokens never loads one)."""
        policy = cfg.train.train_policy
        if not isinstance(policy, GRPOPolicyConfig):
            raise ConfigError([f'{WHERE}: rewards are scored in a GRPO job (train.train_policy.type = "grpo")'])
        ol = policy.overlong_reward
        return cls(_token_counter(tokenizer), cfg.rollout.max_response_length, ol.buffer_length, ol.penalty_factor)


def _token_counter(tokenizer: Any) -> Callable[[str], int]:
    loaded: list[Any] = [tokenizer] if hasattr(tokenizer, "encode") else []

    def count(text: str) -> int:
        if not loaded:
            loaded.append(tokenizer())
        # the completion's own tokens: cosmos-rl encodes its text without the template's special tokens
        return len(loaded[0].encode(text, add_special_tokens=False))

    return count


ContextRewardFn = Callable[[str, Mapping[str, Any], RewardContext], float]
# Rewards that also read the run's RewardContext: fn(completion, sample, context) -> float.
CONTEXT_REWARDS: dict[str, ContextRewardFn] = {}


def register_reward(name: str, *, accuracy: bool = False) -> Callable[[RewardFn], RewardFn]:
    """Register `fn(completion, sample) -> float` as `name` (replacing one of that name); `accuracy`: it is 1 for a
    right answer and 0 otherwise (ACCURACY_REWARDS)."""

    def deco(fn: RewardFn) -> RewardFn:
        REWARDS[name] = fn
        CONTEXT_REWARDS.pop(name, None)
        if accuracy:
            ACCURACY_REWARDS.add(name)
        else:
            ACCURACY_REWARDS.discard(name)
        return fn

    return deco


def known_rewards() -> list[str]:
    """Every registered reward name, sorted."""
    return sorted({*REWARDS, *CONTEXT_REWARDS})


@register_reward("format")
def format_reward(completion: str, sample: Mapping[str, Any]) -> float:
    """cosmos-rl's format: "<think>R</think>\n\n<answer>A</answer>" and nothing else (one final newline aside), R
    holding no <think> or </think> tag."""
    text = completion[:-1] if completion.endswith("\n") else completion  # its pattern's `$` allows one final newline
    if not text.startswith("<think>"):
        return 0.0
    close = text.find("</think>", len("<think>"))
    if close < 0 or "<think>" in text[len("<think>") : close]:
        return 0.0
    # the reasoning ends at its first </think>; the answer block runs from right after it to the very end
    rest = text[close + len("</think>") :]
    if not rest.startswith("\n\n<answer>"):
        return 0.0
    return 1.0 if rest[len("\n\n<answer>") :].endswith("</answer>") else 0.0


@register_reward("format_lenient")
def lenient_format_reward(completion: str, sample: Mapping[str, Any]) -> float:
    """Ours: a <think> block then an <answer> block, whitespace allowed around and between them."""
    return 1.0 if _LENIENT_FORMAT.fullmatch(completion) else 0.0


def first_answer_block(text: str) -> str:
    """The content of the first <answer>...</answer> (the first <answer> that a </answer> follows), else the whole
    text; stripped."""
    start = text.find("<answer>")
    end = text.find("</answer>", start + len("<answer>")) if start >= 0 else -1
    return (text[start + len("<answer>") : end] if end >= 0 else text).strip()


@register_reward("single_choice", accuracy=True)
def single_choice_reward(completion: str, sample: Mapping[str, Any]) -> float:
    reference = reference_answer(sample)
    if reference is None:
        return 0.0
    return 1.0 if first_answer_block(completion).lower() == first_answer_block(reference).lower() else 0.0


def _options(sample: Mapping[str, Any], reference: str) -> dict[str, str]:
    options = sample.get("options")
    if isinstance(options, Mapping) and options:
        return {str(k): str(v) for k, v in options.items()}
    # A row that kept only its letter: the letters up to the reference's, with no option text.
    last = max(LETTERS.index(reference) if reference in LETTERS else 3, 3)
    return dict.fromkeys(LETTERS[: last + 1], "")


@register_reward("choice_letter", accuracy=True)
def choice_letter_reward(completion: str, sample: Mapping[str, Any]) -> float:
    """Ours: the option letter the evaluation's parser reads from the completion is the reference letter."""
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


def overlong_reward(completion: str, sample: Mapping[str, Any], context: RewardContext) -> float:
    """cosmos-rl's overlong (DAPO): 0 up to max_response_length - buffer_length tokens, then falling linearly by
    penalty_factor per buffer_length tokens (-penalty_factor at max_response_length)."""
    expected = context.max_response_length - context.buffer_length
    exceed = context.count_tokens(completion) - expected
    return float(min(-exceed / context.buffer_length * context.penalty_factor, 0.0))


CONTEXT_REWARDS["overlong"] = overlong_reward


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
    `remote` adds a batch scorer's parts with its own weights; `context` is what the `overlong` reward reads;
    `filter_metrics` the parts whose sum is a completion's filter value (`filter_value`), each scored even
    when no weight names it (weight 0 in the total)."""

    weights: dict[str, float]
    remote: BatchScorer | None = None
    context: RewardContext | None = None
    filter_metrics: tuple[str, ...] = ()

    @property
    def filter_only(self) -> list[str]:
        """Local rewards scored for the filter alone: filter metrics neither weighed here nor scored remotely."""
        remote = self.remote.weights if self.remote is not None else {}
        return list(dict.fromkeys(n for n in self.filter_metrics if n not in self.weights and n not in remote))

    @property
    def names(self) -> list[str]:
        """Every part a completion's score has: the local rewards', the remote ones', then the filter's own."""
        remote = list(self.remote.weights) if self.remote is not None else []
        return list(self.weights) + remote + self.filter_only

    def __call__(self, completion: str, sample: Mapping[str, Any]) -> tuple[float, dict[str, float]]:
        if self.remote is not None:
            return self.score_batch([completion], [sample])[0]
        return self._local(completion, sample)

    def _part(self, name: str, completion: str, sample: Mapping[str, Any]) -> float:
        if name in CONTEXT_REWARDS:
            assert self.context is not None, "combine() refuses a context reward without a context"
            return float(CONTEXT_REWARDS[name](completion, sample, self.context))
        return float(REWARDS[name](completion, sample))

    def _local(self, completion: str, sample: Mapping[str, Any]) -> tuple[float, dict[str, float]]:
        parts = {name: self._part(name, completion, sample) for name in [*self.weights, *self.filter_only]}
        return sum(self.weights[n] * parts[n] for n in self.weights), parts

    def filter_value(self, total: float, parts: Mapping[str, float]) -> float:
        """What dynamic sampling compares across a group, for one completion's (total, parts): the sum of its
        filter metrics' parts (each counted with weight 1, as cosmos-rl counts a plain name), else the total."""
        if not self.filter_metrics:
            return total
        # cosmos-rl's order of summation: the weighed rewards' in reward_function's order, then the others in the
        # filter's (a name listed twice that reward_function does not weigh counts twice, as there)
        order = [n for n in self.weights if n in self.filter_metrics]
        order += [n for n in self.filter_metrics if n not in self.weights]
        return sum(parts[n] for n in order)

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
    spec: str | Sequence[str] | Mapping[str, float],
    remote: Any = None,
    env: Mapping[str, str] | None = None,
    *,
    context: RewardContext | None = None,
    filter_metrics: str | Sequence[str] = (),
) -> RewardSet:
    """The rewards `spec` names, weighted; ConfigError naming the unknown ones and the known names.
    `remote`: a `config.RemoteRewardConfig` whose rewards the service scores alongside (URLs and token
    from it or the environment `env`). `context`: what `overlong` reads (ConfigError when it is named without
    one). `filter_metrics`: train.train_policy.filter_reward_metric (a name or a list; `RewardSet.filter_value`)."""
    weights = weights_of(spec)
    filters = (filter_metrics,) if isinstance(filter_metrics, str) else tuple(filter_metrics)
    remote_names = {f.name for f in remote.reward_fns} if remote is not None else set()
    if remote is not None:
        clash = sorted(set(weights) & remote_names)
        if clash:
            raise ConfigError(
                [
                    f"{WHERE}: {', '.join(clash)} is both a local reward and a remote_reward.reward_fns "
                    "name; score it in one place"
                ]
            )
    elif not weights:
        raise ConfigError([f"{WHERE}: names no reward; known: {', '.join(known_rewards())}"])
    _known(weights)
    _known_filters(filters, remote_names)
    local = [*weights, *(n for n in filters if n not in remote_names)]
    needing = sorted({n for n in local if n in CONTEXT_REWARDS})
    if needing and context is None:
        raise ConfigError(
            [
                f"{WHERE if n in weights else FILTER_WHERE}: {n!r} counts a completion's tokens with the policy's "
                "tokenizer, which was not given here (combine(..., context=RewardContext.from_config(cfg, "
                "tokenizer))); GRPO training and filter-rl-data give it: elsewhere leave it out"
                for n in needing
            ]
        )
    scorer = RemoteScorer.from_config(remote, os.environ if env is None else env) if remote is not None else None
    return RewardSet(weights, scorer, context, filters)


def _known(weights: dict[str, float]) -> dict[str, float]:
    known = {*REWARDS, *CONTEXT_REWARDS}
    unknown = [n for n in weights if n not in known]
    if unknown:
        raise ConfigError(
            [
                f"{WHERE}: {n!r} is not a registered reward; known: {', '.join(known_rewards())} "
                "(a dataset script adds its own through REWARD_FUNCTIONS)"
                for n in unknown
            ]
        )
    return weights


def _known_filters(filters: Sequence[str], remote_names: set[str]) -> None:
    known = {*REWARDS, *CONTEXT_REWARDS, *remote_names}
    unknown = list(dict.fromkeys(n for n in filters if n not in known))
    if unknown:
        raise ConfigError(
            [
                f"{FILTER_WHERE}: {n!r} is not a registered reward (nor a remote_reward.reward_fns name); known: "
                f"{', '.join(sorted(known))}"
                for n in unknown
            ]
        )


__all__ = [
    "ACCURACY_REWARDS",
    "CONTEXT_REWARDS",
    "REWARDS",
    "accuracy_reward",
    "known_rewards",
    "RewardContext",
    "RewardFn",
    "RewardSet",
    "combine",
    "register_reward",
    "register_script_rewards",
    "weights_of",
]
