"""From scored rollouts to what the GRPO loss reads: the completions of each group laid out after ONE copy
of their prompt, and the per-token log-probs of a forward's logits.

Shared prompt: a group's n completions share their prompt (and its video). One micro-batch row holds, for
each group in it, the prompt's tokens followed by each completion's tokens; a 4D attention mask lets every
completion see the whole prompt and its own earlier tokens, never another completion's, and each
completion's positions continue from the prompt's end (3D RoPE: the prompt's own positions from the
model's `get_rope_index`, then text positions + the prompt's rope delta, exactly as generation placed
them). The prompt and the vision tower then run once per group instead of n times, and every completion
token's log-prob equals the one a separate prompt + completion sequence gives (tests/unit/test_rl_batch.py).
The logits at the prompt's last position predict every completion's first token.

The separate layout (prompt + one completion per sequence) is the reference the shared one is tested
against: tests/rl_reference.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from cosmos_train.data.chat import IGNORE_INDEX, EncodedChat
from cosmos_train.errors import ModelError
from cosmos_train.generation import Completion
from cosmos_train.train.batching import MicroBatch, cat_vision


@dataclass
class RLSample:
    """One completion to train on. Completions of one group hold the same `prompt` object."""

    prompt: EncodedChat  # the prompt's encoding (ids, token types, vision tensors)
    token_ids: list[int]  # the sampled completion
    advantage: float
    behav_logprobs: torch.Tensor  # [completion tokens] the engine's, under the sampled distribution
    in_loss: bool = True  # False: the step's loss leaves it out (a truncated completion when masked, padding)
    ignore_prefix: int = 0  # leading tokens left out of the loss (min_filter_prefix_tokens)


@dataclass
class SharedPrefixLayout:
    """Where each completion token of a shared-prompt micro-batch is read: token t (in sample order, then
    token order) is sample[t]'s token column[t], predicted by kept-logits row logit_index[t]."""

    logit_index: torch.Tensor  # [N]
    sample: torch.Tensor  # [N]
    column: torch.Tensor  # [N]
    target: torch.Tensor  # [N] the token ids
    n_samples: int
    width: int  # the longest completion

    def to(self, device: torch.device) -> SharedPrefixLayout:
        return replace(
            self,
            logit_index=self.logit_index.to(device),
            sample=self.sample.to(device),
            column=self.column.to(device),
            target=self.target.to(device),
        )

    def grid(self, values: torch.Tensor) -> torch.Tensor:
        """Per-token values [N] as [n_samples, width] (zeros past each completion's end)."""
        out = values.new_zeros(self.n_samples, self.width)
        return out.index_put((self.sample, self.column), values)

    def token_mask(self) -> torch.Tensor:
        return self.grid(torch.ones_like(self.target, dtype=torch.float32)) > 0

    def logprobs(self, logits: torch.Tensor, temperature: float) -> torch.Tensor:
        """[n_samples, width] log-probs of the targets under softmax(kept logits / temperature); logits
        [1, K, V] from a forward with logits_to_keep = the micro-batch's logit_positions."""
        rows = logits[0].float()
        if temperature > 0 and temperature != 1:
            rows = rows / temperature
        picked = rows[self.logit_index, self.target] - torch.logsumexp(rows, dim=-1)[self.logit_index]
        return self.grid(picked)

    def per_position(self, values: torch.Tensor) -> torch.Tensor:
        """Values per kept position [K] (e.g. entropy) as [n_samples, width] at each token's predictor."""
        return self.grid(values[self.logit_index])


def _prompt_positions(prompt: EncodedChat, rope_index: Callable[..., Any]) -> tuple[torch.Tensor, int]:
    """(3D RoPE positions [3, P] of the prompt, its rope delta): what generation used (hf engine)."""
    n = len(prompt.input_ids)
    if prompt.video_grid_thw is None and prompt.image_grid_thw is None:
        return torch.arange(n).expand(3, n), 0
    kwargs: dict[str, Any] = {
        "attention_mask": torch.ones(1, n, dtype=torch.long),
        "mm_token_type_ids": prompt.mm_token_type_ids[None].long(),
    }
    for key in ("video_grid_thw", "image_grid_thw", "second_per_grid_ts"):
        if getattr(prompt, key) is not None:
            kwargs[key] = getattr(prompt, key)
    pos, delta = rope_index(prompt.input_ids[None], **kwargs)
    return pos[:, 0, :].cpu(), int(delta.reshape(-1)[0])


def shared_prefix_batch(
    samples: list[RLSample], rope_index: Callable[..., Any]
) -> tuple[MicroBatch, SharedPrefixLayout]:
    """One micro-batch row for `samples` (module docstring); consecutive samples with the same prompt
    object form one block. rope_index: the model's `get_rope_index`."""
    ids: list[torch.Tensor] = []
    text_pos: list[torch.Tensor] = []
    rope_pos: list[torch.Tensor] = []
    types: list[torch.Tensor] = []
    vision_of: list[EncodedChat] = []
    allowed: list[tuple[int, int, torch.Tensor]] = []  # (row start, row end, columns each row may see)
    predictor: list[int] = []
    sample_of: list[int] = []
    column: list[int] = []
    target: list[int] = []
    offset = 0
    i = 0
    while i < len(samples):
        prompt = samples[i].prompt
        j = i
        while j < len(samples) and samples[j].prompt is prompt:
            j += 1
        n_prompt = len(prompt.input_ids)
        pos3, delta = _prompt_positions(prompt, rope_index)
        ids.append(prompt.input_ids)
        text_pos.append(torch.arange(n_prompt))
        rope_pos.append(pos3)
        types.append(prompt.mm_token_type_ids.long())
        vision_of.append(prompt)
        prompt_cols = torch.arange(offset, offset + n_prompt)
        allowed.append((offset, offset + n_prompt, prompt_cols))
        start = offset + n_prompt
        for k in range(i, j):
            toks = torch.tensor(samples[k].token_ids, dtype=torch.long)
            m = len(toks)
            if m:
                steps = torch.arange(n_prompt, n_prompt + m)
                ids.append(toks)
                text_pos.append(steps)
                rope_pos.append((steps + delta).expand(3, m))
                types.append(torch.zeros(m, dtype=torch.long))
                allowed.append((start, start + m, torch.cat([prompt_cols, torch.arange(start, start + m)])))
                for t in range(m):
                    predictor.append(offset + n_prompt - 1 if t == 0 else start + t - 1)
                    sample_of.append(k)
                    column.append(t)
                    target.append(samples[k].token_ids[t])
            start += m
        offset = start
        i = j
    length = offset
    mask = torch.zeros(length, length, dtype=torch.bool)
    for lo, hi, cols in allowed:
        rows = torch.arange(lo, hi)
        # causal within what a row may see
        mask[lo:hi, cols] = cols.unsqueeze(0) <= rows.unsqueeze(1)
    keep, logit_index = torch.unique(torch.tensor(predictor, dtype=torch.long), sorted=True, return_inverse=True)
    batch = MicroBatch(
        input_ids=torch.cat(ids)[None],
        labels=torch.full((1, length), IGNORE_INDEX, dtype=torch.long),
        attention_mask=mask[None, None],
        mm_token_type_ids=torch.cat(types)[None],
        vision=cat_vision(vision_of),
        n_samples=len(samples),
        position_ids=torch.cat([torch.cat(text_pos)[None], torch.cat(rope_pos, dim=1)], dim=0)[:, None, :],
        logit_positions=keep,
    )
    layout = SharedPrefixLayout(
        logit_index,
        torch.tensor(sample_of, dtype=torch.long),
        torch.tensor(column, dtype=torch.long),
        torch.tensor(target, dtype=torch.long),
        len(samples),
        max((len(s.token_ids) for s in samples), default=0),
    )
    return batch, layout


def check_prompt_ids(prompt: EncodedChat, completion: Completion, origin: str = "") -> None:
    """The engine's prompt ids, when it reports them, must be the trainer's: else the log-probs would
    score another sequence than the one sampled."""
    if completion.prompt_token_ids and list(completion.prompt_token_ids) != prompt.input_ids.tolist():
        raise ModelError(
            f"{origin}: the rollout engine encoded the prompt into {len(completion.prompt_token_ids)} ids that "
            f"differ from the trainer's {len(prompt.input_ids)}: the engine and the trainer must use the same "
            "tokenizer, chat template and vision settings (rollout and policy model paths)"
        )


def behav_tensor(completion: Completion) -> torch.Tensor:
    if completion.logprobs is None or len(completion.logprobs) != len(completion.token_ids):
        raise ModelError(
            "the rollout engine returned no per-token log-probs for a completion; GRPO needs them "
            "(generation engines report them for every sampled token)"
        )
    return torch.tensor(completion.logprobs, dtype=torch.float32)
