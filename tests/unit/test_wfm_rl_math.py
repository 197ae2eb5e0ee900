"""The world-model RL math against hand-computed values and direct densities (cosmos_train/wfm/sde.py, losses.py)."""

from __future__ import annotations

import math

import pytest
import torch

from cosmos_train.wfm.losses import advantages, flow_matching_loss, noised, policy_step_loss
from cosmos_train.wfm.sde import gaussian_kl, sde_step, sigma_schedule, step_mean, step_std


def test_sigma_schedule_endpoints_and_shift() -> None:
    s = sigma_schedule(4)
    assert torch.allclose(s, torch.tensor([1.0, 0.75, 0.5, 0.25, 0.0]))
    shifted = sigma_schedule(4, shift=3.0)
    assert shifted[0] == 1.0 and shifted[-1] == 0.0
    assert math.isclose(float(shifted[2]), 3 * 0.5 / (1 + 2 * 0.5), rel_tol=1e-6)  # 0.75
    with pytest.raises(ValueError):
        sigma_schedule(0)


def test_sde_step_mean_and_std_by_hand() -> None:
    # x=1, v=2, sigma=0.5 -> 0.25, a=0.7: std_t = 0.7 sqrt(0.5/0.5) = 0.7; drift correction 0.49 / (2*0.5) = 0.49
    # mean = 1 + (2 + 0.49 (1 + 0.5*2)) (-0.25) = 0.255; step std = 0.7 sqrt(0.25) = 0.35
    x, v = torch.ones(1, 3), torch.full((1, 3), 2.0)
    step = sde_step(x, v, 0.5, 0.25, noise_level=0.7, noise=torch.zeros(1, 3))
    assert torch.allclose(step.mean, torch.full((1, 3), 0.255))
    assert math.isclose(float(step.std), 0.35, rel_tol=1e-6)
    assert torch.equal(step.x_next, step.mean)
    # noise level 0 is the Euler (ODE) step x + dt v
    std_t, _ = step_std(0.5, 0.25, 0.0, 0.99)
    assert torch.allclose(step_mean(x, v, 0.5, 0.25, std_t), x + (0.25 - 0.5) * v)


def test_sde_log_prob_is_the_gaussian_density() -> None:
    g = torch.Generator().manual_seed(0)
    x, v = torch.randn(3, 2, 4, 5, generator=g), torch.randn(3, 2, 4, 5, generator=g)
    step = sde_step(x, v, 0.6, 0.4, noise_level=0.8, noise=torch.randn(3, 2, 4, 5, generator=g))
    direct = torch.distributions.Normal(step.mean, step.std).log_prob(step.x_next).flatten(1).mean(1)
    assert torch.allclose(step.log_prob, direct, atol=1e-6)
    # scoring the recorded x_next again gives the same log-prob, and it carries v's gradient
    v2 = v.clone().requires_grad_(True)
    again = sde_step(x, v2, 0.6, 0.4, noise_level=0.8, x_next=step.x_next)
    assert torch.allclose(again.log_prob, step.log_prob, atol=1e-6)
    again.log_prob.sum().backward()
    assert v2.grad is not None and v2.grad.abs().sum() > 0


def test_sde_keeps_the_flow_marginals() -> None:
    """For data that is one point x0 the exact velocity is (x - x0) / sigma; the SDE sampler with the drift
    correction must keep x_sigma ~ N((1 - sigma) x0, sigma^2) at every step and end at x0 (without the
    correction the variance would grow)."""
    torch.manual_seed(0)
    x0, n = 0.7, 200_000
    sigmas = sigma_schedule(40)
    x = torch.randn(n, 1)
    for k in range(40):
        s, s_next = float(sigmas[k]), float(sigmas[k + 1])
        v = (x - x0) / s
        x = sde_step(x, v, s, s_next, noise_level=0.7, noise=torch.randn(n, 1), sigma_cap=float(sigmas[1])).x_next
        if k == 19:  # sigma 0.5
            assert abs(float(x.mean()) - 0.5 * x0) < 0.01 and abs(float(x.std()) - 0.5) < 0.02
    # the last step (sigma 0.025 -> 0) still adds its own noise, std 0.7 sqrt(0.025/0.975) sqrt(0.025) = 0.018
    assert abs(float(x.mean()) - x0) < 1e-3 and float(x.std()) < 0.025


def test_gaussian_kl_matches_torch() -> None:
    g = torch.Generator().manual_seed(1)
    m, r = torch.randn(2, 6, generator=g), torch.randn(2, 6, generator=g)
    std = torch.tensor(0.3)
    direct = torch.distributions.kl_divergence(
        torch.distributions.Normal(m, std), torch.distributions.Normal(r, std)
    ).mean(1)
    assert torch.allclose(gaussian_kl(m, r, std), direct, atol=1e-6)


def test_policy_step_loss_by_hand() -> None:
    # ratio e^0.5 = 1.6487 for both; clip 0.2: A=+1 -> max(-1.6487, -1.2) = -1.2; A=-1 -> max(1.6487, 1.2) = 1.6487
    logp = torch.tensor([0.5, 0.5], requires_grad=True)
    loss, stats = policy_step_loss(logp, torch.zeros(2), torch.tensor([1.0, -1.0]), clip_range=0.2)
    assert math.isclose(float(loss.detach()), (-1.2 + math.exp(0.5)) / 2, rel_tol=1e-6)
    assert stats["clip_frac"] == 1.0
    loss.backward()  # the clipped sample (A=+1) gives no gradient; the other d/dlogp (-A ratio)/2 = ratio/2
    assert torch.allclose(logp.grad, torch.tensor([0.0, math.exp(0.5) / 2]))
    # the KL term adds kl_beta * mean(kl)
    loss2, stats2 = policy_step_loss(
        torch.zeros(2), torch.zeros(2), torch.zeros(2), 0.2, kl=torch.tensor([0.2, 0.4]), kl_beta=0.5
    )
    assert math.isclose(float(loss2), 0.15, rel_tol=1e-6) and math.isclose(stats2["kl"], 0.3, rel_tol=1e-6)


def test_advantages_are_group_normalised_and_clipped() -> None:
    r = torch.tensor([1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 0.0, 10.0])
    a = advantages(r, group_size=4, clip=1.0)
    g1 = (torch.tensor([1.0, 2, 3, 4]) - 2.5) / (torch.tensor([1.0, 2, 3, 4]).std() + 1e-6)
    assert torch.allclose(a[:4], g1.clamp(-1, 1))
    assert a[7] == 1.0 and a[4] < 0  # 10 is 1.5 std above its group: clipped to 1


def test_flow_matching_loss_by_hand() -> None:
    x0, eps = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, -1.0]])
    assert torch.allclose(noised(x0, eps, torch.tensor([0.25])), torch.tensor([[0.875, 1.25]]))
    # target eps - x0 = [-0.5, -3]; prediction [0, -2]: ((0.5)^2 + 1^2) / 2 = 0.625
    assert math.isclose(float(flow_matching_loss(torch.tensor([[0.0, -2.0]]), x0, eps)), 0.625, rel_tol=1e-6)
