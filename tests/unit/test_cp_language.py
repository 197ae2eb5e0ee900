"""The VLM context-parallel helpers that need no process group: which kept positions a rank holds, and the whole
sequence's attention layout (padding masks, GRPO's 4D mask, packed bounds, the cp padding) as `cp_sdpa` runs it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from cosmos_train.context_parallel import NO_CP, CpGroup
from cosmos_train.train.cp_language import CpAttention, KeptSlice, attention_layout, cp_sdpa, local_kept


def test_each_kept_position_belongs_to_one_rank_in_its_slice() -> None:
    keep = torch.tensor([0, 3, 4, 5, 9, 10])
    length, cp = 11, 4  # padded to 12: slices of 3
    seen = []
    for rank in range(cp):
        mine, at = local_kept(keep, length, CpGroup(None, cp, rank))
        assert ((at >= 0) & (at < 3)).all() and torch.equal(mine, at + 3 * rank)
        seen += mine.tolist()
    assert seen == keep.tolist()
    assert all(torch.equal(t, keep) for t in local_kept(keep, length, NO_CP))


def test_kept_slice_locates_the_rows_of_this_rank() -> None:
    positions = torch.tensor([2, 5, 7, 8])
    kept = KeptSlice(CpGroup(None, 2, 1), positions, mine=torch.tensor([7, 8]))  # rank 1 of 2, length 12
    held, rows = kept.locate(torch.tensor([0, 2, 3, 3, 1]))  # tokens predicted at positions 2, 7, 8, 8, 5
    assert held.tolist() == [False, True, True, True, False] and rows.tolist() == [0, 1, 1]
    none = KeptSlice(CpGroup(None, 2, 0), positions, mine=torch.tensor([], dtype=torch.long))
    held, rows = none.locate(torch.tensor([0, 1]))
    assert not held.any() and rows.numel() == 0


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: CpAttention) -> torch.Tensor:
    return cp_sdpa(torch.nn.Module(), q, k, v, None, scaling=0.5, cp_attention=layout)[0]


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """Attention with the padding mask `keys` [B, S] and causality, key/value heads repeated: [B, S, H, D]."""
    s = q.shape[2]
    mask = torch.tril(torch.ones(s, s, dtype=torch.bool)) & keys.bool()[:, None, None, :]
    k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.5).transpose(1, 2)


def test_layouts_attend_as_the_padding_mask_does() -> None:
    torch.manual_seed(0)
    b, h, s, d = 2, 4, 7, 8
    q, k, v = torch.randn(b, h, s, d), torch.randn(b, 2, s, d), torch.randn(b, 2, s, d)
    # a left-padded row and a full one: the dense causal & key mask (padding queries see themselves)
    left = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [1] * 7])
    layout = attention_layout(left, None, s, 0, NO_CP)
    assert layout.mask is not None
    real = left.bool()
    assert torch.allclose(_attend(q, k, v, layout)[real], _reference(q, k, v, left)[real], atol=1e-6)
    # right padding: plain causal attention, the same for every real token
    right = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1] * 7])
    layout = attention_layout(right, None, s, 0, NO_CP)
    assert layout.mask is None and layout.bounds is None
    real = right.bool()
    assert torch.allclose(_attend(q, k, v, layout)[real], _reference(q, k, v, right)[real], atol=1e-6)
    # a packed row of samples 3 and 4 long: each causal within itself
    packed = _attend(q[:1], k[:1], v[:1], CpAttention(NO_CP, bounds=[0, 3, 7]))
    first = _reference(q[:1, :, :3], k[:1, :, :3], v[:1, :, :3], torch.ones(1, 3))
    second = _reference(q[:1, :, 3:], k[:1, :, 3:], v[:1, :, 3:], torch.ones(1, 4))
    assert torch.allclose(packed, torch.cat([first, second], dim=1), atol=1e-6)


def test_cp_padding_extends_masks_and_bounds_without_touching_real_tokens() -> None:
    s, n_pad = 5, 3
    four_d = torch.tril(torch.ones(s, s, dtype=torch.bool))[None, None].repeat(2, 1, 1, 1)
    four_d[1, 0, 4, :3] = False  # GRPO's layout: a completion token not seeing another completion
    mask = attention_layout(four_d, None, s, n_pad, NO_CP).mask
    assert mask is not None and mask.shape == (2, 1, 8, 8)
    assert torch.equal(mask[:, :, :s, :s], four_d)
    assert not mask[:, :, :s, s:].any() and not mask[:, :, s:, :s].any()  # no real token sees padding, nor back
    assert torch.equal(mask[0, 0, s:, s:], torch.eye(n_pad, dtype=torch.bool))  # padding sees itself only
    bounds = attention_layout(None, torch.tensor([0, 2, 5], dtype=torch.int32), s, n_pad, NO_CP).bounds
    assert bounds == [0, 2, 5, 8]
    additive = torch.zeros(1, 1, s, s).masked_fill(~torch.tril(torch.ones(s, s, dtype=torch.bool)), -1e9)
    mask = attention_layout(additive, None, s, 0, NO_CP).mask
    assert mask is not None and torch.equal(mask[0, 0], torch.tril(torch.ones(s, s, dtype=torch.bool)))
