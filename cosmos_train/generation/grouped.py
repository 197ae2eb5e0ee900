"""A rollout engine shared by a group of ranks: each rank asks for its own requests, the group's engine
answers all of them at once, each rank gets its own answers back.

    engine = GroupedEngine(create_engine(cfg), group_of_consecutive_ranks(tp_size))

Why: under vLLM's external launcher, `tp_size` consecutive torchrun ranks run ONE tensor-parallel
engine, so they must submit the same requests in the same call; but the policy gives each data-parallel
rank its own prompts. The ranks of a group exchange their requests (all_gather_object: chats are small
JSON-able lists), every rank calls the engine with the union in rank order, and keeps its slice. A group
of one rank is the engine itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch.distributed as dist

from cosmos_train.generation.base import Chat, Completion, GenerationEngine, SamplingParams, WeightSource


def group_of_consecutive_ranks(size: int) -> Any:
    """This rank's process group of `size` consecutive ranks (every rank must call this: each new_group is
    collective over the world). None when size is 1."""
    if size <= 1:
        return None
    world, rank = dist.get_world_size(), dist.get_rank()
    mine = None
    for start in range(0, world, size):
        group = dist.new_group(list(range(start, start + size)))
        if start <= rank < start + size:
            mine = group
    return mine


class GroupedEngine:
    """`inner` answering the union of a process group's requests (module docstring)."""

    def __init__(self, inner: GenerationEngine, group: Any):
        self.inner, self.group = inner, group
        self.name = inner.name

    @property
    def weight_version(self) -> int:
        return self.inner.weight_version

    def generate(self, requests: Sequence[Chat], sampling: SamplingParams) -> list[list[Completion]]:
        if self.group is None:
            return self.inner.generate(requests, sampling)
        gathered: list[Any] = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(gathered, list(requests), group=self.group)
        mine = dist.get_rank(self.group)
        start = sum(len(g) for g in gathered[:mine])
        answers = self.inner.generate([chat for g in gathered for chat in g], sampling)
        return answers[start : start + len(requests)]

    def update_weights(self, weights: WeightSource, version: int | None = None) -> int:
        return self.inner.update_weights(weights, version)

    def sleep(self) -> None:
        self.inner.sleep()

    def wake(self) -> None:
        self.inner.wake()

    def close(self) -> None:
        self.inner.close()
