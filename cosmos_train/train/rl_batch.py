"""From scored rollouts to what the GRPO loss reads: the completions of each group laid out after ONE copy
of their prompt, and the per-token log-probs of a forward's logits.

Shared prompt: a group's n completions share their prompt (and its video). One micro-batch row holds, for
one group, the prompt's tokens followed by each completion's tokens; a 4D attention mask lets every
completion see the whole prompt and its own earlier tokens, never another completion's, and each
completion's positions continue from the prompt's end (3D RoPE: the prompt's own positions from the
model's `get_rope_index`, then text positions + the prompt's rope delta, exactly as generation placed
them). The prompt and the vision tower then run once per group instead of n times, and every completion
token's log-prob equals the one a separate prompt + completion sequence gives (tests/unit/test_rl_batch.py).
The logits at the prompt's last position predict every completion's first token. One row per group, not
all groups packed into one row: attention costs the square of a row's length whatever the mask allows,
so 8 groups in one row cost 8x the attention of 8 rows (tests/unit/test_rl_batch.py counts it).

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
from cosmos_train.train.cp_language import KeptSlice


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
    token order) is sample[t]'s token column[t], predicted by the kept logits at row logit_row[t], kept
    position logit_index[t]."""

    logit_row: torch.Tensor  # [N] the micro-batch row (one per prompt block)
    logit_index: torch.Tensor  # [N] index into the kept positions
    sample: torch.Tensor  # [N]
    column: torch.Tensor  # [N]
    target: torch.Tensor  # [N] the token ids
    n_samples: int
    width: int  # the longest completion

    def to(self, device: torch.device) -> SharedPrefixLayout:
        return replace(
            self,
            logit_row=self.logit_row.to(device),
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

    def logprobs(self, logits: torch.Tensor, temperature: float, kept: KeptSlice | None = None) -> torch.Tensor:
        """[n_samples, width] log-probs of the targets under softmax(kept logits / temperature); logits
        [B, K, V] from a forward with logits_to_keep = the micro-batch's logit_positions. With context parallel,
        `kept` says which of those positions this rank's logits hold; the others' values come from their ranks."""
        rows = logits.float()
        if temperature > 0 and temperature != 1:
            rows = rows / temperature
        if kept is None:
            at = (self.logit_row, self.logit_index)
            return self.grid(rows[(*at, self.target)] - torch.logsumexp(rows, dim=-1)[at])
        held, index = kept.locate(self.logit_index)
        at = (self.logit_row[held], index)
        picked = rows.new_zeros(self.target.shape).index_put(
            (held.nonzero(as_tuple=True)[0],), rows[(*at, self.target[held])] - torch.logsumexp(rows, dim=-1)[at]
        )
        return self.grid(kept.combine(picked))

    def per_position(self, values: torch.Tensor, kept: KeptSlice | None = None) -> torch.Tensor:
        """Values per kept position [B, K] (e.g. entropy) as [n_samples, width] at each token's predictor
        (`kept`: as in `logprobs`)."""
        if kept is None:
            return self.grid(values[self.logit_row, self.logit_index])
        held, index = kept.locate(self.logit_index)
        picked = values.new_zeros(self.target.shape).index_put(
            (held.nonzero(as_tuple=True)[0],), values[self.logit_row[held], index]
        )
        return self.grid(kept.combine(picked))


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


@dataclass
class _Block:
    """One prompt and its completions in the block's own columns (0: the prompt's first token)."""

    prompt: EncodedChat
    ids: torch.Tensor  # [length]
    text_pos: torch.Tensor  # [length]
    rope_pos: torch.Tensor  # [3, length]
    types: torch.Tensor  # [length]
    mask: torch.Tensor  # [length, length] who sees whom
    predictor: list[int]  # per completion token (sample order, then token order): the column predicting it
    sample_of: list[int]
    column: list[int]
    target: list[int]

    @property
    def length(self) -> int:
        return len(self.ids)


def _block(samples: list[RLSample], first: int, last: int, rope_index: Callable[..., Any]) -> _Block:
    """samples[first:last] (one prompt object) as a block: the prompt, then each completion after it."""
    prompt = samples[first].prompt
    n_prompt = len(prompt.input_ids)
    pos3, delta = _prompt_positions(prompt, rope_index)
    ids, text_pos, rope_pos = [prompt.input_ids], [torch.arange(n_prompt)], [pos3]
    types = [prompt.mm_token_type_ids.long()]
    spans = [(0, n_prompt)]  # (start, end) of the prompt, then of each completion
    predictor: list[int] = []
    sample_of: list[int] = []
    column: list[int] = []
    start = n_prompt
    for k in range(first, last):
        toks = samples[k].token_ids
        m = len(toks)
        steps = torch.arange(n_prompt, n_prompt + m)
        ids.append(torch.tensor(toks, dtype=torch.long))
        text_pos.append(steps)
        rope_pos.append((steps + delta).expand(3, m))
        types.append(torch.zeros(m, dtype=torch.long))
        spans.append((start, start + m))
        if m:  # the prompt's last token predicts the first completion token, each token the next
            predictor += [n_prompt - 1, *range(start, start + m - 1)]
        sample_of += [k] * m
        column += range(m)
        start += m
    # causal within the prompt; each completion sees the whole prompt and its own earlier tokens
    cols = torch.arange(start)
    span_of = torch.zeros(start, dtype=torch.long)
    for i, (lo, hi) in enumerate(spans):
        span_of[lo:hi] = i
    causal = cols.unsqueeze(0) <= cols.unsqueeze(1)
    same_span = span_of.unsqueeze(0) == span_of.unsqueeze(1)
    mask = causal & (same_span | (cols < n_prompt).unsqueeze(0))
    target = [t for k in range(first, last) for t in samples[k].token_ids]
    return _Block(
        prompt,
        torch.cat(ids),
        torch.cat(text_pos),
        torch.cat(rope_pos, dim=1),
        torch.cat(types),
        mask,
        predictor,
        sample_of,
        column,
        target,
    )


def shared_prefix_batch(
    samples: list[RLSample], rope_index: Callable[..., Any]
) -> tuple[MicroBatch, SharedPrefixLayout]:
    """The micro-batch of `samples` (module docstring): consecutive samples with the same prompt object form
    one block, each block one row. Rows are aligned on the prompts' ends (a shorter prompt is padded on
    the left, a row with fewer completion tokens on the right), so every row's completions start in the
    same column and the kept logit positions of all rows are nearly the same few. A padding position sees
    only itself and no real token sees it. rope_index: the model's `get_rope_index`."""
    blocks: list[_Block] = []
    i = 0
    while i < len(samples):
        j = i
        while j < len(samples) and samples[j].prompt is samples[i].prompt:
            j += 1
        blocks.append(_block(samples, i, j, rope_index))
        i = j
    prompt_width = max((len(b.prompt.input_ids) for b in blocks), default=0)
    length = prompt_width + max((b.length - len(b.prompt.input_ids) for b in blocks), default=0)
    n_rows = len(blocks)
    input_ids = torch.zeros(n_rows, length, dtype=torch.long)
    types = torch.zeros(n_rows, length, dtype=torch.long)
    positions = torch.zeros(4, n_rows, length, dtype=torch.long)
    # padding sees itself: a query row with nothing to attend to would make attention NaN
    mask = torch.eye(length, dtype=torch.bool).repeat(n_rows, 1, 1)
    logit_row: list[int] = []
    logit_col: list[int] = []
    for r, b in enumerate(blocks):
        shift = prompt_width - len(b.prompt.input_ids)
        at = slice(shift, shift + b.length)
        input_ids[r, at] = b.ids
        types[r, at] = b.types
        positions[0, r, at] = b.text_pos
        positions[1:, r, at] = b.rope_pos
        mask[r, at, at] = b.mask
        logit_row += [r] * len(b.predictor)
        logit_col += [shift + p for p in b.predictor]
    cols = torch.tensor(logit_col, dtype=torch.long)
    keep = torch.unique(cols, sorted=True)
    batch = MicroBatch(
        input_ids=input_ids,
        labels=torch.full((n_rows, length), IGNORE_INDEX, dtype=torch.long),
        attention_mask=mask[:, None],
        mm_token_type_ids=types,
        vision=cat_vision([b.prompt for b in blocks]),
        n_samples=len(samples),
        position_ids=positions,
        logit_positions=keep,
        n_padding=n_rows * length - sum(b.length for b in blocks),
    )
    layout = SharedPrefixLayout(
        torch.tensor(logit_row, dtype=torch.long),
        torch.searchsorted(keep, cols),
        torch.tensor([k for b in blocks for k in b.sample_of], dtype=torch.long),
        torch.tensor([c for b in blocks for c in b.column], dtype=torch.long),
        torch.tensor([t for b in blocks for t in b.target], dtype=torch.long),
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
