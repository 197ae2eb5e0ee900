"""The training reports (cosmos_train/train/report.py) and curves (cosmos_train/curves.py) on hand-written run
folders: summary numbers, the completions table, the curves PNG, the per-step table, the export paths."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from cosmos_train.curves import curves_markdown, metrics_table, plot_curves, sample_rows
from cosmos_train.train.report import (
    completions_table,
    export_markdown,
    grpo_summary_markdown,
    read_run_report,
    result_notes,
    sft_summary_markdown,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _train(step: int, reward: float, acc: float, kl: float, **extra: float) -> dict:
    return {
        "step": step,
        "kind": "train",
        "time": 1000.0 + step,
        "reward_mean": reward,
        "reward_std": 0.25,
        "reward/format": 1.0,
        "reward/single_choice": acc,
        "accuracy": acc,
        "kl": kl,
        "clip_fraction": 0.0,
        "entropy": 1.5,
        "response_length_mean": 4.0,
        "zero_std_fraction": 0.5,
        "rollout_time": 3.0,
        "train_time": 1.0,
        "step_time": 4.0,
        "tokens_per_s": 100.0 * step,
        "weight_version": step,
        "loss": 0.1,
        "grad_norm": 0.5,
        "lr": 1e-5,
        "update_tflops_per_device": 0.01 * step,
        **extra,
    }


def _completion(step: int, i: int, reward: float) -> dict:
    return {
        "step": step,
        "id": f"clip-{i // 4}",
        "prompt": "SYSTEM " * 100 + f"Which way does ball {i} roll?",
        "completion": f"<think>step {step}</think><answer>{'AB'[i % 2]}</answer>",
        "reward": reward,
        "parts": {"format": 1.0, "single_choice": reward - 1.0},
        "advantage": reward - 1.5,
    }


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "20250101120000"
    run.mkdir()
    metrics = [
        _train(1, 0.5, 0.25, 0.0),
        _train(2, 0.75, 0.5, 0.0123),
        {"step": 2, "kind": "val", "time": 1003.0, "reward_mean": 1.2, "accuracy": 0.625, "n": 8},
        _train(3, 1.0, 0.5, 0.0456),
        _train(4, 1.25, 0.75, 0.0321),
        {"step": 4, "kind": "val", "time": 1005.0, "reward_mean": 1.1, "accuracy": 0.5, "n": 8},
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics))
    # Step 2 sampled, then step 4 twice (an attempt cut by a crash, then its retry), the last line torn.
    cut = [{**_completion(4, i, 1.0), "completion": "crashed attempt"} for i in range(3)]
    completions = [_completion(2, i, 1.0) for i in range(4)] + cut + [_completion(4, i, 2.0 - i % 2) for i in range(24)]
    text = "".join(json.dumps(r) + "\n" for r in completions)
    (run / "completions.jsonl").write_text(text + '{"step": 4, "id": "cl')
    result = {
        "step": 4,
        "stopped": False,
        "final": str(run / "safetensors" / "final"),
        "best": {"step": 2, "metric": "accuracy", "value": 0.625, "path": str(run / "safetensors" / "best")},
        "resumed_from": str(run / "checkpoints" / "step_2"),
        "resume_note": "resumed after a crash at step 3",
        "skipped_steps": [3],
    }
    (run / "result.json").write_text(json.dumps(result))
    return run


def test_summary_names_the_numbers(run_dir: Path) -> None:
    md = grpo_summary_markdown(read_run_report(run_dir))
    assert "# GRPO run `20250101120000`" in md
    assert "- steps: 4\n" in md
    assert "reward (train mean): 0.500 (step 1) -> 1.250 (step 4)" in md
    assert "accuracy (train rollouts): 0.250 (step 1) -> 0.750 (step 4)" in md
    assert "validation accuracy: best 0.625 at step 2, last 0.500 (step 4)" in md
    assert "KL: last 0.0321, max 0.0456" in md
    assert "rollout 12.0 s (75%), training 4.0 s (25%)" in md
    assert "400 tokens/s (last step), 250 mean" in md
    assert "policy update: 0.04 model TFLOP/s per device (last step) (MFU: peak unknown" in md
    assert f"final export: `{run_dir / 'safetensors' / 'final'}`" in md
    assert f"best export: `{run_dir / 'safetensors' / 'best'}` (accuracy 0.625 at step 2)" in md
    assert f"resumed from `{run_dir / 'checkpoints' / 'step_2'}`" in md and "resumed after a crash at step 3" in md
    assert "non-finite loss or gradient norm: [3]" in md


def test_summary_of_a_run_without_accuracy_or_exports(tmp_path: Path) -> None:
    rows = [{k: v for k, v in _train(s, 0.1 * s, 0.0, 0.0).items() if k != "accuracy"} for s in (1, 2)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "result.json").write_text(json.dumps({"step": 2, "stopped": True, "final": None, "best": None}))
    md = grpo_summary_markdown(read_run_report(tmp_path))
    assert "- steps: 2 (stopped early)" in md and "reward (train mean): 0.100 (step 1) -> 0.200 (step 2)" in md
    assert "accuracy" not in md and "- final export: none" in md and "best export" not in md
    assert "no completions sampled" in md


def test_table_holds_the_last_sampled_steps_rows(run_dir: Path) -> None:
    table = completions_table(read_run_report(run_dir).completions)
    # Capped at the last 20 of the retry's 24 rows of step 4: none of step 2, none of the crashed attempt.
    assert len(table) == 20 and {r["step"] for r in table} == {4}
    assert "crashed attempt" not in {r["completion"] for r in table}
    first, second = table[0], table[1]
    assert first["id"] == "clip-1" and first["reward"] == 2.0 and second["reward"] == 1.0
    assert first["reward/format"] == 1.0 and first["reward/single_choice"] == 1.0 and first["advantage"] == 0.5
    assert first["completion"] == "<think>step 4</think><answer>A</answer>"
    # The prompt's tail is the question: kept, the long system prompt cut.
    assert first["prompt"].endswith("Which way does ball 4 roll?") and len(first["prompt"]) <= 203
    assert completions_table([]) == []


def _panel_rows(png: Path) -> int:
    """Rows of panels in a curves PNG: the figure is 2.4 inches per row at 72 dpi."""
    from PIL import Image

    width, height = Image.open(png).size
    assert abs(width - 8.4 * 72) <= 1
    return round(height / (2.4 * 72))


def test_grpo_curves_one_small_png_embedded(run_dir: Path) -> None:
    png = plot_curves(run_dir, "grpo")
    data = png.read_bytes()
    assert png == run_dir / "plots" / "curves.png" and data.startswith(PNG_MAGIC) and 5000 < len(data) < 150_000
    # 7 GRPO panels with data (reward, accuracy, KL, length, grad norm, lr, tokens/s): 4 rows of 2
    assert _panel_rows(png) == 4
    md = curves_markdown(png, "GRPO curves")
    assert base64.b64decode(md.split("data:image/png;base64,")[1].split(")")[0]) == data


def test_a_panel_without_data_is_left_out(tmp_path: Path) -> None:
    rows = [
        {"step": 1, "kind": "train", "loss": 2.0, "lr": float("nan")},
        {"step": 2, "kind": "train", "loss": 1.5},
        {"step": 2, "kind": "val", "loss": 1.7},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    png = plot_curves(tmp_path, "sft")
    assert _panel_rows(png) == 1  # the loss panel alone
    assert plot_curves(tmp_path / "empty", "sft") is None
    assert "No train or validation rows" in curves_markdown(None, "SFT curves")


def test_metrics_table_every_step_or_sampled(tmp_path: Path) -> None:
    rows = [{"step": s, "kind": "train", "loss": 1.0 / s, "lr": 1e-3, "grad_norm": 0.123456789} for s in range(1, 251)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = metrics_table(tmp_path, "sft", limit=100)
    assert len(table) == 100 and table[0]["step"] == 1 and table[-1]["step"] == 250
    assert table[0] == {"step": 1, "loss": 1.0, "lr": 0.001, "grad_norm": 0.1235}
    assert [r["step"] for r in metrics_table(tmp_path, "sft", limit=1000)] == list(range(1, 251))
    assert sample_rows(list(range(5)), 10) == [0, 1, 2, 3, 4] and sample_rows(list(range(10)), 3) == [0, 4, 9]


def test_export_paths_are_text_with_their_uploads() -> None:
    md = export_markdown(
        {
            "final": "/runs/a/safetensors/final",
            "best": {"path": "/runs/a/safetensors/best"},
            "uploads": [
                {"what": "safetensors/final", "url": "s3://b/a/safetensors/final", "ok": True},
                {"what": "checkpoints/step_2", "url": "s3://b/x", "ok": False},
            ],
        }
    )
    assert "- final: `/runs/a/safetensors/final`" in md and "- best: `/runs/a/safetensors/best`" in md
    assert "uploaded to s3://b/a/safetensors/final" in md and "s3://b/x" not in md and "file://" not in md


def test_summary_lists_the_keys_that_had_no_effect() -> None:
    """A cosmos-rl key accepted with no effect is said in the run summary, never dropped silently."""
    lines = result_notes({"no_effect": ["redis = '12800': cosmos-rl's controller port: there is no controller here"]})
    assert lines == [
        "- accepted with no effect here (cosmos-rl keys / settings):",
        "  - `redis = '12800': cosmos-rl's controller port: there is no controller here`",
    ]
    assert result_notes({"no_effect": []}) == []


def test_sft_summary_gives_model_flops_and_mfu(tmp_path: Path) -> None:
    row = {"step": 1, "kind": "train", "loss": 2.0, "tokens_per_s": 900.0, "samples_per_s": 3.0, "peak_mem_gb": 1.0}
    md = sft_summary_markdown(tmp_path, {"step": 1}, [{**row, "tflops_per_device": 312.0, "mfu": 0.4}])
    assert "- model FLOPs (last step): 312 TFLOP/s per device, MFU 40.0%" in md
    md = sft_summary_markdown(tmp_path, {"step": 1}, [{**row, "tflops_per_device": 0.05}])
    assert "0.05 TFLOP/s per device (MFU: peak unknown, set COSMOS_PEAK_TFLOPS)" in md
