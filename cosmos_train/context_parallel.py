"""Context parallel (Ulysses): one sequence split over the ranks of a CP group, for the DiT and the VLM trainers.

Each rank of a CP group holds a contiguous 1/cp slice of every sequence (`split_sequence`). Attention needs the
whole sequence, so `ulysses_attention` does one all-to-all that trades the sequence split for a head split (each
rank then has heads/cp of the heads over the whole sequence), runs the ordinary attention (sdpa, with the mask or
varlen information of the whole sequence: nothing about the attention itself changes), and one all-to-all back.
`gather_sequence` puts the slices back together where a whole sequence is needed (before unpatchify, or for a
loss that is not a sum over tokens).

Why Ulysses and not ring attention: the attention kernel is the ordinary one, so masks, document boundaries of
packed rows (varlen), GQA and sdpa's backends work unchanged and the result equals cp = 1 to rounding; the
communication is two all-to-alls of the activations per attention (independent of cp), against ring's cp - 1
exchanges of K/V. Its limit is that the (query and key/value) heads must divide by cp; key/value heads that do
not are repeated to the query heads first (GQA), and a config whose query heads do not divide is refused.

Gradients: every collective here is a differentiable autograd Function (all-to-all's adjoint is the inverse
all-to-all; gather's backward is this rank's slice of the gradient, no sum). So each CP rank's backward gives
the gradient of ITS tokens' share of the loss; the shares of one CP group add up to the sequence's gradient,
which the FSDP reduction over the CP ranks sums (distributed.py: the FSDP mesh is dp_shard x cp flattened and
`set_data_parallel_average` makes FSDP divide by the data-parallel ranks only). Replicated computations before
the split (embeddings of the whole sequence, the timestep embedding, text) get only the part of the gradient
that flows through this rank's slice, which is again the right share.

With a size-1 group (or `NO_CP`) every function here is the identity: code paths need no `if cp`.
Works on gloo (CPU) and nccl (GPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class CpGroup:
    """The CP group of this rank: `group` None (or size 1) means no context parallel."""

    group: dist.ProcessGroup | None
    size: int
    rank: int

    @property
    def active(self) -> bool:
        return self.size > 1


NO_CP = CpGroup(None, 1, 0)


def _all_to_all(x: Tensor, scatter_dim: int, gather_dim: int, cp: CpGroup) -> Tensor:
    """x split into cp chunks along scatter_dim, chunk j sent to rank j; the chunks received (one per rank, in
    rank order) concatenated along gather_dim."""
    send = torch.stack([c.contiguous() for c in x.chunk(cp.size, dim=scatter_dim)])
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=cp.group)
    return torch.cat(recv.unbind(0), dim=gather_dim)


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, scatter_dim: int, gather_dim: int, cp: CpGroup) -> Tensor:
        ctx.dims, ctx.cp = (scatter_dim, gather_dim), cp
        return _all_to_all(x, scatter_dim, gather_dim, cp)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        scatter_dim, gather_dim = ctx.dims
        return _all_to_all(grad, gather_dim, scatter_dim, ctx.cp), None, None, None


def all_to_all(x: Tensor, scatter_dim: int, gather_dim: int, cp: CpGroup) -> Tensor:
    """Differentiable all-to-all over the CP group (the identity at size 1); x.shape[scatter_dim] % cp == 0."""
    if not cp.active:
        return x
    if x.shape[scatter_dim] % cp.size:
        raise ValueError(
            f"all_to_all: dim {scatter_dim} of size {x.shape[scatter_dim]} does not divide by cp {cp.size}"
        )
    return _AllToAll.apply(x, scatter_dim, gather_dim, cp)


def ulysses_attention(
    q: Tensor, k: Tensor, v: Tensor, cp: CpGroup, attend: Callable[[Tensor, Tensor, Tensor], Tensor]
) -> Tensor:
    """Attention over the whole sequence from this rank's slice of it.

    q, k, v: [B, H, S_local, D] (sdpa's layout; k / v may have fewer heads, GQA). `attend(q, k, v)` gets
    [B, H/cp, S, D] (the whole sequence, this rank's heads) and returns [B, H/cp, S, Dv]; the result is
    [B, H, S_local, Dv]. Key/value heads that do not divide by cp are repeated to the query heads first.
    """
    if not cp.active:
        return attend(q, k, v)
    hq, hk = q.shape[1], k.shape[1]
    if hq % cp.size:
        raise ValueError(f"ulysses_attention: {hq} attention heads do not divide by context_parallel_size {cp.size}")
    if hk != hq and hk % cp.size:
        # the groups stay aligned: query head h uses key/value head h // (hq / hk) before and after
        k, v = k.repeat_interleave(hq // hk, dim=1), v.repeat_interleave(hq // hk, dim=1)
    q, k, v = (all_to_all(t, 1, 2, cp) for t in (q, k, v))
    return all_to_all(attend(q, k, v), 2, 1, cp)


class _Split(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, dim: int, cp: CpGroup) -> Tensor:
        ctx.dim, ctx.cp, ctx.full = dim, cp, x.shape[dim]
        return x.chunk(cp.size, dim=dim)[cp.rank].contiguous()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        # the other ranks' slices do not depend on this rank's loss share: zeros there (their ranks add theirs)
        shape = list(grad.shape)
        shape[ctx.dim] = ctx.full
        out = grad.new_zeros(shape)
        out.narrow(ctx.dim, ctx.cp.rank * grad.shape[ctx.dim], grad.shape[ctx.dim]).copy_(grad)
        return out, None, None


def split_sequence(x: Tensor, dim: int, cp: CpGroup) -> Tensor:
    """This rank's contiguous 1/cp slice of x along dim (x.shape[dim] % cp == 0: `pad_to_multiple` first).
    Backward: the gradient of this slice in place, zeros elsewhere."""
    if not cp.active:
        return x
    if x.shape[dim] % cp.size:
        raise ValueError(
            f"split_sequence: length {x.shape[dim]} does not divide by context_parallel_size {cp.size} "
            "(pad_to_multiple first)"
        )
    return _Split.apply(x, dim, cp)


class _Gather(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, dim: int, cp: CpGroup) -> Tensor:
        ctx.dim, ctx.cp = dim, cp
        parts = [torch.empty_like(x) for _ in range(cp.size)]
        dist.all_gather(parts, x.contiguous(), group=cp.group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        # every rank holds the gathered tensor and its own loss share's gradient of it: this rank's slice only
        return grad.chunk(ctx.cp.size, dim=ctx.dim)[ctx.cp.rank].contiguous(), None, None


def gather_sequence(x: Tensor, dim: int, cp: CpGroup) -> Tensor:
    """All ranks' slices along dim, in rank order (every slice the same size). Backward: this rank's slice of the
    gradient (not summed over ranks: see the module docstring)."""
    if not cp.active:
        return x
    return _Gather.apply(x, dim, cp)


def pad_to_multiple(x: Tensor, dim: int, multiple: int, value: float = 0) -> tuple[Tensor, int]:
    """x padded at the end of dim with `value` to a multiple of `multiple`; returns (padded, n_pad)."""
    n_pad = -x.shape[dim] % multiple
    if n_pad == 0:
        return x, 0
    pad = [0, 0] * (x.dim() - dim % x.dim() - 1) + [0, n_pad]
    return F.pad(x, pad, value=value), n_pad
