"""What GRPO logs about a rollout: its statistics (additive sums per rank, all-reduced over the ranks, then
means) and its completions' rows.

    sums = RolloutSums.of(rollout, rewards.names)          # this rank's groups
    stats = sums.all_reduced(dist).stats(ranks=dist.dp_size)   # {"reward_mean": ..., "accuracy": ...}
    rows = completion_rows(rollout)                        # RUN/completions.jsonl's rows of its completions

The sums run over every group sampled, those dynamic sampling dropped included: else the reward of a run
that solved its prompts would read as the ~0.5 of the mixed groups it kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from cosmos_train.data.prompt import reference_answer, user_text
from cosmos_train.distributed import DistInfo, all_reduce_max, all_reduce_sum
from cosmos_train.rewards import accuracy_reward
from cosmos_train.train.rollout.groups import Rollout

# RolloutSums' fields summed over ranks, in the order they travel in one all-reduce (then the parts' sums)
_SUMMED = (
    "completions",
    "reward",
    "reward_squared",
    "response_tokens",
    "truncated",
    "groups_kept",
    "zero_std_groups",
    "groups_sampled",
    "refill_rounds",
)


@dataclass
class RolloutSums:
    """Additive statistics of one rank's rollout (float64, summed over ranks by `all_reduced`); `longest`
    is a maximum. `part_rewards` follows `parts`, the reward set's part names."""

    completions: float = 0.0
    reward: float = 0.0
    reward_squared: float = 0.0
    response_tokens: float = 0.0
    truncated: float = 0.0  # completions cut at max_response_length (finish_reason "length")
    groups_kept: float = 0.0  # the groups trained on
    zero_std_groups: float = 0.0  # groups whose rewards (or filter parts) are all equal
    groups_sampled: float = 0.0  # kept + dropped by dynamic sampling
    refill_rounds: float = 0.0
    part_rewards: list[float] = field(default_factory=list)
    parts: tuple[str, ...] = ()
    longest: float = 0.0

    @classmethod
    def of(cls, rollout: Rollout, parts: Sequence[str]) -> RolloutSums:
        out = cls(part_rewards=[0.0] * len(parts), parts=tuple(parts))
        sampled = rollout.groups + rollout.dropped
        for g in sampled:
            for c, reward, p in zip(g.completions, g.rewards, g.parts):
                out.completions += 1.0
                out.reward += reward
                out.reward_squared += reward * reward
                out.response_tokens += len(c.token_ids)
                out.truncated += float(c.finish_reason == "length")
                for j, name in enumerate(parts):
                    out.part_rewards[j] += p.get(name, 0.0)
            out.zero_std_groups += float(g.zero_std)
        out.groups_kept = float(len(rollout.groups))
        out.groups_sampled = float(len(sampled))
        out.refill_rounds = float(rollout.refill_rounds)
        out.longest = float(max((len(c.token_ids) for g in sampled for c in g.completions), default=0))
        return out

    def all_reduced(self, dist: DistInfo) -> RolloutSums:
        """The sums over every rank (each policy TP x CP group, which trains on one rollout, counted once), the
        longest completion of any."""
        values = torch.tensor([getattr(self, name) for name in _SUMMED] + self.part_rewards, dtype=torch.float64)
        total = (all_reduce_sum(values, dist.device) / (dist.tp * dist.cp)).tolist()
        return RolloutSums(
            **dict(zip(_SUMMED, total)),
            part_rewards=total[len(_SUMMED) :],
            parts=self.parts,
            longest=float(all_reduce_max(self.longest, dist.device)),
        )

    def stats(self, ranks: int = 1) -> dict[str, float]:
        """What to log: reward mean / std and per part, accuracy (`rewards.accuracy_reward`), lengths,
        truncation, groups trained on, zero-std fraction, dropped groups, refill rounds (a mean over `ranks`)."""
        n = max(self.completions, 1.0)
        mean = self.reward / n
        out = {
            "reward_mean": mean,
            "reward_std": math.sqrt(max(self.reward_squared / n - mean * mean, 0.0)),
            "response_length_mean": self.response_tokens / n,
            "response_length_max": self.longest,
            "truncated_fraction": self.truncated / n,
            "groups": self.groups_kept,
            "completions": self.completions,
            "zero_std_fraction": self.zero_std_groups / max(self.groups_sampled, 1.0),
            "dropped_zero_std": self.groups_sampled - self.groups_kept,
            "refill_rounds": self.refill_rounds / ranks,
        }
        for name, value in zip(self.parts, self.part_rewards):
            out[f"reward/{name}"] = value / n
        if (accuracy := accuracy_reward(self.parts)) is not None:
            out["accuracy"] = out[f"reward/{accuracy}"]
        return out


def rollout_stats(rollout: Rollout, parts: Sequence[str]) -> dict[str, float]:
    """One rank's rollout's statistics (`RolloutSums.stats`), without reducing over ranks."""
    return RolloutSums.of(rollout, parts).stats()


def completion_rows(rollout: Rollout) -> list[dict[str, Any]]:
    """Every sampled completion (dropped groups included) as a row of RUN/completions.jsonl (`metrics.SAMPLES_FILE`):
    its row's id, prompt and reference, the completion, its reward and parts, advantage and finish reason."""
    rows = []
    for g in rollout.groups + rollout.dropped:
        for c, reward, parts, adv in zip(g.completions, g.rewards, g.parts, g.advantages):
            rows.append(
                {
                    "id": g.row.get("id"),
                    "prompt": user_text(g.row.get("messages") or []),
                    "reference": reference_answer(g.row),
                    "completion": c.text,
                    "reward": reward,
                    "parts": parts,
                    "advantage": adv,
                    "finish_reason": c.finish_reason,
                }
            )
    return rows


__all__ = ["RolloutSums", "completion_rows", "rollout_stats"]
