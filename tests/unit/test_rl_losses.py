"""GRPO advantages and policy loss against values computed by hand (in the comments)."""

from __future__ import annotations

import math

import pytest
import torch

from cosmos_train.train.rl_losses import (
    PolicyLossConfig,
    aggregate,
    group_advantages,
    k3_kl,
    policy_loss,
    token_entropy,
    zero_std_groups,
)


def test_group_advantages_grpo_and_dr_grpo() -> None:
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1])
    # group 1: mean 0.25; population std (np.std, cosmos-rl's) = sqrt((0.75^2 + 3 * 0.25^2) / 4) = sqrt(3) / 4
    adv = group_advantages(rewards, 4)
    assert adv[:4].tolist() == pytest.approx(
        [3 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3), -1 / math.sqrt(3)], abs=1e-5
    )
    # the sample std (TRL's, advantage_std = "sample") = sqrt((0.75^2 + 3 * 0.25^2) / 3) = 0.5
    assert group_advantages(rewards, 4, std="sample")[:4].tolist() == pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-5)
    assert adv[4:].tolist() == [0, 0, 0, 0]  # all equal: no signal
    assert group_advantages(rewards, 4, scale_by_std=False)[:4].tolist() == [0.75, -0.25, -0.25, -0.25]
    assert zero_std_groups(rewards, 4).tolist() == [False, True]
    assert group_advantages(torch.tensor([3.0, 5.0]), 1).tolist() == [0.0, 0.0]


def _logp(ratios: list[float]) -> torch.Tensor:
    return torch.log(torch.tensor([ratios]))  # old log-probs are 0, so ratio = exp(logp)


def test_clip_low_high_and_dual_clip_by_hand() -> None:
    cfg = PolicyLossConfig(epsilon_low=0.2, epsilon_high=0.28, dual_clip=3.0)
    old = torch.zeros(1, 4)
    mask = torch.ones(1, 4)
    # A = +1, ratios 1.5, 1, 0.5, 4: min(r, clip(r, 0.8, 1.28)) = 1.28, 1, 0.5, 1.28 -> loss -(4.06) / 4
    loss, m = policy_loss(_logp([1.5, 1.0, 0.5, 4.0]), old, torch.tensor([1.0]), mask, cfg)
    assert loss.item() == pytest.approx(-(1.28 + 1 + 0.5 + 1.28) / 4)
    assert m["clip_high_fraction"] == 0.5 and m["clip_low_fraction"] == 0 and m["dual_clip_fraction"] == 0
    assert m["ratio_mean"] == pytest.approx(7 / 4) and m["ratio_max"] == pytest.approx(4)
    # A = -1: max(r, clip(r)) = 1.5, 1, 0.8 (clipped low), 4 -> dual clip bounds it at c = 3
    loss, m = policy_loss(_logp([1.5, 1.0, 0.5, 4.0]), old, torch.tensor([-1.0]), mask, cfg)
    assert loss.item() == pytest.approx((1.5 + 1 + 0.8 + 3) / 4)
    assert m["clip_low_fraction"] == 0.25 and m["dual_clip_fraction"] == 0.25 and m["clip_high_fraction"] == 0
    no_dual = PolicyLossConfig(epsilon_low=0.2, epsilon_high=0.28, dual_clip=None)
    loss, _ = policy_loss(_logp([1.5, 1.0, 0.5, 4.0]), old, torch.tensor([-1.0]), mask, no_dual)
    assert loss.item() == pytest.approx((1.5 + 1 + 0.8 + 4) / 4)


def test_gradient_only_through_unclipped_tokens() -> None:
    logp = _logp([1.5, 1.0]).requires_grad_(True)
    loss, _ = policy_loss(
        logp,
        torch.zeros(1, 2),
        torch.tensor([2.0]),
        torch.ones(1, 2),
        PolicyLossConfig(epsilon_low=0.2, epsilon_high=0.2),
    )
    loss.backward()
    # token 0 is clipped (1.5 > 1.2): no gradient; token 1: d(-r * A / 2)/dlogp = -r * A / 2 = -1
    assert logp.grad[0].tolist() == pytest.approx([0.0, -1.0])


def test_aggregations_by_hand() -> None:
    per_token = torch.tensor([[1.0, 2, 3], [4, 9, 9]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert aggregate(per_token, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate(per_token, mask, "token-mean", normaliser=8).item() == pytest.approx(10 / 8)
    assert aggregate(per_token, mask, "seq-mean-token-mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate(per_token, mask, "seq-mean-token-mean", max_tokens=4).item() == pytest.approx((6 / 4 + 4 / 4) / 2)
    assert aggregate(per_token, mask, "seq-mean-token-sum").item() == pytest.approx(10 / 2)
    assert aggregate(per_token, mask, "token-sum").item() == pytest.approx(10)


@pytest.mark.parametrize("loss_type", ["token-mean"])
def test_micro_batches_with_the_global_normaliser_sum_to_the_full_batch(loss_type: str) -> None:
    """loss_denominator = "update" (ours): token-mean with the update's token count splits exactly."""
    gen = torch.Generator().manual_seed(0)
    logp = (torch.randn(4, 5, generator=gen) * 0.1).requires_grad_(True)
    old = torch.randn(4, 5, generator=gen) * 0.1
    adv = torch.tensor([1.0, -0.5, 2.0, -1.0])
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 0, 0, 0]])
    cfg = PolicyLossConfig(loss_type=loss_type)  # type: ignore[arg-type]
    norm = float(mask.sum())
    full, _ = policy_loss(logp, old, adv, mask, cfg, normaliser=norm)
    (full_grad,) = torch.autograd.grad(full, logp)
    total = 0.0
    grad = torch.zeros_like(logp)
    for rows in ([0, 1], [2, 3]):
        part, _ = policy_loss(logp[rows], old[rows], adv[rows], mask[rows], cfg, normaliser=norm)
        total += part.item()
        grad += torch.autograd.grad(part, logp)[0]
    assert total == pytest.approx(full.item(), abs=1e-7)
    assert torch.allclose(grad, full_grad, atol=1e-8)


def test_k3_kl_and_kl_term() -> None:
    logp, ref = torch.log(torch.tensor([[0.5]])), torch.log(torch.tensor([[0.25]]))
    # ref - logp = log 0.5: exp(.) - (.) - 1 = 0.5 + 0.693147 - 1
    assert k3_kl(logp, ref).item() == pytest.approx(0.5 + math.log(2) - 1)
    assert k3_kl(logp, logp).item() == 0
    cfg = PolicyLossConfig(kl_beta=0.1)
    base, _ = policy_loss(logp, logp, torch.tensor([1.0]), torch.ones(1, 1), PolicyLossConfig())
    loss, m = policy_loss(logp, logp, torch.tensor([1.0]), torch.ones(1, 1), cfg, ref_logprobs=ref)
    assert m["kl"] == pytest.approx(0.5 + math.log(2) - 1)
    assert loss.item() == pytest.approx(base.item() + 0.1 * (0.5 + math.log(2) - 1))
    # each token's term is clamped to 10 (cosmos-rl): ref - logp = 20 would give e^20 - 21
    far, m = policy_loss(logp, logp, torch.tensor([1.0]), torch.ones(1, 1), cfg, ref_logprobs=logp + 20)
    assert m["kl"] == 10.0 and far.item() == pytest.approx(base.item() + 0.1 * 10)


def test_decoupled_importance_weight_and_its_cap() -> None:
    logp = torch.zeros(1, 2)
    behav = torch.log(torch.tensor([[1 / 3, 1 / 1.5]]))  # old/behav = 3 (over the cap 2: zeroed) and 1.5
    loss, m = policy_loss(
        logp,
        torch.zeros(1, 2),
        torch.tensor([1.0]),
        torch.ones(1, 2),
        PolicyLossConfig(decoupled=True, is_cap=2.0),
        behav_logprobs=behav,
    )
    assert loss.item() == pytest.approx(-(0 + 1.5) / 2)
    assert m["is_capped_fraction"] == 0.5 and m["is_weight_mean"] == pytest.approx(0.75)
    loss, _ = policy_loss(
        logp,
        torch.zeros(1, 2),
        torch.tensor([1.0]),
        torch.ones(1, 2),
        PolicyLossConfig(decoupled=True),
        behav_logprobs=behav,
    )
    assert loss.item() == pytest.approx(-(3 + 1.5) / 2)  # no cap: the whole weight
    loss, _ = policy_loss(
        logp,
        torch.zeros(1, 2),
        torch.tensor([1.0]),
        torch.ones(1, 2),
        PolicyLossConfig(is_cap=2.0),
        behav_logprobs=behav,
    )
    assert loss.item() == pytest.approx(-1.0)  # without the decoupled loss the cap does nothing (cosmos-rl)


def test_gspo_sequence_ratio() -> None:
    # token log-ratios log 2 and 0: the sequence ratio is exp(log(2) / 2) = sqrt 2 for both tokens
    logp = torch.log(torch.tensor([[2.0, 1.0]])).requires_grad_(True)
    cfg = PolicyLossConfig(epsilon_low=0.2, epsilon_high=0.5, sequence_ratio=True)
    loss, m = policy_loss(logp, torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2), cfg)
    assert loss.item() == pytest.approx(-math.sqrt(2)) and m["ratio_mean"] == pytest.approx(math.sqrt(2))
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-math.sqrt(2) / 2, -math.sqrt(2) / 2])


def test_token_entropy() -> None:
    logits = torch.zeros(2, 3, 4)
    logits[1, 0] = torch.tensor([100.0, 0, 0, 0])
    ent = token_entropy(logits, chunk=2)
    assert ent[0].tolist() == pytest.approx([math.log(4)] * 3) and ent[1, 0].item() == pytest.approx(0, abs=1e-6)


def _trl_loss(
    loss_type: str,
    logp: torch.Tensor,
    old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    beta: float = 0.0,
    ref: torch.Tensor | None = None,
    level: str = "token",
    max_completion_length: int = 0,
) -> torch.Tensor:
    """TRL 1.16's GRPOTrainer._compute_loss run for real on these tensors: the trainer object is a
    stand-in holding only the attributes the loss reads, and the model's log-probs are `logp`."""
    from collections import defaultdict
    from types import SimpleNamespace

    from trl import GRPOTrainer

    identity = lambda x, **_: x  # noqa: E731 (one process: gather / reduce return the tensor)
    stub = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp), None),
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level=level,
        beta=beta,
        loss_type=loss_type,
        epsilon_low=eps_low,
        epsilon_high=eps_high,
        use_vllm=False,
        vllm_importance_sampling_correction=False,
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        max_completion_length=max_completion_length,
        accelerator=SimpleNamespace(
            num_processes=1, gather=identity, gather_for_metrics=identity, reduce=identity, sync_gradients=True
        ),
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
        _entropy_bonus_enabled=False,
        aux_loss_enabled=False,
        _metrics=defaultdict(lambda: defaultdict(list)),
    )
    inputs = {
        "prompt_ids": torch.zeros(logp.shape[0], 1, dtype=torch.long),
        "prompt_mask": torch.ones(logp.shape[0], 1),
        "completion_ids": torch.zeros_like(logp, dtype=torch.long),
        "completion_mask": mask.float(),
        "advantages": adv,
        "old_per_token_logps": old,
        "num_items_in_batch": mask.sum().float(),
    }
    if ref is not None:
        inputs["ref_per_token_logps"] = ref
    return GRPOTrainer._compute_loss(stub, None, inputs)


@pytest.mark.parametrize(
    ("trl_type", "ours"),
    [
        ("dapo", dict(loss_type="token-mean")),
        ("bnpo", dict(loss_type="token-mean")),
        ("grpo", dict(loss_type="seq-mean-token-mean")),
        ("dr_grpo", dict(loss_type="seq-mean-token-mean", max_tokens=6)),
        ("grpo-kl", dict(loss_type="seq-mean-token-mean", kl_beta=0.1)),
        ("gspo", dict(loss_type="seq-mean-token-mean", sequence_ratio=True)),
    ],
)
def test_loss_equals_trl_on_the_same_tensors(trl_type: str, ours: dict) -> None:
    pytest.importorskip("trl")
    gen = torch.Generator().manual_seed(3)
    logp = -torch.rand(4, 6, generator=gen) * 2
    old = logp + torch.randn(4, 6, generator=gen) * 0.3  # ratios on both sides of both clips
    ref = logp + torch.randn(4, 6, generator=gen) * 0.2
    adv = torch.tensor([1.2, -0.7, 0.4, -1.5])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0]])
    kw = dict(eps_low=0.2, eps_high=0.28)
    if trl_type == "grpo-kl":
        expected = _trl_loss("grpo", logp, old, adv, mask, beta=0.1, ref=ref, **kw)
    elif trl_type == "gspo":
        expected = _trl_loss("grpo", logp, old, adv, mask, level="sequence", **kw)
    else:
        expected = _trl_loss(trl_type, logp, old, adv, mask, max_completion_length=6, **kw)
    normaliser = None
    cfg = PolicyLossConfig(epsilon_low=0.2, epsilon_high=0.28, dual_clip=None, **ours)
    got, _ = policy_loss(
        logp, old, adv, mask, cfg, ref_logprobs=ref if "kl" in trl_type else None, normaliser=normaliser
    )
    assert got.item() == pytest.approx(expected.item(), abs=1e-6)
