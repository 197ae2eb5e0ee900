"""One synchronous GRPO rollout: RL rows in, scored groups of completions with advantages out.

    rollout = collect_rollouts(engine, rows, combine(["single_choice"]), SamplingParams(n=8, temperature=1.0))
    rollout.groups[0].completions[3].token_ids, rollout.groups[0].advantages[3]
    rollout = run_rollout(engine, rows, rewards, cfg, step_seed, all_rows)   # the same, as the config says
    shaping, seed = reward_shaping(cfg), derive_seed(cfg.train.seed, step=3, rank=1)

Each row's prompt is `cosmos_train.data.prompt.prompt_messages` (the one prompt builder: the ids
SFT trains after and evaluation asks); the engine gives `n` completions per row; the reward set
scores each against the row (its `reference` / `options`); advantages are group-normalised
(`rl_losses.group_advantages`). DAPO's soft overlong penalty is a reward, `overlong` (cosmos-rl's name), so it
is in the total when reward_function names it.

Advantages are clipped to [advantage_low, advantage_high] with clip_advantages (cosmos-rl's language-model
GRPO does not clip). With min_filter_prefix_tokens, completions of a
group that share a longest common prefix of at least that many tokens but got different rewards leave the
prefix out of the loss (`shared_prefix_ignore`), as cosmos-rl does: the reward cannot tell whether the
shared tokens were good. A completion that is the whole prefix (but for its stop token) keeps its tokens, and a
group whose filter values are all equal masks nothing, as in cosmos-rl's reward calculator.

Dynamic sampling (DAPO): a group whose filter values are all equal carries no signal. A completion's filter value
is `RewardSet.filter_value`: the sum of its `filter_reward_metric` parts (scored even when reward_function does not
name them), else its total reward, as cosmos-rl's `Reward.compute_reward`. With `refill`, such
groups are dropped and more rows are asked for, up to `max_refill_rounds`, until the batch holds as
many informative groups as rows were given; what could not be refilled is reported, never hidden.

`run_rollout` is what both GRPO rollout sources call (`rollout.colocated`, in the trainer's process, and
`rollout.worker`, in a process of its own); what to log about a rollout is `rollout.stats`. GRPO and
filter-rl-data (train/rl_filter.py) take the same settings from a config: its rewards (`training_rewards`), how
they become advantages (`reward_shaping`), its sampling (`step_sampling`) and every seed (`derive_seed`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from cosmos_train.config import Config, ConfigError, GRPOPolicyConfig
from cosmos_train.data.prompt import prompt_messages
from cosmos_train.generation import Completion, GenerationEngine, SamplingParams
from cosmos_train.rewards import RewardContext, RewardSet, combine, register_script_rewards
from cosmos_train.rewards.remote import RewardServiceUnreachable
from cosmos_train.train.rl_losses import AdvantageStd, group_advantages

SEED_MOD = 2**31  # sampling seeds are taken modulo this (engines want a 32-bit seed)
# a step seed's offsets (`offset_seed`): its completions' sampling, and its refill rounds (+ the round)
SAMPLING_OFFSET = 7
REFILL_OFFSET = 14


def derive_seed(seed: int, step: int = 0, rank: int = 0, purpose: int = 0) -> int:
    """The sampling seed of (run seed, step, rank, purpose): a resumed run samples what the uninterrupted one did
    (GRPO's steps and validation, filter-rl-data's chunks of prompts as its steps)."""
    return (seed * 1_000_003 + step * 10_007 + rank * 101 + purpose * 7) % SEED_MOD


def offset_seed(step_seed: int, offset: int) -> int:
    """A seed `offset` past a step's seed (`SAMPLING_OFFSET`, `REFILL_OFFSET` + round), kept below SEED_MOD."""
    return (step_seed + offset) % SEED_MOD


@dataclass
class Group:
    """The n completions of one row, their rewards (with parts) and advantages."""

    row: Mapping[str, Any]
    completions: list[Completion]
    rewards: list[float]
    parts: list[dict[str, float]]
    advantages: list[float]
    ignore_prefix: list[int] = field(default_factory=list)  # leading tokens per completion left out of the loss
    filter_values: list[float] = field(default_factory=list)  # per completion (empty: the rewards)

    @property
    def zero_std(self) -> bool:
        """No signal for dynamic sampling: every completion's filter value is the same."""
        return len(set(self.filter_values or self.rewards)) == 1


def shared_prefix_ignore(
    seqs: Sequence[Sequence[int]],
    rewards: Sequence[float],
    min_tokens: int,
    stopped: Sequence[bool] | None = None,
) -> list[int]:
    """Per completion, how many leading tokens to leave out of the loss: completions that share a maximal
    common prefix of >= min_tokens tokens (no longer prefix is shared by two of them) and whose rewards
    differ ignore that prefix. A completion that is the whole prefix, but for its stop token (`stopped[i]`: seqs[i]
    ends with one), keeps its tokens: cosmos-rl compares its text with the prefix's, stop token left out, and
    leaves such a completion whole, else it would train on nothing but its stop token."""
    stops = [int(s) for s in stopped] if stopped is not None else [0] * len(seqs)
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
            # the prefix's own text: without the stop token it ends with when it is a whole stopped completion
            text_len = depth - any(stops[i] and len(seqs[i]) == depth for i in members)
            for i in members:
                if len(seqs[i]) - stops[i] != text_len:
                    ignore[i] = depth
    return ignore


@dataclass
class Rollout:
    """What one rollout step produced (`rollout.stats` says what to log about it)."""

    groups: list[Group]
    dropped_zero_std: int = 0  # groups left out by dynamic sampling
    refill_rounds: int = 0
    dropped: list[Group] = field(default_factory=list)  # those groups, for what may still need an input


@dataclass(frozen=True)
class Shaping:
    """How a group's rewards become its advantages and loss masks (train_policy keys)."""

    scale_by_std: bool = True
    std: AdvantageStd = "population"
    advantage_clip: tuple[float, float] | None = None
    min_filter_prefix_tokens: int | None = None


def _score(
    engine: GenerationEngine,
    rows: Sequence[Mapping[str, Any]],
    rewards: RewardSet,
    sampling: SamplingParams,
    system_prompt: str | None,
    shaping: Shaping,
) -> list[Group]:
    if not rows:
        return []
    prompts = [prompt_messages(r["messages"], system_prompt, origin=str(r.get("id", ""))) for r in rows]
    answers = engine.generate(prompts, sampling)
    # one scoring call for the whole batch: a remote scorer sends it in few requests, not one per group
    flat = rewards.score_batch(
        [c.text for group in answers for c in group], [row for row, group in zip(rows, answers) for _ in group]
    )
    groups = []
    start = 0
    for row, completions in zip(rows, answers):
        scored = flat[start : start + len(completions)]
        start += len(completions)
        totals = [t for t, _ in scored]
        filter_values = [rewards.filter_value(t, p) for t, p in scored]
        adv = group_advantages(
            torch.tensor(totals), len(completions), scale_by_std=shaping.scale_by_std, std=shaping.std
        )
        if shaping.advantage_clip is not None:
            adv = adv.clamp(*shaping.advantage_clip)
        # cosmos-rl looks for shared prefixes only in a group that dynamic sampling would keep
        ignore = (
            [0] * len(completions)
            if shaping.min_filter_prefix_tokens is None or len(set(filter_values)) == 1
            else shared_prefix_ignore(
                [c.token_ids for c in completions],
                totals,
                shaping.min_filter_prefix_tokens,
                [c.finish_reason == "stop" for c in completions],
            )
        )
        groups.append(Group(row, completions, totals, [p for _, p in scored], adv.tolist(), ignore, filter_values))
    return groups


def collect_rollouts(
    engine: GenerationEngine,
    rows: Sequence[Mapping[str, Any]],
    rewards: RewardSet,
    sampling: SamplingParams,
    *,
    system_prompt: str | None = None,
    scale_by_std: bool = True,
    shaping: Shaping | None = None,
    refill: Callable[[int], Sequence[Mapping[str, Any]]] | None = None,
    max_refill_rounds: int = 0,
    any_rank_needs: Callable[[bool], bool] | None = None,
    agree_outage: Callable[[RewardServiceUnreachable | None], None] | None = None,
) -> Rollout:
    """Generate, score and normalise one batch (module docstring). refill(k) returns up to k more rows.

    any_rank_needs(this rank needs more) -> whether any rank does: for an engine whose ranks must call
    `generate` together (vLLM under torchrun), every rank runs a refill round while any rank needs one;
    a rank that needs none then samples one refill row and leaves its groups out. Such ranks also pass
    agree_outage (`rollout.sources.agree_on_outage`), called after each scoring with the reward service's outage
    on this rank or None: it raises on every rank when any met one, so none enters a refill round alone.
    shaping: every reward-to-advantage setting (default: scale_by_std alone)."""
    shaping = shaping or Shaping(scale_by_std=scale_by_std)

    def scored(batch: Sequence[Mapping[str, Any]]) -> list[Group]:
        if agree_outage is None:
            return _score(engine, batch, rewards, sampling, system_prompt, shaping)
        try:
            got = _score(engine, batch, rewards, sampling, system_prompt, shaping)
        except RewardServiceUnreachable as e:
            agree_outage(e)  # raises on every rank
            raise
        agree_outage(None)
        return got

    groups = scored(rows)
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
            new = scored(more)
            if need > 0:
                dropped += [g for g in new if g.zero_std]
                kept += [g for g in new if not g.zero_std]
        groups = kept[: len(rows)]
    return Rollout(groups, len(dropped), rounds, dropped)


def grpo_policy(cfg: Config) -> GRPOPolicyConfig:
    """[train.train_policy] of a GRPO job, with GRPO's keys (the loader builds it from type = "grpo")."""
    policy_cfg = cfg.train.train_policy
    if not isinstance(policy_cfg, GRPOPolicyConfig):
        raise ConfigError([f'train.train_policy.type = {policy_cfg.type!r}: GRPO needs type = "grpo"'])
    return policy_cfg


def training_rewards(cfg: Config, tokenizer: Any, dataset_script: str | None = None) -> RewardSet:
    """The rewards a GRPO step scores with: reward_function (and the remote service's when use_remote_reward),
    filter_reward_metric's for dynamic sampling, the `overlong` reward's context. `tokenizer`: the policy's, or a
    function of no arguments loading it (`RewardContext.from_config`: loaded only when a reward counts tokens).
    A dataset script's REWARD_FUNCTIONS are registered first (and stay registered: validation names them too)."""
    policy_cfg = grpo_policy(cfg)
    if dataset_script:
        register_script_rewards(dataset_script)
    return combine(
        policy_cfg.reward_function,
        remote=policy_cfg.remote_reward if policy_cfg.use_remote_reward else None,
        context=RewardContext.from_config(cfg, tokenizer),
        filter_metrics=policy_cfg.filter_reward_metric,
    )


def reward_shaping(cfg: Config) -> Shaping:
    """How the config's rewards become advantages and loss masks (Dr.GRPO, advantage clipping, prefix masking)."""
    policy_cfg = grpo_policy(cfg)
    return Shaping(
        scale_by_std=policy_cfg.scale_rewards,
        std=policy_cfg.advantage_std,
        advantage_clip=(policy_cfg.advantage_low, policy_cfg.advantage_high) if policy_cfg.clip_advantages else None,
        min_filter_prefix_tokens=policy_cfg.min_filter_prefix_tokens,
    )


def step_sampling(cfg: Config, step_seed: int) -> SamplingParams:
    """How a step's completions are drawn ([rollout] and its sampling_config)."""
    r = cfg.rollout
    sc = r.sampling_config
    return SamplingParams(
        n=r.n_generation,
        max_new_tokens=r.max_response_length,
        temperature=sc.temperature,
        top_p=sc.top_p,
        top_k=sc.top_k,
        repetition_penalty=sc.repetition_penalty,
        seed=offset_seed(step_seed, SAMPLING_OFFSET),
    )


def validation_sampling(cfg: Config, seed: int) -> SamplingParams:
    """How validation answers are drawn ([validation]; max_response_length or top_p unset: the rollout's, as
    cosmos-rl's rollout engines build their validation sampling)."""
    v = cfg.validation
    return SamplingParams(
        n=v.n_generation,
        max_new_tokens=v.max_response_length or cfg.rollout.max_response_length,
        temperature=v.temperature,
        top_p=cfg.rollout.sampling_config.top_p if v.top_p is None else v.top_p,
        top_k=v.top_k,
        repetition_penalty=v.repetition_penalty,
        seed=seed,
    )


def run_rollout(
    engine: GenerationEngine,
    rows: Sequence[Mapping[str, Any]],
    rewards: RewardSet,
    cfg: Config,
    step_seed: int,
    all_rows: Sequence[Mapping[str, Any]],
    any_rank_needs: Callable[[bool], bool] | None = None,
    agree_outage: Callable[[RewardServiceUnreachable | None], None] | None = None,
) -> Rollout:
    """One rollout batch as the config says (`reward_shaping`, `step_sampling`, DAPO dynamic sampling whose extra
    prompts are drawn from `all_rows` with seeds of (step_seed, round), outside the epoch order); the last two as
    `collect_rollouts` takes them."""
    policy_cfg = grpo_policy(cfg)
    dapo = policy_cfg.variant == "dapo"
    rounds = [0]

    def more(k: int) -> list[Mapping[str, Any]]:
        rounds[0] += 1
        g = torch.Generator().manual_seed(offset_seed(step_seed, REFILL_OFFSET + rounds[0]))
        return [all_rows[i] for i in torch.randint(len(all_rows), (k,), generator=g).tolist()]

    return collect_rollouts(
        engine,
        rows,
        rewards,
        step_sampling(cfg, step_seed),
        shaping=reward_shaping(cfg),
        refill=more if dapo else None,
        max_refill_rounds=policy_cfg.dynamic_sampling_max_rounds if dapo else 0,
        any_rank_needs=any_rank_needs,
        agree_outage=agree_outage,
    )
