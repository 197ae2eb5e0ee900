"""GRPO's prompts on the trainer's side: a row's chat, its encoding, and the RL samples of scored groups.

    prompts = GRPOPrompts(processor, frames, cfg)
    samples = prompts.samples_of(rollout.groups)       # RLSample per completion to train on
    filler = prompts.filler(rollout, samples, pad_id)  # the input of a rank's weight-0 micro-batches

The chat is the one prompt builder's (`data.prompt.prompt_messages`), as the engine was asked; the encoding is the
frame memo's, which a colocated engine already filled with this step's prompts (the same settings).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from cosmos_train.config import Config
from cosmos_train.data.chat import EncodedChat
from cosmos_train.data.frame_memo import FrameMemo
from cosmos_train.data.prompt import prompt_messages
from cosmos_train.generation import Chat
from cosmos_train.train.rl_batch import RLSample, behav_tensor, check_prompt_ids
from cosmos_train.train.rollout.groups import Group, Rollout, grpo_policy
from cosmos_train.vision.processor import get_tokenizer
from cosmos_train.vision.settings import VisionSettings

VISION_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")


def row_chat(row: Mapping[str, Any]) -> Chat:
    """The prompt a row's completions answer (the one prompt builder's)."""
    return prompt_messages(row["messages"], origin=str(row.get("id", "")))


class GRPOPrompts:
    """Encodes a step's prompts as the trainer reads them and turns scored groups into RL samples."""

    def __init__(self, processor: Any, frames: FrameMemo, cfg: Config):
        policy_cfg = grpo_policy(cfg)
        self.processor, self.frames = processor, frames
        self.max_length = cfg.policy.model_max_length
        defaults = policy_cfg.dataset.vision.as_part_defaults()
        self.vision_defaults = VisionSettings(**defaults) if defaults else None
        self.mask_truncated = policy_cfg.mask_truncated_completions
        ids = get_tokenizer(processor).convert_tokens_to_ids(list(VISION_TOKENS))
        self.vision_ids = {i for i in (ids if isinstance(ids, list) else [ids]) if isinstance(i, int) and i >= 0}
        # completions left out for a vision placeholder since the trainer last reset it (its step's metric)
        self.vision_token_completions = 0

    def encode(self, row: Mapping[str, Any]) -> EncodedChat:
        # the colocated engine's memo holds this step's prompts as it encoded them with the same settings
        return self.frames.encode_chat(
            self.processor,
            row_chat(row),
            add_generation_prompt=True,
            max_length=self.max_length,
            vision_defaults=self.vision_defaults,
        )

    def samples_of(self, groups: list[Group]) -> list[RLSample]:
        """The training sequences of `groups`. A completion holding a vision placeholder token (an untrained
        model samples <|video_pad|> now and then) cannot be scored again: the model would look for pixels
        that are not there. It keeps its place in its group's advantages and is left out of the loss
        (counted in `vision_token_completions`)."""
        out = []
        for g in groups:
            prompt = self.encode(dict(g.row))
            origin = f"row {g.row.get('id', '?')} ({g.row.get('origin', '?')})"
            ignore = g.ignore_prefix or [0] * len(g.completions)
            for c, adv, skip in zip(g.completions, g.advantages, ignore):
                if self.vision_ids.intersection(c.token_ids):
                    self.vision_token_completions += 1
                    continue
                check_prompt_ids(prompt, c, origin)
                out.append(
                    RLSample(
                        prompt,
                        list(c.token_ids),
                        float(adv),
                        behav_tensor(c),
                        in_loss=not (self.mask_truncated and c.finish_reason == "length"),
                        ignore_prefix=skip,
                    )
                )
        return out

    def filler(self, rollout: Rollout, samples: list[RLSample], pad_id: int) -> RLSample:
        """An input for the weight-0 micro-batches of a rank with fewer samples than the others: one of its
        own, else one from a dropped group, else the first prompt with an empty completion."""
        if samples:
            return samples[0]
        for g in rollout.dropped:
            kept = self.samples_of([g])
            if kept:
                return kept[0]
        # every completion held a vision placeholder: a one-token stand-in (end of turn) that no loss reads
        prompt = self.encode(dict((rollout.groups or rollout.dropped)[0].row))
        return RLSample(prompt, [pad_id], 0.0, torch.zeros(1), in_loss=False)
