"""Training run reports (SFT, GRPO), from the run folder's files: plain functions, no Prefect (the flows
publish them as artifacts).

    from cosmos_train.train.report import grpo_summary_markdown, read_run_report
    print(grpo_summary_markdown(read_run_report("RUN")))

SFT: `sft_summary_markdown` (loss first -> last, throughput, memory, model FLOPs) from RUN/metrics.jsonl.
GRPO: reads RUN/result.json, RUN/metrics.jsonl (train rows: reward_mean, reward_std, accuracy, kl,
rollout_time, train_time, tokens_per_s ...; val rows: reward_mean, accuracy, n) and
RUN/completions.jsonl (sampled completions with reward, parts, advantage), and builds the summary
markdown and the completions table. Both trainers: `result_notes` (resume, skipped steps, uploads) and
`export_markdown` (where the exports are, as text, and where they were uploaded). The curves are
cosmos_train/curves.py's (tasks/curves.py publishes them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cosmos_train.curves import per_step, series
from cosmos_train.metrics import read_metrics
from cosmos_train.train.run_health import HealthReport

COMPLETIONS_FILE = "completions.jsonl"
TABLE_ROWS = 20
# Table cells: a prompt holds the system prompt and a long question; its tail is the question.
PROMPT_CHARS = 200
COMPLETION_CHARS = 400


def read_completions(run_dir: Path) -> list[dict[str, Any]]:
    """The rows of RUN/completions.jsonl; lines that do not parse (a write cut by a kill) are skipped,
    since the file is only displayed."""
    path = Path(run_dir) / COMPLETIONS_FILE
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8", errors="replace").split("\n"):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


@dataclass
class RunReport:
    run_dir: Path
    result: dict[str, Any]
    train: list[dict[str, Any]]
    val: list[dict[str, Any]]
    completions: list[dict[str, Any]]


def read_run_report(run_dir: Path) -> RunReport:
    """Everything the report shows, read once; missing files read as empty."""
    run_dir = Path(run_dir)
    result_path = run_dir / "result.json"
    result = json.loads(result_path.read_text()) if result_path.is_file() else {}
    metrics = read_metrics(run_dir)
    return RunReport(run_dir, result, per_step(metrics, "train"), per_step(metrics, "val"), read_completions(run_dir))


def _first_last(rows: list[dict[str, Any]], key: str, fmt: str) -> str | None:
    steps, values = series(rows, key)
    if not values:
        return None
    return f"{values[0]:{fmt}} (step {steps[0]}) -> {values[-1]:{fmt}} (step {steps[-1]})"


def grpo_summary_markdown(report: RunReport, health: HealthReport | None = None) -> str:
    """Steps, reward and accuracy first -> last, best validation accuracy, KL, time split, throughput,
    exports, the run-health line (`run_health.HealthReport.line`), resume notes and skipped steps."""
    r, train, val = report.result, report.train, report.val
    ended = " (stopped early)" if r.get("stopped") else ""
    if r.get("ended_early"):
        ended = " (ended early by train.stop_when_stuck: RL could not learn)"
    lines = [
        f"# GRPO run `{report.run_dir.name}`",
        "",
        f"- run folder: `{report.run_dir}`",
        f"- steps: {r.get('step')}" + ended,
    ]
    if health is not None:
        lines.append(health.line())
    if (reward := _first_last(train, "reward_mean", ".3f")) is not None:
        lines.append(f"- reward (train mean): {reward}")
    if (acc := _first_last(train, "accuracy", ".3f")) is not None:
        lines.append(f"- accuracy (train rollouts): {acc}")
    val_steps, val_acc = series(val, "accuracy")
    if val_acc:
        best = max(range(len(val_acc)), key=lambda i: val_acc[i])  # the first of equal bests
        lines.append(
            f"- validation accuracy: best {val_acc[best]:.3f} at step {val_steps[best]}, "
            f"last {val_acc[-1]:.3f} (step {val_steps[-1]})"
        )
    _, kl = series(train, "kl")
    if kl:
        lines.append(f"- KL: last {kl[-1]:.4g}, max {max(kl):.4g}")
    _, rollout = series(train, "rollout_time")
    _, training = series(train, "train_time")
    if rollout and training:
        total = sum(rollout) + sum(training)
        share = 100.0 * sum(rollout) / total if total > 0 else 0.0
        lines.append(
            f"- time: rollout {sum(rollout):.1f} s ({share:.0f}%), training {sum(training):.1f} s "
            f"({100.0 - share:.0f}%)"
        )
    _, tps = series(train, "tokens_per_s")
    if tps:
        lines.append(f"- throughput: {tps[-1]:.0f} tokens/s (last step), {sum(tps) / len(tps):.0f} mean")
    _, tflops = series(train, "update_tflops_per_device")
    if tflops:
        _, mfu = series(train, "update_mfu")
        lines.append(
            f"- policy update: {tflops[-1]:.3g} model TFLOP/s per device (last step)"
            + (f", MFU {mfu[-1]:.1%}" if mfu else " (MFU: peak unknown, set COSMOS_PEAK_TFLOPS)")
        )
    lines.append(f"- final export: `{r['final']}`" if r.get("final") else "- final export: none")
    if best_export := r.get("best"):
        value = best_export.get("value")
        shown = f"{value:.3f}" if isinstance(value, int | float) else value
        lines.append(
            f"- best export: `{best_export.get('path')}` ({best_export.get('metric')} {shown} "
            f"at step {best_export.get('step')})"
        )
    lines += result_notes(r)
    if not report.completions:
        lines.append("- no completions sampled (completions.jsonl is empty or missing)")
    return "\n".join(lines) + "\n"


def sft_summary_markdown(run_dir: Path, result: dict[str, Any], metrics: list[dict[str, Any]]) -> str:
    """Steps, loss first -> last, throughput, peak memory and model FLOPs of the last step, the last validation
    loss, the export, resume notes."""
    train = [m for m in metrics if m.get("kind") == "train"]
    val = [m for m in metrics if m.get("kind") == "val"]
    lines = [
        f"# SFT run `{run_dir.name}`",
        "",
        f"- run folder: `{run_dir}`",
        f"- steps: {result.get('step')}",
        f"- export: `{result.get('final')}`",
    ]
    if train:
        first, last = train[0], train[-1]
        lines += [
            f"- loss: {first['loss']:.4f} (step {first['step']}) -> {last['loss']:.4f} (step {last['step']})",
            f"- throughput (last step): {last['tokens_per_s']:.0f} tokens/s, {last['samples_per_s']:.1f} samples/s",
            f"- peak memory: {max(m['peak_mem_gb'] for m in train):.2f} GB",
        ]
        if "tflops_per_device" in last:
            mfu = f", MFU {last['mfu']:.1%}" if "mfu" in last else " (MFU: peak unknown, set COSMOS_PEAK_TFLOPS)"
            lines.append(f"- model FLOPs (last step): {last['tflops_per_device']:.3g} TFLOP/s per device{mfu}")
    if val:
        lines.append(f"- validation loss (step {val[-1]['step']}): {val[-1]['loss']:.4f}")
    lines += result_notes(result)
    return "\n".join(lines)


def _clip(text: Any, n: int, tail: bool = False) -> str:
    s = str(text or "")
    if len(s) <= n:
        return s
    return "..." + s[-n:] if tail else s[:n] + "..."


def _round(v: Any, digits: int = 4) -> Any:
    return round(v, digits) if isinstance(v, float) else v


def completions_table(completions: list[dict[str, Any]], limit: int = TABLE_ROWS) -> list[dict[str, Any]]:
    """The last sampled step's completions, its last `limit` rows, one row each, reward parts as columns.

    The last rows, not the first: a retry that resumed before a step already sampled logs that step
    again after the crashed attempt's rows, and only the retry's count."""
    if not completions:
        return []
    last = completions[-1].get("step")
    block: list[dict[str, Any]] = []
    for row in reversed(completions):
        if row.get("step") != last or len(block) == limit:
            break
        block.append(row)
    block.reverse()
    table = []
    for row in block:
        out = {
            "step": row.get("step"),
            "id": row.get("id"),
            "prompt": _clip(row.get("prompt"), PROMPT_CHARS, tail=True),
            "completion": _clip(row.get("completion"), COMPLETION_CHARS),
            "reward": _round(row.get("reward")),
        }
        out.update({f"reward/{k}": _round(v) for k, v in (row.get("parts") or {}).items()})
        out["advantage"] = _round(row.get("advantage"))
        table.append(out)
    return table


def result_notes(result: dict[str, Any]) -> list[str]:
    """The lines every training flow's summary ends with (the sft flow's too): where the run resumed
    from, what a resume said, the steps skipped for a non-finite loss or gradient, what was uploaded where,
    the config's keys that had no effect here."""
    lines = []
    if result.get("resumed_from"):
        lines.append(f"- resumed from `{result['resumed_from']}`")
    if result.get("resume_note"):
        lines.append(f"- {result['resume_note']}")
    if result.get("skipped_steps"):
        lines.append(f"- steps skipped for a non-finite loss or gradient norm: {result['skipped_steps']}")
    lines += upload_notes(result.get("uploads") or [])
    if result.get("no_effect"):
        lines.append("- accepted with no effect here (cosmos-rl keys / settings):")
        lines += [f"  - `{line}`" for line in result["no_effect"]]
    return lines


def upload_notes(records: list[dict[str, Any]]) -> list[str]:
    """Summary lines: what went where, and what did not (with the reason and the command to retry)."""
    lines = []
    for r in records:
        if r.get("ok"):
            lines.append(
                f"- uploaded `{r['what']}` -> {r['url']} ({r['files_sent']} files sent, "
                f"{r['files_unchanged']} unchanged)"
            )
        else:
            lines.append(
                f"- NOT uploaded `{r['what']}` -> {r['url']}: {r.get('error')} (the files are in the "
                f"run folder; `cosmos-train upload RUN/{r['what']} --to {r['url']}` retries)"
            )
    return lines


def export_markdown(result: dict[str, Any]) -> str:
    """The exports as paths a reader can copy (a web page will not open file:// links), and their uploads."""
    lines = ["# Exports", ""]
    for name, path in (("final", result.get("final")), ("best", (result.get("best") or {}).get("path"))):
        if path:
            lines.append(f"- {name}: `{path}`")
    for r in result.get("uploads") or []:
        if r.get("ok"):
            lines.append(f"- `{r['what']}` uploaded to {r['url']}")
        elif r.get("error"):
            lines.append(f"- `{r['what']}` NOT uploaded to {r['url']}: {r['error']}")
    if len(lines) == 2:
        lines.append("- none (train.ckpt.export_safetensors = false, or the run stopped early)")
    if result.get("run_url"):  # output_dir on S3: the run folder is the local copy of this
        lines.append(f"\nThe run folder is mirrored to {result['run_url']}")
    return "\n".join(lines) + "\n"
