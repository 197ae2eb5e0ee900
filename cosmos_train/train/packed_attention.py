"""Attention for packed rows without a dense mask: each sample of a packed row attends within itself.

    use_packed_attention(model)                # once, when train.sequence_packing is on
    model(**model_inputs(model, packed_mb))    # model_inputs adds the segment bounds (cu_seq_lens_*)

transformers isolates the samples of a packed row (position ids restarting at 0) by building a dense
block-diagonal causal mask of L x L for SDPA and attending over all L^2 pairs, most of them masked: on the
tiny model that made packed training slower than padded (bench/RESULTS.md). Here the language model's
attention is `cosmos_packed_sdpa`, registered with transformers' AttentionInterface: for a packed row it runs
causal SDPA on each sample's slice of the row (`cu_seq_lens_q`, the bounds flash-attention's varlen path takes
too), so the work is sum(L_i^2) and no mask is built (a name transformers has no mask function for gets
none). The result equals the masked attention (tests/unit/test_batching.py). Without segment bounds (a padded
batch) it is SDPA with the padding mask, as `sdpa` is.

flash_attention_2 / 3 are left alone: transformers already runs them varlen from the restarting positions.
The vision tower keeps its own attention (it isolates images and frames by its own cu_seqlens).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

NAME = "cosmos_packed_sdpa"
_REPLACES = ("sdpa", "eager")


def packed_sdpa(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    cu_seq_lens_q: torch.Tensor | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """query [1, H, L, D], key / value [1, H_kv, L, D] -> ([1, L, H, D], None); causal within each segment of
    `cu_seq_lens_q` (cumulative bounds [0, L_1, L_1 + L_2, ..., L]). Without bounds: transformers' SDPA."""
    if cu_seq_lens_q is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if query.shape[0] != 1:
        raise ValueError(f"a packed row has batch size 1, got {query.shape[0]}")
    p = dropout if module.training else 0.0
    out = segment_sdpa(query, key, value, cu_seq_lens_q.tolist(), dropout=p, scaling=scaling)
    return out.transpose(1, 2).contiguous(), None


def segment_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    bounds: list[int],
    dropout: float = 0.0,
    scaling: float | None = None,
) -> torch.Tensor:
    """Causal SDPA within each segment [bounds[i], bounds[i + 1]) of the sequence (dim 2): [B, H, L, D] (key /
    value may have fewer heads, GQA) -> [B, H, L, D]. The work is sum(L_i^2), no mask is built."""
    gqa = key.shape[1] != query.shape[1]
    outs = [
        F.scaled_dot_product_attention(
            query[:, :, s:e],
            key[:, :, s:e],
            value[:, :, s:e],
            dropout_p=dropout,
            is_causal=True,
            scale=scaling,
            enable_gqa=gqa,
        )
        for s, e in zip(bounds[:-1], bounds[1:])
        if e > s
    ]
    return torch.cat(outs, dim=2)


def packed_mask(*, attention_mask: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor | None:
    """SDPA's mask for a padded batch (a 2D padding mask given); none for a packed row, which carries its
    segment bounds instead (model_inputs passes no padding mask for it): the dense L x L mask is never built.
    transformers calls a mask interface with keyword arguments only."""
    if attention_mask is None:
        return None
    return sdpa_mask(attention_mask=attention_mask, **kwargs)


AttentionInterface.register(NAME, packed_sdpa)
ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, packed_mask)


def language_config(model: nn.Module) -> Any:
    config = model.config
    return getattr(config, "text_config", None) or config


def use_packed_attention(model: nn.Module) -> bool:
    """Switch the language model's attention to `cosmos_packed_sdpa` where it is SDPA or eager; True if
    switched (flash attention stays: it is varlen already)."""
    config = language_config(model)
    if getattr(config, "_attn_implementation", None) not in _REPLACES:
        return False
    config._attn_implementation = NAME
    return True


def segment_bounds(lengths: list[int]) -> dict[str, Any]:
    """The flash-attention varlen keywords of a packed row made of samples of `lengths` tokens, for
    `packed_sdpa`: the bounds stay on the CPU, so reading them in every layer costs no device sync."""
    bounds = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    longest = max(lengths)
    return {"cu_seq_lens_q": bounds, "cu_seq_lens_k": bounds, "max_length_q": longest, "max_length_k": longest}
