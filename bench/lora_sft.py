"""LoRA against full fine-tuning: SFT step time, peak memory, trainable parameters and optimizer state.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/lora_sft.py [--reps 3] [--steps 12] [--warmup 2] [--model DIR]
                                                         [--data DIR] [--workdir DIR]

Each side is our SFT trainer under `torchrun --nproc_per_node=1` (its own process, so its peak resident
memory is its own), on the same model, rows, batches and seed; the sides alternate inside each repetition
(which goes first alternates too), since other processes share the machine. Step time: the median of the
steps after --warmup, from the run's metrics.jsonl (the trainer's own wall time per step). Peak memory:
the run's last `peak_mem_gb` (CUDA: max allocated; CPU: the process's peak RSS, which includes the Python
process, torch and the data). Optimizer state: Adam's two moments per trainable parameter, fp32.
LoRA side: [policy.lora] r = 16, lora_alpha = 32, modules_to_save = ["lm_head"] (the tiny random model's
lm_head must train for it to learn the task at all, see bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LORA = '[policy.lora]\nr = 16\nlora_alpha = 32\nmodules_to_save = ["lm_head"]\n'


def _config(path: Path, model: Path, data: Path, out: Path, steps: int, lora: bool) -> Path:
    from tests.conftest import write_tiny_sft_config

    cfg = write_tiny_sft_config(path, model, data, out, max_num_steps=steps, train_batch_per_replica=8)
    text = cfg.read_text().replace("save_freq = 2", f"save_freq = {steps * 10}")
    cfg.write_text(text + (LORA if lora else ""))
    return cfg


def _run(cfg: Path) -> list[dict]:
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=1",
        "-m",
        "cosmos_train.train.sft",
        "--config",
        str(cfg),
    ]
    p = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    if p.returncode:
        raise SystemExit(p.stdout[-3000:] + p.stderr[-3000:])
    return [json.loads(x) for x in (cfg.parent / "metrics.jsonl").read_text().splitlines() if x.strip()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--model", type=Path, default=None, help="a model folder (default: a fresh tiny model)")
    ap.add_argument("--data", type=Path, default=None, help="a synthetic dataset folder (default: a fresh one)")
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    import torch

    work = args.workdir or Path(tempfile.mkdtemp(prefix="lora-bench-"))
    model = args.model
    if model is None:
        from cosmos_train.models.tiny import make_tiny_model

        model = make_tiny_model(work / "tiny-model")
    data = args.data
    if data is None:
        from cosmos_train.data.synthetic import make_synthetic_dataset

        data = make_synthetic_dataset(work / "synthetic", n_train=48, n_val=8, n_test=8, seed=0)
    from cosmos_train.config import LoraConfig
    from cosmos_train.models.load import load_model
    from cosmos_train.models.lora import apply_lora

    probe = load_model(str(model), dtype=torch.float32, device="cpu")
    total = sum(p.numel() for p in probe.parameters())
    lora_trainable, _ = apply_lora(probe, LoraConfig(r=16, lora_alpha=32, modules_to_save=["lm_head"]))
    del probe

    times: dict[str, list[float]] = {"full": [], "lora": []}
    mem: dict[str, list[float]] = {"full": [], "lora": []}
    load = [os.getloadavg()[0]]
    for rep in range(args.reps):
        order = ["full", "lora"] if rep % 2 == 0 else ["lora", "full"]
        for side in order:
            run = work / f"{side}-{rep}"
            rows = _run(_config(run / "config.toml", model, data, work / "out", args.steps, side == "lora"))
            train = [r for r in rows if r["kind"] == "train"][args.warmup :]
            times[side].append(statistics.median(r["step_time"] for r in train))
            mem[side].append(train[-1]["peak_mem_gb"])
        load.append(os.getloadavg()[0])
    trainable = {"full": total, "lora": lora_trainable}
    out = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "torch": torch.__version__,
        "load_1min": load,
        "steps": args.steps,
        "warmup": args.warmup,
        "reps": args.reps,
        "model_params": total,
    }
    for side in ("full", "lora"):
        out[side] = {
            "step_time_s": statistics.median(times[side]),
            "step_times": times[side],
            "peak_mem_gb": statistics.median(mem[side]),
            "trainable_params": trainable[side],
            "adam_state_mb": trainable[side] * 2 * 4 / 2**20,
        }
    out["lora_over_full_step_time"] = out["lora"]["step_time_s"] / out["full"]["step_time_s"]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
