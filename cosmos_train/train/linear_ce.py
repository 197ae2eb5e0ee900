"""The LM head and cross entropy fused, a chunk of tokens at a time: the [tokens x vocab] logits are never
held whole.

    loss_sum, n = linear_ce_sum(hidden, lm_head.weight, targets, chunk_rows=2048)   # hidden [N, H], targets [N]

The unfused path (`model(...).logits` at the label positions, then `sft_loss.kept_ce_sum`) holds the logits of
every label token in the compute dtype, their fp32 copy for a stable log-softmax, and in backward a gradient of
the same size: for Qwen2.5-VL's 151,936-token vocabulary and 8,192 label tokens that is ~5 GiB per fp32 copy,
often the largest tensor of an SFT step. Here each chunk of `chunk_rows` tokens computes its logits, its loss
and, in the same pass, its gradient with respect to the hidden states and the head's weight (softmax - one-hot,
the closed form of d CE / d logits), then frees them; backward only scales those gradients by the incoming
one. The peak is one chunk's logits (chunk_rows x vocab in fp32, worked on in place) whatever the number of
tokens, with no recompute: the head's matmuls run once forward and twice for the gradients, as autograd's do.
bench/linear_ce_memory.py measures it (bench/RESULTS.md).
Liger-Kernel's fused linear cross entropy works the same way in Triton (GPU only); this is plain torch, so it
runs on every device the trainer does and is tested on CPU against the unfused loss and gradients.

The loss is a sum over the tokens whose target is not IGNORE (the trainers divide by the step's global token
count, as with `kept_ce_sum`).
"""

from __future__ import annotations

from typing import Any

import torch

from cosmos_train.errors import ConfigError
from cosmos_train.train.sft_loss import IGNORE


def linear_ce_sum(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk_rows: int = 2048
) -> tuple[torch.Tensor, int]:
    """(sum of CE of `targets` under logits = hidden @ weight.T, number of counted tokens): hidden [N, H],
    weight [V, H], targets [N] (IGNORE: not counted). Differentiable in `hidden` and `weight`; equal to
    `F.cross_entropy(hidden @ weight.T, targets, ignore_index=IGNORE, reduction="sum")` in value and gradient."""
    if (
        hidden.dim() != 2
        or weight.dim() != 2
        or hidden.shape[1] != weight.shape[1]
        or targets.shape != hidden.shape[:1]
    ):
        raise ValueError(
            f"linear_ce_sum: hidden [N, H], weight [V, H], targets [N]; got {tuple(hidden.shape)}, "
            f"{tuple(weight.shape)}, {tuple(targets.shape)}"
        )
    if chunk_rows < 1:
        raise ValueError(f"linear_ce_sum: chunk_rows must be >= 1, got {chunk_rows}")
    targets = targets.to(hidden.device)
    n_tokens = int((targets != IGNORE).sum())
    wants_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    if not wants_grad:
        return _chunked(hidden, weight, targets, chunk_rows, need_hidden=False, need_weight=False)[0], n_tokens
    return _LinearCrossEntropy.apply(hidden, weight, targets, chunk_rows), n_tokens


def _chunked(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_rows: int,
    need_hidden: bool,
    need_weight: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(loss sum in fp32, d loss / d hidden or None, d loss / d weight in fp32 or None), one chunk of rows at a time."""
    loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
    grad_hidden = torch.empty_like(hidden) if need_hidden else None
    # accumulated over chunks in fp32 (a bf16 running sum would round every chunk's share)
    grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_weight else None
    for start in range(0, hidden.shape[0], chunk_rows):
        rows = slice(start, start + chunk_rows)
        loss += _chunk(
            hidden[rows], weight, targets[rows], None if grad_hidden is None else grad_hidden[rows], grad_weight
        )
    return loss, grad_hidden, grad_weight


def _chunk(
    h: torch.Tensor,
    weight: torch.Tensor,
    t: torch.Tensor,
    grad_h: torch.Tensor | None,
    grad_weight: torch.Tensor | None,
) -> torch.Tensor:
    """One chunk's CE sum; its d loss / d h written into `grad_h`, its d loss / d weight added to `grad_weight`.
    A function of its own so the chunk's [n, V] buffer is freed before the next chunk allocates one."""
    counted = t != IGNORE
    if not counted.any():
        if grad_h is not None:
            grad_h.zero_()
        return torch.zeros((), dtype=torch.float32, device=h.device)
    # [n, V]: the only vocabulary-wide buffer; everything below works in it in place
    logits = (h @ weight.T).float()
    safe_t = t.clamp(min=0)
    picked = logits.gather(1, safe_t[:, None]).squeeze(1)
    top = logits.amax(dim=-1)
    probs = logits.sub_(top[:, None]).exp_()  # exp(logit - max): logsumexp's shift, without its temporary
    total = probs.sum(dim=-1)
    loss = ((top + total.log() - picked) * counted).sum()
    if grad_h is None and grad_weight is None:
        return loss
    # d CE / d logits = softmax - one_hot(target), zero for ignored rows
    grad_logits = probs.div_(total[:, None])
    grad_logits[torch.arange(t.shape[0], device=t.device), safe_t] -= 1.0
    grad_logits *= counted[:, None]
    if grad_h is not None:
        grad_h.copy_(grad_logits.to(weight.dtype) @ weight)
    if grad_weight is not None:
        grad_weight.addmm_(grad_logits.T, h.float())  # in place: no [V, H] temporary
    return loss


class _LinearCrossEntropy(torch.autograd.Function):
    """Forward computes the loss and both gradients chunk by chunk; backward scales them (the loss is a scalar)."""

    @staticmethod
    def forward(
        ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk_rows: int
    ) -> torch.Tensor:
        loss, grad_hidden, grad_weight = _chunked(
            hidden,
            weight,
            targets,
            chunk_rows,
            need_hidden=ctx.needs_input_grad[0],
            need_weight=ctx.needs_input_grad[1],
        )
        ctx.weight_dtype = weight.dtype
        ctx.save_for_backward(grad_hidden, grad_weight)
        return loss

    @staticmethod
    def backward(ctx: Any, grad_loss: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        grad_hidden, grad_weight = ctx.saved_tensors
        if grad_hidden is not None:
            grad_hidden = grad_hidden * grad_loss.to(grad_hidden.dtype)
        if grad_weight is not None:
            grad_weight = (grad_weight * grad_loss).to(ctx.weight_dtype)
        return grad_hidden, grad_weight, None, None


def head_weight(lm_head: torch.nn.Module) -> torch.Tensor:
    """The LM head's weight [V, H], for `linear_ce_sum`; a head that is more than one bias-free linear map (which
    the fused loss would compute wrongly) is refused naming the key."""
    if type(lm_head) is not torch.nn.Linear or lm_head.bias is not None:
        kind = f"{type(lm_head).__module__}.{type(lm_head).__qualname__}"  # peft's LoRA layer is also "Linear"
        raise ConfigError(
            [
                f"train.fused_linear_ce: the model's lm_head is {kind}"
                f"{' with a bias' if getattr(lm_head, 'bias', None) is not None else ''}; the fused loss "
                "computes a bias-free linear head: set fused_linear_ce = false"
            ]
        )
    return lm_head.weight
