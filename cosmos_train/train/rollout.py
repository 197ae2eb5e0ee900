"""One synchronous GRPO rollout: RL rows in, scored groups of completions with advantages out.

    rollout = collect_rollouts(engine, rows, combine(["single_choice"]), SamplingParams(n=8, temperature=1.0))
    rollout.groups[0].completions[3].token_ids, rollout.groups[0].advantages[3]

Each row's prompt is `cosmos_train.data.prompt.prompt_messages` (the one prompt builder: the ids
SFT trains after and evaluation asks); the engine gives `n` completions per row; the reward set
scores each against the row (its `reference` / `options`); advantages are group-normalised
(`rl_losses.group_advantages`). A DAPO soft overlong penalty is added to the reward when set.

Advantages are clipped to [advantage_low, advantage_high] with clip_advantages (cosmos-rl's language-model
GRPO does not clip). With min_filter_prefix_tokens, completions of a
group that share a longest common prefix of at least that many tokens but got different rewards leave the
prefix out of the loss (`shared_prefix_ignore`), as cosmos-rl does: the reward cannot tell whether the
shared tokens were good.

Dynamic sampling (DAPO): a group whose rewards (or `filter_reward_metric` parts) are all equal carries no
signal. With `refill`, such
groups are dropped and more rows are asked for, up to `max_refill_rounds`, until the batch holds as
many informative groups as rows were given; what could not be refilled is reported, never hidden.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from cosmos_train.data.prompt import prompt_messages
from cosmos_train.generation import Completion, GenerationEngine, SamplingParams
from cosmos_train.rewards import RewardSet
from cosmos_train.train.rl_losses import AdvantageStd, group_advantages, overlong_penalty


@dataclass
class Overlong:
    """DAPO's soft overlong penalty: the last `buffer_length` tokens before `max_length` cost up to
    `penalty_factor` (train_policy.overlong_reward)."""

    max_length: int
    buffer_length: int
    penalty_factor: float = 1.0


@dataclass
class Group:
    """The n completions of one row, their rewards (with parts) and advantages."""

    row: Mapping[str, Any]
    completions: list[Completion]
    rewards: list[float]
    parts: list[dict[str, float]]
    advantages: list[float]
    ignore_prefix: list[int] = field(default_factory=list)  # leading tokens per completion left out of the loss
    filter_metric: tuple[str, ...] = ()  # parts whose equality marks a group without signal (empty: the total)

    @property
    def zero_std(self) -> bool:
        if self.filter_metric:
            values = [tuple(p.get(k, 0.0) for k in self.filter_metric) for p in self.parts]
            return len(set(values)) == 1
        return max(self.rewards) == min(self.rewards)


def shared_prefix_ignore(seqs: Sequence[Sequence[int]], rewards: Sequence[float], min_tokens: int) -> list[int]:
    """Per completion, how many leading tokens to leave out of the loss: completions that share a maximal
    common prefix of >= min_tokens tokens (no longer prefix is shared by two of them) and whose rewards
    differ ignore that prefix; a completion that is all prefix keeps its tokens (else it would carry none)."""
    ignore = [0] * len(seqs)
    stack: list[tuple[list[int], int]] = [(list(range(len(seqs))), 0)]  # (completions sharing a prefix, its length)
    while stack:
        members, depth = stack.pop()
        branches: dict[int, list[int]] = {}
        for i in members:
            if len(seqs[i]) > depth:
                branches.setdefault(seqs[i][depth], []).append(i)
        deeper = [b for b in branches.values() if len(b) > 1]
        stack += [(b, depth + 1) for b in deeper]
        if depth >= min_tokens and not deeper and len({rewards[i] for i in members}) > 1:
            for i in members:
                if len(seqs[i]) > depth:
                    ignore[i] = depth
    return ignore


@dataclass
class Rollout:
    """What one rollout step produced, and what to log about it."""

    groups: list[Group]
    dropped_zero_std: int = 0  # groups left out by dynamic sampling
    refill_rounds: int = 0
    stats: dict[str, float] = field(default_factory=dict)
    dropped: list[Group] = field(default_factory=list)  # those groups, for what may still need an input


@dataclass(frozen=True)
class Shaping:
    """How a group's rewards become its advantages and loss masks (train_policy keys)."""

    scale_by_std: bool = True
    std: AdvantageStd = "population"
    overlong: Overlong | None = None
    advantage_clip: tuple[float, float] | None = None
    min_filter_prefix_tokens: int | None = None
    filter_reward_metric: tuple[str, ...] = ()


def _score(
    engine: GenerationEngine, rows: Sequence[Mapping[str, Any]], rewards: RewardSet, sampling: SamplingParams,
    system_prompt: str | None, shaping: Shaping,
) -> list[Group]:
    if not rows:
        return []
    prompts = [prompt_messages(r["messages"], system_prompt, origin=str(r.get("id", ""))) for r in rows]
    answers = engine.generate(prompts, sampling)
    # one scoring call for the whole batch: a remote scorer sends it in few requests, not one per group
    flat = rewards.score_batch([c.text for group in answers for c in group],
                               [row for row, group in zip(rows, answers) for _ in group])
    groups = []
    start = 0
    for row, completions in zip(rows, answers):
        scored = flat[start:start + len(completions)]
        start += len(completions)
        totals = [t for t, _ in scored]
        overlong = shaping.overlong
        if overlong is not None:
            lengths = torch.tensor([len(c.token_ids) for c in completions])
            penalty = overlong_penalty(lengths, overlong.max_length, overlong.buffer_length, overlong.penalty_factor)
            totals = [t + float(p) for t, p in zip(totals, penalty)]
        adv = group_advantages(torch.tensor(totals), len(completions), scale_by_std=shaping.scale_by_std,
                               std=shaping.std)
        if shaping.advantage_clip is not None:
            adv = adv.clamp(*shaping.advantage_clip)
        ignore = ([0] * len(completions) if shaping.min_filter_prefix_tokens is None else
                  shared_prefix_ignore([c.token_ids for c in completions], totals, shaping.min_filter_prefix_tokens))
        groups.append(Group(row, completions, totals, [p for _, p in scored], adv.tolist(), ignore,
                            shaping.filter_reward_metric))
    return groups


def collect_rollouts(
    engine: GenerationEngine,
    rows: Sequence[Mapping[str, Any]],
    rewards: RewardSet,
    sampling: SamplingParams,
    *,
    system_prompt: str | None = None,
    scale_by_std: bool = True,
    overlong: Overlong | None = None,
    shaping: Shaping | None = None,
    refill: Callable[[int], Sequence[Mapping[str, Any]]] | None = None,
    max_refill_rounds: int = 0,
    any_rank_needs: Callable[[bool], bool] | None = None,
) -> Rollout:
    """Generate, score and normalise one batch (module docstring). refill(k) returns up to k more rows.

    any_rank_needs(this rank needs more) -> whether any rank does: for an engine whose ranks must call
    `generate` together (vLLM under torchrun), every rank runs a refill round while any rank needs one;
    a rank that needs none then samples one refill row and leaves its groups out.
    shaping: every reward-to-advantage setting (default: scale_by_std and overlong alone)."""
    shaping = shaping or Shaping(scale_by_std=scale_by_std, overlong=overlong)
    groups = _score(engine, rows, rewards, sampling, system_prompt, shaping)
    dropped: list[Group] = []
    rounds = 0
    if refill is not None:
        kept = [g for g in groups if not g.zero_std]
        dropped = [g for g in groups if g.zero_std]
        while rounds < max_refill_rounds:
            need = len(rows) - len(kept)
            if not (any_rank_needs(need > 0) if any_rank_needs is not None else need > 0):
                break
            more = list(refill(max(need, 1)))
            if not more and any_rank_needs is None:
                break
            rounds += 1
            new = _score(engine, more, rewards, sampling, system_prompt, shaping)
            if need > 0:
                dropped += [g for g in new if g.zero_std]
                kept += [g for g in new if not g.zero_std]
        groups = kept[: len(rows)]
    rollout = Rollout(groups, len(dropped), rounds, {}, dropped)
    sums, longest = rollout_sums(rollout, rewards.names)
    rollout.stats = rollout_stats(sums.tolist(), longest, rewards.names)
    return rollout


def rollout_sums(rollout: Rollout, parts: Sequence[str]) -> tuple[torch.Tensor, float]:
    """Additive statistics of a rollout, which ranks can all-reduce, over every group sampled, those
    dynamic sampling dropped included (else the reward of a run that solved its prompts would read as
    the ~0.5 of the mixed groups kept); and its longest completion."""
    sums = torch.zeros(9 + len(parts), dtype=torch.float64)
    sampled = rollout.groups + rollout.dropped
    for g in sampled:
        for c, reward, p in zip(g.completions, g.rewards, g.parts):
            sums[:5] += torch.tensor([1, reward, reward * reward, len(c.token_ids), c.finish_reason == "length"],
                                     dtype=torch.float64)
            for j, name in enumerate(parts):
                sums[9 + j] += p.get(name, 0.0)
        sums[6] += g.zero_std
    sums[5] += len(rollout.groups)
    sums[7] += len(sampled)
    sums[8] += rollout.refill_rounds
    return sums, float(max((len(c.token_ids) for g in sampled for c in g.completions), default=0))


def rollout_stats(total: Sequence[float], longest: float, parts: Sequence[str], ranks: int = 1) -> dict[str, float]:
    """What to log from `rollout_sums` (summed over `ranks` ranks): reward mean / std and per part,
    accuracy (with single_choice), lengths, truncation, groups trained on, zero-std fraction, dropped
    groups, refill rounds."""
    n = max(total[0], 1.0)
    mean = total[1] / n
    out = {"reward_mean": mean, "reward_std": math.sqrt(max(total[2] / n - mean * mean, 0.0)),
           "response_length_mean": total[3] / n, "response_length_max": longest,
           "truncated_fraction": total[4] / n, "groups": total[5], "completions": total[0],
           "zero_std_fraction": total[6] / max(total[7], 1.0), "dropped_zero_std": total[7] - total[5],
           "refill_rounds": total[8] / ranks}
    for j, name in enumerate(parts):
        out[f"reward/{name}"] = total[9 + j] / n
    if "single_choice" in parts:
        out["accuracy"] = out["reward/single_choice"]
    return out
