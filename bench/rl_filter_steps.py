"""GRPO steps to reach a validation accuracy on the demo, with and without RL data filtering (filter-rl-data).

    make demo        # once: the tiny model, the synthetic videos and the SFT export (outputs/demo/summary.json)
    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.rl_filter_steps [--seeds 0 1 2] [--target 0.9] [--max-steps 300]
        [--val-freq 5] [--demo-dir outputs/demo] [--work /tmp/rl_filter_steps] [--out /tmp/rl_filter_steps.json]

The demo's GRPO stage (configs/tiny-grpo.toml as configs/tiny-post-train.toml runs it: 2 processes, FSDP2, an HF
engine per rank, 8 prompts x 8 samples, reward = the right letter) from the demo's SFT export
(`summary.json`'s sft checkpoint) on its data, per seed s (train.seed = dataloader_seed = s), twice:
- baseline: GRPO on every training prompt (rl/train.json);
- filtered: `cosmos_train.train.rl_filter.filter_rl_data` first (the same SFT export, 8 samples per prompt,
  keep 0 < pass rate < 1, sampling seed s), then the same GRPO on the kept rows (the overrides it returns).
Validation (the demo's 64 held-out val rows, greedy) runs every --val-freq steps (and at step 0); a run stops at the
first validation whose accuracy is >= --target (its step is the result) or after --max-steps (result "> max").
No checkpoints or exports (they are not what is measured). The filtering's wall time is reported beside the
steps: it is paid once, before GRPO. Prints a table and writes every validation row, the timings, the machine,
versions and load averages to --out.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GRPO_TOML = ROOT / "configs" / "tiny-grpo.toml"
log = logging.getLogger("bench.rl_filter_steps")


def grpo_overrides(model: str, data: str, out: Path, seed: int, max_steps: int, val_freq: int) -> list[str]:
    """The demo's GRPO stage from the SFT export, with this seed, validating every val_freq steps, no files."""
    return [
        f'policy.model_name_or_path="{model}"',
        f'train.train_policy.dataset.name="{data}"',
        f'train.output_dir="{out}"',
        f"train.max_num_steps={max_steps}",
        f"train.seed={seed}",
        f"train.train_policy.dataloader_seed={seed}",
        f"validation.freq={val_freq}",
        "train.ckpt.enable_checkpoint=false",
        "train.ckpt.export_safetensors=false",
        "logging.completion_sample_freq=0",
    ]


def val_rows(metrics: Path) -> list[dict[str, Any]]:
    if not metrics.is_file():
        return []
    rows = []
    for line in metrics.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line being written
            continue
        if row.get("kind") == "val" and "accuracy" in row:
            rows.append(row)
    return rows


def run_grpo(run: Path, overrides: list[str], target: float, timeout_s: float) -> dict[str, Any]:
    """torchrun of the GRPO trainer in `run` (RUN/config.toml), stopped at the first validation >= target."""
    from cosmos_train.config import load_config

    run.mkdir(parents=True, exist_ok=True)
    cfg = load_config(GRPO_TOML, overrides, env={})
    cfg.write(run / "config.toml")
    cmd = [
        sys.executable,
        "-m",
        "cosmos_train.launch",
        f"--nproc_per_node={cfg.launch.nproc_per_node}",
        "--standalone",
        "-m",
        "cosmos_train.train.grpo",
        "--config",
        str(run / "config.toml"),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    started = time.monotonic()
    with open(run / "stdout.log", "w") as logf:
        # its own process group: stopping it stops the launcher and both ranks, nothing else
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        reached: dict[str, Any] | None = None
        try:
            while proc.poll() is None and time.monotonic() - started < timeout_s:
                time.sleep(0.5)
                reached = next((r for r in val_rows(run / "metrics.jsonl") if r["accuracy"] >= target), None)
                if reached is not None:
                    break
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
    seconds = time.monotonic() - started
    vals = val_rows(run / "metrics.jsonl")
    reached = reached or next((r for r in vals if r["accuracy"] >= target), None)
    if reached is None and proc.returncode not in (0, None, -signal.SIGTERM):
        tail = (run / "stdout.log").read_text()[-3000:]
        raise RuntimeError(f"GRPO in {run} failed ({proc.returncode}):\n{tail}")
    return {
        "steps": reached["step"] if reached else None,
        "seconds": round(seconds, 1),
        "val": [(r["step"], r["accuracy"]) for r in vals],
    }


def run_filter(model: str, data: str, out: Path, seed: int, samples: int) -> dict[str, Any]:
    from cosmos_train.config import load_config
    from cosmos_train.train.rl_filter import FilterSettings, filter_rl_data

    cfg = load_config(GRPO_TOML, grpo_overrides(model, data, out.parent, seed, 1, 10), env={})
    started = time.monotonic()
    result = filter_rl_data(cfg, FilterSettings(samples=samples, seed=seed), out)
    return {
        "seconds": round(time.monotonic() - started, 1),
        "kept": result.kept,
        "prompts": len(result.prompts),
        "counts": result.counts(),
        "overrides": result.overrides,
    }


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("torch", "transformers"):
        out[pkg] = importlib.metadata.version(pkg)
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except OSError:
        commit = ""
    out["commit"] = commit
    return out


def _steps(value: int | None, max_steps: int) -> str:
    return f"> {max_steps}" if value is None else str(value)


def table(results: list[dict[str, Any]], target: float, max_steps: int) -> list[str]:
    lines = [
        f"| seed | steps to {target} (all prompts) | steps to {target} (filtered) | prompts kept | filter s | "
        "GRPO s (all / filtered) |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        f = r.get("filter", {})
        lines.append(
            f"| {r['seed']} | {_steps(r['baseline']['steps'], max_steps)} | "
            f"{_steps(r['filtered']['steps'], max_steps) if 'filtered' in r else 'not run'} | "
            f"{f.get('kept', '-')} / {f.get('prompts', '-')} | {f.get('seconds', '-')} | "
            f"{r['baseline']['seconds']} / {r['filtered']['seconds'] if 'filtered' in r else '-'} |"
        )
    done = [r for r in results if "filtered" in r]
    if done and all(r["baseline"]["steps"] is not None and r["filtered"]["steps"] is not None for r in done):
        base = statistics.mean(r["baseline"]["steps"] for r in done)
        filt = statistics.mean(r["filtered"]["steps"] for r in done)
        lines.append(f"| mean | {base:.1f} | {filt:.1f} | | | |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--target", type=float, default=0.9)
    ap.add_argument("--max-steps", type=int, default=300)
    ap.add_argument("--val-freq", type=int, default=5)
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--demo-dir", type=Path, default=ROOT / "outputs" / "demo")
    ap.add_argument("--work", type=Path, default=Path("/tmp/rl_filter_steps"))
    ap.add_argument("--out", type=Path, default=Path("/tmp/rl_filter_steps.json"))
    ap.add_argument("--run-timeout", type=float, default=1200.0, help="Seconds one GRPO run may take.")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")

    summary = json.loads((args.demo_dir / "summary.json").read_text())
    model = next(s["checkpoint"] for s in summary["stages"] if s["name"] == "sft")
    data = summary["data"]
    info: dict[str, Any] = {
        "command": " ".join([sys.executable, "-m", "bench.rl_filter_steps", *(argv or sys.argv[1:])]),
        "model": model,
        "data": data,
        "target": args.target,
        "max_steps": args.max_steps,
        "val_freq": args.val_freq,
        "samples": args.samples,
        "cores": os.cpu_count(),
        "machine": platform.platform(),
        "versions": versions(),
        "load_before": os.getloadavg(),
        "results": [],
    }
    for seed in args.seeds:
        work = args.work / f"seed{seed}"
        entry: dict[str, Any] = {"seed": seed, "load_start": os.getloadavg()}
        info["results"].append(entry)
        log.info("seed %d: GRPO on every prompt", seed)
        overrides = grpo_overrides(model, data, work / "all", seed, args.max_steps, args.val_freq)
        entry["baseline"] = run_grpo(work / "all" / "run", overrides, args.target, args.run_timeout)
        log.info("seed %d: baseline %s", seed, entry["baseline"]["steps"])
        args.out.write_text(json.dumps(info, indent=1))
        log.info("seed %d: filtering", seed)
        entry["filter"] = run_filter(model, data, work / "filter" / "filtered.json", seed, args.samples)
        log.info("seed %d: kept %d of %d", seed, entry["filter"]["kept"], entry["filter"]["prompts"])
        overrides = grpo_overrides(model, data, work / "filtered", seed, args.max_steps, args.val_freq)
        overrides += entry["filter"]["overrides"]
        entry["filtered"] = run_grpo(work / "filtered" / "run", overrides, args.target, args.run_timeout)
        entry["load_end"] = os.getloadavg()
        log.info("seed %d: filtered %s", seed, entry["filtered"]["steps"])
        args.out.write_text(json.dumps(info, indent=1))
    info["load_after"] = os.getloadavg()
    args.out.write_text(json.dumps(info, indent=1))
    print("\n".join(table(info["results"], args.target, args.max_steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
