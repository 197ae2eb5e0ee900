"""GRPO's validation: the rewards it scores with, the validation rows answered and scored over every rank, and
which validation's weights are the best.

    rewards = validation_rewards(cfg, tokenizer)
    values = validate(source, val_rows, rewards, sampling, dist, ranks_sharing_rows)   # reward_mean, accuracy, n
    metric = improved(best, values)        # "accuracy" / "reward_mean" when `values` beat the best so far, else None
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from cosmos_train.config import Config
from cosmos_train.distributed import DistInfo, all_reduce_sum
from cosmos_train.generation import SamplingParams
from cosmos_train.rewards import RewardContext, RewardSet, accuracy_reward, combine, weights_of
from cosmos_train.train.grpo_prompts import row_chat
from cosmos_train.train.rollout.groups import grpo_policy
from cosmos_train.train.rollout.sources import RolloutSource, outage_agreed


def validation_rewards(cfg: Config, tokenizer: Any) -> RewardSet:
    """[validation]'s reward_function (unset: training's), through the remote service when use_remote_reward
    (unset: as training). cosmos-rl validates through the remote service too when training does (it picks which
    weights are best): the service scores its rewards, the local functions the others."""
    policy_cfg = grpo_policy(cfg)
    val_remote = cfg.validation.use_remote_reward
    val_remote = policy_cfg.use_remote_reward if val_remote is None else val_remote
    val_local = weights_of(cfg.validation.reward_function or policy_cfg.reward_function)
    if val_remote:
        remote_names = {f.name for f in policy_cfg.remote_reward.reward_fns}
        val_local = {k: v for k, v in val_local.items() if k not in remote_names}
    return combine(
        val_local,
        remote=policy_cfg.remote_reward if val_remote else None,
        context=RewardContext.from_config(cfg, tokenizer),
    )


def validate(
    source: RolloutSource,
    rows: Sequence[Mapping[str, Any]],
    rewards: RewardSet,
    sampling: SamplingParams,
    dist: DistInfo,
    ranks_sharing_rows: int,
) -> dict[str, float]:
    """The engine (holding the current weights) answers this rank's share of the validation rows under
    `sampling` ([validation]'s: `rollout.groups.validation_sampling`); reward and accuracy over all ranks."""
    share = -(-len(rows) // dist.dp_size)
    mine = rows[dist.dp_rank * share : (dist.dp_rank + 1) * share]
    accuracy = accuracy_reward(rewards.names)  # the validation reward's part that is an accuracy
    sums = torch.zeros(3, dtype=torch.float64)  # answers, their rewards, their accuracy part

    def answered_and_scored() -> None:  # a reward service outage here is agreed before the all-reduce
        answers = source.generate_for_validation(
            [row_chat(r) for r in mine], sampling, together=share, filler=row_chat(rows[0])
        )
        for row, completions in zip(mine, answers):
            texts = [c.text for c in completions]
            for total, parts in rewards.score_batch(texts, [row] * len(completions)):
                right = parts.get(accuracy, 0.0) if accuracy is not None else 0.0
                sums.add_(torch.tensor([1.0, total, right], dtype=torch.float64))

    outage_agreed(answered_and_scored)
    n, reward, right = (all_reduce_sum(sums, dist.device) / ranks_sharing_rows).tolist()
    out = {"reward_mean": reward / max(n, 1.0), "n": int(n)}
    if accuracy is not None:
        out["accuracy"] = right / max(n, 1.0)
    return out


def improved(best: Mapping[str, Any] | None, values: Mapping[str, float]) -> str | None:
    """The metric the best weights are judged by (validation accuracy, else reward) when `values` beat `best`
    (the first validation always does: step 0's is the baseline a run must beat), else None. `values` are
    all-reduced, so every rank answers the same (the export that follows is collective)."""
    metric = "accuracy" if "accuracy" in values else "reward_mean"
    return metric if best is None or values[metric] > best["value"] else None
