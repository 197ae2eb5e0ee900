"""One check of the training stack on a lent GPU machine: the figures bench/RESULTS.md leaves pending.

    scripts/gpu_check.sh OUT                  # on the GPU machine (installs the kit's wheels, then runs this)
    scripts/gpu_check.sh --dry-run OUT        # here: the same steps on the tiny model on the CPU
    python bench/gpu_check.py OUT [--dry-run] [--budget-s 450]

Steps (each a subprocess, its log in OUT/logs/; the 3B-size model is built once, with random weights, and the
synthetic clips are frames archives, so neither PyAV nor the hub is needed):
  a. bench/mfu.py at the Qwen2.5-VL-3B size on video rows at the Cosmos-Reason settings (12 frames of 224 px,
     fps 4, max_pixels 81920), bf16 under torchrun: MFU and tokens/s for eager sdpa, --compile, and --compile
     --fused-ce (the first two with the LM head unfused);
  b. the LM head + cross entropy's peak memory, unfused against fused (bench/linear_ce_memory.py's one-run
     child), at 8k label tokens x 151,936 vocabulary, bf16;
  c. 20 SFT steps of the 3B-size model in bf16 under torchrun (lr 1e-4): the loss falls (the mean of the last
     three steps below the first three's), every grad norm is finite, the peak memory;
  d. one GRPO step at the 3B size with the HF engine on the GPU (bench/gpu_check_rows.py's rows and reward):
     the update's MFU and the rollout's generated tokens/s;
  e. the tiny model's first 5 SFT losses in float32 on the GPU against the same run on this machine's own CPU,
     in this run (same torch, same files; TF32 off through NVIDIA_TF32_OVERRIDE=0): equal within 1e-4.
--dry-run runs each step on the tiny model on the CPU with fewer tokens (e's two runs are then both on the CPU):
it proves the kit and the plumbing, it measures nothing. Not measured here: vLLM on CUDA (its wheels are
hundreds of MB, over the kit's 60 MiB). Printed: one table; written: OUT/gpu_check.json (every step's figures,
its check, its time, the machine and versions). Exit 0 when every step passed, 1 otherwise, 2 for no GPU.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LOG = logging.getLogger("gpu_check")
LOSS_TOLERANCE = 1e-4  # step e: |GPU loss - CPU loss| in float32
UNMEASURED = [
    "vLLM rollout on CUDA (cosmos_train.generation.vllm): vLLM's wheels are hundreds of MB, over the kit's "
    "60 MiB, and the machine has no package index; the GRPO step uses the HF engine"
]


@dataclass
class Step:
    """One row of the table and of gpu_check.json."""

    key: str
    what: str
    ok: bool = False
    result: str = "not run"
    seconds: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Plan:
    """What each step runs: the 3B settings on a GPU, a smoke-sized version of each on the CPU (--dry-run)."""

    dry_run: bool
    out: Path
    deadline: float  # time.monotonic() past which no step starts
    size: str = "3b"
    mfu_steps: int = 6
    mfu_warmup: int = 2
    sft_steps: int = 20
    batch_per_rank: int = 4
    ce_tokens: int = 8192
    ce_chunk: int = 2048  # fused: label rows per chunk
    ce_hidden: int = 2048  # Qwen2.5-VL-3B's hidden size
    grpo_prompts: int = 4
    grpo_new_tokens: int = 64
    device: str = "cuda"

    @classmethod
    def make(cls, out: Path, dry_run: bool, budget_s: float) -> Plan:
        plan = cls(dry_run, out, time.monotonic() + budget_s)
        if dry_run:
            plan.size, plan.mfu_steps, plan.mfu_warmup, plan.ce_tokens, plan.ce_chunk = "tiny", 1, 1, 512, 128
            plan.ce_hidden = 256
            plan.grpo_prompts, plan.grpo_new_tokens, plan.device = 2, 8, "cpu"
            plan.sft_steps, plan.batch_per_rank = 8, 1
        return plan

    @property
    def work(self) -> Path:
        return self.out / "work"

    def workdir(self, size: str) -> Path:
        """Where bench/mfu.py keeps the model and data of `size` (the tiny one is step e's too)."""
        return self.work / size


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


def _run(plan: Plan, name: str, cmd: list[str], cap_s: float, env: dict[str, str] | None = None) -> None:
    """Run `cmd` in the repository with its output in OUT/logs/<name>.log; raise on failure or timeout."""
    left = plan.deadline - time.monotonic()
    if left < 5:
        raise TimeoutError("not run: the time budget was spent")
    timeout = min(cap_s, left)
    log = plan.out / "logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    LOG.info("%s: %s (at most %.0f s)", name, " ".join(cmd[1:4]), timeout)
    with log.open("w") as f:
        # its own session: on a timeout the whole tree goes (torchrun's workers hold the GPU), not just the child
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env or _env(), stdout=f, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as e:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise TimeoutError(f"timed out after {timeout:.0f} s (log: {log})") from e
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"exit {proc.returncode} (log: {log}): {' | '.join(tail)}")


def _mfu(plan: Plan, name: str, cap_s: float, *flags: str, size: str | None = None, env: dict | None = None) -> dict:
    """bench/mfu.py on the prepared model and data; its --json result."""
    out = plan.out / f"{name}.json"
    size = size or plan.size
    cmd = [sys.executable, str(ROOT / "bench" / "mfu.py"), "--size", size, "--workdir", str(plan.workdir(size))]
    cmd += ["--nproc", "1", "--video-format", "npz", "--reuse", "--attn", "sdpa", "--run-name", f"run-{name}"]
    cmd += ["--batch-per-rank", str(plan.batch_per_rank)]
    _run(plan, name, [*cmd, "--json", str(out), *flags], cap_s, env)
    return json.loads(out.read_text())


def _pct(x: float | None) -> str:
    return "n/a (peak unknown)" if x is None else f"{100 * x:.1f}%"


def step_prepare(plan: Plan) -> Step:
    step = Step("0", f"build the {plan.size}-size model (random weights) and the synthetic clips")
    for size in dict.fromkeys([plan.size, "tiny"]):  # the tiny model is step e's
        cmd = [sys.executable, str(ROOT / "bench" / "mfu.py"), "--size", size, "--workdir", str(plan.workdir(size))]
        _run(plan, f"prepare-{size}", [*cmd, "--nproc", "1", "--video-format", "npz", "--prepare-only"], 150)
    step.ok, step.result = True, f"in {plan.work}"
    return step


def step_mfu(plan: Plan) -> list[Step]:
    """a: eager sdpa, --compile, --compile --fused-ce."""
    variants = [
        ("a1", "eager sdpa", ["--no-fused-ce"], 90),
        ("a2", "--compile", ["--compile", "--no-fused-ce"], 150),
        ("a3", "--compile --fused-ce", ["--compile", "--fused-ce"], 100),
    ]
    steps = []
    for key, label, flags, cap in variants:
        step = Step(key, f"mfu.py {plan.size}, {label}: MFU, tokens/s per device")
        t0 = time.monotonic()
        try:
            res = _mfu(plan, f"a-{key}", cap, *flags, "--steps", str(plan.mfu_steps), "--warmup", str(plan.mfu_warmup))
            med = res["medians"]
            step.data = {k: res[k] for k in ("medians", "tokens_per_s_per_device", "settings", "device")}
            step.ok = bool(res["tokens_per_s_per_device"]) and (plan.dry_run or med["mfu"] is not None)
            step.result = (
                f"MFU {_pct(med['mfu'])}, {res['tokens_per_s_per_device']:.0f} tokens/s/device, "
                f"peak {med['peak_mem_gb']:.1f} GB"
            )
        except (RuntimeError, TimeoutError, KeyError, ValueError) as e:
            step.result = str(e)
        step.seconds = time.monotonic() - t0
        steps.append(step)
    return steps


def step_linear_ce(plan: Plan) -> Step:
    """b: one forward + backward of the head + loss per mode, each in a fresh process."""
    step = Step(
        "b",
        f"LM head + CE peak memory, unfused vs fused (chunk {plan.ce_chunk}), {plan.ce_tokens} label tokens x "
        f"151936 vocabulary, hidden {plan.ce_hidden}",
    )
    runs = {}
    for mode in ("unfused:0", f"fused:{plan.ce_chunk}"):
        name = f"b-{mode.split(':')[0]}"
        cmd = [sys.executable, str(ROOT / "bench" / "linear_ce_memory.py"), "--child", mode, "--device", plan.device]
        threads = "1" if plan.dry_run else "8"
        cmd += ["--tokens", str(plan.ce_tokens), "--hidden", str(plan.ce_hidden), "--vocab", "151936"]
        cmd += ["--threads", threads]
        _run(plan, name, cmd, 60)
        runs[mode] = json.loads((plan.out / "logs" / f"{name}.log").read_text().strip().splitlines()[-1])
    unfused, fused = runs["unfused:0"], runs[f"fused:{plan.ce_chunk}"]
    loss_rel = abs(fused["loss"] - unfused["loss"]) / abs(unfused["loss"])
    step.data = {
        "unfused_peak_gib": unfused["peak_gib"],
        "fused_peak_gib": fused["peak_gib"],
        "unfused_s": unfused["seconds"],
        "fused_s": fused["seconds"],
        "loss_relative_diff": loss_rel,
    }
    step.ok = fused["peak_gib"] < unfused["peak_gib"] and loss_rel < 1e-2
    step.result = (
        f"peak {unfused['peak_gib']:.2f} -> {fused['peak_gib']:.2f} GiB "
        f"({fused['peak_gib'] / max(unfused['peak_gib'], 1e-9):.2f}x), loss rel. diff {loss_rel:.1e}"
    )
    return step


def step_sft(plan: Plan) -> Step:
    """c: 20 SFT steps in bf16 under torchrun."""
    dtype = "float32 (CPU)" if plan.device == "cpu" else "bf16"
    step = Step("c", f"{plan.sft_steps} SFT steps, {plan.size}, {dtype}, torchrun: loss falls, grad norm finite, peak")
    res = _mfu(plan, "c-sft", 120, "--fused-ce", "--steps", str(plan.sft_steps), "--warmup", "0", "--lr", "1e-4")
    losses = [r["loss"] for r in res["rows"]]
    norms = [r["grad_norm"] for r in res["rows"]]
    peak = max(r["peak_mem_gb"] for r in res["rows"])
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    finite = all(math.isfinite(x) for x in losses + norms)
    step.data = {
        "losses": losses,
        "grad_norms": norms,
        "peak_mem_gb": peak,
        "skipped": sum(r.get("skipped", 0) for r in res["rows"]),
    }
    step.ok = len(losses) == plan.sft_steps and finite and last < first
    step.result = f"loss {first:.3f} -> {last:.3f} (mean of 3), grad norm max {max(norms):.3g}, peak {peak:.1f} GB"
    return step


def _grpo_config(plan: Plan, data: Path, model: Path, run: Path) -> Path:
    cuda = plan.device == "cuda"
    lines = [
        "[train]",
        f'output_dir = "{run / "out"}"',
        "epoch = 100",
        "max_num_steps = 1",
        f"train_batch_per_replica = {plan.grpo_prompts * 8}",
        "optm_lr = 1e-6",
        "optm_warmup_steps = 0",
        'optm_decay_type = "none"',
        f'param_dtype = "{"bfloat16" if cuda else "float32"}"',
        'fsdp_reduce_dtype = "float32"',
        'master_dtype = "float32"',
        "seed = 0",
        "sync_weight_interval = 1",
        "[train.ckpt]",
        "enable_checkpoint = false",
        "export_safetensors = false",
        "[train.train_policy]",
        'type = "grpo"',
        'variant = "grpo"',
        'reward_function = ["gpu_check_length_parity"]',
        "kl_beta = 0.0",
        f"micro_batch = {min(8, plan.grpo_prompts * 8)}",
        "mu_iterations = 1",
        "temperature = 1.0",
        "on_policy = true",
        "dataloader_num_workers = 0",
        "[train.train_policy.dataset]",
        f'name = "{ROOT / "bench" / "gpu_check_rows.py"}"',
        "[train.train_policy.dataset.vision]",
        "fps = 4",
        "max_pixels = 81920",
        "[rollout]",
        'backend = "hf"',
        "n_generation = 8",
        f"max_response_length = {plan.grpo_new_tokens}",
        "[rollout.sampling_config]",
        "temperature = 1.0",
        "[validation]",
        "enable = false",
        "[policy]",
        f'model_name_or_path = "{model}"',
        "model_max_length = 8192",
        "model_gradient_checkpointing = true",
        'attn_implementation = "sdpa"',
        "[policy.parallelism]",
        "dp_shard_size = 1",
        "[logging]",
        "logger = []",
        "[custom.gpu_check]",
        f'rows = "{data / "rl" / "train.json"}"',
    ]
    path = run / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def step_grpo(plan: Plan) -> Step:
    """d: one GRPO step with the HF engine: update MFU, rollout tokens/s."""
    step = Step("d", f"1 GRPO step, {plan.size}, HF engine: update MFU, rollout tokens/s")
    workdir = plan.workdir(plan.size)
    run = plan.work / "run-d-grpo"
    cfg = _grpo_config(plan, workdir / "data", workdir / "model", run)
    script = str(ROOT / "bench" / "gpu_check_rows.py")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", "-m"]
    cmd += ["cosmos_train.train.grpo", "--config", str(cfg), "--dataset-script", script]
    _run(plan, "d-grpo", cmd, 150, _env() if plan.device == "cuda" else _env(OMP_NUM_THREADS="2"))
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    row = [r for r in rows if r.get("kind") == "train"][-1]
    generated = row["completions"] * row["response_length_mean"]
    rollout_tps = generated / row["rollout_time"]
    mfu = row.get("update_mfu")
    step.data = {k: row.get(k) for k in ("update_mfu", "update_tflops_per_device", "rollout_time", "train_time")}
    step.data.update(rollout_tokens_per_s=rollout_tps, generated_tokens=generated, loss=row.get("loss"))
    updated = "update_tflops_per_device" in row and math.isfinite(row.get("loss", math.nan))
    step.ok = updated and (plan.dry_run or mfu is not None)
    step.result = (
        f"update MFU {_pct(mfu)}, rollout {rollout_tps:.0f} tokens/s ({generated:.0f} tokens in "
        f"{row['rollout_time']:.1f} s), peak {row.get('peak_mem_gb', 0):.1f} GB"
        if updated
        else f"no update was made (groups {row.get('groups')}): nothing to time"
    )
    return step


def step_parity(plan: Plan) -> Step:
    """e: the tiny model's first 5 float32 SFT losses, GPU against this machine's CPU."""
    step = Step("e", "tiny model, first 5 SFT losses in float32: GPU == this machine's CPU within 1e-4")
    flags = ["--steps", "5", "--warmup", "0", "--lr", "1e-4", "--dtype", "float32", "--deterministic"]
    size = "tiny"
    cpu = _mfu(plan, "e-cpu", 120, *flags, size=size, env=_env(CUDA_VISIBLE_DEVICES=""))
    # TF32 off in cuBLAS and cuDNN (the vision tower's patch convolution), deterministic cuBLAS workspaces.
    gpu_env = _env(NVIDIA_TF32_OVERRIDE="0", CUBLAS_WORKSPACE_CONFIG=":4096:8")
    other = _mfu(plan, "e-gpu", 120, *flags, size=size, env=gpu_env)
    a, b = [r["loss"] for r in cpu["rows"]], [r["loss"] for r in other["rows"]]
    diff = max((abs(x - y) for x, y in zip(a, b, strict=True)), default=math.inf) if len(a) == len(b) else math.inf
    step.data = {"cpu": a, "gpu": b, "max_abs_diff": diff, "devices": [cpu["device"], other["device"]]}
    step.ok = len(a) == 5 and diff <= LOSS_TOLERANCE
    step.result = f"max abs diff {diff:.1e} over {len(a)} steps ({other['device']} vs {cpu['device']})"
    return step


def run_all(plan: Plan) -> list[Step]:
    """Every step in an order that keeps the quick ones safe from a slow compile; a failure is recorded, the
    next step still runs."""
    order: list[tuple[str, Callable[[Plan], Step | list[Step]]]] = [
        ("0", step_prepare),
        ("b", step_linear_ce),
        ("e", step_parity),
        ("c", step_sft),
        ("d", step_grpo),
        ("a", step_mfu),
    ]
    done: dict[str, list[Step]] = {}
    for key, fn in order:
        t0 = time.monotonic()
        try:
            out = fn(plan)
            done[key] = out if isinstance(out, list) else [out]
        except (RuntimeError, TimeoutError, KeyError, ValueError, IndexError, OSError) as e:
            done[key] = [Step(key, (fn.__doc__ or fn.__name__).splitlines()[0], False, f"{type(e).__name__}: {e}")]
        if key != "a":
            done[key][0].seconds = time.monotonic() - t0
        LOG.info("%s: %s", key, "; ".join(f"{'ok' if s.ok else 'FAILED'} {s.result}" for s in done[key]))
        if key == "0" and not done[key][0].ok:
            break  # nothing to run on
    return [s for key in ("0", "a", "b", "c", "d", "e") for s in done.get(key, [])]


def machine() -> dict[str, Any]:
    import torch
    import transformers

    cuda = torch.cuda.is_available()
    return {
        "device": torch.cuda.get_device_name(0) if cuda else f"{platform.machine()} CPU",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "loadavg": os.getloadavg(),
    }


def table(steps: list[Step], info: dict[str, Any], dry_run: bool) -> str:
    head = f"GPU check{' (dry run: tiny model on the CPU, nothing measured)' if dry_run else ''} on {info['device']}"
    lines = [
        f"{head}, torch {info['torch']}, transformers {info['transformers']}, python {info['python']}",
        "| step | what | result | check | s |",
        "|---|---|---|---|---:|",
    ]
    for s in steps:
        lines.append(f"| {s.key} | {s.what} | {s.result} | {'ok' if s.ok else 'FAILED'} | {s.seconds:.0f} |")
    for u in UNMEASURED:
        lines.append(f"| - | {u.split(':')[0]} | not measured: {u.split(': ', 1)[1]} | - | 0 |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="Folder for gpu_check.json, the logs and the work files.")
    ap.add_argument("--dry-run", action="store_true", help="The tiny model on the CPU: the kit and the plumbing.")
    ap.add_argument("--budget-s", type=float, default=450.0, help="No step starts after this many seconds.")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s gpu_check %(message)s", stream=sys.stderr)
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        LOG.error("no CUDA device here: run `scripts/gpu_check.sh --dry-run OUT` on a CPU machine")
        return 2
    t0 = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    plan = Plan.make(args.out.resolve(), args.dry_run, args.budget_s)
    steps = run_all(plan)
    info = machine()
    ok = all(s.ok for s in steps) and {s.key for s in steps} >= {"0", "a1", "a2", "a3", "b", "c", "d", "e"}
    result = {
        "ok": ok,
        "dry_run": args.dry_run,
        "machine": info,
        "wall_s": time.monotonic() - t0,
        "steps": [asdict(s) for s in steps],
        "unmeasured": UNMEASURED,
    }
    (args.out / "gpu_check.json").write_text(json.dumps(result, indent=1) + "\n")
    print(table(steps, info, args.dry_run))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
