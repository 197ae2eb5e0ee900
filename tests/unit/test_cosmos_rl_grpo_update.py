"""One GRPO update over several mini-batches: our trainer's gradient equals cosmos-rl 0.4.7's.

Ours is the real thing: a `GRPOTrainer` built from cosmos-rl's key names (mini_batch, loss_type, kl_beta,
mu_iterations, ...) on the tiny model, one CPU rank, whose `train_on` (its loop over `grpo_update.micro_batch_loss`)
runs a rollout of 8 completions of unequal
lengths in mini-batches of 3 (3, 3 and 2 completions, 12, 10 and 13 loss tokens). Its gradients are read where the
update would clip them (`clip_gradients`), so every optimizer update of the step is seen and the update itself
still runs.

cosmos-rl's, from the installed package (tests/cosmos_rl_oracle.py): `GRPOTrainer.step_training`
(policy/trainer/llm_trainer/grpo_trainer.py) cannot run here (CUDA streams, its packers and its model classes),
so its few inline lines are retraced around its own functions, on the same model with the same weights:
its data packer's `get_policy_input` gives each completion's logprob_masks (ignored prefix included), each
mini-batch (`processed_samples[i : i + mini_batch]`) is right-padded and run through the model, its
`compute_logprobs` gives the log-probs (logits / train_policy.temperature), its `compute_loss` the loss, minus
entropy_coeff x its effective_entropy, times `loss_scaling_factor = len(mini_batch) / len(processed_samples_for_
optimize)`, backward, one optimizer step per pass; the reference log-probs come from the initial weights before
training, the old ones from the first pass (`old_per_token_logps[local_mini_step]`), kept for the mu_iterations
that follow. Before each of its passes the oracle's model takes the weights ours had at that update, so the
optimizer's step (not cosmos-rl code) is outside the comparison and pass 2's gradient is compared at equal weights.

The two forwards differ in layout only (ours: the shared-prompt rows of `rl_batch`; theirs: one padded row per
completion), so float32 rounding is all that separates them: gradients agree to under 1e-6 of their largest
element (5e-7 measured), and TOL = 1e-4 of it is far below what each mutation at the end moves (0.19 and more).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from cosmos_train.config import config_from_dict
from cosmos_train.distributed import DistInfo
from cosmos_train.generation import Completion
from cosmos_train.models.load import load_model
from cosmos_train.train import grpo, grpo_update, loop
from cosmos_train.train.batching import split_micro_batches
from cosmos_train.train.rollout.groups import Group
from tests.cosmos_rl_oracle import oracle_config, oracle_function

GRPO_TRAINER = "cosmos_rl.policy.trainer.llm_trainer.grpo_trainer"
PACKER = "cosmos_rl.dispatcher.data.packer.decoder_only_llm_data_packer"
TOL = 1e-4  # of the largest gradient element (module docstring)

# the rollout: two prompts x n_generation = 4 completions of these lengths; in mini-batches of 3 that is 3, 3 and 2
# completions holding 12, 10 and 13 loss tokens (the third completion of the first group ignores its first 2)
PROMPTS = ("Which colour is the sky on a clear day?", "Name a prime number.")
LENGTHS = ((5, 2, 7, 3), (1, 6, 4, 9))
ADVANTAGES = ((1.2, -0.7, 0.4, -0.9), (-1.5, 0.8, 0.3, 0.4))
IGNORE_PREFIX = ((0, 0, 2, 0), (0, 0, 0, 0))
MINI_BATCH = 3

Tensors = dict[str, torch.Tensor]  # by parameter name: gradients or weights


# ------------------------------------------------------------------------------------------------ ours
def _trainer(model_dir: Path, run_dir: Path, monkeypatch: pytest.MonkeyPatch, **train_policy: Any) -> grpo.GRPOTrainer:
    """A real GRPOTrainer from cosmos-rl's keys, one CPU rank; its rows are a data-prep manifest of the prompts.
    Left out: the rollout engine (the update never calls it) and the process's signal handlers."""
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"p{i}", "messages": [{"role": "user", "content": p}]} for i, p in enumerate(PROMPTS)]
    (run_dir / "manifest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = config_from_dict(
        {
            "train": {
                "output_dir": str(run_dir / "out"),
                "train_batch_per_replica": 8,
                "param_dtype": "float32",
                "optm_lr": 1e-2,  # a visible move between the passes of mu_iterations = 2
                "train_policy": {"type": "grpo", "mini_batch": MINI_BATCH, **train_policy},
            },
            "rollout": {"n_generation": 4},
            "policy": {"model_name_or_path": str(model_dir), "model_gradient_checkpointing": False},
        }
    )
    dist = DistInfo(0, 1, 0, torch.device("cpu"), mesh=None, dp_replicate=1, dp_shard=1, tp=1)  # type: ignore[arg-type]
    monkeypatch.setattr(loop, "install_exit_handlers", lambda *a, **k: None)
    monkeypatch.setattr(grpo.GRPOTrainer, "_rollout_source", lambda self, script: SimpleNamespace(frames=None))
    return grpo.GRPOTrainer(cfg, run_dir, dist)


def _rollout(trainer: grpo.GRPOTrainer) -> list[Group]:
    """The groups of the two prompts: random completion tokens (no vision placeholder) of LENGTHS."""
    gen = torch.Generator().manual_seed(0)
    groups = []
    for row, lengths, advantages, ignore in zip(trainer.rows, LENGTHS, ADVANTAGES, IGNORE_PREFIX):
        completions = []
        for n in lengths:
            ids = [
                i for i in torch.randint(100, 1000, (n,), generator=gen).tolist() if i not in trainer.prompts.vision_ids
            ]
            assert len(ids) == n
            completions.append(Completion("", ids, (-torch.rand(n, generator=gen)).tolist(), "stop"))
        rewards = [float(a > 0) for a in advantages]
        groups.append(Group(row, completions, rewards, [{}] * 4, list(advantages), list(ignore)))
    return groups


def our_update(trainer: grpo.GRPOTrainer, groups: list[Group]) -> tuple[list[Tensors], list[Tensors]]:
    """(the gradient of each optimizer update of the step on `groups`, the weights it was computed at), as
    train_step trains a rollout: the prompts' samples_of, then train_on."""
    grads: list[Tensors] = []
    weights: list[Tensors] = []
    clip = trainer.clip_gradients

    def record_then_clip() -> float:
        named = list(trainer.model.named_parameters())
        grads.append({n: p.grad.detach().clone() for n, p in named if p.grad is not None})
        weights.append({n: p.detach().clone() for n, p in named})
        return clip()

    trainer.clip_gradients = record_then_clip  # type: ignore[method-assign]
    samples = trainer.prompts.samples_of(groups)
    micro = split_micro_batches(samples, trainer.update.micro_batch)
    tokens = [sum(len(s.token_ids) - s.ignore_prefix for s in m) for m in micro]
    assert len(micro) >= 3 and len(set(tokens)) == len(tokens), tokens  # several mini-batches of unequal tokens
    filler = trainer.prompts.filler(SimpleNamespace(dropped=[]), samples, trainer.pad_id)  # type: ignore[arg-type]
    trainer.train_on(samples, filler)
    return grads, weights


# ------------------------------------------------------------------------------------------------ cosmos-rl's
def _their_config(mini_batch: int, **train_policy: Any) -> Any:
    cfg = oracle_config()
    cfg.train.train_policy.mini_batch = mini_batch
    for key, value in train_policy.items():
        setattr(cfg.train.train_policy, key, value)
    return cfg


def _their_policy_inputs(trainer: grpo.GRPOTrainer, groups: list[Group], cfg: Any) -> list[Any]:
    """cosmos-rl's DecoderOnlyLLMDataPacker.get_policy_input of each completion (completions as token ids; its
    tokenizer call answers with our prompt's ids), in rollout order."""
    get_policy_input = oracle_function(
        PACKER,
        "DecoderOnlyLLMDataPacker.get_policy_input",
        DecoderOnlyLLMDataPacker=SimpleNamespace(RLPolicyInput=SimpleNamespace),  # its record of the two lists
    )
    out = []
    for group in groups:
        prompt_ids = trainer.prompts.encode(dict(group.row)).input_ids.tolist()
        packer = SimpleNamespace(
            config=cfg,
            get_rollout_input=lambda sample: sample,
            tokenizer=lambda text, add_special_tokens, ids=prompt_ids: SimpleNamespace(input_ids=ids),
        )
        for c, skip in zip(group.completions, group.ignore_prefix):
            out.append(get_policy_input(packer, group.row["id"], list(c.token_ids), skip))
    return out


def _padded(inputs: list[Any]) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, logprob_masks) of a mini-batch, right-padded as cosmos-rl's policy_collate_fn pads them (the pad
    id is never seen: padding follows every position a mask keeps, and attention is causal)."""
    width = max(len(x.input_ids) for x in inputs)
    ids = torch.tensor([x.input_ids + [0] * (width - len(x.input_ids)) for x in inputs])
    masks = torch.tensor([x.logprob_masks + [0] * (width - len(x.logprob_masks)) for x in inputs], dtype=torch.bool)
    return ids, masks


def their_update(
    trainer: grpo.GRPOTrainer, groups: list[Group], weights: list[Tensors], **train_policy: Any
) -> list[Tensors]:
    """cosmos-rl's step_training on `groups` (module docstring): the gradient of each of its mu_iterations
    optimizer steps, pass k at `weights[k]` (ours at that update)."""
    compute_loss = oracle_function(GRPO_TRAINER, "compute_loss")
    compute_logprobs = oracle_function("cosmos_rl.utils.util", "compute_logprobs")
    cfg = _their_config(MINI_BATCH, **train_policy)
    tp = cfg.train.train_policy
    model = load_model(str(trainer.model_dir), dtype=torch.float32, device="cpu")
    processed = _their_policy_inputs(trainer, groups, cfg)
    advantages_t = torch.tensor([a for group in groups for a in group.advantages])
    starts = range(0, len(processed), tp.mini_batch)
    mini_batches = [
        (processed[i : i + tp.mini_batch], list(range(i, min(i + tp.mini_batch, len(processed))))) for i in starts
    ]

    def logprobs(ids: torch.Tensor, masks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict]:
        logits = model(input_ids=ids, use_cache=False).logits
        if tp.temperature > 1e-6 and tp.temperature != 1.0:
            logits = logits / tp.temperature
        return compute_logprobs(ids, masks, logits, is_full_logits=True, entropy_requires_grad=tp.entropy_coeff > 0)

    ref: dict[int, torch.Tensor | None] = dict.fromkeys(range(len(mini_batches)))
    if tp.kl_beta != 0.0:  # TrainerPhase.REF_COMPUTE: the reference (the initial weights), before training
        model.load_state_dict(weights[0])
        model.eval()
        with torch.no_grad():
            for step, (inputs, _) in enumerate(mini_batches):
                ref[step] = logprobs(*_padded(inputs))[0]
    old: dict[int, torch.Tensor] = {}
    out = []
    for i_mu in range(tp.mu_iterations):
        model.load_state_dict(weights[i_mu])
        model.train()
        model.zero_grad(set_to_none=True)
        for step, (inputs, indices) in enumerate(mini_batches):
            loss_scaling_factor = len(inputs) / len(processed)
            ids, masks = _padded(inputs)
            current, cu_seqlens, metrics = logprobs(ids, masks)
            old.setdefault(step, current.detach())  # the first pass's, reused by the later ones
            advantages = masks * advantages_t[indices].unsqueeze(1).expand(-1, ids.shape[1])
            loss = compute_loss(current, old[step], ref[step], advantages, cu_seqlens, cfg, masks)[0]
            if tp.entropy_coeff > 0.0:
                loss = loss - tp.entropy_coeff * metrics["effective_entropy"]
            (loss * loss_scaling_factor).backward()
        out.append({n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None})
    return out


# ------------------------------------------------------------------------------------------------ the comparison
def gradient_difference(
    model_dir: Path,
    run_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    ours_only: dict[str, Any] | None = None,
    **train_policy: Any,
) -> float:
    """The largest |ours - cosmos-rl's| over every parameter's gradient of every update of the step, over the
    largest |cosmos-rl's| element (the same settings, cosmos-rl's key names, given to both; `ours_only`: keys of
    ours that cosmos-rl lacks)."""
    trainer = _trainer(model_dir, run_dir, monkeypatch, **train_policy, **(ours_only or {}))
    groups = _rollout(trainer)
    ours, weights = our_update(trainer, groups)
    theirs = their_update(trainer, groups, weights, **train_policy)
    assert len(ours) == len(theirs) == train_policy.get("mu_iterations", 1)
    worst, scale = 0.0, 0.0
    for a, b in zip(ours, theirs):
        assert a.keys() == b.keys()
        for name, g in b.items():
            worst = max(worst, float((a[name] - g).abs().max()))
            scale = max(scale, float(g.abs().max()))
    assert scale > 0
    return worst / scale


CASES = {
    "token-mean": dict(loss_type="token-mean"),
    "seq-mean-token-mean": dict(loss_type="seq-mean-token-mean"),
    "seq-mean-token-sum": dict(loss_type="seq-mean-token-sum"),
    "token-sum": dict(loss_type="token-sum"),
    # the k3 KL's gradient is 0 while the policy is the reference: only a second pass sees kl_beta
    "token-mean-kl": dict(loss_type="token-mean", kl_beta=0.3, mu_iterations=2),
    "token-mean-mu2": dict(loss_type="token-mean", mu_iterations=2, epsilon_high=0.28),
    "seq-mean-token-mean-mu2-kl": dict(
        loss_type="seq-mean-token-mean", mu_iterations=2, kl_beta=0.3, unbiased_kl_estimate=True
    ),
    "temperature-entropy": dict(loss_type="token-mean", temperature=0.7, entropy_coeff=0.05, mu_iterations=2),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_update_over_mini_batches_equals_cosmos_rl(
    case: str, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every update's gradient (mu_iterations of them) equals cosmos-rl's step over the same mini-batches."""
    assert gradient_difference(tiny_model_dir, tmp_path, monkeypatch, **CASES[case]) < TOL


# ------------------------------------------------------------------------------------------------ mutations
def _equal_shares(original: Callable[..., Any]) -> Callable[..., Any]:
    def scales(micro: list[Any], *a: Any) -> Any:
        out = original(micro, *a)
        return grpo_update.LossScales(out.normalisers, [1.0 / len(micro)] * len(micro), out.dp_factor, total=out.total)

    return scales


def _old_from_each_pass(original: Callable[..., Any]) -> Callable[..., Any]:
    def loss(logp: torch.Tensor, old: torch.Tensor, *a: Any, **k: Any) -> Any:
        return original(logp, logp.detach(), *a, **k)

    return loss


def test_mutations_of_the_update_are_caught(
    tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each comparison fails when ours is changed on purpose: mini-batches weighed equally instead of by their
    completions, one denominator over the whole update (our loss_denominator = "update", not cosmos-rl's), and
    old log-probs taken from each pass instead of the first."""
    with monkeypatch.context() as m:
        m.setattr(grpo, "loss_scales", _equal_shares(grpo.loss_scales))
        assert gradient_difference(tiny_model_dir, tmp_path / "a", m, loss_type="token-mean") > 100 * TOL
    whole_update = {"loss_denominator": "update"}
    assert (
        gradient_difference(tiny_model_dir, tmp_path / "b", monkeypatch, whole_update, loss_type="token-mean")
        > 100 * TOL
    )
    with monkeypatch.context() as m:
        m.setattr(grpo_update, "policy_loss", _old_from_each_pass(grpo_update.policy_loss))
        assert (
            gradient_difference(tiny_model_dir, tmp_path / "c", m, loss_type="token-mean", mu_iterations=2) > 100 * TOL
        )
