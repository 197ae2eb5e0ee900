"""From scored rollouts to what the GRPO loss reads: one training sequence per completion, and the
per-token log-probs of a forward's logits.

A completion's sequence is its prompt's encoding (ids, 3D-RoPE token types and vision tensors, encoded
once per group) followed by the sampled ids; the labels are -100 on the prompt and the sampled ids on
the completion, so the SFT machinery (collate, `label_positions`, the shared-vision forward) runs GRPO
micro-batches unchanged and the LM head runs on completion positions only.

Positions: logits at position t predict the token at t + 1, so a completion of P prompt tokens has its
j-th token's log-prob at predictor position P - 1 + j; `label_positions` keeps exactly the positions
some row needs, and `per_token` lays per-completion values (the engine's log-probs) out the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from cosmos_train.data.chat import IGNORE_INDEX, EncodedChat
from cosmos_train.errors import ModelError
from cosmos_train.generation import Completion


@dataclass
class RLSample:
    """One completion to train on."""

    sequence: EncodedChat  # prompt + completion, labels on the completion
    advantage: float
    behav_logprobs: torch.Tensor  # [completion tokens] the engine's, under the sampled distribution
    in_loss: bool = True  # False: the step's loss leaves it out (a truncated completion when masked, padding)


def completion_sequence(prompt: EncodedChat, completion: Completion, origin: str = "") -> EncodedChat:
    """The prompt's encoding + the completion's ids, labelled on the completion. The engine's prompt ids,
    when it reports them, must be the trainer's: else the log-probs would score another sequence."""
    if completion.prompt_token_ids and list(completion.prompt_token_ids) != prompt.input_ids.tolist():
        raise ModelError(
            f"{origin}: the rollout engine encoded the prompt into {len(completion.prompt_token_ids)} ids that "
            f"differ from the trainer's {len(prompt.input_ids)}: the engine and the trainer must use the same "
            "tokenizer, chat template and vision settings (rollout and policy model paths)"
        )
    ids = torch.tensor(completion.token_ids, dtype=torch.long)
    prompt_labels = torch.full_like(prompt.input_ids, IGNORE_INDEX)
    return replace(
        prompt,
        input_ids=torch.cat([prompt.input_ids, ids]),
        labels=torch.cat([prompt_labels, ids]),
        attention_mask=torch.ones(len(prompt.input_ids) + len(ids), dtype=prompt.attention_mask.dtype),
        mm_token_type_ids=torch.cat([prompt.mm_token_type_ids, torch.zeros(len(ids), dtype=prompt.mm_token_type_ids.dtype)]),
    )


def token_logprobs(logits: torch.Tensor, labels: torch.Tensor, positions: torch.Tensor,
                   temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
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


def behav_tensor(completion: Completion) -> torch.Tensor:
    if completion.logprobs is None or len(completion.logprobs) != len(completion.token_ids):
        raise ModelError("the rollout engine returned no per-token log-probs for a completion; GRPO needs them "
                         "(generation engines report them for every sampled token)")
    return torch.tensor(completion.logprobs, dtype=torch.float32)
