"""GRPO step time: our GRPO trainer against TRL's GRPOTrainer, same model, prompts, images and settings.

    HF_HUB_OFFLINE=1 .venv/bin/python -m bench.grpo_step [--steps 12 --warmup 2 --mode both --out FILE]

One GRPO step on both sides: 8 prompts x 8 completions (64), temperature 1, at most 4 new tokens (the
answer letter), reward 1 for the right letter, group-normalised advantages, one optimizer step per
rollout batch (no PPO epochs), AdamW lr 3e-4 constant, weight decay 0, grad clip 1, PPO clip 0.2 / 0.28,
no KL (beta 0, so no reference model), token-mean loss (TRL's default "dapo"), fp32, CPU, one trainer
process, --threads torch threads (the cores) on TRL's side and in our synchronous trainer.
- Our rollout modes (`train.train_policy.on_policy`, --mode): synchronous (true: the trainer's own engine
  samples each step, in its process, all cores) and asynchronous (false: a worker process samples a step
  ahead; trainer and worker each take half the cores). `--mode both` (the default) times the default
  (on_policy unset, as a user's config leaves it) and then the other mode set explicitly; each row names the
  mode it measured, read from its metrics (a worker's rows carry its staleness), not from the setting.
  The asynchronous trainer's "rollout" column is its wait for the worker; the worker's own sampling and
  scoring time is the "worker s" column.
- Model: the offline tiny Qwen2.5-VL (`cosmos_train.models.tiny`), randomly initialised, then (unless
  --sft-steps 0) a short SFT on letter answers with our SFT trainer, so that it answers with a letter and a
  group's rewards differ, as in real GRPO: the random model samples 4 tokens of noise, every reward is 0
  and every advantage 0 (a step with nothing to learn).
- Data: TRL 1.16's GRPOTrainer cannot take video on this CPU torch (no torchvision), so both sides get
  images: the middle frame of each synthetic clip (`cosmos_train.data.synthetic`, the moving-dot
  direction family, 56x56) saved as PNG, with the clip's question, options and answer letter, as RL rows
  {"id", "image", "qa_pairs"} in a json file our hf source reads. TRL gets the very chat samples our data
  layer builds from that file (list-style contents, the image as a PIL image); the script checks the
  prompt token ids TRL's processor gives equal ours before timing.
- Reward: ours is the registry's `choice_letter`; TRL's is a function calling the same parser
  (`cosmos_train.rewards.parsing.parse_letter`) with the row's reference and options.
- Ours: `python -m cosmos_train.train.grpo --config RUN/config.toml` as its own process (what the CLI
  runs on one rank), step time = the median `step_time` of its metrics.jsonl rows after --warmup steps;
  the wall time between consecutive metrics rows is reported too (everything its loop does).
- TRL: `trl.GRPOTrainer` in this process; step time = wall time between consecutive optimizer-step ends
  (a TrainerCallback), median after --warmup steps.
All run in one invocation, one after the other (TRL first, then ours in each mode), with
`os.getloadavg()` before and after each. The JSON written to --out holds every step time, the settings and the versions.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from cosmos_train.train.rollout.sources import asynchronous_rollout

ROOT = Path(__file__).resolve().parents[1]
GROUP, PROMPTS, NEW_TOKENS = 8, 8, 4  # group size, prompts per step, max new tokens
LR, CLIP_LOW, CLIP_HIGH, GRAD_CLIP = 3e-4, 0.2, 0.28, 1.0
PIXELS = 3136  # 56x56: the synthetic frame as it is, 4 merged vision tokens
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
# --mode: train.train_policy.on_policy of each of our runs (None: unset, the default the trainer resolves)
ON_POLICY: dict[str, bool | None] = {"default": None, "sync": True, "async": False}


# ---------------------------------------------------------------------------------------------- data
def image_dataset(synthetic: Path, out: Path) -> tuple[Path, Path]:
    """The synthetic train clips as image rows: the middle frame of each clip as PNG, with the clip's
    RL row (qa_pairs) in out/rl.json and its SFT letter row (system, question, letter) in out/sft.json.
    Our hf source reads both; image paths are relative to the files' folder."""
    import av
    from PIL import Image

    rl = json.loads((synthetic / "rl" / "train.json").read_text())
    sft = {row["id"]: row for row in json.loads((synthetic / "sft" / "train_letter.json").read_text())}
    (out / "images").mkdir(parents=True, exist_ok=True)
    rl_rows, sft_rows = [], []
    for row in rl:
        with av.open(str(synthetic / row["video"])) as container:
            frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
        name = f"images/{row['id']}.png"
        Image.fromarray(frames[len(frames) // 2]).save(out / name)
        rl_rows.append({"id": row["id"], "image": name, "qa_pairs": row["qa_pairs"]})
        sft_rows.append({"id": row["id"], "image": name, "conversations": sft[row["id"]]["conversations"]})
    (out / "rl.json").write_text(json.dumps(rl_rows, indent=1))
    (out / "sft.json").write_text(json.dumps(sft_rows, indent=1))
    return out / "rl.json", out / "sft.json"


def sft_model(model: Path, data: Path, run: Path, steps: int, threads: int) -> Path:
    """A short SFT of the random tiny model on the letter rows (our SFT trainer, one process), so its
    rollouts are letters and groups hold right and wrong ones. Returns the exported model folder."""
    from cosmos_train.config import config_from_dict

    final = run / "safetensors" / "final"
    if (final / "config.json").exists():
        return final
    config_from_dict(
        {
            "train": {
                "output_dir": str(run),
                "max_num_steps": steps,
                "epoch": 1000,
                "train_batch_per_replica": 8,
                "optm_lr": 1e-3,
                "optm_warmup_steps": 0,
                "optm_weight_decay": 0.0,
                "param_dtype": "float32",
                "seed": 0,
                "ckpt": {"enable_checkpoint": False, "export_safetensors": True},
                "train_policy": {
                    "type": "sft",
                    "mini_batch": 8,
                    "dataset": {"name": str(data), "vision": {"min_pixels": PIXELS, "max_pixels": PIXELS}},
                },
            },
            "policy": {
                "model_name_or_path": str(model),
                "model_max_length": 512,
                "model_gradient_checkpointing": False,
                "parallelism": {"dp_shard_size": 1},
            },
            "logging": {"logger": []},
        }
    ).write(run / "config.toml")
    run_module("cosmos_train.train.sft", run / "config.toml", threads)
    return final


def run_module(module: str, config: Path, threads: int) -> None:
    """`python -m module --config config` as its own single process (no torchrun), `threads` threads."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(threads)}
    for k in TORCHRUN_VARS:
        env.pop(k, None)
    proc = subprocess.run(
        [sys.executable, "-m", module, "--config", str(config)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{module} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")


def grpo_config_dict(model: Path, data: Path, out: Path, steps: int, on_policy: bool | None = None) -> dict[str, Any]:
    """Our GRPO job, matching the TRL settings line by line (see the module docstring); on_policy None
    leaves the key unset (the trainer picks the mode)."""
    from cosmos_train.data.prompt import QUESTION_SYSTEM_PROMPT

    cfg: dict[str, Any] = {
        "train": {
            "output_dir": str(out),
            "max_num_steps": steps,
            "epoch": 1000,
            "train_batch_per_replica": GROUP * PROMPTS,
            "optm_lr": LR,
            "optm_warmup_steps": 0,
            "optm_decay_type": "none",
            "optm_weight_decay": 0.0,
            "optm_grad_norm_clip": GRAD_CLIP,
            "param_dtype": "float32",
            "seed": 0,
            "ckpt": {"enable_checkpoint": False, "export_safetensors": False},
            "train_policy": {
                "type": "grpo",
                "reward_function": ["choice_letter"],
                "temperature": 1.0,
                "system_prompt": QUESTION_SYSTEM_PROMPT,  # the SFT rows' system turn
                "epsilon_low": CLIP_LOW,
                "epsilon_high": CLIP_HIGH,
                "kl_beta": 0.0,
                "mu_iterations": 1,
                "loss_type": "token-mean",
                "micro_batch": GROUP * PROMPTS,
                "dataloader_num_workers": 0,
                "dataset": {
                    "name": str(data),
                    "split": "train",
                    "vision": {"min_pixels": PIXELS, "max_pixels": PIXELS},
                },
            },
        },
        "policy": {
            "model_name_or_path": str(model),
            "model_max_length": 512,
            "model_gradient_checkpointing": False,
            "parallelism": {"dp_shard_size": 1},
        },
        "rollout": {
            "backend": "hf",
            "n_generation": GROUP,
            "batch_size": PROMPTS,
            "max_response_length": NEW_TOKENS,
            "sampling_config": {"temperature": 1.0},
            "seed": 0,
        },
        "launch": {"nproc_per_node": 1},
        "logging": {"logger": [], "completion_sample_freq": 0},  # TRL: log_completions=False
    }
    if on_policy is not None:
        cfg["train"]["train_policy"]["on_policy"] = on_policy
    return cfg


def chat_samples(cfg_dict: dict[str, Any]) -> list[dict[str, Any]]:
    """The RL samples our data layer reads from the image rows (messages, reference, options)."""
    from cosmos_train.config import config_from_dict
    from cosmos_train.data.sources import load_samples

    return load_samples(config_from_dict(cfg_dict), "train")


def trl_rows(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our samples in TRL's layout: list-style contents, the image part empty and the PIL image in an
    `image` column, the reference and options kept for the reward function."""
    from PIL import Image

    from cosmos_train.data.prompt import prompt_messages

    rows = []
    for s in samples:
        prompt, image = [], None
        for msg in prompt_messages(s["messages"]):
            content = msg["content"]
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            parts = []
            for part in content:
                if part["type"] == "image":
                    if image is not None:
                        raise ValueError(f"{s['id']}: more than one image; the benchmark rows have one")
                    image = Image.open(part["image"]).convert("RGB")
                    parts.append({"type": "image"})
                else:
                    parts.append({"type": "text", "text": part["text"]})
            prompt.append({"role": msg["role"], "content": parts})
        rows.append(
            {"prompt": prompt, "image": image, "reference": s["reference"], "options": json.dumps(s["options"])}
        )
    return rows


def check_same_prompts(model: Path, samples: list[dict[str, Any]], rows: list[dict[str, Any]]) -> int:
    """Both sides must see the same tokens: TRL's processor on its row vs our encode_chat on our sample.
    Returns the prompt length (tokens, vision pads included)."""
    from cosmos_train.data.chat import encode_chat
    from cosmos_train.data.media import VisionSettings
    from cosmos_train.data.prompt import prompt_messages
    from cosmos_train.models.load import load_processor

    processor = load_processor(model)
    lengths = set()
    for s, r in zip(samples, rows):
        ours = encode_chat(
            processor,
            prompt_messages(s["messages"]),
            add_generation_prompt=True,
            vision_defaults=VisionSettings(min_pixels=PIXELS, max_pixels=PIXELS),
        ).input_ids
        text = processor.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True)
        theirs = processor(text=[text], images=[[r["image"]]], return_tensors="pt")["input_ids"][0]
        if ours.tolist() != theirs.tolist():
            raise RuntimeError(f"{s['id']}: TRL's prompt ids differ from ours:\n{theirs.tolist()}\n{ours.tolist()}")
        lengths.add(len(ours))
    if len(lengths) != 1:
        raise RuntimeError(f"prompt lengths differ between rows: {sorted(lengths)}")
    return lengths.pop()


# ---------------------------------------------------------------------------------------------- TRL
def letter_reward(completions: list[Any], reference: list[str], options: list[str], **_: Any) -> list[float]:
    """TRL's reward: 1 when our evaluation parser reads the reference letter (what `choice_letter` does)."""
    from cosmos_train.rewards.parsing import parse_letter

    out = []
    for completion, ref, opts in zip(completions, reference, options):
        text = completion if isinstance(completion, str) else completion[-1]["content"]
        if not isinstance(text, str):  # list-style content
            text = "".join(p.get("text", "") for p in text)
        answer = parse_letter(text, json.loads(opts)).answer
        out.append(1.0 if answer is not None and answer.strip().upper() == ref.strip().upper() else 0.0)
    return out


@contextlib.contextmanager
def single_process_env() -> Iterator[None]:
    """No torchrun variables: accelerate would otherwise wrap TRL in a one-rank DDP."""
    saved = {k: os.environ.pop(k) for k in TORCHRUN_VARS if k in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def run_trl(model_dir: Path, rows: list[dict[str, Any]], out: Path, steps: int) -> dict[str, Any]:
    """TRL's GRPOTrainer for `steps` optimizer steps; per-step wall times and rewards."""
    from accelerate.utils import DistributedType
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from cosmos_train.models.load import load_model, load_processor

    model = load_model(model_dir, dtype=torch.float32, device="cpu")
    ends: list[float] = []
    rollout_times: list[float] = []
    rollout = [0.0]  # generation + reward + advantages of the current step

    class StepClock(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            ends.append(time.perf_counter())
            rollout_times.append(rollout[0])
            rollout[0] = 0.0

    args = GRPOConfig(
        output_dir=str(out),
        per_device_train_batch_size=GROUP * PROMPTS,
        gradient_accumulation_steps=1,
        num_generations=GROUP,
        max_completion_length=NEW_TOKENS,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        beta=0.0,
        num_iterations=1,
        epsilon=CLIP_LOW,
        epsilon_high=CLIP_HIGH,
        loss_type="dapo",
        scale_rewards="group",
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=GRAD_CLIP,
        max_steps=steps,
        gradient_checkpointing=False,
        bf16=False,
        fp16=False,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        seed=0,
        dataloader_num_workers=0,
        log_completions=False,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[letter_reward],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=load_processor(model_dir),
        callbacks=[StepClock()],
    )
    if trainer.accelerator.distributed_type != DistributedType.NO:
        raise RuntimeError(f"TRL runs as {trainer.accelerator.distributed_type}, not as one plain process")
    generate = trainer._generate_and_score_completions

    def timed_generate(*a: Any, **kw: Any) -> Any:  # TRL's rollout: generate, score, advantages
        t = time.perf_counter()
        try:
            return generate(*a, **kw)
        finally:
            rollout[0] += time.perf_counter() - t

    trainer._generate_and_score_completions = timed_generate
    start = time.perf_counter()
    trainer.train()
    marks = [start, *ends]
    steps_s = [b - a for a, b in zip(marks, marks[1:])]
    return {
        "step_times": steps_s,
        "rollout_times": rollout_times,
        "train_times": [s - r for s, r in zip(steps_s, rollout_times)],  # the rest: forward, backward, AdamW
        "reward_mean": [e["reward"] for e in trainer.state.log_history if "reward" in e],
    }


# ---------------------------------------------------------------------------------------------- ours
def run_ours(cfg_dict: dict[str, Any], run: Path, threads: int) -> dict[str, Any]:
    """`python -m cosmos_train.train.grpo --config RUN/config.toml`, one process; its metrics.jsonl rows and
    the rollout mode they show (a worker's rows carry its staleness; the colocated engine's do not)."""
    from cosmos_train.config import config_from_dict

    config = config_from_dict(cfg_dict).write(run / "config.toml")
    run_module("cosmos_train.train.grpo", config, threads)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    train = sorted((r for r in rows if r.get("kind") == "train"), key=lambda r: r["step"])
    if not train or any("step_time" not in r for r in train):
        raise RuntimeError(f"{run}/metrics.jsonl has no train rows with step_time: {rows[:2]}")
    times = [r["time"] for r in train]
    on_policy = cfg_dict["train"]["train_policy"].get("on_policy")
    return {
        "mode": "asynchronous" if all("staleness" in r for r in train) else "synchronous",
        "on_policy": "unset, the default" if on_policy is None else f"= {str(on_policy).lower()}",
        "worker_times": [r.get("rollout_generate_time") for r in train],
        "step_times": [r["step_time"] for r in train],
        "rollout_times": [r.get("rollout_time") for r in train],
        "train_times": [r.get("train_time") for r in train],
        "reward_mean": [r.get("reward_mean") for r in train],
        # wall between consecutive rows: everything the loop does (the first step has no predecessor)
        "row_intervals": [b - a for a, b in zip(times, times[1:])],
    }


# ---------------------------------------------------------------------------------------------- main
def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("torch", "transformers", "trl", "accelerate"):
        out[pkg] = importlib.metadata.version(pkg)
    return out


def median_after(values: list[float], warmup: int) -> float:
    kept = values[warmup:]
    if not kept:
        raise ValueError(f"no steps left after {warmup} warm-up steps (raise --steps)")
    return statistics.median(kept)


def _med(values: list[float | None], warmup: int) -> str:
    kept = [v for v in values[warmup:] if v is not None]
    return f"{statistics.median(kept):.3f}" if kept else "n/a"


def modes_to_run(mode: str) -> list[str]:
    """--mode -> our runs, as ON_POLICY keys: `both` times the default, then the other mode set explicitly."""
    if mode != "both":
        return [mode]
    cpu_default_async, _ = asynchronous_rollout(None, 1, torch.device("cpu"))
    return ["default", "sync" if cpu_default_async else "async"]


def table(result: dict[str, Any], warmup: int) -> list[str]:
    """The markdown table: each of our runs named by the mode it measured, then TRL."""
    trl = result["trl"]
    lines = [
        "| side | step s (median) | rollout s (median) | worker s (median) | train s (median) | step times s "
        "| mean reward | TRL / ours |",
        "|---|---:|---:|---:|---:|---|---:|---:|",
    ]
    for ours in result["ours"].values():
        lines.append(
            f"| ours, {ours['mode']} (on_policy {ours['on_policy']}) | {ours['median_step_s']:.3f} "
            f"| {_med(ours['rollout_times'], warmup)} | {_med(ours['worker_times'], warmup)} "
            f"| {_med(ours['train_times'], warmup)} | {' / '.join(f'{t:.3f}' for t in ours['step_times'])} | "
            f"{statistics.mean(r for r in ours['reward_mean'] if r is not None):.3f} | **{ours['ratio']:.2f}x** |"
        )
    lines.append(
        f"| TRL GRPOTrainer | {trl['median_step_s']:.3f} | {_med(trl['rollout_times'], warmup)} | n/a | "
        f"{_med(trl['train_times'], warmup)} | {' / '.join(f'{t:.3f}' for t in trl['step_times'])} | "
        f"{statistics.mean(trl['reward_mean']):.3f} | 1.00x |"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12, help="Optimizer steps per side.")
    ap.add_argument(
        "--warmup",
        type=int,
        default=2,
        help="Steps left out of the median at the start of each run (default 2: steps 3..N count).",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="torch intra-op threads, both sides (default and only choice with ours: the cores).",
    )
    ap.add_argument("--rows", type=int, default=64, help="Synthetic clips -> image rows.")
    ap.add_argument(
        "--sft-steps",
        type=int,
        default=100,
        help="SFT steps on letter answers before GRPO (0: the random model, whose rewards are all 0).",
    )
    ap.add_argument(
        "--mode",
        choices=["both", *ON_POLICY],
        default="both",
        help="Our rollout mode(s): both (the default mode, then the other one), default (on_policy unset), "
        "sync (on_policy = true) or async (on_policy = false).",
    )
    ap.add_argument("--skip-ours", action="store_true", help="Time TRL only (before our trainer exists).")
    ap.add_argument("--workdir", type=Path, default=None, help="Keep model, data and runs here (default: temp).")
    ap.add_argument("--out", type=Path, default=None, help="Write the results as JSON here.")
    args = ap.parse_args(argv)
    cores = len(os.sched_getaffinity(0))
    if args.threads != cores and not args.skip_ours:
        # our HF rollout engine sets torch threads to cores / processes on the host (generation/config.py;
        # the asynchronous trainer takes the same share, train/rollout/worker.share_cores), so ours would not
        # run with --threads: refuse rather than compare unlike thread counts
        ap.error(
            f"--threads {args.threads}: our trainer's engine uses all {cores} cores of one process; "
            f"pass --threads {cores} (or --skip-ours)"
        )
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # else accelerate may reset torch's thread count
    torch.set_num_threads(args.threads)

    from cosmos_train.data.synthetic import make_synthetic_dataset
    from cosmos_train.models.tiny import make_tiny_model

    t0 = time.perf_counter()
    load: dict[str, tuple[float, ...]] = {}
    ours: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="grpo-bench-") as tmp:
        work = args.workdir or Path(tmp)
        model = make_tiny_model(work / "model")
        synthetic = make_synthetic_dataset(
            work / "synthetic", n_train=args.rows, n_val=4, n_test=4, families=["direction"]
        )
        data, sft_data = image_dataset(synthetic, work / "images")
        if args.sft_steps:
            model = sft_model(model, sft_data, work / "sft", args.sft_steps, args.threads)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        samples = chat_samples(grpo_config_dict(model, data, work / "probe", args.steps))
        rows = trl_rows(samples)
        prompt_len = check_same_prompts(model, samples, rows)
        print(
            f"{len(rows)} image rows, {prompt_len} prompt tokens each; TRL's processor and ours give the same ids",
            flush=True,
        )
        load["before"] = os.getloadavg()
        with single_process_env():
            trl = run_trl(model, rows, work / "trl", args.steps)
        if torch.get_num_threads() != args.threads:
            raise RuntimeError(f"TRL changed torch threads to {torch.get_num_threads()}")
        load["after TRL"] = os.getloadavg()
        trl_median = median_after(trl["step_times"], args.warmup)
        print(f"TRL: median step {trl_median:.3f}s, load {load['after TRL'][0]:.2f}", flush=True)
        for mode in [] if args.skip_ours else modes_to_run(args.mode):
            cfg_dict = grpo_config_dict(model, data, work / f"ours-{mode}-{stamp}", args.steps, ON_POLICY[mode])
            got = run_ours(cfg_dict, work / f"ours-{mode}-{stamp}", args.threads)
            load[f"after ours {mode}"] = os.getloadavg()
            median = median_after(got["step_times"], args.warmup)
            # the first metrics row has no predecessor: interval k ends at step k + 2
            wall = median_after(got["row_intervals"], max(args.warmup - 1, 0))
            ours[mode] = {**got, "median_step_s": median, "median_row_interval_s": wall, "ratio": trl_median / median}
            print(f"ours {mode} ({got['mode']}): median step {median:.3f}s, load {load[f'after ours {mode}'][0]:.2f}")

    result: dict[str, Any] = {
        "command": " ".join([Path(sys.executable).name, "-m", "bench.grpo_step", *(argv or sys.argv[1:])]),
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "versions": versions(),
        "threads": args.threads,
        "load": load,
        "warmup": args.warmup,
        "settings": {
            "group": GROUP,
            "prompts_per_step": PROMPTS,
            "max_new_tokens": NEW_TOKENS,
            "lr": LR,
            "clip": [CLIP_LOW, CLIP_HIGH],
            "kl_beta": 0.0,
            "sft_steps": args.sft_steps,
            "prompt_tokens": prompt_len,
        },
        "trl": {**trl, "median_step_s": trl_median},
        "ours": ours,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    if "default" in ours:
        result["default_mode"] = ours["default"]["mode"]
        result["ratio"] = ours["default"]["ratio"]  # the default mode's, what a config that leaves it gets
    print("\n".join(table(result, args.warmup)))
    for mode, got in ours.items():
        print(
            f"ours {mode} ({got['mode']}), wall between metrics rows (median): {got['median_row_interval_s']:.3f}s "
            f"-> {trl_median / got['median_row_interval_s']:.2f}x"
        )
    print(f"versions {result['versions']}, {args.threads} torch threads, load {load}, wall {result['wall_s']}s")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
