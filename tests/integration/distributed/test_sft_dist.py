"""SFT under torchrun with 2 processes (FSDP2, gloo): trains, exports, and resumes exactly. The runs that read no
other run (`runs`) share one launch, one after another; a killed run and each resumed one have their own."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import write_tiny_sft_config
from tests.torchrun import finish, running, sft, sft_args, sft_runs

pytestmark = pytest.mark.slow


def exported(run: Path) -> dict[str, torch.Tensor]:
    final = run / "safetensors" / "final"
    tensors: dict[str, torch.Tensor] = {}
    for f in sorted(final.glob("*.safetensors")):
        tensors.update(load_file(f))
    return tensors


def metrics(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]


@pytest.fixture(scope="module")
def runs(tiny_model_dir: Path, synthetic_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The runs no other run feeds, on 2 processes in one launch: each one's run folder.
    - straight: the tiny job's 4 steps with the defaults (first in the launch), which the resume and the compiled
      cases compare with;
    - straight8: 8 steps, which the killed-and-resumed case compares with;
    - exports: 4 steps, async checkpoints (the background DCP write runs while training and the step_2 export run
      their own collectives) and the held-out loss every 2 steps;
    - compiled: the GPU path's options (see test_compiled_fused_blocks_train_as_eager; last: nothing compiled runs
      before the eager runs)."""
    tmp = tmp_path_factory.mktemp("sft-runs")

    def config(name: str, **keys: object) -> Path:
        return write_tiny_sft_config(
            tmp / name / "config.toml", tiny_model_dir, synthetic_dir, tmp / f"o-{name}", **keys
        )

    exports = config("exports", max_num_steps=4, save_mode="async")
    exports.write_text(exports.read_text() + "[validation]\nenable = true\nfreq = 2\nbatch_size = 3\n")
    compiled = config("compiled", max_num_steps=4, compile=True, fused_linear_ce=True, fused_linear_ce_chunk=5)
    compiled.write_text(compiled.read_text().replace("[policy]\n", '[policy]\nattn_implementation = "eager"\n'))
    configs = [config("straight", max_num_steps=4), config("straight8", max_num_steps=8), exports, compiled]
    sft_runs(configs, 2)
    return {cfg.parent.name: cfg.parent for cfg in configs}


def test_two_process_fsdp2_trains_and_exports(runs: dict[str, Path], tiny_model_dir: Path) -> None:
    run = runs["exports"]
    rows = [m for m in metrics(run) if m["kind"] == "train"]
    assert [m["step"] for m in rows] == [1, 2, 3, 4]
    assert all(m["label_tokens"] == 4 * 2 for m in rows)  # 4 rows per replica: letter + <|im_end|>
    assert rows[-1]["loss"] < rows[0]["loss"]
    assert sorted(x.name for x in (run / "checkpoints").iterdir()) == ["step_2", "step_4"]
    # held-out loss every 2 steps (the last one is the final weights), over all 8 val_letter rows
    val = [m for m in metrics(run) if m["kind"] == "val"]
    assert [m["step"] for m in val] == [2, 4] and all(m["label_tokens"] == 16 for m in val)
    assert val[1]["loss"] < val[0]["loss"] * 1.5
    # the export loads with plain transformers and equals the trained weights in the final checkpoint
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(run / "safetensors" / "final")
    base = AutoModelForImageTextToText.from_pretrained(tiny_model_dir)
    trained = dict(model.named_parameters())
    changed = [k for k, v in base.named_parameters() if not torch.equal(v, trained[k])]
    assert changed, "training changed no weight"
    assert (run / "safetensors" / "step_2" / "config.json").exists()


def test_resume_after_kill_equals_uninterrupted(
    runs: dict[str, Path], tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    steps = 8
    straight = runs["straight8"]

    # same job, killed (SIGTERM to the whole torchrun group, as Prefect cancel does) after step 2 ...
    broken = tmp_path / "broken"
    cfg2 = write_tiny_sft_config(
        broken / "config.toml", tiny_model_dir, synthetic_dir, tmp_path / "o2", max_num_steps=steps
    )
    with running(2, *sft_args(cfg2)) as p:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            if (broken / "metrics.jsonl").exists() and any(m["step"] >= 2 for m in metrics(broken)):
                break
            time.sleep(0.05)
        os.killpg(p.pid, signal.SIGTERM)
        finish(p)
    stopped_at = max(m["step"] for m in metrics(broken))
    assert stopped_at < steps, "the run finished before it could be killed"
    # ... then resumed from its own newest checkpoint, on ONE process (a different world size)
    out = sft(cfg2, 1, "--resume-own-run")
    assert f"at step {stopped_at}" in out
    a, b = exported(straight), exported(broken)
    assert a.keys() == b.keys()
    # Same batches, same order; only the gradient reduction order differs on one process (float sums
    # are not associative), which Adam amplifies on near-zero gradients: close, not bit-equal.
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=0, atol=2e-3, msg=k)
    # the loss curve after resume continues the straight run's curve
    la = {m["step"]: m["loss"] for m in metrics(straight) if m["kind"] == "train"}
    lb = {m["step"]: m["loss"] for m in metrics(broken) if m["kind"] == "train"}
    for s in range(stopped_at + 1, steps + 1):
        assert lb[s] == pytest.approx(la[s], rel=1e-3)


def test_resume_same_world_size_is_bit_exact(
    runs: dict[str, Path], tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    """4 steps straight == 2 steps, then resume from step_2 for 2 more (a launch of its own): tolerance 0 on CPU."""
    straight = runs["straight"]
    resumed = tmp_path / "resumed"
    cfg2 = write_tiny_sft_config(
        resumed / "config.toml",
        tiny_model_dir,
        synthetic_dir,
        tmp_path / "o2",
        max_num_steps=4,
        resume=str(straight / "checkpoints" / "step_2"),
    )
    out = sft(cfg2, 2)
    assert "at step 2" in out
    a, b = exported(straight), exported(resumed)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_compiled_fused_blocks_train_as_eager(runs: dict[str, Path], tiny_model_dir: Path) -> None:
    """The GPU path's options on 2 processes: every block torch.compile'd in place before FSDP2, the LM head fused
    into the cross entropy in chunks of 5 label tokens (the lm_head weight gathered by FSDP2 inside the root's
    forward), eager attention named by policy.attn_implementation: the same losses as the defaults ("straight"),
    and the export keeps the eager model's names."""
    compiled = [m["loss"] for m in metrics(runs["compiled"]) if m["kind"] == "train"]
    eager = [m["loss"] for m in metrics(runs["straight"]) if m["kind"] == "train"]
    assert len(compiled) == 4 and compiled == pytest.approx(eager, rel=1e-4)
    assert exported(runs["compiled"]).keys() == load_file(tiny_model_dir / "model.safetensors").keys()
