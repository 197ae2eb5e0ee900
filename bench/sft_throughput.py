"""SFT training tokens/s: our trainer against TRL's SFTTrainer, same model, rows, batches and machine.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/sft_throughput.py [--reps 5] [--warmup 2] [--steps 6] [--batch 16]
                                                              [--no-fsdp2] [--workdir DIR]

What is compared (see bench/RESULTS.md for the numbers and the reasoning):
- The tiny offline Qwen2.5-VL on synthetic 56x56 clips, reasoning and letter rows mixed and shuffled
  once with a fixed seed. Every row is encoded ONCE with `encode_chat`; both trainers get the very same
  tensors in the very same batches, so the benchmark times training, not video decoding.
- ours: `cosmos_train.train.sft.SFTTrainer` built in this process (a one-rank group: FSDP2 over one rank,
  exactly what `torchrun --nproc_per_node=1` runs) and driven through its own `train_step` + metrics log,
  i.e. `fit()`'s per-step work minus the data loader.
- TRL: `trl.SFTTrainer` with its defaults except what must match: fp32 on CPU, no gradient checkpointing,
  batch = ours, no gradient accumulation, the same lr / warmup / decay / clip / weight decay, rows in the
  same order (sequential sampler), a collator that pads the pre-encoded tensors (our `collate_padded`, so
  the padded batches are bit-identical), no logging, no checkpoints.
- Packing: TRL 1.16 refuses packing and padding_free for vision datasets, and forbids a custom collator
  with padding_free (trl/trainer/sft_trainer.py), so a video batch cannot be trained packed by TRL. The
  packed row is ours packed against TRL's best available for this data, padded.
- Tokens are counted the same way on both sides: non-pad tokens of the step's rows (prompt, vision and
  answer tokens). Step time is the wall time between consecutive step ends (everything the loop does);
  the first --warmup steps of each run are dropped. Sides alternate inside each repetition (and which
  goes first alternates between repetitions) because other processes share the machine; the median
  over repetitions is reported, with `os.getloadavg()` before and after.
- --fsdp2 (default on): our trainer under torchrun with 2 processes (FSDP2 over 2 ranks, global batch =
  --batch), for information only; its tokens/s is read from the run's metrics.jsonl (video decode is
  outside its step time there too).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
SPLITS = ("train", "train_letter")  # reasoning answers (~230 tokens) and letter answers (~120)
LR, WARMUP_LR_STEPS, CLIP = 3e-4, 2, 1.0


@dataclass
class Run:
    """One timed run of one side: per-step wall times and tokens, warm-up steps already dropped."""

    step_times: list[float]
    tokens: list[int]

    @property
    def tokens_per_s(self) -> float:
        return sum(self.tokens) / sum(self.step_times)

    @property
    def step_time(self) -> float:
        return statistics.median(self.step_times)


@dataclass
class Series:
    """All repetitions of one (mode, side) cell."""

    runs: list[Run] = field(default_factory=list)

    def median_tokens_per_s(self) -> float:
        return statistics.median(r.tokens_per_s for r in self.runs)

    def median_step_time(self) -> float:
        return statistics.median(r.step_time for r in self.runs)


# ---------------------------------------------------------------------------------------------- data
def write_config(path: Path, model: Path, data: Path, out: Path, *, batch: int, steps: int, packing: bool,
                 nproc: int = 1) -> Path:
    """The trainer config: fp32, no checkpointing, no gradient checkpointing, one micro-batch per rank."""
    splits = ", ".join(f'"{s}"' for s in SPLITS)
    lines = [
        "[train]", f'output_dir = "{out}"', f"max_num_steps = {steps}", "epoch = 1000",
        f"train_batch_per_replica = {batch}", f"optm_lr = {LR}", f"optm_warmup_steps = {WARMUP_LR_STEPS}",
        'optm_decay_type = "linear"', "optm_weight_decay = 0.0", f"optm_grad_norm_clip = {CLIP}",
        'param_dtype = "float32"', "seed = 0", f"sequence_packing = {str(packing).lower()}",
        "[train.ckpt]", "enable_checkpoint = false", "export_safetensors = false",
        "[train.train_policy]", 'type = "sft"', f"mini_batch = {batch // nproc}", "dataloader_num_workers = 0",
        "[train.train_policy.dataset]", f'name = "{data}"', f"split = [{splits}]",
        "[train.train_policy.dataset.vision]", "min_pixels = 3136", "max_pixels = 3136",
        "[policy]", f'model_name_or_path = "{model}"', "model_max_length = 512",
        "model_gradient_checkpointing = false",
        "[policy.parallelism]", f"dp_shard_size = {nproc}",
        "[logging]", "logger = []",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def prepare(workdir: Path, n_clips: int) -> tuple[Path, Path, list[Any]]:
    """Tiny model, synthetic data, and every row encoded once (shuffled with a fixed seed)."""
    from cosmos_train.config import load_config
    from cosmos_train.data.chat import encode_chat
    from cosmos_train.data.sources import load_samples
    from cosmos_train.data.synthetic import make_synthetic_dataset
    from cosmos_train.models.load import load_processor
    from cosmos_train.models.tiny import make_tiny_model

    model = make_tiny_model(workdir / "model")
    data = make_synthetic_dataset(workdir / "data", n_train=n_clips, n_val=4, n_test=4)
    cfg = load_config(write_config(workdir / "probe" / "config.toml", model, data, workdir / "out",
                                   batch=1, steps=1, packing=False), env={})
    samples = list(load_samples(cfg, "train"))
    random.Random(0).shuffle(samples)
    processor = load_processor(model)
    return model, data, [encode_chat(processor, s["messages"], max_length=512) for s in samples]


def batches(encoded: list[Any], batch: int, n_steps: int) -> list[list[Any]]:
    """n_steps consecutive batches, cycling through the rows in order (what both sides train on)."""
    per_epoch = len(encoded) // batch
    return [encoded[(k % per_epoch) * batch:(k % per_epoch + 1) * batch] for k in range(n_steps)]


def step_tokens(batch: list[Any]) -> int:
    return sum(len(s) for s in batch)


def timed(ends: list[float], start: float, tokens: list[int], warmup: int) -> Run:
    times = [b - a for a, b in zip([start, *ends[:-1]], ends)]
    return Run(times[warmup:], tokens[warmup:])


# ---------------------------------------------------------------------------------------------- sides
def run_ours(cfg_path: Path, steps: list[list[Any]], warmup: int) -> Run:
    from cosmos_train.config import load_config
    from cosmos_train.distributed import init_distributed
    from cosmos_train.train.sft import SFTTrainer

    cfg = load_config(cfg_path, env={})
    trainer = SFTTrainer(cfg, cfg_path.parent, init_distributed(cfg.policy.parallelism))
    ends: list[float] = []
    start = time.perf_counter()
    for i, samples in enumerate(steps):
        values = trainer.train_step(samples)
        trainer.metrics.log(i + 1, values)  # what fit() does after each step
        ends.append(time.perf_counter())
    trainer.metrics.close()
    return timed(ends, start, [step_tokens(s) for s in steps], warmup)


def run_trl(model_dir: Path, out: Path, steps: list[list[Any]], warmup: int) -> Run:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig, SFTTrainer

    from cosmos_train.models.load import load_model, load_processor
    from cosmos_train.train.batching import collate_padded

    model = load_model(model_dir, dtype=torch.float32, device="cpu")
    c = model.config
    pad = c.get_text_config().pad_token_id or 0
    rows = [s for batch in steps for s in batch]
    # TRL takes a datasets.Dataset; it holds row indices into the pre-encoded tensors, so TRL's data path
    # costs what ours does (a list lookup), and the sequential sampler replays our batches exactly.
    index = Dataset.from_dict({"row": list(range(len(rows)))})

    def collate(items: list[dict[str, int]]) -> dict[str, torch.Tensor]:
        samples = [rows[item["row"]] for item in items]
        mb = collate_padded(samples, pad, c.image_token_id, c.video_token_id)
        return {"input_ids": mb.input_ids, "attention_mask": mb.attention_mask, "labels": mb.labels,
                "mm_token_type_ids": mb.mm_token_type_ids, **mb.vision}

    ends: list[float] = []

    class StepClock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            ends.append(time.perf_counter())

    args = SFTConfig(
        output_dir=str(out), per_device_train_batch_size=len(steps[0]), gradient_accumulation_steps=1,
        max_steps=len(steps), learning_rate=LR, warmup_steps=WARMUP_LR_STEPS, lr_scheduler_type="linear",
        weight_decay=0.0, max_grad_norm=CLIP, gradient_checkpointing=False, bf16=False, fp16=False,
        use_cpu=True, report_to=[], save_strategy="no", logging_strategy="no", disable_tqdm=True,
        remove_unused_columns=False, dataset_kwargs={"skip_prepare_dataset": True}, max_length=None,
        train_sampling_strategy="sequential", dataloader_num_workers=0, seed=0,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=index, data_collator=collate,
                         processing_class=load_processor(model_dir), callbacks=[StepClock()])
    start = time.perf_counter()
    trainer.train()
    if len(ends) != len(steps):
        raise RuntimeError(f"TRL ran {len(ends)} optimizer steps, expected {len(steps)}")
    return timed(ends, start, [step_tokens(s) for s in steps], warmup)


def run_fsdp2(model: Path, data: Path, out: Path, batch: int, n_steps: int, warmup: int,
              packing: bool) -> float:
    """Our trainer under torchrun, 2 ranks: median tokens/s of metrics.jsonl after warm-up."""
    run_dir = out / ("fsdp2-packed" if packing else "fsdp2-padded")
    cfg = write_config(run_dir / "config.toml", model, data, out, batch=batch, steps=n_steps, packing=packing,
                       nproc=2)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "cosmos_train.train.sft", "--config", str(cfg)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if proc.returncode != 0:
        raise RuntimeError(f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rates = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r][warmup:]
    if not rates:
        raise RuntimeError(f"{run_dir}/metrics.jsonl has no tokens_per_s after {warmup} warm-up steps")
    return statistics.median(rates)


# ---------------------------------------------------------------------------------------------- report
def versions() -> str:
    import transformers
    import trl

    return (f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, "
            f"trl {trl.__version__}, torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs")


def table(cells: dict[tuple[str, str], Series], fsdp2: dict[str, float]) -> str:
    trl_padded = cells[("padded", "TRL")].median_tokens_per_s()
    lines = ["| mode | trainer | tokens/s (median) | step time s (median) | ours / TRL padded |",
             "|---|---|---:|---:|---:|"]
    for mode in ("padded", "packed"):
        ours = cells[(mode, "ours")]
        lines.append(f"| {mode} | ours (1 process) | {ours.median_tokens_per_s():.0f} | "
                     f"{ours.median_step_time():.3f} | **{ours.median_tokens_per_s() / trl_padded:.2f}x** |")
        trl = cells.get((mode, "TRL"))
        if trl is None:
            lines.append(f"| {mode} | TRL | n/a: TRL 1.16 has no packing/padding-free for vision data | | |")
        else:
            lines.append(f"| {mode} | TRL | {trl.median_tokens_per_s():.0f} | {trl.median_step_time():.3f} | 1.00x |")
    for mode, rate in fsdp2.items():
        lines.append(f"| {mode} | ours, FSDP2 2 processes (info) | {rate:.0f} | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="Repetitions; each runs every cell once.")
    ap.add_argument("--warmup", type=int, default=2, help="Optimizer steps dropped at the start of each run.")
    ap.add_argument("--steps", type=int, default=6, help="Timed optimizer steps per run.")
    ap.add_argument("--batch", type=int, default=16, help="Rows per optimizer step (one micro-batch).")
    ap.add_argument("--clips", type=int, default=32, help="Synthetic clips; each gives a reasoning and a letter row.")
    ap.add_argument("--no-fsdp2", dest="fsdp2", action="store_false", help="Skip the 2-process FSDP2 runs.")
    ap.add_argument("--workdir", type=Path, default=None, help="Where model, data and runs go (default: a temp dir).")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    t_start = time.perf_counter()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="sft-bench-") as tmp:
        work = args.workdir or Path(tmp)
        model, data, encoded = prepare(work, args.clips)
        if len(encoded) < args.batch:
            raise ValueError(f"--batch {args.batch} exceeds the {len(encoded)} encoded rows (raise --clips)")
        n = args.warmup + args.steps
        steps = batches(encoded, args.batch, n)
        lengths = [len(s) for s in encoded]
        print(f"{len(encoded)} rows, {min(lengths)}-{max(lengths)} tokens (mean {statistics.mean(lengths):.0f}); "
              f"batch {args.batch}, {args.warmup} warm-up + {args.steps} timed steps x {args.reps} reps")
        print(f"loadavg before: {load_before}")
        cells: dict[tuple[str, str], Series] = {}
        for rep in range(args.reps):
            for mode in ("padded", "packed"):
                sides = ["ours", "TRL"] if mode == "padded" else ["ours"]
                for side in sides if rep % 2 == 0 else sides[::-1]:
                    out = work / f"rep{rep}-{mode}-{side}"
                    if side == "ours":
                        cfg = write_config(out / "config.toml", model, data, out, batch=args.batch, steps=n,
                                           packing=mode == "packed")
                        run = run_ours(cfg, steps, args.warmup)
                    else:
                        run = run_trl(model, out, steps, args.warmup)
                    cells.setdefault((mode, side), Series()).runs.append(run)
                    print(f"rep {rep} {mode:6s} {side:4s}: {run.tokens_per_s:8.0f} tokens/s, "
                          f"median step {run.step_time:.3f}s, loadavg {os.getloadavg()[0]:.2f}", flush=True)
        fsdp2: dict[str, float] = {}
        if args.fsdp2:
            for mode in ("padded", "packed"):
                fsdp2[mode] = run_fsdp2(model, data, work, args.batch, n, args.warmup, mode == "packed")
                print(f"fsdp2 {mode}: {fsdp2[mode]:.0f} tokens/s", flush=True)
    load_after = os.getloadavg()
    print()
    print(table(cells, fsdp2))
    print()
    print(f"versions: {versions()}")
    print(f"loadavg before: {tuple(round(x, 2) for x in load_before)}, after: {tuple(round(x, 2) for x in load_after)}")
    print(f"wall time: {time.perf_counter() - t_start:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
