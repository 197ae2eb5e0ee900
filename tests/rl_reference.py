"""The separate layout of GRPO sequences (prompt + one completion each, labelled on the completion): the
reference `cosmos_train.train.rl_batch.shared_prefix_batch` is tested against (log-probs, gradients) and
the layout of the engine log-prob test; kept out of the library, where nothing uses it."""

from __future__ import annotations

from dataclasses import replace

import torch

from cosmos_train.data.chat import IGNORE_INDEX, EncodedChat
from cosmos_train.generation import Completion
from cosmos_train.train.rl_batch import check_prompt_ids


def completion_sequence(prompt: EncodedChat, completion: Completion, origin: str = "") -> EncodedChat:
    """The prompt's encoding + the completion's ids, labelled on the completion (checked as in
    `check_prompt_ids`)."""
    check_prompt_ids(prompt, completion, origin)
    ids = torch.tensor(completion.token_ids, dtype=torch.long)
    prompt_labels = torch.full_like(prompt.input_ids, IGNORE_INDEX)
    return replace(
        prompt,
        input_ids=torch.cat([prompt.input_ids, ids]),
        labels=torch.cat([prompt_labels, ids]),
        attention_mask=torch.ones(len(prompt.input_ids) + len(ids), dtype=prompt.attention_mask.dtype),
        mm_token_type_ids=torch.cat(
            [prompt.mm_token_type_ids, torch.zeros(len(ids), dtype=prompt.mm_token_type_ids.dtype)]
        ),
    )


def token_logprobs(
    logits: torch.Tensor, labels: torch.Tensor, positions: torch.Tensor, temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-prob of each label under softmax(logits / temperature) [B, K], mask of label positions [B, K]).
    logits [B, K, V] are those at `positions` (predicting labels at positions + 1). Temperature 0 (greedy
    sampling) scores under temperature 1, as the engines report greedy log-probs."""
    targets = labels[:, positions + 1].to(logits.device)
    mask = targets != IGNORE_INDEX
    scaled = logits.float()
    if temperature > 0 and temperature != 1:
        scaled = scaled / temperature
    picked = scaled.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(scaled, dim=-1), mask


def per_token(values: list[torch.Tensor], prompt_lengths: list[int], positions: torch.Tensor) -> torch.Tensor:
    """Per-completion token values (row b: its completion's tokens in order) laid out like
    `token_logprobs`' output [B, K]; zeros where a row has no token."""
    out = torch.zeros(len(values), positions.numel(), dtype=torch.float32, device=positions.device)
    for b, (v, plen) in enumerate(zip(values, prompt_lengths)):
        if v.numel():
            at = torch.arange(v.numel(), device=positions.device) + (plen - 1)
            out[b, torch.searchsorted(positions, at)] = v.to(out.device, out.dtype)
    return out
