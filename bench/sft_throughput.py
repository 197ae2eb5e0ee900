"""SFT training tokens/s: our trainer against TRL's SFTTrainer, same model, rows, batches and machine.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/sft_throughput.py [--reps 5] [--warmup 1] [--steps 4] [--batch 8]
                                                              [--threads 1] [--no-fsdp2] [--workdir DIR]
                                                              [--rows synthetic|varied]

What is compared (see bench/RESULTS.md for the numbers and the reasoning):
- The tiny offline Qwen2.5-VL on synthetic 56x56 clips, reasoning and letter rows mixed and shuffled
  once with a fixed seed. `--rows varied`: the same clips with answers of varied length (a seeded lognormal
  word count: median 60 words, sigma 0.8, 5 to 350 words, from the tokenizer's vocabulary of physical scenes)
  and a third of the rows text-only, so lengths spread from tens to ~600 tokens as in instruction data
  (LLaVA-Instruct-style answers, Cosmos-Reason video rows) and a padded batch is mostly padding. Every row is encoded
  ONCE with `encode_chat`; both trainers get the very same
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
- Cells of ours for information: "packed, dense mask" (packing through transformers' dense block-diagonal
  SDPA mask, as before cosmos_train.train.packed_attention) and "packed, compiled" (train.compile; its first
  COMPILE_WARMUP steps, which compile, are left out).
- Tokens are counted the same way on both sides: non-pad tokens of the step's rows (prompt, vision and
  answer tokens). Step time is the wall time between consecutive step ends (everything the loop does);
  the first --warmup steps of each run are dropped. Sides alternate inside each repetition (and which
  goes first alternates between repetitions) because other processes share the machine; the median
  over repetitions is reported, with `os.getloadavg()` before and after. Tokens per CPU-second (this
  process's CPU time) is reported too: it is blind to time spent descheduled, so it moves less with load.
- Both in-process sides run with --threads torch threads (default 1: on a shared 2-core machine two
  intra-op threads stall on each other and made every number 4x slower and noisier).
- --fsdp2 (default on): our trainer under torchrun with 2 processes (FSDP2 over 2 ranks, global batch =
  --batch), for information only; its tokens/s is read from the run's metrics.jsonl (video decode is
  outside its step time there too).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
SPLITS = ("train", "train_letter")  # reasoning answers (~230 tokens) and letter answers (~120)
LR, WARMUP_LR_STEPS, CLIP = 3e-4, 2, 1.0
MAX_LENGTH = 1024
DENSE = "packed, dense mask"  # information: packing through transformers' SDPA mask, as before
COMPILED = "packed, compiled"  # train.compile: every block torch.compile'd (its first steps compile)
MODES = ("padded", "packed", DENSE, COMPILED)
COMPILE_WARMUP = 3  # steps a compiled run leaves out: the compile, and the recompile for dynamic lengths
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass
class Run:
    """One timed run of one side: per-step wall and CPU times and tokens, warm-up steps already dropped."""

    step_times: list[float]
    cpu_times: list[float]  # this process's CPU seconds (all threads): blind to time spent descheduled
    tokens: list[int]

    @property
    def tokens_per_s(self) -> float:
        return sum(self.tokens) / sum(self.step_times)

    @property
    def tokens_per_cpu_s(self) -> float:
        return sum(self.tokens) / sum(self.cpu_times)

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

    def median_tokens_per_cpu_s(self) -> float:
        return statistics.median(r.tokens_per_cpu_s for r in self.runs)


# ---------------------------------------------------------------------------------------------- data
def write_config(
    path: Path,
    model: Path,
    data: Path,
    out: Path,
    *,
    batch: int,
    steps: int,
    packing: bool,
    nproc: int = 1,
    split: str = "train",
    compile: bool = False,
) -> Path:
    """The trainer config: fp32, no checkpointing, no gradient checkpointing, one micro-batch per rank.
    The rows it names are only read by the FSDP2 run, and there a manifest.jsonl takes precedence."""
    lines = [
        "[train]",
        f'output_dir = "{out}"',
        f"max_num_steps = {steps}",
        "epoch = 1000",
        f"train_batch_per_replica = {batch}",
        f"optm_lr = {LR}",
        f"optm_warmup_steps = {WARMUP_LR_STEPS}",
        'optm_decay_type = "linear"',
        "optm_weight_decay = 0.0",
        f"optm_grad_norm_clip = {CLIP}",
        'param_dtype = "float32"',
        "seed = 0",
        f"sequence_packing = {str(packing).lower()}",
        f"compile = {str(compile).lower()}",
        "[train.ckpt]",
        "enable_checkpoint = false",
        "export_safetensors = false",
        "[train.train_policy]",
        'type = "sft"',
        f"micro_batch = {batch // nproc}",
        "dataloader_num_workers = 0",
        "dataloader_shuffle = false",
        "[train.train_policy.dataset]",
        f'name = "{data}"',
        f'split = "{split}"',
        "[train.train_policy.dataset.vision]",
        "min_pixels = 3136",
        "max_pixels = 3136",
        "[policy]",
        f'model_name_or_path = "{model}"',
        f"model_max_length = {MAX_LENGTH}",
        "model_gradient_checkpointing = false",
        "[policy.parallelism]",
        f"dp_shard_size = {nproc}",
        "[logging]",
        "logger = []",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def vary_lengths(samples: list[dict], seed: int = 1) -> None:
    """Give each row an answer of a lognormal word count (median 60, 5-350 words) and make a third of the rows
    text-only (their video parts dropped), in place and seeded."""
    import math

    from cosmos_train.models.tiny_tokenizer import training_corpus

    words = sorted({w for line in training_corpus() for w in line.split() if w.isalpha()})
    rng = random.Random(seed)
    for sample in samples:
        n_words = min(350, max(5, int(rng.lognormvariate(math.log(60), 0.8))))
        sample["messages"][-1]["content"] = " ".join(rng.choice(words) for _ in range(n_words)) + "."
        if rng.random() < 1 / 3:
            for message in sample["messages"]:
                if isinstance(message["content"], list):
                    message["content"] = [p for p in message["content"] if "video" not in p]


def prepare(workdir: Path, n_clips: int, varied: bool = False) -> tuple[Path, Path, list[dict], list[Any]]:
    """Tiny model, synthetic data, and every row encoded once (shuffled with a fixed seed)."""
    from cosmos_train.config import load_config
    from cosmos_train.data.chat import encode_chat
    from cosmos_train.data.sources import load_samples
    from cosmos_train.data.synthetic import make_synthetic_dataset
    from cosmos_train.models.load import load_processor
    from cosmos_train.models.tiny import make_tiny_model

    model = make_tiny_model(workdir / "model")
    data = make_synthetic_dataset(workdir / "data", n_train=n_clips, n_val=4, n_test=4)
    samples = []
    for split in SPLITS:
        cfg = load_config(
            write_config(
                workdir / "probe" / "config.toml",
                model,
                data,
                workdir / "out",
                batch=1,
                steps=1,
                packing=False,
                split=split,
            ),
            env={},
        )
        samples += load_samples(cfg, "train")
    random.Random(0).shuffle(samples)  # mixed lengths in every batch, as a shuffled loader gives
    if varied:
        vary_lengths(samples)
    processor = load_processor(model)
    return model, data, samples, [encode_chat(processor, s["messages"], max_length=MAX_LENGTH) for s in samples]


def batches(encoded: list[Any], batch: int, n_steps: int) -> list[list[Any]]:
    """n_steps consecutive batches, cycling through the rows in order (what both sides train on)."""
    per_epoch = len(encoded) // batch
    return [encoded[(k % per_epoch) * batch : (k % per_epoch + 1) * batch] for k in range(n_steps)]


def step_tokens(batch: list[Any]) -> int:
    return sum(len(s) for s in batch)


class Clock:
    """Wall and process-CPU timestamps at each step end."""

    def __init__(self) -> None:
        self.start = (time.perf_counter(), time.process_time())
        self.ends: list[tuple[float, float]] = []

    def tick(self) -> None:
        self.ends.append((time.perf_counter(), time.process_time()))

    def run(self, tokens: list[int], warmup: int) -> Run:
        if len(self.ends) != len(tokens):
            raise RuntimeError(f"{len(self.ends)} optimizer steps were timed, expected {len(tokens)}")
        marks = [self.start, *self.ends]
        wall = [b[0] - a[0] for a, b in zip(marks, marks[1:])]
        cpu = [b[1] - a[1] for a, b in zip(marks, marks[1:])]
        return Run(wall[warmup:], cpu[warmup:], tokens[warmup:])


# ---------------------------------------------------------------------------------------------- sides
def run_ours(cfg_path: Path, steps: list[list[Any]], warmup: int, dense_mask: bool = False) -> Run:
    """dense_mask: packed rows through transformers' SDPA with its dense block-diagonal mask (what packing did
    before `cosmos_train.train.packed_attention`), for comparison."""
    from unittest import mock

    from cosmos_train.config import load_config
    from cosmos_train.distributed import init_distributed
    from cosmos_train.train import packed_attention
    from cosmos_train.train.sft import SFTTrainer

    cfg = load_config(cfg_path, env={})
    with (
        mock.patch.object(packed_attention, "use_packed_attention", lambda model: False)
        if dense_mask
        else contextlib.nullcontext()
    ):
        trainer = SFTTrainer(cfg, cfg_path.parent, init_distributed(cfg.policy.parallelism))
    clock = Clock()
    for i, samples in enumerate(steps):
        values = trainer.train_step(samples)
        trainer.metrics.log(i + 1, values)  # what fit() does after each step
        clock.tick()
    trainer.metrics.close()
    return clock.run([step_tokens(s) for s in steps], warmup)


@contextlib.contextmanager
def single_process_env() -> Iterator[None]:
    """Hide the torchrun variables our in-process run set (a one-rank group): with them, accelerate would
    wrap TRL's model in DistributedDataParallel over one rank, which a plain `python train.py` never does."""
    saved = {k: os.environ.pop(k) for k in TORCHRUN_VARS if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def run_trl(model_dir: Path, out: Path, steps: list[list[Any]], warmup: int, padding_free: bool = False) -> Run:
    from accelerate.utils import DistributedType
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
        mb = collate_padded(samples, pad)
        return {
            "input_ids": mb.input_ids,
            "attention_mask": mb.attention_mask,
            "labels": mb.labels,
            "mm_token_type_ids": mb.mm_token_type_ids,
            **mb.vision,
        }

    clock: Clock | None = None

    class StepClock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            assert clock is not None
            clock.tick()

    args = SFTConfig(
        output_dir=str(out),
        per_device_train_batch_size=len(steps[0]),
        gradient_accumulation_steps=1,
        max_steps=len(steps),
        learning_rate=LR,
        warmup_steps=WARMUP_LR_STEPS,
        lr_scheduler_type="linear",
        weight_decay=0.0,
        max_grad_norm=CLIP,
        gradient_checkpointing=False,
        bf16=False,
        fp16=False,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
        remove_unused_columns=False,
        dataset_kwargs={"skip_prepare_dataset": True},
        max_length=None,
        train_sampling_strategy="sequential",
        dataloader_num_workers=0,
        seed=0,
        padding_free=padding_free,
    )
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=index,
        data_collator=collate,
        processing_class=load_processor(model_dir),
        callbacks=[StepClock()],
    )
    if trainer.accelerator.distributed_type != DistributedType.NO:
        raise RuntimeError(f"TRL runs as {trainer.accelerator.distributed_type}, not as one plain process")
    clock = Clock()
    trainer.train()
    if trainer.model_wrapped is not trainer.model:
        raise RuntimeError(f"TRL wrapped the model in {type(trainer.model_wrapped).__name__}")
    return clock.run([step_tokens(s) for s in steps], warmup)


def trl_packed_refusal(model_dir: Path, out: Path, steps: list[list[Any]]) -> str:
    """Ask TRL for padding-free training on our video batches; return its refusal (checked, not assumed)."""
    try:
        run_trl(model_dir, out, steps[:1], 0, padding_free=True)
    except ValueError as e:
        return str(e)
    raise RuntimeError("TRL accepted padding_free with a video collator: add a TRL packed cell to this benchmark")


def run_fsdp2(
    model: Path, data: Path, samples: list[dict], out: Path, batch: int, n_steps: int, warmup: int, packing: bool
) -> float:
    """Our trainer under torchrun, 2 ranks, on the same rows in the same order (a run folder's
    manifest.jsonl is what the trainer reads first): median tokens/s of its metrics.jsonl after warm-up."""
    run_dir = out / ("fsdp2-packed" if packing else "fsdp2-padded")
    cfg = write_config(run_dir / "config.toml", model, data, out, batch=batch, steps=n_steps, packing=packing, nproc=2)
    (run_dir / "manifest.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "cosmos_train.train.sft",
        "--config",
        str(cfg),
    ]
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

    return (
        f"python {platform.python_version()}, torch {torch.__version__}, transformers {transformers.__version__}, "
        f"trl {trl.__version__}, torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs"
    )


def table(cells: dict[tuple[str, str], Series], fsdp2: dict[str, float]) -> str:
    trl_padded = cells[("padded", "TRL")].median_tokens_per_s()
    trl_padded_cpu = cells[("padded", "TRL")].median_tokens_per_cpu_s()
    lines = [
        "| mode | trainer | tokens/s (median) | step time s (median) | ours / TRL padded (wall) "
        "| tokens per CPU-s (median) | ours / TRL padded (CPU) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for mode in MODES:
        for side in ("ours", "TRL") if mode in ("padded", "packed") else ("ours",):
            cell = cells.get((mode, side))
            name = "ours (1 process)" if side == "ours" else "TRL SFTTrainer"
            if cell is None:
                lines.append(
                    f"| {mode} | {name} | n/a: TRL 1.16 refuses packing / padding-free for vision data | | | | |"
                )
                continue
            tps, cps = cell.median_tokens_per_s(), cell.median_tokens_per_cpu_s()
            lines.append(
                f"| {mode} | {name} | {tps:.0f} | {cell.median_step_time():.2f} | "
                f"**{tps / trl_padded:.2f}x** | {cps:.0f} | {cps / trl_padded_cpu:.2f}x |"
            )
    for mode, rate in fsdp2.items():
        lines.append(f"| {mode} | ours, FSDP2 over 2 processes (information) | {rate:.0f} | | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="Repetitions; each runs every cell once.")
    ap.add_argument("--warmup", type=int, default=1, help="Optimizer steps dropped at the start of each run.")
    ap.add_argument("--steps", type=int, default=4, help="Timed optimizer steps per run.")
    ap.add_argument("--batch", type=int, default=8, help="Rows per optimizer step (one micro-batch).")
    ap.add_argument("--clips", type=int, default=32, help="Synthetic clips; each gives a reasoning and a letter row.")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads for the in-process runs (both sides). 1 is what torchrun gives "
        "each of 2 processes; 2 threads on a shared 2-core machine stall on each other.",
    )
    ap.add_argument("--no-fsdp2", dest="fsdp2", action="store_false", help="Skip the 2-process FSDP2 runs.")
    ap.add_argument("--workdir", type=Path, default=None, help="Where model, data and runs go (default: a temp dir).")
    ap.add_argument(
        "--rows",
        choices=["synthetic", "varied"],
        default="synthetic",
        help="synthetic: the dataset's two row kinds; varied: answers of lognormal length and a third "
        "text-only (see the module docstring).",
    )
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # else accelerate may reset torch's thread count
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="sft-bench-") as tmp:
        work = args.workdir or Path(tmp)
        model, data, samples, encoded = prepare(work, args.clips, varied=args.rows == "varied")
        if len(encoded) < args.batch:
            raise ValueError(f"--batch {args.batch} exceeds the {len(encoded)} encoded rows (raise --clips)")
        n = args.warmup + args.steps
        steps = batches(encoded, args.batch, n)
        lengths = [len(s) for s in encoded]
        padded = sum(len(b) * max(len(s) for s in b) for b in steps)
        print(
            f"{len(encoded)} rows, {min(lengths)}-{max(lengths)} tokens (mean {statistics.mean(lengths):.0f}); "
            f"batch {args.batch}, {args.warmup} warm-up + {args.steps} timed steps x {args.reps} reps; "
            f"padding is {1 - sum(map(step_tokens, steps)) / padded:.0%} of padded positions"
        )
        print(f"loadavg before: {load_before}")
        with single_process_env():
            refusal = trl_packed_refusal(model, work / "trl-packed", steps)
        print(f"TRL packed: refused: {refusal}")
        cells: dict[tuple[str, str], Series] = {}
        for rep in range(args.reps):
            for mode in MODES:
                sides = ["ours", "TRL"] if mode == "padded" else ["ours"]
                for side in sides if rep % 2 == 0 else sides[::-1]:
                    out = work / f"rep{rep}-{mode}-{side}"
                    if side == "ours":
                        cfg = write_config(
                            out / "config.toml",
                            model,
                            data,
                            out,
                            batch=args.batch,
                            steps=n,
                            packing=mode != "padded",
                            compile=mode == COMPILED,
                        )
                        warmup = max(args.warmup, COMPILE_WARMUP) if mode == COMPILED else args.warmup
                        run = run_ours(cfg, steps, warmup, dense_mask=mode == DENSE)
                    else:
                        with single_process_env():
                            run = run_trl(model, out, steps, args.warmup)
                    if torch.get_num_threads() != args.threads:
                        raise RuntimeError(f"{side} changed torch threads to {torch.get_num_threads()}")
                    cells.setdefault((mode, side), Series()).runs.append(run)
                    print(
                        f"rep {rep} {mode:6s} {side:4s}: {run.tokens_per_s:6.0f} tokens/s, "
                        f"{run.tokens_per_cpu_s:6.0f} tokens/CPU-s, median step {run.step_time:.2f}s, "
                        f"loadavg {os.getloadavg()[0]:.2f}",
                        flush=True,
                    )
        fsdp2: dict[str, float] = {}
        if args.fsdp2:
            for mode in ("padded", "packed"):
                fsdp2[mode] = run_fsdp2(model, data, samples, work, args.batch, n, args.warmup, mode == "packed")
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
