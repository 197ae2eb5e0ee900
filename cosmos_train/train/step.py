"""One optimizer step's mechanics, shared by the SFT and GRPO trainers.

    backward_micro_batches(model, micro, dist, loss_fn)   # forward + backward each micro-batch
    for f in forward_micro_batches(model, micro, dist):   # the same as a flat loop: the caller's loss
        f.backward(my_loss(f.logits, f.keep))
    grad_norm = clip_grad_norm(model, cfg.train.optm_grad_norm_clip)
    applied = apply_update(optimizer, scheduler, finite=math.isfinite(loss) and math.isfinite(grad_norm))

What a trainer computes from a micro-batch's logits (SFT's cross entropy, GRPO's policy loss) is its
own `loss_fn`; everything around it is here: gradient sync on the last micro-batch only, the vision
tower run the same way on every rank, the global grad norm over mixed meshes, and the rule for a step
whose loss or gradient is not finite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor

from cosmos_train.context_parallel import NO_CP, CpGroup
from cosmos_train.distributed import DistInfo
from cosmos_train.train.batching import MicroBatch
from cosmos_train.train.cp_language import local_kept
from cosmos_train.train.sft_loss import label_positions
from cosmos_train.train.vision_forward import forward_micro_batch, media_in_micro_batches

# (index of the micro-batch, the micro-batch on the device, logits at `positions`, positions) -> loss
LossFn = Callable[[int, MicroBatch, torch.Tensor, torch.Tensor], torch.Tensor]
# the same from the last hidden states at `positions` [B, K, H] and the model's lm_head (whose weight is gathered
# while it runs): the loss computes the head itself, e.g. fused with the cross entropy (train/linear_ce.py)
HeadLossFn = Callable[[int, MicroBatch, torch.Tensor, nn.Module, torch.Tensor], torch.Tensor]


def forward_logits(
    model: nn.Module, mb: MicroBatch, run_vision: bool, cp: CpGroup = NO_CP
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(logits at the label positions [B, K, V], those positions [K], the blank-vision loss term or None).
    Only positions some row needs are sent through the LM head (`label_positions`, or the micro-batch's
    own `logit_positions`). With context parallel (`cp`), the positions are those of this rank's slice of the
    sequence (`cp_language.local_kept`), still numbered in the whole sequence."""
    keep = mb.logit_positions if mb.logit_positions is not None else label_positions(mb.labels)
    if not cp.active:
        out, blank = forward_micro_batch(model, mb, run_vision, use_cache=False, logits_to_keep=keep)
        return out.logits, keep, blank
    mine, at = local_kept(keep, mb.input_ids.shape[1], cp)

    def head(hidden: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        return lm_head(hidden[:, at.to(hidden.device)])

    logits, blank = forward_micro_batch(model, mb, run_vision, head=head, cp=cp, use_cache=False)
    return logits, mine, blank


def forward_head_loss(
    model: nn.Module, i: int, mb: MicroBatch, run_vision: bool, head_loss_fn: HeadLossFn, cp: CpGroup = NO_CP
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(`head_loss_fn`'s loss on micro-batch `i`, the blank-vision loss term or None): `forward_logits`'s
    forward with the LM head left to the loss, which sees the hidden states at the same positions."""
    keep = mb.logit_positions if mb.logit_positions is not None else label_positions(mb.labels)
    mine, at = local_kept(keep, mb.input_ids.shape[1], cp)

    def head(hidden: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        return head_loss_fn(i, mb, hidden[:, at.to(hidden.device)], lm_head, mine)

    return forward_micro_batch(model, mb, run_vision, head=head, cp=cp, use_cache=False)


@dataclass
class MicroForward:
    """One micro-batch's forward (`forward_micro_batches`): its logits at the kept positions, for the caller's loss."""

    index: int  # the micro-batch's place in the step
    batch: MicroBatch  # on the device
    logits: torch.Tensor  # [B, K, V] at `keep`
    keep: torch.Tensor  # the positions kept (this rank's slice's with context parallel: `forward_logits`)
    blank: torch.Tensor | None  # the blank-vision loss term, added to the loss's backward

    def backward(self, loss: torch.Tensor) -> None:
        """The loss's gradients (with the blank-vision term) into the parameters."""
        (loss if self.blank is None else loss + self.blank).backward()


def _sync_gradients_on_last(model: nn.Module, i: int, count: int) -> None:
    # reduce-scatter gradients once per step, not once per micro-batch
    if isinstance(model, FSDPModule):  # FSDP2-sharded (one CPU rank runs unsharded)
        model.set_requires_gradient_sync(i == count - 1)


def forward_micro_batches(model: nn.Module, micro: list[MicroBatch], dist: DistInfo) -> Iterator[MicroForward]:
    """Forward every micro-batch in turn: the caller computes its loss and calls `backward` on each before asking for
    the next (`backward_micro_batches`' contract: the same number on every rank, each loss already divided by the
    step's global normaliser, gradient sync on the last one)."""
    run_vision = media_in_micro_batches(micro, dist.device)
    cp = dist.cp_group
    for i, mb in enumerate(micro):
        _sync_gradients_on_last(model, i, len(micro))
        mb = mb.to(dist.device)
        logits, keep, blank = forward_logits(model, mb, run_vision[i], cp)
        yield MicroForward(i, mb, logits, keep, blank)


def backward_micro_batches(
    model: nn.Module,
    micro: list[MicroBatch],
    dist: DistInfo,
    loss_fn: LossFn | None = None,
    head_loss_fn: HeadLossFn | None = None,
) -> None:
    """Forward and backward every micro-batch; gradients accumulate in the parameters.

    Every rank must pass the same number of micro-batches (FSDP's collectives pair up across ranks).
    `loss_fn` (from the logits) or `head_loss_fn` (from the hidden states and the LM head) returns the
    micro-batch's share of the step's loss, already divided by the step's global normaliser, so the
    accumulated gradient is the full batch's whatever the split. With context parallel the ranks of a CP group
    hold the same micro-batches and the loss functions get the positions of their own slice (`forward_logits`):
    each returns its slice's share (FSDP sums the CP ranks' gradients: `distributed.set_data_parallel_average`)."""
    if (loss_fn is None) == (head_loss_fn is None):
        raise ValueError("backward_micro_batches: give exactly one of loss_fn and head_loss_fn")
    if loss_fn is not None:
        for f in forward_micro_batches(model, micro, dist):
            f.backward(loss_fn(f.index, f.batch, f.logits, f.keep))
        return
    assert head_loss_fn is not None  # exactly one of the two, checked above
    run_vision = media_in_micro_batches(micro, dist.device)
    for i, mb in enumerate(micro):
        _sync_gradients_on_last(model, i, len(micro))
        mb = mb.to(dist.device)
        loss, blank = forward_head_loss(model, i, mb, run_vision[i], head_loss_fn, dist.cp_group)
        (loss if blank is None else loss + blank).backward()


def clip_grad_norm(model: nn.Module, clip: float, force_finite: bool = False) -> float:
    """Global grad norm, then clip (clip <= 0: measure only). With TP + FSDP, parameters live on
    different meshes (2D for the language model, 1D for the vision tower), which one foreach norm
    cannot mix: norm each group of gradients sharing a mesh and placement, gather those to plain
    tensors, combine. force_finite (cosmos-rl's grad_clip callback): NaN / inf gradient elements become 0
    first, so one bad element does not make the whole update non-finite."""
    if force_finite:
        for p in model.parameters():
            if p.grad is not None:
                local = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
                torch.nan_to_num_(local, nan=0.0, posinf=0.0, neginf=0.0)
    groups: dict[Any, list[torch.Tensor]] = {}
    for p in model.parameters():
        if p.grad is not None:
            g = p.grad
            key = (g.device_mesh, tuple(g.placements)) if isinstance(g, DTensor) else None
            groups.setdefault(key, []).append(p)
    if not groups:
        return 0.0
    norms = []
    for params in groups.values():
        n = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None], norm_type=2.0, foreach=True)
        norms.append(n.full_tensor() if isinstance(n, DTensor) else n)
    total = torch.linalg.vector_norm(torch.stack(norms))
    if clip > 0:
        for params in groups.values():
            torch.nn.utils.clip_grads_with_norm_(params, clip, total, foreach=True)
    return float(total)


def apply_update(optimizer: torch.optim.Optimizer, scheduler: Any, finite: bool) -> bool:
    """Step the optimizer when the step's loss and grad norm are finite (both global values, so every
    rank agrees), always the scheduler unless None (the caller ticks it: GRPO once a step; a skipped update
    keeps the schedule on step numbers, as AMP's scaler does), then clear the gradients. Returns whether the
    update was applied."""
    if finite:
        optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return finite
