"""Training MFU of our SFT trainer: a Qwen2.5-VL-3B-size model built from its config with random weights (no
hub), video rows at the Cosmos-Reason settings, FSDP2 over the GPUs present (or CPU processes).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/mfu.py [--size 3b|tiny] [--nproc N] [--steps 10] [--warmup 3]
                                                    [--batch-per-rank 4] [--packing | --no-packing] [--workdir DIR]
                                                    [--compile] [--fused-ce | --no-fused-ce] [--attn auto|sdpa|...]
                                                    [--lr 1e-5] [--video-format mp4|npz] [--reuse] [--prepare-only]
                                                    [--json FILE]

--workdir keeps the model and the data; with --reuse a model and data already there are taken as they are (one
3B build for several runs: scripts/gpu_check.sh), --prepare-only builds them and stops. --video-format npz writes
the clips as frames archives, read without PyAV. --json writes the medians, the settings and every train row.

What runs: `cosmos_train.train.sft` under torchrun with `train.param_dtype = "bfloat16"` (GPU; float32 on CPU),
`fsdp_reduce_dtype = "float32"`, float32 master weights, activation checkpointing per block, sequence packing,
on synthetic 224 px clips of 12 frames at 4 fps read at the Cosmos-Reason SFT vision settings (fps 4,
max_pixels 81920); the LM head fused with the loss (train.fused_linear_ce, --no-fused-ce: off), attention
policy.attn_implementation = --attn (auto: flash_attention_2 where flash-attn is installed), train.compile
with --compile. The trainer logs each step's model FLOPs (`cosmos_train.train.flops`: 6 x matmul
parameters per token + attention within each sample + vision patches) and, with the device's peak known
(GPU table, or COSMOS_PEAK_TFLOPS), MFU. Printed: the medians after the warm-up steps of tokens/s per device,
TFLOP/s per device, MFU and peak memory, with the machine and versions.

Anchors (issue 17): torchtitan reports 33-39% MFU for dense LLMs on H100; EasyR1's actor 16-23% for
Qwen2.5-VL-7B. `--size tiny` is the offline tiny model: a smoke run of the same path on a CPU.
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
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]

# Qwen2.5-VL-3B-Instruct's config.json (text and vision shapes).
QWEN25_VL_3B = {
    "text": {
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "num_hidden_layers": 36,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
    },
    "vision": {
        "depth": 32,
        "hidden_size": 1280,
        "intermediate_size": 3420,
        "num_heads": 16,
        "out_hidden_size": 2048,
        "fullatt_block_indexes": [7, 15, 23, 31],
        "window_size": 112,
    },
}


def three_b_config(tiny: Any) -> Any:
    """The tiny model's config (its token ids) with Qwen2.5-VL-3B's shapes."""
    d = tiny.to_dict()
    d["text_config"].update(QWEN25_VL_3B["text"])
    d["text_config"].pop("layer_types", None)  # derived from the layer count again
    d["vision_config"].update(QWEN25_VL_3B["vision"])
    d["tie_word_embeddings"] = True
    return type(tiny).from_dict(d)


def build_model(out: Path, size: str) -> Path:
    """The tiny offline model, or its folder with a 3B-size config and random bf16 weights in its place."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    from cosmos_train.models.tiny import make_tiny_model

    folder = make_tiny_model(out)
    if size == "tiny":
        return folder
    config = three_b_config(AutoConfig.from_pretrained(folder))
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    for f in folder.glob("model*.safetensors"):
        f.unlink()
    model.save_pretrained(folder)
    return folder


def prepare(work: Path, size: str, n_train: int, video_format: str = "mp4", reuse: bool = False) -> tuple[Path, Path]:
    """(model folder, synthetic dataset) under `work`: built, or with `reuse` taken as they are when a
    previous run left them complete (the model's config and weights, the dataset's info file)."""
    from cosmos_train.data.synthetic import make_synthetic_dataset

    model, data = work / "model", work / "data"
    if not (reuse and (model / "config.json").is_file() and any(model.glob("model*.safetensors"))):
        build_model(model, size)
    if not (reuse and (data / "dataset_info.json").is_file()):
        make_synthetic_dataset(
            data, n_train=n_train, n_val=4, n_test=4, size=224, n_frames=12, fps=4, video_format=video_format
        )
    return model, data


def write_config(
    path: Path,
    model: Path,
    data: Path,
    out: Path,
    *,
    nproc: int,
    batch_per_rank: int,
    steps: int,
    packing: bool,
    cuda: bool,
    compile: bool = False,
    fused_ce: bool = True,
    attn: str = "auto",
    lr: float = 1e-5,
    dtype: str = "auto",
    deterministic: bool = False,
) -> Path:
    """The SFT job's TOML; dtype "auto": bfloat16 compute on a GPU, float32 on a CPU."""
    param_dtype = ("bfloat16" if cuda else "float32") if dtype == "auto" else dtype
    lines = [
        "[train]",
        f'output_dir = "{out}"',
        f"max_num_steps = {steps}",
        "epoch = 1000",
        f"train_batch_per_replica = {batch_per_rank * nproc}",
        f"optm_lr = {lr!r}",
        "optm_warmup_steps = 1",
        f'param_dtype = "{param_dtype}"',
        f"deterministic = {str(deterministic).lower()}",
        'fsdp_reduce_dtype = "float32"',
        'master_dtype = "float32"',
        "seed = 0",
        f"sequence_packing = {str(packing).lower()}",
        f"compile = {str(compile).lower()}",
        f"fused_linear_ce = {str(fused_ce).lower()}",
        "[train.ckpt]",
        "enable_checkpoint = false",
        "export_safetensors = false",
        "[train.train_policy]",
        'type = "sft"',
        f"micro_batch = {batch_per_rank}",
        "dataloader_num_workers = 2",
        "[train.train_policy.dataset]",
        f'name = "{data}"',
        'split = "train"',
        "[train.train_policy.dataset.vision]",
        "fps = 4",
        "max_pixels = 81920",
        "[policy]",
        f'model_name_or_path = "{model}"',
        "model_max_length = 8192",
        "model_gradient_checkpointing = true",
        f'attn_implementation = "{attn}"',
        "[policy.parallelism]",
        f"dp_shard_size = {nproc}",
        "[logging]",
        "logger = []",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=["3b", "tiny"], default="3b")
    ap.add_argument("--nproc", type=int, default=None, help="Processes (default: the GPUs present, else 2).")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3, help="Steps left out of the medians.")
    ap.add_argument("--batch-per-rank", type=int, default=4)
    ap.add_argument("--packing", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--compile", action="store_true", help="train.compile: each block torch.compile'd.")
    ap.add_argument(
        "--fused-ce",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="train.fused_linear_ce: the LM head fused with the cross entropy.",
    )
    ap.add_argument(
        "--attn",
        default="auto",
        choices=["auto", "sdpa", "eager", "flash_attention_2", "flash_attention_3"],
        help="policy.attn_implementation.",
    )
    ap.add_argument("--lr", type=float, default=1e-5, help="train.optm_lr (constant after one warm-up step).")
    ap.add_argument("--dtype", choices=["auto", "float32", "bfloat16"], default="auto", help="train.param_dtype.")
    ap.add_argument("--deterministic", action="store_true", help="train.deterministic: deterministic kernels.")
    ap.add_argument("--video-format", choices=["mp4", "npz"], default="mp4", help="npz: frames archives, no PyAV.")
    ap.add_argument("--reuse", action="store_true", help="Take the model and data already in --workdir.")
    ap.add_argument("--prepare-only", action="store_true", help="Build the model and data in --workdir, then stop.")
    ap.add_argument("--run-name", default="run", help="The run's folder under the work folder.")
    ap.add_argument("--json", type=Path, default=None, help="Write the results and every train row here.")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cuda = torch.cuda.is_available()
    nproc = args.nproc or (torch.cuda.device_count() if cuda else 2)
    if (args.reuse or args.prepare_only) and args.workdir is None:
        ap.error("--reuse and --prepare-only need --workdir")

    with tempfile.TemporaryDirectory(prefix="mfu-bench-") as tmp:
        work = args.workdir or Path(tmp)
        n_train = max(64, 4 * args.batch_per_rank * nproc)
        model, data = prepare(work, args.size, n_train, args.video_format, args.reuse)
        if args.prepare_only:
            print(f"model {model}, data {data}")
            return 0
        run = work / args.run_name
        cfg = write_config(
            run / "config.toml",
            model,
            data,
            work / "out",
            nproc=nproc,
            batch_per_rank=args.batch_per_rank,
            steps=args.warmup + args.steps,
            packing=args.packing,
            cuda=cuda,
            compile=args.compile,
            fused_ce=args.fused_ce,
            attn=args.attn,
            lr=args.lr,
            dtype=args.dtype,
            deterministic=args.deterministic,
        )
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
            "-m",
            "cosmos_train.train.sft",
            "--config",
            str(cfg),
        ]
        env = {**os.environ} if cuda else {**os.environ, "OMP_NUM_THREADS": "1"}
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            print(proc.stdout[-4000:], proc.stderr[-4000:], sep="\n")
            return proc.returncode
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
        all_train = [r for r in rows if r.get("kind") == "train"]
        train = all_train[args.warmup :]

    def median(key: str) -> float | None:
        values = [r[key] for r in train if key in r]
        return statistics.median(values) if values else None

    device = torch.cuda.get_device_name(0) if cuda else f"{platform.processor() or platform.machine()} CPU"
    mfu = median("mfu")
    print("| model | devices | tokens/s per device | TFLOP/s per device | MFU | peak memory GB |")
    print("|---|---|---:|---:|---:|---:|")
    print(
        f"| Qwen2.5-VL-{args.size} | {nproc} x {device} | {median('tokens_per_s') / nproc:.0f} | "
        f"{median('tflops_per_device'):.3g} | {'%.1f%%' % (100 * mfu) if mfu is not None else 'n/a (peak unknown)'} "
        f"| {median('peak_mem_gb'):.2f} |"
    )
    import transformers

    if args.json is not None:
        result = {
            "size": args.size,
            "nproc": nproc,
            "device": device,
            "settings": {
                k: getattr(args, k)
                for k in ("steps", "warmup", "batch_per_rank", "packing", "compile", "fused_ce", "attn", "lr", "dtype")
            },
            "medians": {k: median(k) for k in ("tokens_per_s", "tflops_per_device", "mfu", "peak_mem_gb", "step_time")},
            "tokens_per_s_per_device": median("tokens_per_s") / nproc,
            "rows": all_train,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "loadavg": os.getloadavg(),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(
        f"{len(train)} steps after {args.warmup} warm-up; packing {args.packing}; compile {args.compile}; fused "
        f"LM head + CE {args.fused_ce}; attention {args.attn}; batch {args.batch_per_rank} "
        f"per rank; torch {torch.__version__}, transformers {transformers.__version__}, python "
        f"{platform.python_version()}; loadavg {os.getloadavg()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
