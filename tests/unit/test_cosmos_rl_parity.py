"""Under cosmos-rl's keys, cosmos-rl's maths: ours run beside cosmos-rl's own code on the same tensors.

The oracle is the installed cosmos-rl 0.4.7 (`make oracle`; tests/cosmos_rl_oracle.py): its GRPO
`compute_loss`, `compute_logprobs` (entropy), `GRPO.compute_advantage`, `build_lr_schedulers` and its
`Config()` defaults. Every comparison is a function returning the largest difference, so the mutation
tests at the end can show that a deliberate change of ours is caught. `PARITY_CHECKED` (config.compat_notes)
names, per key, which of cosmos-rl's functions it is checked against; the last test keeps that column of
docs/COSMOS_RL_KEYS.md equal to what these tests cover.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from cosmos_train.config import config_from_dict
from cosmos_train.config.compat_notes import PARITY_CHECKED, default_note
from cosmos_train.config.docs import schema_keys
from cosmos_train.train import optim, rl_losses
from cosmos_train.train.rl_losses import (
    PolicyLossConfig,
    aggregate,
    group_advantages,
    policy_loss,
    token_entropy,
)
from tests.cosmos_rl_oracle import oracle_config, oracle_function, oracle_learning_rates, oracle_module

GRPO_TRAINER = "cosmos_rl.policy.trainer.llm_trainer.grpo_trainer"
TOL = 1e-5

# ------------------------------------------------------------------------------------ the keys each test checks
LOSS_KEYS = (
    "loss_type",
    "variant",
    "epsilon_low",
    "epsilon_high",
    "lower_bound_ratio",
    "kl_beta",
    "unbiased_kl_estimate",
    "use_decoupled_loss",
    "behav_imp_weight_cap",
    "unbiased_loss_max_tokens",
)
ADVANTAGE_KEYS = ("unbiased_advantage", "advantage_low", "advantage_high")
SCHEDULE_KEYS = (
    "optm_warmup_steps",
    "optm_warmup_start_factor",
    "optm_decay_ratio",
    "optm_decay_type",
    "optm_min_lr_factor",
)
UPDATE = "step_training (compute_loss x loss_scaling_factor per mini-batch)"
COVERED: dict[str, str] = {
    **{f"train.train_policy.{k}": "compute_loss" for k in LOSS_KEYS},
    # test_balance_dp_token_equals_cosmos_rl here; SFT's in test_cosmos_rl_sft_loss.py
    "train.train_policy.balance_dp_token": "compute_loss, async_safe_ce",
    # test_cosmos_rl_grpo_update.py (a whole GRPO update) and test_cosmos_rl_sft_loss.py (an SFT step)
    "train.train_policy.mini_batch": f"{UPDATE}, async_safe_ce",
    "train.train_policy.mu_iterations": UPDATE,
    "train.train_policy.temperature": UPDATE,
    "train.train_policy.entropy_coeff": "compute_logprobs",
    # test_cosmos_rl_optimizer.py: the weights after steps of ours and of its build_optimizers
    **{
        f"train.{k}": "build_optimizers"
        for k in ("optm_lr", "optm_name", "optm_impl", "optm_betas", "epsilon", "optm_weight_decay")
    },
    **{f"train.train_policy.{k}": "GRPO.compute_advantage" for k in ADVANTAGE_KEYS},
    **{f"train.{k}": "build_lr_schedulers" for k in SCHEDULE_KEYS},
    **{
        k: "recompute_total_steps"
        for k in ("train.train_batch_per_replica", "rollout.n_generation", "train.max_num_steps", "train.epoch")
    },
    # test_cosmos_rl_rewards.py: every rule reward, the overlong reward and the filter values
    "train.train_policy.reward_function": "format / single_choice / gsm8k / boxed_math / direct_math / "
    "overlong_reward_fn",
    "train.train_policy.overlong_reward.buffer_length": "overlong_reward_fn",
    "train.train_policy.overlong_reward.penalty_factor": "overlong_reward_fn",
    "train.train_policy.filter_reward_metric": "Reward.compute_reward",
    # test_cosmos_rl_splits.py: the rows validation holds out of the training set
    "train.train_policy.dataset.test_size": "split_train_n_val_dataset, construct_dataset",
    # test_cosmos_rl_rollout.py: the prefix pass of cosmos-rl's reward calculator, its validation sampling
    "train.train_policy.min_filter_prefix_tokens": "LocalRewardCalculator.compute_rewards",
    **{
        f"validation.{k}": "vLLMRollout's val_sampling_params"
        for k in ("top_p", "top_k", "temperature", "repetition_penalty", "n_generation", "max_response_length")
    },
}


# ------------------------------------------------------------------------------------------------ the loss
def _their_config(**train_policy: Any) -> Any:
    cfg = oracle_config()
    for key, value in train_policy.items():
        setattr(cfg.train.train_policy, key, value)
    return cfg


def _grid(flat: torch.Tensor, lengths: list[int]) -> torch.Tensor:
    """Completion-major flat values [N] -> our [B, T] grid (zeros past each length)."""
    out = flat.new_zeros(len(lengths), max(lengths) + 1)
    start = 0
    for i, n in enumerate(lengths):
        out[i, :n] = flat[start : start + n]
        start += n
    return out


def _tensors(seed: int, lengths: list[int]) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    n = sum(lengths)
    logp = -torch.rand(n, generator=gen, dtype=torch.float64) * 2
    adv_seq = torch.randn(len(lengths), generator=gen, dtype=torch.float64) * 1.5
    return {
        "logp": logp,
        "old": logp + torch.randn(n, generator=gen, dtype=torch.float64) * 0.4,  # ratios past both clips
        "ref": logp + torch.randn(n, generator=gen, dtype=torch.float64) * 0.3,
        "behav": logp + torch.randn(n, generator=gen, dtype=torch.float64) * 0.5,  # IS weights past a cap of 1.5
        "adv": torch.repeat_interleave(adv_seq, torch.tensor(lengths)),
        "adv_seq": adv_seq,
    }


def ours_vs_theirs_loss(seed: int, lengths: list[int], **settings: Any) -> float:
    """Largest difference of loss and gradient (w.r.t. the trainer's log-probs) between cosmos-rl's
    compute_loss and ours on one mini-batch (our micro-batch) with `settings` (cosmos-rl key names)."""
    compute_loss = oracle_function(GRPO_TRAINER, "compute_loss")
    t = _tensors(seed, lengths)
    s = {
        "variant": "grpo",
        "loss_type": "token-mean",
        "epsilon_low": 0.2,
        "epsilon_high": 0.28,
        "lower_bound_ratio": 3.0,
        "kl_beta": 0.0,
        "unbiased_kl_estimate": False,
        "use_decoupled_loss": False,
        "behav_imp_weight_cap": None,
        "unbiased_loss_max_tokens": None,
        **settings,
    }
    theirs_logp = t["logp"].clone().requires_grad_(True)
    cu = torch.tensor([0, *itertools.accumulate(lengths)])
    their_loss = compute_loss(
        theirs_logp,
        t["old"],
        t["ref"] if s["kl_beta"] else None,
        t["adv"],
        cu,
        _their_config(**s),
        torch.ones(len(lengths), max(lengths) + 1, dtype=torch.bool),
        rollout_per_token_logps=t["behav"] if s["use_decoupled_loss"] else None,
    )[0]
    (their_grad,) = torch.autograd.grad(their_loss, theirs_logp)

    ours_flat = t["logp"].clone().requires_grad_(True)
    mask = _grid(torch.ones_like(t["logp"]), lengths)
    cfg = PolicyLossConfig(
        epsilon_low=s["epsilon_low"],
        epsilon_high=s["epsilon_high"],
        dual_clip=s["lower_bound_ratio"],
        sequence_ratio=s["variant"] == "gspo",
        kl_beta=s["kl_beta"],
        unbiased_kl=s["unbiased_kl_estimate"],
        decoupled=s["use_decoupled_loss"],
        is_cap=s["behav_imp_weight_cap"],
        loss_type=s["loss_type"],
        max_tokens=s["unbiased_loss_max_tokens"],
    )
    our_loss, _ = policy_loss(
        _grid(ours_flat, lengths),
        _grid(t["old"], lengths),
        t["adv_seq"],
        mask,
        cfg,
        ref_logprobs=_grid(t["ref"], lengths),
        behav_logprobs=_grid(t["behav"], lengths),
    )
    (our_grad,) = torch.autograd.grad(our_loss, ours_flat)
    return max(abs(float(our_loss) - float(their_loss)), float((our_grad - their_grad).abs().max()))


LOSS_CASES = [
    dict(
        loss_type=loss_type,
        variant=variant,
        lower_bound_ratio=dual,
        use_decoupled_loss=decoupled,
        behav_imp_weight_cap=cap,
        kl_beta=kl,
        unbiased_kl_estimate=unbiased_kl,
    )
    for loss_type, variant, dual, (decoupled, cap), (kl, unbiased_kl) in itertools.product(
        ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-sum"),
        ("grpo", "dapo", "gspo"),
        (3.0, 1.5),
        ((False, None), (False, 1.5), (True, None), (True, 1.5)),
        ((0.0, False), (0.1, False), (0.1, True)),
    )
]


@pytest.mark.parametrize("lengths", [[3, 7, 1, 5], [9]], ids=["4-completions", "1-completion"])
def test_compute_loss_equals_cosmos_rl_over_every_setting(lengths: list[int]) -> None:
    """loss_type x variant x dual clip x (decoupled loss, behav_imp_weight_cap) x (kl_beta, unbiased_kl_estimate):
    the loss and its gradient equal cosmos-rl's compute_loss on the same tensors."""
    worst = {repr(case): ours_vs_theirs_loss(7, lengths, **case) for case in LOSS_CASES}
    assert len(worst) == 4 * 3 * 2 * 4 * 3
    off = {k: v for k, v in worst.items() if v > TOL}
    assert off == {}, f"{len(off)} settings differ from cosmos-rl, e.g. {next(iter(off.items()), None)}"


def ours_vs_theirs_far_kl() -> float:
    """The KL clamp at 10 only bites when the reference is far: ref - logp up to 4 gives k3 terms past 10."""
    compute_loss = oracle_function(GRPO_TRAINER, "compute_loss")
    t = _tensors(2, [4, 4])
    ref = t["logp"] + torch.linspace(0, 4, 8, dtype=torch.float64)
    cu = torch.tensor([0, 4, 8])
    theirs = compute_loss(
        t["logp"], t["old"], ref, t["adv"], cu, _their_config(kl_beta=0.5), torch.ones(1, 1, dtype=torch.bool)
    )[0]
    ours, _ = policy_loss(
        _grid(t["logp"], [4, 4]),
        _grid(t["old"], [4, 4]),
        t["adv_seq"],
        _grid(torch.ones(8, dtype=torch.float64), [4, 4]),
        PolicyLossConfig(epsilon_high=0.2, kl_beta=0.5),
        ref_logprobs=_grid(ref, [4, 4]),
    )
    return abs(float(ours) - float(theirs))


def test_kl_clamp_equals_cosmos_rl() -> None:
    assert ours_vs_theirs_far_kl() < TOL


def test_dr_grpo_max_tokens_and_clip_settings_equal_cosmos_rl() -> None:
    for case in (
        dict(loss_type="seq-mean-token-mean", unbiased_loss_max_tokens=16),
        dict(epsilon_low=0.1, epsilon_high=0.5),
        dict(variant="gspo", epsilon_high=0.05, kl_beta=0.2),
    ):
        assert ours_vs_theirs_loss(11, [4, 2, 8], **case) < TOL, case


def ours_vs_theirs_balanced(dp: int = 2) -> float:
    """balance_dp_token: cosmos-rl divides each rank's token sum by the mini-batch's tokens on every dp rank and
    multiplies by dp (FSDP then averages); ours takes that normaliser. One process stands for `dp` ranks."""
    compute_loss = oracle_function(GRPO_TRAINER, "compute_loss")
    per_rank = [[3, 5], [1, 2]][:dp]
    tokens = sum(sum(x) for x in per_rank)

    class _OneRankGroups:  # cosmos-rl's all_reduce of the token count across dp, done by hand here
        @staticmethod
        def world_size() -> int:
            return dp

        @staticmethod
        def allreduce(src: torch.Tensor, dst: torch.Tensor, op: Any) -> None:
            dst.fill_(tokens)

    worst = 0.0
    for rank, lengths in enumerate(per_rank):
        t = _tensors(rank, lengths)
        cu = torch.tensor([0, *itertools.accumulate(lengths)])
        theirs = compute_loss(
            t["logp"],
            t["old"],
            None,
            t["adv"],
            cu,
            _their_config(balance_dp_token=True),
            torch.ones(1, 1, dtype=torch.bool),
            ddp_comm=_OneRankGroups(),
        )[0]
        mask = _grid(torch.ones_like(t["logp"]), lengths)
        ours, _ = policy_loss(
            _grid(t["logp"], lengths),
            _grid(t["old"], lengths),
            t["adv_seq"],
            mask,
            PolicyLossConfig(epsilon_high=0.2),
            normaliser=float(tokens),
        )
        worst = max(worst, abs(float(ours) * dp - float(theirs)))
    return worst


def test_balance_dp_token_equals_cosmos_rl() -> None:
    assert ours_vs_theirs_balanced() < TOL


def ours_vs_theirs_entropy(seed: int = 0) -> float:
    """entropy_coeff: cosmos-rl's compute_logprobs gives the mean entropy of the completion tokens with gradient
    (entropy_requires_grad when entropy_coeff > 0) and the loss subtracts coeff x that; ours the same term."""
    compute_logprobs = oracle_function("cosmos_rl.utils.util", "compute_logprobs")
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 6, 11, generator=gen, dtype=torch.float64)
    ids = torch.randint(11, (2, 6), generator=gen)
    masks = torch.tensor([[0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1]], dtype=torch.bool)
    theirs_logits = logits.clone().requires_grad_(True)
    _, _, metrics = compute_logprobs(ids, masks, theirs_logits, is_full_logits=True, entropy_requires_grad=True)
    (their_grad,) = torch.autograd.grad(metrics["effective_entropy"], theirs_logits)
    ours_logits = logits.clone().requires_grad_(True)
    ours = aggregate(token_entropy(ours_logits), masks, "token-mean")
    (our_grad,) = torch.autograd.grad(ours, ours_logits)
    return max(abs(float(ours) - float(metrics["effective_entropy"])), float((our_grad - their_grad).abs().max()))


def test_entropy_bonus_equals_cosmos_rl() -> None:
    assert ours_vs_theirs_entropy() < TOL


# ------------------------------------------------------------------------------------------------ advantages
def ours_vs_theirs_advantages(unbiased: bool) -> float:
    """cosmos-rl's GRPO.compute_advantage (np.std, eps 1e-6, no clip) against ours for groups of 2 to 32."""
    grpo = oracle_module("cosmos_rl.dispatcher.algo.grpo").GRPO(reward_fn=None, unbiased=unbiased)
    cfg = config_from_dict({"train": {"train_policy": {"type": "grpo", "unbiased_advantage": unbiased}}})
    tp = cfg.train.train_policy
    rng = np.random.default_rng(5)
    worst = 0.0
    for n in (2, 3, 8, 16, 32):
        for rewards in (rng.random(n), (rng.random(n) > 0.9).astype(float), np.eye(1, n)[0]):
            theirs = np.array(grpo.compute_advantage(list(rewards)))
            ours = group_advantages(torch.tensor(rewards), n, scale_by_std=tp.scale_rewards, std=tp.advantage_std)
            if tp.clip_advantages:
                ours = ours.clamp(tp.advantage_low, tp.advantage_high)
            worst = max(worst, float(np.abs(ours.numpy() - theirs).max()))
    return worst


@pytest.mark.parametrize("unbiased", [False, True])
def test_advantages_equal_cosmos_rl(unbiased: bool) -> None:
    """Population std, and no clip at [advantage_low, advantage_high]: one right answer in 32 gets
    sqrt(31) = 5.57, which a clip at 5 would change."""
    assert ours_vs_theirs_advantages(unbiased) < 1e-5


# ------------------------------------------------------------------------------------------------ schedules
SCHEDULE_CASES = [
    dict(optm_warmup_steps=w, optm_warmup_start_factor=f, optm_decay_ratio=r, optm_decay_type=d, optm_min_lr_factor=m)
    for w, f, r, d, m in itertools.product(
        (0, 1, 5, 20, 0.1, 1.0), (0.0, 0.3), (None, 0.0, 0.4), ("none", "linear", "cosine", "sqrt"), (0.0, 0.1)
    )
]


def ours_vs_theirs_schedule(total: int, **train: Any) -> float:
    """The learning rate of every step of a `total`-step run: cosmos-rl's build_lr_schedulers (LambdaLR over
    trainer steps) against ours, from the same keys."""
    theirs = oracle_learning_rates(total, **train)
    ours_cfg = config_from_dict({"train": {"optm_lr": 1.0, **train}})
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = optim.build_scheduler(opt, ours_cfg.train, total)
    worst = 0.0
    for step in range(total + 1):  # every step's rate, and the rate after the run's last tick
        worst = max(worst, abs(theirs[step] - opt.param_groups[0]["lr"]))
        if step < total:
            opt.step()
            sched.step()
    return worst


@pytest.mark.parametrize("total", [1, 3, 25, 200])
def test_lr_schedules_equal_cosmos_rl_over_whole_runs(total: int) -> None:
    off = {repr(c): d for c in SCHEDULE_CASES if (d := ours_vs_theirs_schedule(total, **c)) > 1e-12}
    assert off == {}, f"{len(off)} of {len(SCHEDULE_CASES)} schedules differ, e.g. {next(iter(off.items()), None)}"


# ------------------------------------------------------------------------------------------------ a step
def their_total_steps(rows: int, n_generation: int, tbpr: int, epoch: int, max_num_steps: int | None) -> int:
    """cosmos-rl's controller (PolicyStatusManager.recompute_total_steps, dispatcher/status.py): steps = the
    run's completions // (train_batch_per_replica x replicas), capped by max_num_steps."""

    recompute = oracle_function(
        "cosmos_rl.dispatcher.status",
        "PolicyStatusManager.recompute_total_steps",
        JobPhase=SimpleNamespace(DRAINING="draining"),
    )
    cfg = _their_config()
    cfg.train.train_batch_per_replica = tbpr
    cfg.train.max_num_steps = max_num_steps
    manager = SimpleNamespace(
        config=cfg,
        current_step=0,
        total_steps=0,
        job_phase=None,
        training_finished=lambda: False,
        get_all_atoms_arrived_replicas=lambda: ["one replica"],
    )
    recompute(manager, explicit_num_remaining_samples=rows * n_generation * epoch)
    return manager.total_steps


def ours_vs_theirs_step(
    rows: int, n_generation: int, tbpr: int, batch_size: int, epoch: int, max_num_steps: int | None
) -> int:
    """Differences in what one run is made of: prompts and completions per step, and the step count the
    schedule and the loop run over (ours: prompts_per_step; the trainer makes mu_iterations updates a step)."""
    cfg = config_from_dict(
        {
            "train": {
                "train_batch_per_replica": tbpr,
                "epoch": epoch,
                "max_num_steps": max_num_steps,
                "train_policy": {"type": "grpo"},
            },
            "rollout": {"n_generation": n_generation, "batch_size": batch_size},
        }
    )
    prompts, parts = cfg.prompts_per_step, cfg.rl_steps_per_step
    ours_total = (rows // prompts) * epoch  # the trainer's steps (drop_last per epoch)
    if max_num_steps is not None:
        ours_total = min(ours_total, max_num_steps)
    theirs = their_total_steps(rows, n_generation, tbpr, epoch, max_num_steps * parts if max_num_steps else None)
    # completions one of cosmos-rl's steps trains on, and the schedule's ticks over the run
    return abs(prompts * n_generation - tbpr * parts) + abs(ours_total * parts - theirs)


@pytest.mark.parametrize(
    ("rows", "n_gen", "tbpr", "batch_size", "epoch", "max_steps"),
    [
        (64, 8, 64, 8, 1, None),  # the demo: 8 prompts x 8 a step
        (64, 8, 16, 8, 1, None),  # train_batch_per_replica < n_generation x batch_size: 4x the steps
        (64, 4, 32, 1, 3, None),  # batch_size below a step's prompts: the step still takes 8
        (64, 8, 16, 8, 2, 10),  # max_num_steps caps the run
        (64, 16, 8, 1, 1, None),  # cosmos-rl's defaults: a group of 16 is two of its steps of 8
    ],
)
def test_a_step_is_what_cosmos_rl_makes_it(
    rows: int, n_gen: int, tbpr: int, batch_size: int, epoch: int, max_steps: int | None
) -> None:
    assert ours_vs_theirs_step(rows, n_gen, tbpr, batch_size, epoch, max_steps) == 0


# ------------------------------------------------------------------------------------------------ defaults
def _live(cfg: Any, key: str) -> Any:
    node = cfg
    for part in key.split("."):
        node = getattr(node, part)
    return node


# unset in cosmos-rl's schema and resolved from another key by its Config's validators
RESOLVED_AT_LOAD = ("validation.use_remote_reward",)


def test_every_implemented_keys_default_is_cosmos_rls_or_explained() -> None:
    """Every key of ours that cosmos-rl's Config() has: its default equals cosmos-rl's live default (GRPO and SFT
    sections both), or config.compat_notes.DEFAULTS_DIFFER says why."""
    from cosmos_train.config.docs import _format

    ours = schema_keys()
    grpo, sft = oracle_config(), oracle_config()
    sft.train.train_policy = oracle_module("cosmos_rl.policy.config").SFTDataConfig(type="sft")
    compared, off = 0, {}
    for key, our_default in ours.items():
        if key == "train.train_policy.type":  # the section's discriminator: each section sets its own
            continue
        if key in RESOLVED_AT_LOAD:  # cosmos-rl's Config() fills these from another key: compare the field's own
            section, _, name = key.rpartition(".")
            values = {_format(type(_live(grpo, section)).model_fields[name].default)}
            compared += 1
            if default_note(key, our_default, values.pop()) == "":
                off[key] = our_default
            continue
        try:
            values = {_format(_live(c, key)) for c in (grpo, sft)}
        except AttributeError:
            continue  # a key of ours that cosmos-rl does not have, or only under one section
        compared += 1
        theirs = " | ".join(sorted(values))
        if any(default_note(key, our_default, v) == "" for v in values):
            off[key] = (our_default, theirs)
    assert compared > 90
    assert off == {}, f"defaults differ from cosmos-rl's Config() without a reason in DEFAULTS_DIFFER: {off}"


# ------------------------------------------------------------------------------------------------ the column
def test_the_keys_table_says_what_these_tests_check() -> None:
    assert dict(PARITY_CHECKED) == COVERED


# ------------------------------------------------------------------------------------------------ mutations
@contextmanager
def _patched(target: Any, name: str, value: Any) -> Iterator[None]:
    before = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, before)


def test_mutations_of_ours_are_caught() -> None:
    """Each parity check fails when ours is changed on purpose: no KL clamp, the sample std, a dual clip for GSPO,
    (s + 1) / w warmup, another normaliser, the entropy of untempered... each one a real past difference."""
    with _patched(rl_losses, "KL_BOUND", math.inf):  # the reference far off: k3 terms past 10
        assert ours_vs_theirs_far_kl() > TOL
    original = rl_losses.group_advantages

    def sample_std(*a: Any, **k: Any) -> torch.Tensor:
        return original(*a, **{**k, "std": "sample"})

    with _patched(sys.modules[__name__], "group_advantages", sample_std):
        assert ours_vs_theirs_advantages(False) > 1e-3
    with _patched(rl_losses, "uses_dual_clip", lambda cfg: cfg.dual_clip is not None):
        assert (
            max(ours_vs_theirs_loss(seed, [3, 7, 1, 5], variant="gspo", lower_bound_ratio=1.01) for seed in range(8))
            > TOL
        )
    with _patched(optim, "lr_factor", lambda s, sched, *a, **k: min(1.0, (s + 1) / max(sched.warmup, 1))):
        assert ours_vs_theirs_schedule(25, optm_warmup_steps=5) > 1e-3
    with _patched(rl_losses, "aggregate", lambda p, m, t, n=None, x=None: (p * m).sum() / 1000.0):
        assert ours_vs_theirs_loss(7, [3, 7, 1, 5]) > TOL
