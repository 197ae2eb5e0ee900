"""Loss, schedule and sampler of the SFT trainer against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from cosmos_train.config import config_from_dict
from cosmos_train.errors import ConfigError, DataError
from cosmos_train.train.optim import apply_freeze_patterns, build_optimizer, lr_factor, schedule_of
from cosmos_train.train.sampler import DataPosition, GlobalBatchSampler
from cosmos_train.train.sft_loss import token_ce_sum


def test_token_ce_sum_matches_hand_computation() -> None:
    # vocab 3, one row of 4 positions; labels shifted by one; -100 ignored
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 3.0], [1.0, 1.0, 1.0]]])
    labels = torch.tensor([[-100, 1, -100, 0]])
    total, n = token_ce_sum(logits, labels)
    # position 0 predicts label 1: -log softmax([2,0,0])[1]; position 2 predicts label 0: -log softmax([0,0,3])[0]
    expect = -math.log(1 / (math.e**2 + 2)) - math.log(1 / (2 + math.e**3))
    assert n == 2
    assert total.item() == pytest.approx(expect, rel=1e-6)


def test_accumulated_loss_equals_full_batch_token_mean() -> None:
    torch.manual_seed(0)
    logits = torch.randn(4, 6, 5)
    labels = torch.randint(0, 5, (4, 6))
    labels[0, :4] = -100  # uneven label counts per row
    labels[2, :] = -100
    full, n = token_ce_sum(logits, labels)
    parts = [token_ce_sum(logits[i : i + 1], labels[i : i + 1]) for i in range(4)]
    assert sum(k for _, k in parts) == n
    assert (sum(s for s, _ in parts) / n).item() == pytest.approx((full / n).item(), rel=1e-6)


@pytest.mark.parametrize("decay", ["none", "linear", "cosine", "sqrt"])
def test_schedule_warmup_and_decay(decay: str) -> None:
    """cosmos-rl's warmup-stable-decay by hand: 10 steps, 2 of warmup from 0 (step s of w: s / (w - 1)), one
    stable step (its virtual last step), then 8 of decay at progress (s + 1 - 3) / 8."""
    sched = schedule_of(config_from_dict({"train": {"optm_warmup_steps": 2}}).train, 10)
    assert (sched.warmup, sched.stable, sched.decay) == (2, 1, 8)
    f = [lr_factor(s, sched, decay, 0.1) for s in range(10)]
    assert f[0] == 0.0 and f[1] == 1.0 and f[2] == 1.0
    if decay == "none":
        assert f[1:] == [1.0] * 9
    else:
        assert all(a >= b for a, b in zip(f[2:], f[3:]))
        assert lr_factor(10, sched, decay, 0.1) == pytest.approx(0.1)  # the virtual step after the run
    if decay == "linear":
        assert f[3] == pytest.approx(0.1 + 0.9 * 7 / 8) and f[9] == pytest.approx(0.1 + 0.9 / 8)
    if decay == "cosine":  # halfway through the decay (step 6: progress 4 / 8): min + (1 - min) / 2
        assert f[6] == pytest.approx(0.55)


def test_fractional_warmup() -> None:
    """A float <= 1.0 is a fraction of the run (rounded down), an integer is steps; never more than the run."""
    for value, expected in ((0.1, 20), (5, 5), (1.0, 200), (1, 1), (0.0333, 6), (300, 200)):
        cfg = config_from_dict({"train": {"optm_warmup_steps": value}})
        assert schedule_of(cfg.train, 200).warmup == expected, value


def test_sampler_covers_epoch_once_and_resume_is_world_size_free() -> None:
    n = 23
    one = GlobalBatchSampler(n, 4, 1, 0, shuffle=True, seed=3)
    steps = list(one.batches(DataPosition()))
    assert len(steps) == one.steps_per_epoch() == 5  # drop_last: 20 of 23
    seen = [i for b, _ in steps for i in b]
    assert len(seen) == len(set(seen)) == 20
    # two ranks of one replica see the same global batches, split between them
    r0 = list(GlobalBatchSampler(n, 4, 2, 0, shuffle=True, seed=3).batches(DataPosition()))
    r1 = list(GlobalBatchSampler(n, 4, 2, 1, shuffle=True, seed=3).batches(DataPosition()))
    assert [a + b for (a, _), (b, _) in zip(r0, r1)] == [b for b, _ in steps]
    # resume from the position after step 2 on the other world size: the rest, no repeat, no skip
    pos = steps[1][1]
    rest = list(GlobalBatchSampler(n, 4, 2, 0, shuffle=True, seed=3).batches(pos))
    assert [b for b, _ in rest] == [b for b, _ in r0[2:]]
    assert one.order(0) != one.order(1)  # reshuffled each epoch


def test_sampler_rejects_too_small_split() -> None:
    with pytest.raises(DataError, match="fewer than one global batch"):
        GlobalBatchSampler(3, 4, 1, 0, shuffle=False, seed=0)


def test_freeze_and_trainable_patterns() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    cfg = config_from_dict({"policy": {"freeze_pattern": ["^0\\."]}})
    trainable, total = apply_freeze_patterns(model, cfg.policy)
    assert (trainable, total) == (3, 9)
    assert [p.requires_grad for p in model.parameters()] == [False, False, True, True]
    model2 = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 1))
    cfg = config_from_dict({"policy": {"trainable_pattern": "^1\\.weight"}})
    assert apply_freeze_patterns(model2, cfg.policy) == (2, 9)
    cfg = config_from_dict({"policy": {"freeze_pattern": "visual"}})
    with pytest.raises(ConfigError, match="match no parameter"):
        apply_freeze_patterns(torch.nn.Linear(2, 2), cfg.policy)


def test_optimizer_decays_every_parameter_unless_matrices_only() -> None:
    model = torch.nn.Linear(3, 2)
    cfg = config_from_dict({"train": {"optm_lr": 0.5, "optm_weight_decay": 0.1}})
    opt = build_optimizer(model, cfg.train, torch.device("cpu"))
    assert [(len(g["params"]), g["weight_decay"]) for g in opt.param_groups] == [(2, 0.1)]  # cosmos-rl's
    ours = config_from_dict({"train": {"optm_lr": 0.5, "optm_weight_decay": 0.1, "decay_matrices_only": True}})
    opt = build_optimizer(model, ours.train, torch.device("cpu"))
    assert sorted(g["weight_decay"] for g in opt.param_groups) == [0.0, 0.1]  # the bias spared
    assert all(g["lr"] == 0.5 for g in opt.param_groups)


def test_loss_on_kept_positions_equals_full_loss() -> None:
    from cosmos_train.train.sft_loss import kept_ce_sum, label_positions

    torch.manual_seed(1)
    logits = torch.randn(3, 7, 11)
    labels = torch.full((3, 7), -100)
    labels[0, 5:] = torch.tensor([1, 2])
    labels[2, 3] = 4
    keep = label_positions(labels)
    assert keep.tolist() == [2, 4, 5]
    full, n = token_ce_sum(logits, labels)
    kept, k = kept_ce_sum(logits[:, keep], labels, keep)
    assert k == n == 3
    assert kept.item() == pytest.approx(full.item(), rel=1e-6)


def test_settings_the_trainers_do_not_implement_are_refused() -> None:
    from cosmos_train.config import unsupported_settings

    assert unsupported_settings(config_from_dict({})) == []
    assert unsupported_settings(config_from_dict({"train": {"train_policy": {"kl_beta": 0.1}}})) == []  # GRPO runs
    cfg = config_from_dict(
        {
            "train": {
                "compile": True,
                "train_policy": {
                    "kl_beta": 0.1,
                    "use_remote_reward": True,
                    "remote_reward": {"reward_fns": [{"name": "a"}]},
                },
            },
            "policy": {"lora": {"r": 4}, "parallelism": {"cp_size": 2, "pp_size": 2}},
            "rollout": {"backend": "hf", "parallelism": {"tp_size": 2}},
        }
    )
    problems = " ".join(unsupported_settings(cfg))
    assert "rollout.parallelism.tp_size" in problems and "policy.lora" not in problems  # LoRA runs
    tp_lora = config_from_dict({"policy": {"lora": {"r": 4}, "parallelism": {"tp_size": 2}}})
    assert "policy.lora: LoRA with tensor parallelism" in " ".join(unsupported_settings(tp_lora))
    # layout-only settings run (the same result), said as accepted with no effect; cp_size is context parallel
    assert [n.key for n in cfg.no_effect] == ["policy.parallelism.pp_size"]
    assert (cfg.policy.parallelism.cp_size, cfg.policy.parallelism.pp_size) == (2, 1)
    assert "use_remote_reward" not in problems  # the reward service client implements it


def test_keys_our_code_does_not_read_are_refused_or_said_to_have_no_effect() -> None:
    """policy.model_revision would change the weights that train: refused past its default ("main" is what loading
    the name gives); train.logprob_dtype, rollout.quantization and rollout.enable_chunked_prefill only change
    precision or speed: listed with no effect when a config sets them off their defaults."""
    from cosmos_train.config import unsupported_settings

    quiet = config_from_dict({"policy": {"model_revision": "main"}, "train": {"train_policy": {}}})
    assert unsupported_settings(quiet) == [] and quiet.no_effect == []
    problems = unsupported_settings(config_from_dict({"policy": {"model_revision": "v1.1"}}))
    assert len(problems) == 1 and problems[0].startswith("policy.model_revision = 'v1.1'")
    assert "--revision" in problems[0]
    speed = config_from_dict(
        {
            "train": {"logprob_dtype": "bfloat16"},
            "rollout": {"enable_chunked_prefill": True, "quantization": "fp8"},
        }
    )
    assert [n.key for n in speed.no_effect] == [
        "train.logprob_dtype",
        "rollout.quantization",
        "rollout.enable_chunked_prefill",
    ]


def test_schedule_start_factor_and_decay_ratio_by_hand() -> None:
    """optm_warmup_start_factor: warmup from f (step s of w: f + (1 - f) s / (w - 1)); optm_decay_ratio: the peak
    holds until the last round(ratio x total) steps, which decay (cosmos-rl's warmup-stable-decay)."""
    cfg = config_from_dict(
        {
            "train": {
                "optm_warmup_steps": 2,
                "optm_warmup_start_factor": 0.2,
                "optm_decay_ratio": 0.4,
                "optm_decay_type": "linear",
            }
        }
    )
    sched = schedule_of(cfg.train, 10)
    assert (sched.warmup, sched.stable, sched.decay) == (2, 5, 4)
    f = [lr_factor(s, sched, "linear", 0.0, start_factor=0.2) for s in range(10)]
    assert f == pytest.approx([0.2, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.75, 0.5, 0.25])
    short = schedule_of(cfg.train, 3)  # warmup 2 leaves 1 step: the decay takes at most that
    assert (short.warmup, short.decay) == (2, 1)
    flat = schedule_of(config_from_dict({"train": {"optm_warmup_steps": 2, "optm_decay_ratio": 0.0}}).train, 10)
    assert [lr_factor(s, flat, "linear", 0.0) for s in range(1, 10)] == [1.0] * 9


def test_gpu_path_options_refused_where_they_cannot_run() -> None:
    """Flash attention and the fused head + CE: SFT takes them; GRPO's layout and loss refuse them by key; a flash
    kernel named where it cannot run (a CPU, fp32 compute, the package absent) is refused before loading."""
    from cosmos_train.config import unsupported_settings
    from cosmos_train.models.load import resolve_attention

    sft = config_from_dict({"train": {"fused_linear_ce": True}, "policy": {"attn_implementation": "flash_attention_2"}})
    assert unsupported_settings(sft) == []
    grpo = config_from_dict(
        {
            "train": {"fused_linear_ce": True, "train_policy": {"kl_beta": 0.1}},
            "policy": {"attn_implementation": "flash_attention_2"},
        }
    )
    problems = unsupported_settings(grpo)
    assert [p.split(":")[0] for p in problems] == ["train.fused_linear_ce", "policy.attn_implementation"]
    assert "4D attention mask" in problems[1]
    # LoRA on the head: an adapter branch the fused loss would leave out (a name or a regex naming it); trained whole
    # (modules_to_save) or left alone (unset, all-linear, names without it) it is taken
    for targets in (["q_proj", "lm_head"], "lm_head", r".*(q_proj|lm_head)"):
        lora = config_from_dict({"train": {"fused_linear_ce": True}, "policy": {"lora": {"target_modules": targets}}})
        assert [p.split(":")[0] for p in unsupported_settings(lora)] == ["train.fused_linear_ce"], targets
    for targets in (None, "all-linear", ["q_proj", "v_proj"], r".*\.q_proj"):
        lora = config_from_dict(
            {
                "train": {"fused_linear_ce": True},
                "policy": {"lora": {"target_modules": targets, "modules_to_save": ["lm_head"]}},
            }
        )
        assert unsupported_settings(lora) == [], targets
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert resolve_attention("auto", cpu, torch.float32, "sft") == "sdpa"
    assert resolve_attention("auto", gpu, torch.float32, "sft") == "sdpa"  # flash kernels take no fp32
    assert resolve_attention("auto", gpu, torch.bfloat16, "grpo") == "sdpa"
    assert resolve_attention("eager", cpu, torch.float32, "sft") == "eager"
    with pytest.raises(ConfigError, match="cannot run here: the policy trains on a CPU"):
        resolve_attention("flash_attention_2", cpu, torch.float32, "sft")
    with pytest.raises(ConfigError, match="the compute dtype is float32"):
        resolve_attention("flash_attention_3", gpu, torch.float32, "sft")
    import importlib.util

    if importlib.util.find_spec("flash_attn") is None:  # this machine: auto falls back, the name is refused
        assert resolve_attention("auto", gpu, torch.bfloat16, "sft") == "sdpa"
        with pytest.raises(ConfigError, match="flash_attn package is not installed \\(pip install flash-attn\\)"):
            resolve_attention("flash_attention_2", gpu, torch.bfloat16, "sft")
    else:
        assert resolve_attention("auto", gpu, torch.bfloat16, "sft") == "flash_attention_2"
