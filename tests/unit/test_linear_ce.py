"""The fused LM head + cross entropy (train/linear_ce.py) against torch's unfused one: values and gradients,
chunk sizes below, at and above the token count, ignored tokens and wholly ignored chunks, a frozen head,
bf16, and a loss scaled after it (gradient accumulation divides it by the step's token count)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cosmos_train.errors import ConfigError
from cosmos_train.train.linear_ce import head_weight, linear_ce_sum
from cosmos_train.train.sft_loss import IGNORE


def _inputs(n: int = 11, h: int = 8, v: int = 37, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g) * 2
    weight = torch.randn(v, h, generator=g)
    targets = torch.randint(0, v, (n,), generator=g)
    targets[[1, 4, 5]] = IGNORE
    return hidden, weight, targets


def _reference(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy((hidden @ weight.T).float(), targets, ignore_index=IGNORE, reduction="sum")


@pytest.mark.parametrize("chunk", [1, 3, 4, 11, 64])
def test_value_and_gradients_equal_the_unfused_loss(chunk: int) -> None:
    hidden, weight, targets = _inputs()
    h_ref, w_ref = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    ref = _reference(h_ref, w_ref, targets)
    (ref * 0.37).backward()  # scaled afterwards, as the trainers scale by dp_size / global tokens
    h_new, w_new = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss, n = linear_ce_sum(h_new, w_new, targets, chunk_rows=chunk)
    (loss * 0.37).backward()
    assert n == 8 and loss.dtype == torch.float32
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(h_new.grad, h_ref.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w_new.grad, w_ref.grad, rtol=1e-5, atol=1e-6)
    assert not h_new.grad[[1, 4, 5]].any()  # ignored tokens get no gradient


def test_hand_computed_value() -> None:
    # two tokens, vocabulary of 2, hidden of 1: logits (2, 0) and (-2, 0), both targets 0:
    # CE = log(1 + e^-2) + log(1 + e^2)
    hidden, weight = torch.tensor([[1.0], [-1.0]]), torch.tensor([[2.0], [0.0]])
    loss, n = linear_ce_sum(hidden, weight, torch.tensor([0, 0]), chunk_rows=1)
    want = (torch.log(1 + torch.exp(torch.tensor(-2.0))) + torch.log(1 + torch.exp(torch.tensor(2.0)))).item()
    assert n == 2 and loss.item() == pytest.approx(want, rel=1e-6)


def test_a_chunk_of_ignored_tokens_and_a_frozen_head() -> None:
    hidden, weight, targets = _inputs()
    targets[:4] = IGNORE  # the first chunk of 4 counts nothing
    h_ref = hidden.clone().requires_grad_()
    _reference(h_ref, weight, targets).backward()
    h_new = hidden.clone().requires_grad_()
    frozen = weight.clone()  # LoRA: the head takes no gradient, the hidden states still do
    loss, _ = linear_ce_sum(h_new, frozen, targets, chunk_rows=4)
    loss.backward()
    assert frozen.grad is None and not h_new.grad[:4].any()
    torch.testing.assert_close(h_new.grad, h_ref.grad, rtol=1e-5, atol=1e-6)


def test_no_grad_gives_the_value_only() -> None:
    hidden, weight, targets = _inputs()
    with torch.no_grad():
        loss, n = linear_ce_sum(hidden.requires_grad_(), weight, targets, chunk_rows=2)
    assert not loss.requires_grad and n == 8
    torch.testing.assert_close(loss, _reference(hidden, weight, targets), rtol=1e-6, atol=1e-5)


def test_bf16_matches_the_unfused_bf16_loss() -> None:
    hidden, weight, targets = (t.bfloat16() if t.is_floating_point() else t for t in _inputs(n=64, h=32, v=300))
    h_ref, w_ref = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    ref = _reference(h_ref, w_ref, targets)
    ref.backward()
    h_new, w_new = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss, _ = linear_ce_sum(h_new, w_new, targets, chunk_rows=16)
    loss.backward()
    assert h_new.grad.dtype == w_new.grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=1e-3)  # the same bf16 logits, upcast the same way
    # the head's gradient is accumulated over chunks in fp32 here, in one bf16 matmul there: bf16 rounding apart
    torch.testing.assert_close(h_new.grad.float(), h_ref.grad.float(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(w_new.grad.float(), w_ref.grad.float(), rtol=2e-2, atol=5e-2)


def test_bad_shapes_and_heads_are_refused() -> None:
    hidden, weight, targets = _inputs()
    with pytest.raises(ValueError, match="hidden \\[N, H\\]"):
        linear_ce_sum(hidden, weight[:, :5], targets)
    with pytest.raises(ValueError, match="chunk_rows"):
        linear_ce_sum(hidden, weight, targets, chunk_rows=0)
    assert head_weight(torch.nn.Linear(8, 37, bias=False)).shape == (37, 8)
    with pytest.raises(ConfigError, match="the model's lm_head is torch.nn.modules.linear.Linear with a bias"):
        head_weight(torch.nn.Linear(8, 37))

    class Linear(torch.nn.Linear):  # named like the plain layer, as peft's LoRA layer is: the message tells them apart
        pass

    with pytest.raises(ConfigError, match="lm_head is test_linear_ce.test_bad_shapes_and_heads_are_refused.<locals>"):
        head_weight(Linear(8, 37, bias=False))
