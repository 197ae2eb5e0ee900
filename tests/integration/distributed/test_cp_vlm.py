"""Context parallel for the VLM trainers (policy.parallelism.cp_size): each sequence split over the CP ranks gives the
cp = 1 loss and gradients, in one step (SFT padded and packed, a GRPO loss) and over training runs that resume at
another cp size. The SFT and GRPO runs at cp = 2 (`cp2_runs`) share one launch; each resume has its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import write_tiny_grpo_config, write_tiny_sft_config
from tests.integration.distributed.test_grpo_dist import exported, rows
from tests.torchrun import grpo, grpo_args, runs_in_one_launch, sft, sft_args, torchrun

pytestmark = pytest.mark.slow


# GRPO's: 2 steps, a checkpoint each; kl_beta: the frozen reference model scores the tokens through the same split
# forward
GRPO_KEYS = {"train.max_num_steps": 2, "train.ckpt.save_freq": 1, "train.train_policy.kl_beta": 0.05}


def sft_config(run: Path, model: Path, data: Path, out: Path, cp: int, **keys: object) -> Path:
    """The tiny job on packed rows, 4 steps, the held-out loss at the end; at context parallel `cp`."""
    cfg = write_tiny_sft_config(run / "config.toml", model, data, out, sequence_packing=True, **keys)
    text = cfg.read_text() + "[validation]\nenable = true\nfreq = 4\nbatch_size = 3\n"
    cfg.write_text(text + (f"[policy.parallelism]\ncp_size = {cp}\n" if cp > 1 else ""))
    return cfg


@pytest.fixture(scope="module")
def cp2_runs(tiny_model_dir: Path, synthetic_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The SFT ("sft") and GRPO ("grpo") runs on 2 ranks at cp_size = 2, in one launch: each one's run folder."""
    tmp = tmp_path_factory.mktemp("cp2")
    sft_cfg = sft_config(tmp / "sft", tiny_model_dir, synthetic_dir, tmp / "o-sft", 2)
    grpo_cfg = write_tiny_grpo_config(
        tmp / "grpo" / "config.toml",
        tiny_model_dir,
        synthetic_dir,
        tmp / "o-grpo",
        **{**GRPO_KEYS, "policy.parallelism.cp_size": 2},
    )
    runs_in_one_launch([sft_args(sft_cfg)[1:], grpo_args(grpo_cfg)[1:]], 2, timeout=400)
    return {"sft": sft_cfg.parent, "grpo": grpo_cfg.parent}


def train_rows(run: Path) -> dict[int, dict]:
    return {r["step"]: r for r in rows(run) if r["kind"] == "train"}


def test_one_step_equals_cp1_at_cp4_and_cp2_with_fsdp(tiny_model_dir: Path, tmp_path: Path) -> None:
    """4 ranks: cp = 4 (the tiny model's 2 key/value heads repeated to its 4 query heads), and cp = 2 x 2 FSDP
    shards (the CP and data-parallel gradient reductions together). Loss and every gradient equal the whole batch
    through an unsharded model at cp = 1, for SFT padded, packed and with the fused LM head + cross entropy, and a
    GSPO loss on GRPO's shared-prompt layout."""
    out = tmp_path / "out"
    worker = "tests.integration.distributed.cp_vlm_worker"
    torchrun(4, "-m", worker, str(tiny_model_dir), str(out), "4x1,2x2", timeout=400)
    for rank in range(4):
        results = json.loads((out / f"rank{rank}.json").read_text())
        kinds = ("sft-padded", "sft-packed", "sft-fused")
        assert set(results) == {f"{k}-cp{c}" for k in kinds for c in ("4x1", "2x2")} | {"grpo-cp4"}
        for case, r in results.items():
            assert r["loss"] == pytest.approx(r["ref"], rel=1e-5), (rank, case, r)
            # float32 rounding: the attention and reductions run in another order (a cp bug moves this to ~1e-3)
            assert r["grad"] < 1e-5, (rank, case, r)


def test_sft_at_cp2_trains_as_cp1_and_resumes_at_cp1(
    cp2_runs: dict[str, Path], tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    """The SFT trainer on 2 ranks at cp_size = 2 (one data-parallel rank), packed rows, 4 steps; its step-2
    checkpoint resumed on 1 process at cp = 1 repeats steps 3 and 4: the same losses and the same final weights."""
    runs = {"cp2": cp2_runs["sft"], "resumed": tmp_path / "resumed"}
    resume = str(runs["cp2"] / "checkpoints" / "step_2")
    out = sft(
        sft_config(runs["resumed"], tiny_model_dir, synthetic_dir, tmp_path / "o", 1, resume=resume), 1, timeout=400
    )
    assert "at step 2" in out
    a, b = train_rows(runs["cp2"]), train_rows(runs["resumed"])
    assert sorted(a) == [1, 2, 3, 4] and sorted(b) == [3, 4]
    for s in (3, 4):
        assert a[s]["label_tokens"] == b[s]["label_tokens"]  # the CP group's rows counted once, not per rank
        assert b[s]["loss"] == pytest.approx(a[s]["loss"], rel=1e-4)
    # the held-out loss of the final weights, split over the CP ranks and whole
    va, vb = ([r for r in rows(runs[n]) if r["kind"] == "val"] for n in ("cp2", "resumed"))
    assert [r["step"] for r in va] == [4] and [r["step"] for r in vb] == [4]
    assert va[0]["label_tokens"] == vb[0]["label_tokens"] and vb[0]["loss"] == pytest.approx(va[0]["loss"], rel=1e-4)
    wa, wb = exported(runs["cp2"] / "safetensors" / "final"), exported(runs["resumed"] / "safetensors" / "final")
    assert wa.keys() == wb.keys()
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=0, atol=1e-4, msg=k)


def test_grpo_at_cp2_updates_as_cp1_and_resumes_at_cp1(
    cp2_runs: dict[str, Path], tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    """The GRPO trainer on 2 ranks at cp_size = 2: the ranks of the CP group train on one rollout (the CP leader's),
    and the shared-prompt log-probs (the policy's and the KL reference's) are gathered over the group. Resumed from
    its step-1 checkpoint on 1 process at cp = 1, step 2 samples the same completions and makes the same update."""
    cp2 = cp2_runs["grpo"]
    resumed = tmp_path / "resumed"
    grpo(
        write_tiny_grpo_config(
            resumed / "config.toml",
            tiny_model_dir,
            synthetic_dir,
            tmp_path / "o2",
            **{**GRPO_KEYS, "train.resume": str(cp2 / "checkpoints" / "step_1")},
        ),
        nproc=1,
    )
    a, b = train_rows(cp2), train_rows(resumed)
    assert sorted(a) == [1, 2] and sorted(b) == [2]
    # each group counted once although both ranks of the CP group hold it
    assert a[2]["groups"] == b[2]["groups"] and a[2]["reward_mean"] == b[2]["reward_mean"]
    # on-policy at ratio 1 the loss is ~0; the gradient it makes is what the update is
    assert b[2]["loss"] == pytest.approx(a[2]["loss"], rel=1e-4, abs=1e-6)
    assert b[2]["grad_norm"] == pytest.approx(a[2]["grad_norm"], rel=1e-5) and a[2]["grad_norm"] > 0.1
    assert b[2]["kl"] == pytest.approx(a[2]["kl"], rel=1e-4, abs=1e-9) and a[2]["kl"] > 0
    wa, wb = exported(cp2 / "safetensors" / "final"), exported(resumed / "safetensors" / "final")
    for k in wa:
        torch.testing.assert_close(wb[k], wa[k], rtol=0, atol=1e-4, msg=k)
