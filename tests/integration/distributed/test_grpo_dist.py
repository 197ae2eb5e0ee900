"""GRPO under torchrun with 2 processes (FSDP2, gloo, an HF rollout engine per rank): the reward rises,
what a run writes, and a resumed run equals an uninterrupted one. The runs that read no other run (`runs`) share
one launch, one after another; a resumed run, one process, and the rollout worker's run each have their own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import write_tiny_grpo_config
from tests.cosmos_rl_oracle import oracle_learning_rates
from tests.torchrun import grpo, grpo_runs

pytestmark = pytest.mark.slow
# metrics that are rates over measured time (and memory): they differ between two runs of the same steps
TIMED = ("tokens_per_s", "peak_mem_gb", "update_tflops_per_device", "update_mfu")


def rows(run: Path, name: str = "metrics.jsonl") -> list[dict]:
    return [json.loads(x) for x in (run / name).read_text().splitlines() if x.strip()]


def assert_same_weights(a_folder: Path, b_folder: Path) -> None:
    """The two safetensors folders hold the same tensors, bit for bit."""
    a, b = exported(a_folder), exported(b_folder)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def exported(folder: Path) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        tensors.update(load_file(f))
    return tensors


# each run's settings over write_tiny_grpo_config's
RUNS: dict[str, dict[str, object]] = {
    # 4 steps straight: the run test_resume_equals_uninterrupted resumes from its step_2 (first in the launch)
    "straight": {
        "train.max_num_steps": 4,
        "rollout.sampling_config.top_k": 4,
        "train.train_policy.kl_beta": 0.05,
        "train.train_policy.mu_iterations": 2,
        "train.train_batch_per_replica": 8,
        "train.optm_warmup_steps": 2,
        "train.optm_warmup_start_factor": 0.5,
        "train.optm_decay_type": "linear",
    },
    "dynamic": {
        "train.max_num_steps": 16,
        "train.train_policy.variant": "dapo",
        "rollout.sampling_config.top_k": 4,
        "validation.enable": True,
        "validation.freq": 8,
        "validation.temperature": 1.0,
        "validation.n_generation": 2,
        "train.ckpt.save_freq": 8,
    },
    "tp": {
        "train.max_num_steps": 3,
        "policy.parallelism.tp_size": 2,
        "policy.parallelism.dp_shard_size": 1,
        "rollout.sampling_config.top_k": 4,
        "validation.enable": True,
        "validation.freq": 3,
    },
    **{
        f"mb{micro}": {
            "train.max_num_steps": 1,
            "train.train_policy.micro_batch": micro,
            "rollout.sampling_config.top_k": 4,
            "train.train_policy.kl_beta": 0.1,
            "train.train_policy.loss_denominator": "update",
        }
        for micro in (8, 2)
    },
}


def lora_keys(on_policy: bool) -> dict[str, object]:
    """The LoRA case's settings: the colocated engine (on_policy) or the asynchronous rollout worker."""
    return {
        "train.max_num_steps": 2,
        "rollout.sampling_config.top_k": 4,
        "train.train_policy.kl_beta": 0.1,
        "train.train_policy.on_policy": on_policy,
        "policy.lora": {"r": 4, "lora_alpha": 8},
    }


@pytest.fixture(scope="module")
def runs(tiny_model_dir: Path, synthetic_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """RUNS and the colocated LoRA run on 2 processes, in one launch: each name's run folder."""
    tmp = tmp_path_factory.mktemp("grpo-runs")
    settings = {**RUNS, "lora-colocated": lora_keys(True)}
    configs = {
        name: write_tiny_grpo_config(
            tmp / name / "config.toml", tiny_model_dir, synthetic_dir, tmp / f"o-{name}", **keys
        )
        for name, keys in settings.items()
    }
    grpo_runs(list(configs.values()), timeout=900)
    return {name: cfg.parent for name, cfg in configs.items()}


def test_dynamic_sampling_run_raises_the_reward(runs: dict[str, Path]) -> None:
    """The toy task (a completion starting with a space, among the 4 likeliest tokens) from the random
    tiny model: DAPO's dynamic sampling leaves the ranks different numbers of groups (weight-0 fillers
    keep their collectives paired), and the reward over all sampled groups climbs."""
    run = runs["dynamic"]
    train = [m for m in rows(run) if m["kind"] == "train"]
    assert [m["step"] for m in train] == list(range(1, 17))
    first, last = train[:4], train[-4:]
    before = sum(m["reward_mean"] for m in first) / 4
    after = sum(m["reward_mean"] for m in last) / 4
    assert after >= before + 0.25, [round(m["reward_mean"], 3) for m in train]
    assert any(m["dropped_zero_std"] > 0 for m in train)  # dynamic sampling did drop groups
    trained = [m for m in train if m["updates"] > 0]  # a step whose groups all had equal rewards makes none
    for key in (
        "reward/leading_space",
        "clip_fraction",
        "entropy",
        "response_length_mean",
        "zero_std_fraction",
        "rollout_time",
        "train_time",
        "tokens_per_s",
        "weight_version",
        "grad_norm",
        "lr",
    ):
        assert key in trained[-1], key
    assert train[-1]["weight_version"] == 16
    val = [m for m in rows(run) if m["kind"] == "val"]
    assert [m["step"] for m in val] == [0, 8, 16]
    result = json.loads((run / "result.json").read_text())
    best = json.loads((run / "best.json").read_text())
    assert result["best"] == best and best["metric"] == "reward_mean"
    assert best["value"] == max(m["reward_mean"] for m in val)
    assert exported(Path(best["path"])).keys() == exported(Path(result["final"])).keys()
    sampled = rows(run, "completions.jsonl")
    assert {r["step"] for r in sampled} == set(range(1, 17))
    assert all(r["reward"] == float(r["completion"].startswith(" ")) for r in sampled)


def test_resume_equals_uninterrupted(
    runs: dict[str, Path], tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    """4 steps straight == 2 steps, then resume from step_2 (in a launch of its own) for 2 more: the same
    completions, rewards and weights, tolerance 0 on CPU (sampling seeds derive from the step; the data position is
    checkpointed)."""
    straight = runs["straight"]
    resumed = tmp_path / "resumed"
    out = grpo(
        write_tiny_grpo_config(
            resumed / "config.toml",
            tiny_model_dir,
            synthetic_dir,
            tmp_path / "o2",
            **{**RUNS["straight"], "train.resume": str(straight / "checkpoints" / "step_2")},
        )
    )
    assert "at step 2" in out
    assert_same_weights(straight / "safetensors" / "final", resumed / "safetensors" / "final")
    tail = [
        {k: v for k, v in m.items() if not k.endswith("time") and k not in TIMED}
        for m in rows(straight)
        if m["kind"] == "train" and m["step"] > 2
    ]
    again = [
        {k: v for k, v in m.items() if not k.endswith("time") and k not in TIMED}
        for m in rows(resumed)
        if m["kind"] == "train"
    ]
    assert tail == again
    # a step is train_batch_per_replica = 8 completions (2 prompts x 4): one update per pass, 2 passes
    assert "kl" in tail[-1] and tail[-1]["updates"] == 2 and tail[-1]["completions"] == 8
    # the learning rate after each step is cosmos-rl's own schedule (build_lr_schedulers) ticked once a step,
    # not once an update
    theirs = oracle_learning_rates(
        4, lr=1e-3, optm_warmup_steps=2, optm_warmup_start_factor=0.5, optm_decay_type="linear"
    )
    # "lr" is logged after each step's tick: the rates of steps 1..4 of the run's 4-step schedule
    assert [m["lr"] for m in rows(straight) if m["kind"] == "train"] == pytest.approx(theirs[1:], rel=1e-9)
    assert [r["completion"] for r in rows(straight, "completions.jsonl") if r["step"] > 2] == [
        r["completion"] for r in rows(resumed, "completions.jsonl")
    ]


def test_masked_truncated_completions_make_no_update(tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    """mask_truncated_completions: every completion of the toy task hits the 3-token budget, so nothing is
    left to learn from: no update is made and the exported weights are the initial ones (one process)."""
    run = tmp_path / "run"
    grpo(
        write_tiny_grpo_config(
            run / "config.toml",
            tiny_model_dir,
            synthetic_dir,
            tmp_path / "out",
            **{
                "train.max_num_steps": 2,
                "train.train_policy.mask_truncated_completions": True,
                "rollout.sampling_config.top_k": 4,
                "policy.parallelism.dp_shard_size": 1,
            },
        ),
        nproc=1,
    )
    train = [m for m in rows(run) if m["kind"] == "train"]
    assert [m["truncated_fraction"] for m in train] == [1.0, 1.0]
    assert [m["updates"] for m in train] == [0.0, 0.0]
    assert_same_weights(run / "safetensors" / "final", tiny_model_dir)


def test_tensor_parallel_policy(runs: dict[str, Path], tiny_model_dir: Path) -> None:
    """The policy on TP 2 (both ranks one replica): the ranks train on the first rank's rollout, so the
    replica sees one batch, and the run trains, validates and exports."""
    run = runs["tp"]
    train = [m for m in rows(run) if m["kind"] == "train"]
    assert [m["step"] for m in train] == [1, 2, 3]
    assert all(m["completions"] == 16 and m["updates"] == 1 for m in train)  # one replica: 4 prompts x 4, not x 2
    assert exported(run / "safetensors" / "final").keys() == exported(tiny_model_dir).keys()


def test_micro_batch_split_does_not_change_the_update(runs: dict[str, Path]) -> None:
    """loss_denominator = "update" (ours): token-mean over the update's global token count, so one update of 16
    completions (8 a rank) computed in micro-batches of 8 or of 2 has the same loss and gradient norm (first
    step: same weights, same rollout). cosmos-rl's default normalises each micro-batch by its own tokens."""
    first = {micro: next(m for m in rows(runs[f"mb{micro}"]) if m["kind"] == "train") for micro in (8, 2)}
    a, b = first[8], first[2]
    assert a["reward_mean"] == b["reward_mean"] and a["completions"] == b["completions"] == 16
    assert abs(a["grad_norm"] - b["grad_norm"]) <= 1e-5 * max(1.0, a["grad_norm"]) and a["grad_norm"] > 0
    assert abs(a["loss"] - b["loss"]) <= 1e-6 and abs(a["kl"] - b["kl"]) <= 1e-7


@pytest.mark.parametrize("on_policy", [True, False], ids=["colocated", "async-worker"])
def test_lora_policy_trains_and_the_engine_gets_merged_weights(
    request: pytest.FixtureRequest, tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path, on_policy: bool
) -> None:
    """[policy.lora] with GRPO: the colocated engine receives the merged weights (base + scaling * B @ A under
    the base model's names; it refuses any other name), the asynchronous worker reads the merged export, the
    KL reference is the base model, and only the adapted projections change in the export. The colocated run is
    one of `runs`; the worker's, which starts a rollout process of its own, has its own launch."""
    if on_policy:
        run = request.getfixturevalue("runs")["lora-colocated"]
    else:
        run = tmp_path / "run"
        grpo(
            write_tiny_grpo_config(
                run / "config.toml", tiny_model_dir, synthetic_dir, tmp_path / "out", **lora_keys(False)
            )
        )
    train = [m for m in rows(run) if m["kind"] == "train"]
    assert [m["step"] for m in train] == [1, 2] and all(m["updates"] == 1 for m in train)
    assert train[1]["kl"] > 0  # the adapted policy moved away from the base reference
    base, merged = exported(tiny_model_dir), exported(run / "safetensors" / "final")
    assert merged.keys() == base.keys()
    changed = [k for k in base if not torch.equal(base[k], merged[k])]
    assert changed and all(k.startswith("model.layers.") and k.endswith("_proj.weight") for k in changed), changed
