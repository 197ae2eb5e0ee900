"""Where a GRPO step's rollout comes from: one interface, two implementations, chosen once when the
trainer starts (`GRPOTrainer`).

    source.start(step, rows, seed)          # the prompts of `step` (up to `steps_ahead` steps early)
    got = source.result(step)               # StepRollout: the Rollout and what to log about its sampling
    version = source.sync_weights(model, version)
    answers = source.generate_for_validation(chats, sampling, together=share, filler=chat)
    source.close()

- `rollout_colocated.ColocatedRollout`: the trainer's own engine, in its process (HF, or vLLM in the ranks'
  process group, tensor-parallel over consecutive ranks), sampling each step when it is trained;
- `rollout_worker.WorkerRollout`: a worker process per rank that samples `max_inflight_steps` steps ahead
  of training (train_policy.on_policy = false with rollout tp_size 1).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from cosmos_train.data.frame_memo import FrameMemo
from cosmos_train.distributed import all_reduce_sum
from cosmos_train.generation import Chat, Completion, SamplingParams
from cosmos_train.train.rollout import Rollout


@dataclass
class StepRollout:
    """One step's rollout and what to log about how it was sampled (staleness, waits; empty when colocated)."""

    rollout: Rollout
    metrics: dict[str, float] = field(default_factory=dict)


class RolloutSource(ABC):
    """A GRPO trainer's rollout (module docstring)."""

    description: str  # for the trainer's opening line
    steps_ahead: int = 0  # steps whose prompts it holds beyond the one being trained
    seed_rank: int  # the rank index sampling seeds derive from (ranks sharing an engine share it)
    frames: FrameMemo | None = None  # decoded prompt clips the trainer may share (an in-process engine's)

    @abstractmethod
    def start(self, step: int, rows: list[dict[str, Any]], seed: int) -> None:
        """Step `step` samples `rows` with `seed` (called in step order, before `result(step)`)."""

    @abstractmethod
    def result(self, step: int) -> StepRollout:
        """The rollout of `step`, sampled with weights current enough for it (every rank calls it)."""

    @abstractmethod
    def sync_weights(self, model: nn.Module, version: int) -> int:
        """The policy's weights into the engine as `version` (a collective); the version it now holds."""

    @abstractmethod
    def generate_for_validation(
        self, chats: list[Chat], sampling: SamplingParams, *, together: int, filler: Chat
    ) -> list[list[Completion]]:
        """Completions of `chats` with the newest weights. Where ranks must generate together, each asks for
        `together` chats, padded with `filler` (whose answers are dropped)."""

    @abstractmethod
    def close(self) -> None:
        """Stop the engine or the worker."""


def any_rank(flag: bool, device: torch.device) -> bool:
    """Whether `flag` holds on any rank (a collective: every rank calls it with its own)."""
    return bool(all_reduce_sum(float(flag), device) > 0)


__all__ = ["RolloutSource", "StepRollout", "any_rank"]
