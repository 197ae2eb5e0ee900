"""World-model RL with context parallel (model_parallel.context_parallel_size, wfm/context_parallel.py) under
torchrun on gloo: each rank holds 1/cp of a video's DiT tokens, and the run equals cp = 1's: the same losses,
rewards and gradient norms per iteration and the same weights after the updates (float32 tolerance), for DDRL
(the policy term, the KL to the reference, the data term) at cp = 2 and 4, and Flow-GRPO at cp = 2 with HSDP
replicas; a checkpoint written at cp = 1 resumes at cp = 4 to the uninterrupted run's weights. The tiny DiT here
has 4 heads (Ulysses gives each of 4 ranks one). The two runs on 2 processes that read no other run (`two_rank_runs`)
share one launch."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from cosmos_train.export import read_checkpoint_model
from cosmos_train.metrics import read_metrics
from tests.integration.distributed.test_wfm_dist import TIMED, _common, _config, _run
from tests.torchrun import wfm_runs

pytestmark = pytest.mark.slow

RTOL, ATOL = 1e-4, 1e-6  # float32 sums in another order (the all-to-all splits the attention over the heads)
# AdamW's first step moves a weight by lr * g / (|g| + eps): where |g| is near eps (1e-8), a float32 rounding
# difference in g moves that weight by ~1e-6 (lr = 1e-3); a wrong gradient moves it by ~lr
WEIGHT_ATOL = 1e-5


@pytest.fixture(scope="module")
def wfm4_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from cosmos_train.wfm.tiny_model import make_tiny_wfm

    return make_tiny_wfm(tmp_path_factory.mktemp("tiny-wfm-4heads") / "model", heads=4)


DDRL_KEYS = ["checkpoint.save_iter=1", "checkpoint.export_diffusers=false", "model.rl.kl_beta=0.01"]  # 2 iterations
FLOW_GRPO_KEYS = ["checkpoint.export_diffusers=false"]  # 1 iteration


@pytest.fixture(scope="module")
def two_rank_runs(wfm4_dir: Path, wfm_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """On 2 processes, in one launch: DDRL at cp = 2 ("ddrl-cp2") and Flow-GRPO at cp = 1 ("flow-grpo-cp1", FSDP over
    both); each one's run folder."""
    tmp = tmp_path_factory.mktemp("wfm-cp")
    ddrl = _common(wfm4_dir, wfm_data_dir, tmp, 2) + DDRL_KEYS + ["model_parallel.context_parallel_size=2"]
    configs = {
        "ddrl-cp2": _config(tmp / "ddrl-cp2", "tiny-wfm-ddrl.toml", ddrl),
        "flow-grpo-cp1": _config(
            tmp / "flow-grpo-cp1", "tiny-wfm-flow-grpo.toml", _common(wfm4_dir, wfm_data_dir, tmp, 1) + FLOW_GRPO_KEYS
        ),
    }
    wfm_runs(list(configs.values()), 2)
    return {name: cfg.parent for name, cfg in configs.items()}


def _metrics(run: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMED} for r in read_metrics(run)]


def _assert_same_run(
    run: Path, ref: Path, steps: tuple[int, ...], rows: Callable[[dict], bool] = lambda r: True
) -> None:
    """The same metrics rows (those `rows` keeps of ref) and checkpoint weights at `steps`, within tolerance."""
    got, want = _metrics(run), [r for r in _metrics(ref) if rows(r)]
    assert [(r["kind"], r["step"]) for r in got] == [(r["kind"], r["step"]) for r in want]
    for row, ref_row in zip(got, want):
        assert row.keys() == ref_row.keys()
        for key, value in ref_row.items():
            if isinstance(value, float):
                assert row[key] == pytest.approx(value, rel=RTOL, abs=ATOL), (row["kind"], row["step"], key)
    for step in steps:
        weights = read_checkpoint_model(run / "checkpoints" / f"step_{step}")
        ref_weights = read_checkpoint_model(ref / "checkpoints" / f"step_{step}")
        assert weights.keys() == ref_weights.keys()
        for name, value in ref_weights.items():
            torch.testing.assert_close(weights[name], value, rtol=RTOL, atol=WEIGHT_ATOL, msg=f"{name}, step {step}")


def test_ddrl_at_cp2_and_cp4_equals_cp1_and_resumes_at_another_cp(
    two_rank_runs: dict[str, Path], wfm4_dir: Path, wfm_data_dir: Path, tmp_path: Path
) -> None:
    """DDRL with the KL term (policy, reference and data terms): 2 iterations at cp = 1 (one process) and at
    cp = 2 (two); then cp = 1's checkpoint of iteration 1 resumed by 4 processes at cp = 4 (DCP reshards the
    FSDP shards) to the uninterrupted run's iteration 2."""
    common = _common(wfm4_dir, wfm_data_dir, tmp_path, 2) + DDRL_KEYS
    cp1, cp2, cp4 = tmp_path / "cp1", two_rank_runs["ddrl-cp2"], tmp_path / "cp4"
    done = _run(cp1, "tiny-wfm-ddrl.toml", common, nproc=1)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert {"data_loss", "kl", "policy_loss"} <= _metrics(cp2)[1].keys()
    _assert_same_run(cp2, cp1, steps=(1, 2))
    resume = f"checkpoint.resume='{cp1 / 'checkpoints' / 'step_1'}'"
    done = _run(cp4, "tiny-wfm-ddrl.toml", [*common, "model_parallel.context_parallel_size=4", resume], nproc=4)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads((cp4 / "result.json").read_text())["resumed_from"].endswith("step_1")
    _assert_same_run(cp4, cp1, steps=(2,), rows=lambda r: r["step"] == 2)


def test_flow_grpo_at_cp2_with_hsdp_equals_cp1(
    two_rank_runs: dict[str, Path], wfm4_dir: Path, wfm_data_dir: Path, tmp_path: Path
) -> None:
    """Flow-GRPO with 2 data-parallel ranks: FSDP over 2 processes at cp = 1, and HSDP (2 replicas, each sharded
    over its 2 CP ranks, with activation checkpointing) over 4 processes at cp = 2: FSDP sums the CP ranks'
    gradient shares and averages the replicas."""
    common = _common(wfm4_dir, wfm_data_dir, tmp_path, 1) + FLOW_GRPO_KEYS
    cp1, cp2 = two_rank_runs["flow-grpo-cp1"], tmp_path / "cp2"
    # the CP run recomputes each block in the backward too (the all-to-alls run again there)
    hsdp = [
        "model_parallel.context_parallel_size=2",
        "model.dp_replicate_size=2",
        "model.activation_checkpointing=true",
    ]
    done = _run(cp2, "tiny-wfm-flow-grpo.toml", [*common, *hsdp], nproc=4)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "policy_loss" in _metrics(cp2)[1]
    _assert_same_run(cp2, cp1, steps=(1,))
