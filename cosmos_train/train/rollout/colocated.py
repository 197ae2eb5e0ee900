"""GRPO's rollout in the trainer's own process: the rank's engine samples each step when it is trained.

    source = ColocatedRollout(cfg, dist, rewards, all_rows, processes_per_host)

HF on the CPU or vLLM on the rank's GPU. With vLLM under torchrun (the external launcher) the engine joins
the ranks' process group: `rollout.parallelism.tp_size` consecutive ranks run one tensor-parallel engine
(`GroupedEngine` sends it the union of their prompts, which then share one seed), and every rank calls
`generate` in lockstep: dynamic sampling's refill rounds (and a reward service's outage after each scoring) are
agreed over the ranks and validation shares are padded to equal length. Weights go in place (FSDP / TP shards
gathered as they stream; LoRA merged). Without lockstep a reward service's outage is agreed once the rollout is
done (`rollout.sources.outage_agreed`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from torch import nn

from cosmos_train.config import Config
from cosmos_train.data.frame_memo import FrameMemo
from cosmos_train.distributed import DistInfo, any_rank
from cosmos_train.generation import Chat, Completion, SamplingParams, create_engine, from_rollout
from cosmos_train.generation.grouped import GroupedEngine, group_of_consecutive_ranks
from cosmos_train.generation.weights import iter_weights
from cosmos_train.models.lora import lora_parts, merged_items
from cosmos_train.rewards import RewardSet
from cosmos_train.train.rollout.groups import run_rollout
from cosmos_train.train.rollout.sources import RolloutSource, StepRollout, agree_on_outage, outage_agreed


class ColocatedRollout(RolloutSource):
    """The trainer's engine, sampling in step with training (module docstring)."""

    def __init__(
        self, cfg: Config, dist: DistInfo, rewards: RewardSet, all_rows: list[dict[str, Any]], processes_per_host: int
    ):
        self.cfg, self.dist, self.rewards, self.all_rows = cfg, dist, rewards, all_rows
        engine = create_engine(from_rollout(cfg, processes_per_host=processes_per_host))
        # vLLM under torchrun (external launcher): the ranks call generate together, and the ranks of one
        # rollout TP group submit one union of requests (and so sample with one seed)
        self.lockstep = engine.name == "vllm" and dist.world_size > 1
        rollout_tp = cfg.rollout.parallelism.tp_size if self.lockstep else 1
        self.seed_rank = dist.rank // rollout_tp if self.lockstep else dist.dp_rank
        self.engine = GroupedEngine(engine, group_of_consecutive_ranks(rollout_tp))
        # the prompts' clips, decoded once: the engine has just decoded them into its own memo
        frames = getattr(engine, "frames", None)
        self.frames = frames if isinstance(frames, FrameMemo) else None
        self.description = f"engine {engine.name}"
        self._asked: dict[int, tuple[list[dict[str, Any]], int]] = {}

    def start(self, step: int, rows: list[dict[str, Any]], seed: int) -> None:
        self._asked[step] = (rows, seed)  # sampled when trained: with the weights of the step before

    def result(self, step: int) -> StepRollout:
        rows, seed = self._asked.pop(step)
        device = self.dist.device
        self.engine.wake()
        if self.lockstep:  # ranks generate together: they agree on a reward outage after each scoring, inside
            rollout = run_rollout(
                self.engine,
                rows,
                self.rewards,
                self.cfg,
                seed,
                self.all_rows,
                any_rank_needs=partial(any_rank, device=device),
                agree_outage=agree_on_outage,
            )
        else:  # no collective inside: they agree once it is done
            rollout = outage_agreed(
                partial(run_rollout, self.engine, rows, self.rewards, self.cfg, seed, self.all_rows)
            )
        self.engine.sleep()
        return StepRollout(rollout)

    def sync_weights(self, model: nn.Module, version: int) -> int:
        weights: Any = model.state_dict()
        if (lora := lora_parts(model)) is not None:  # the engine holds the base model: merged weights
            weights = merged_items(iter_weights(weights), lora.scalings)
        return self.engine.update_weights(weights, version=version)

    def generate_for_validation(
        self, chats: list[Chat], sampling: SamplingParams, *, together: int, filler: Chat
    ) -> list[list[Completion]]:
        # ranks that must generate together all ask for `together` chats; the padding's answers are dropped
        asked = chats + [filler] * (together - len(chats)) if self.lockstep else chats
        if not asked:
            return []
        return self.engine.generate(asked, sampling)[: len(chats)]

    def close(self) -> None:
        self.engine.close()


__all__ = ["ColocatedRollout"]
