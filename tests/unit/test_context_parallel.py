"""Context parallel core (cosmos_train/context_parallel.py, the cp mesh of distributed.py) on 2 gloo processes:
Ulysses attention and the sequence split / gather against plain sdpa on the whole sequence, values and gradients."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from cosmos_train.context_parallel import (
    NO_CP,
    CpGroup,
    gather_sequence,
    pad_to_multiple,
    split_sequence,
    ulysses_attention,
)
from cosmos_train.net import free_port
from tests.spawn_ranks import spawn_ranks

WORLD = 2
ATOL = RTOL = 1e-5


def _sum_over_ranks(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    dist.all_reduce(t)
    return t


def _check_attention(cp: CpGroup, kv_heads: int, causal: bool) -> None:
    torch.manual_seed(0)  # the same whole sequence on every rank
    b, h, s, d = 2, 4, 8, 8
    q = torch.randn(b, h, s, d, requires_grad=True)
    k = torch.randn(b, kv_heads, s, d, requires_grad=True)
    v = torch.randn(b, kv_heads, s, d, requires_grad=True)
    w = torch.randn(b, h, s, d)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1])

    ref = attend(q, k, v)
    grads_ref = torch.autograd.grad((ref * w).sum(), (q, k, v))

    ql, kl, vl = (split_sequence(t, 2, cp) for t in (q, k, v))
    local = ulysses_attention(ql, kl, vl, cp, attend)
    assert local.shape == (b, h, s // cp.size, d)
    torch.testing.assert_close(local, split_sequence(ref, 2, cp).detach(), atol=ATOL, rtol=RTOL)
    # the loss of this rank's tokens only: the ranks' gradients add up to the whole sequence's
    grads = torch.autograd.grad((local * split_sequence(w, 2, cp)).sum(), (q, k, v))
    for g, g_ref in zip(grads, grads_ref):
        torch.testing.assert_close(_sum_over_ranks(g), g_ref, atol=ATOL, rtol=RTOL)
    # gathered output, the whole loss on every rank: the same, with gather's backward taking this rank's slice
    ql, kl, vl = (split_sequence(t, 2, cp) for t in (q, k, v))
    out = gather_sequence(ulysses_attention(ql, kl, vl, cp, attend), 2, cp)
    torch.testing.assert_close(out, ref, atol=ATOL, rtol=RTOL)
    grads = torch.autograd.grad((out * w).sum(), (q, k, v))
    for g, g_ref in zip(grads, grads_ref):
        torch.testing.assert_close(_sum_over_ranks(g), g_ref, atol=ATOL, rtol=RTOL)


def _check_split_gather(cp: CpGroup) -> None:
    torch.manual_seed(1)
    x = torch.randn(3, 6, 5, requires_grad=True)
    w = torch.randn(3, 6, 5)
    mine = split_sequence(x, 1, cp)
    assert mine.shape == (3, 3, 5)
    torch.testing.assert_close(mine, x[:, cp.rank * 3 : (cp.rank + 1) * 3])
    back = gather_sequence(mine, 1, cp)
    torch.testing.assert_close(back, x)
    (g,) = torch.autograd.grad((back * w).sum(), (x,))
    expected = torch.zeros_like(w)
    expected[:, cp.rank * 3 : (cp.rank + 1) * 3] = w[:, cp.rank * 3 : (cp.rank + 1) * 3]
    torch.testing.assert_close(g, expected)
    torch.testing.assert_close(_sum_over_ranks(g), w)
    with pytest.raises(ValueError, match="does not divide"):
        split_sequence(torch.zeros(2, 5), 1, cp)


def _check_mesh_and_fsdp() -> None:
    """init_distributed at cp = 2: one data-parallel rank, the CP group, and FSDP over the CP ranks whose
    gradient is the whole sequence's (set_data_parallel_average sums the CP ranks' shares)."""
    from torch.distributed.fsdp import fully_shard

    from cosmos_train.config import ParallelismConfig
    from cosmos_train.distributed import init_distributed, set_data_parallel_average

    info = init_distributed(ParallelismConfig(cp_size=2))
    assert (info.dp_size, info.dp_rank, info.cp) == (1, 0, 2)
    cp = info.cp_group
    assert (cp.size, cp.rank) == (2, info.rank)
    assert info.dp_mesh.size() == 2
    torch.manual_seed(2)
    lin = torch.nn.Linear(4, 3)
    ref = torch.nn.Linear(4, 3)
    ref.load_state_dict(lin.state_dict())
    x, w = torch.randn(2, 6, 4), torch.randn(2, 6, 3)
    (ref(x) * w).sum().backward()
    fully_shard(lin, mesh=info.dp_mesh)
    set_data_parallel_average(lin, info)
    (lin(split_sequence(x, 1, cp)) * split_sequence(w, 1, cp)).sum().backward()
    for p, p_ref in zip(lin.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.full_tensor(), p_ref.grad, atol=ATOL, rtol=RTOL)  # type: ignore[union-attr]


def _worker(rank: int, port: int) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(WORLD), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    cp = CpGroup(dist.group.WORLD, WORLD, rank)
    for kv_heads, causal in ((4, False), (4, True), (2, True), (1, False)):  # MHA, GQA that divides, repeat
        _check_attention(cp, kv_heads, causal)
    _check_split_gather(cp)
    _check_mesh_and_fsdp()
    dist.barrier()  # both ranks done talking before either leaves (a peer gone mid-collective aborts gloo)
    dist.destroy_process_group()


def test_ulysses_split_gather_and_mesh_on_two_processes() -> None:
    spawn_ranks(_worker, free_port(), nprocs=WORLD)


def test_no_cp_is_identity_and_padding() -> None:
    x = torch.randn(2, 5, 3)
    assert split_sequence(x, 1, NO_CP) is x and gather_sequence(x, 1, NO_CP) is x
    q = torch.randn(1, 2, 5, 4)
    torch.testing.assert_close(
        ulysses_attention(q, q, q, NO_CP, F.scaled_dot_product_attention), F.scaled_dot_product_attention(q, q, q)
    )
    padded, n = pad_to_multiple(x, 1, 4, value=-1.0)
    assert n == 3 and padded.shape == (2, 8, 3) and bool((padded[:, 5:] == -1).all())
    torch.testing.assert_close(padded[:, :5], x)
    same, n = pad_to_multiple(x, -1, 3)
    assert n == 0 and same is x
    padded, n = pad_to_multiple(x, -1, 4)
    assert n == 1 and padded.shape == (2, 5, 4)
