"""Where a GRPO trainer's rollout comes from: one interface, two implementations, chosen once when the
trainer starts (`GRPOTrainer`).

    source.start(step, rows, seed)          # the prompts of `step` (up to `steps_ahead` steps early)
    got = source.result(step)               # StepRollout: the Rollout and what to log about its sampling
    version = source.sync_weights(model, version)
    answers = source.generate_for_validation(chats, sampling, together=share, filler=chat)
    source.close()

- `rollout.colocated.ColocatedRollout`: the trainer's own engine, in its process (HF, or vLLM in the ranks'
  process group, tensor-parallel over consecutive ranks), sampling each step when it is trained;
- `rollout.worker.WorkerRollout`: a worker process per rank that samples `max_inflight_steps` steps ahead
  of training (train_policy.on_policy = false with rollout tp_size 1).

`asynchronous_rollout` picks one: on_policy as set, or, unset, from where the engine runs (CPU: colocated).

A reward service that stays unreachable (`rewards.remote.RewardServiceUnreachable`, on one rank or several) ends
the step on every rank together: each source calls `agree_on_outage` at a point every rank reaches (right after
its rewards were scored, before any other collective), which raises `errors.ServiceUnavailable` everywhere; the
loop then saves the last completed step (`BaseTrainer.fit`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
from torch import nn

from cosmos_train.data.frame_memo import FrameMemo
from cosmos_train.distributed import cpu_group, raise_together
from cosmos_train.errors import ServiceUnavailable
from cosmos_train.generation import Chat, Completion, SamplingParams
from cosmos_train.rewards.remote import RewardServiceUnreachable
from cosmos_train.train.rollout.groups import Rollout

T = TypeVar("T")


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


def asynchronous_rollout(on_policy: bool | None, rollout_tp: int, device: torch.device) -> tuple[bool, str]:
    """Whether the rollout runs in a worker process ahead of training, and why (the trainer logs it).

    A tensor-parallel engine spans ranks: colocated. An explicit on_policy is obeyed. Unset, it follows the
    rank's device. On the CPU the worker's engine computes on the trainer's own cores, each process on its
    share of them (`rollout.worker.share_cores`): overlapping can save at most the rollout's time, while the
    trainer's update on half the threads takes up to twice as long, and the weights go through a safetensors
    folder every step; so the colocated engine, sampling on all the cores, is the faster one (bench/grpo_step.py;
    bench/RESULTS.md, "GRPO step time"). On a GPU the worker samples ahead while the trainer trains (cosmos-rl's
    default)."""
    if rollout_tp > 1:
        return False, (
            f"rollout.parallelism.tp_size = {rollout_tp}: one colocated tensor-parallel engine, sampling "
            "synchronously (the asynchronous worker runs at tp_size 1)"
        )
    if on_policy is not None:
        return not on_policy, f"train.train_policy.on_policy = {str(on_policy).lower()}"
    if device.type == "cpu":
        return False, (
            "train.train_policy.on_policy unset on the CPU: the engine shares the trainer's cores, so it "
            "samples in the trainer's process (set on_policy = false for a worker process)"
        )
    return True, (
        f"train.train_policy.on_policy unset on {device.type}: a worker process samples ahead of training "
        "(set on_policy = true to sample in the trainer's process)"
    )


def agree_on_outage(outage: RewardServiceUnreachable | None) -> None:
    """Every rank calls this at the same point, with the reward service's outage it met there (None: its rewards
    were scored). When any rank met one, every rank raises the same ServiceUnavailable (the lowest such rank's
    words: URL, tries, seconds, last error; `distributed.raise_together`), so no rank walks on into a collective the
    others never reach. One small all-reduce when all is well."""
    stopped = None
    if outage is not None:
        stopped = ServiceUnavailable(str(outage))
        stopped.__cause__ = outage
    raise_together(stopped, "reward scoring", cpu_group())


def outage_agreed(scoring: Callable[[], T]) -> T:
    """`scoring()` (a step's or validation's rewards, with no collective inside), then `agree_on_outage`."""
    try:
        result = scoring()
    except RewardServiceUnreachable as e:
        agree_on_outage(e)  # raises ServiceUnavailable on every rank
        raise
    agree_on_outage(None)
    return result


__all__ = ["RolloutSource", "StepRollout", "agree_on_outage", "asynchronous_rollout", "outage_agreed"]
