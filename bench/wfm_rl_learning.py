"""Does world-model RL learn on CPU? Flow-GRPO and DDRL on the tiny Cosmos-Predict2.5-layout model, 3 seeds each.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/wfm_rl_learning.py [--iters 40] [--seeds 0 1 2] [--nproc 1]
                                                                [--algorithms flow_grpo ddrl] [--workdir DIR]
                                                                [--set model.rl.data_beta=0.003] [--video2world]

Each run is the real trainer (`python -m cosmos_train.launch ... -m cosmos_train.wfm.trainer`, what the wfm_rl flow
launches) on configs/tiny-wfm-flow-grpo.toml / tiny-wfm-ddrl.toml with the seed set in trainer.seed: the tiny
model (`make-tiny-wfm`, the same weights every run), the synthetic dataset (`make-synthetic-wfm-data`: DDRL's data
term and both algorithms' held-out videos), the brightness reward (the reward service's handler, run in the
trainer). What is read from each run's metrics.jsonl:
- the evaluation reward before training and after (ODE samples of the same prompts from the same noise), and the
  mean training reward of the first and last 5 iterations;
- the held-out diffusion (flow-matching) loss before and after: DDRL's data term should keep it near where it
  was while Flow-GRPO, which only sees its reward, lets it drift;
- the follow slope of the evaluation videos before and after (`follow_slope`: does the brightness of the later
  frames follow the first frame's across videos).
Printed as a markdown table (mean +- std over seeds) with the machine, versions, load and wall time.

--video2world: every run continues the first latent frame of its dataset clip (model.rl.min/max_num_conditional_frames
= 1, wfm/conditioning.py) and the reward is first_frame_brightness (the later frames keep the given first frame's
brightness: a dark clip must stay dark, a bright one bright, so no single brightness scores well on every clip);
evaluation conditions the same held-out clips' first frames. Also printed per seed (before -> after).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# --video2world: one conditioning latent frame per rollout, scored on keeping its brightness
VIDEO2WORLD = [
    "model.rl.min_num_conditional_frames=1",
    "model.rl.max_num_conditional_frames=1",
    "reward.fns={first_frame_brightness=1.0}",
]
RECIPES = {"flow_grpo": ROOT / "configs" / "tiny-wfm-flow-grpo.toml", "ddrl": ROOT / "configs" / "tiny-wfm-ddrl.toml"}


def run_one(
    algorithm: str, seed: int, iters: int, nproc: int, model: Path, data: Path, work: Path, extra: list[str]
) -> dict:
    from cosmos_train.metrics import read_metrics
    from cosmos_train.wfm.config import load_wfm_config

    run = work / f"{algorithm}-seed{seed}"
    run.mkdir(parents=True, exist_ok=True)
    overrides = [
        f"model.model_name_or_path='{model}'",
        f"trainer.seed={seed}",
        f"trainer.max_iter={iters}",
        f"job.output_dir='{work}'",
        f"checkpoint.save_iter={iters}",
        "checkpoint.export_diffusers=false",
        "dataloader_train.type='local'",
        f"dataloader_train.video_dataloader.dataset_dir='{data}'",
        *extra,
    ]
    cfg = load_wfm_config(RECIPES[algorithm], overrides, env={})
    cfg.write(run / "config.toml")
    t0 = time.time()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cosmos_train.launch",
            "--standalone",
            f"--nproc_per_node={nproc}",
            "-m",
            "cosmos_train.wfm.trainer",
            "--config",
            str(run / "config.toml"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.time() - t0
    if done.returncode:
        raise SystemExit(f"{algorithm} seed {seed} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    rows = read_metrics(run)
    val = [r for r in rows if r["kind"] == "val"]
    train = [r for r in rows if r["kind"] == "train"]
    samples = sorted((run / "samples").glob("iter_*.npy"), key=lambda f: int(f.stem.split("_")[1]))
    return {
        "follow_before": follow_slope(samples[0]),
        "follow_after": follow_slope(samples[-1]),
        "algorithm": algorithm,
        "seed": seed,
        "wall_s": wall,
        "eval_before": val[0]["reward_mean"],
        "eval_after": val[-1]["reward_mean"],
        "train_first5": statistics.mean(r["reward_mean"] for r in train[:5]),
        "train_last5": statistics.mean(r["reward_mean"] for r in train[-5:]),
        "heldout_before": val[0].get("heldout_diffusion_loss"),
        "heldout_after": val[-1].get("heldout_diffusion_loss"),
    }


def follow_slope(samples: Path) -> float:
    """How the evaluation videos' later frames follow their first frame: the least-squares slope of the later
    frames' mean brightness on the first frame's, across the evaluation videos (1: each continues its first frame's
    brightness; 0: the same brightness whatever the first frame). In video2world the first frame is the given one."""
    import numpy as np

    videos = np.load(samples).astype(np.float64)  # [N, 3, T, H, W]
    first, later = videos[:, :, 0].mean(axis=(1, 2, 3)), videos[:, :, 1:].mean(axis=(1, 2, 3, 4))
    spread = first - first.mean()
    return float((spread * (later - later.mean())).sum() / max((spread**2).sum(), 1e-9))


def _ms(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--algorithms", nargs="+", default=["flow_grpo", "ddrl"], choices=sorted(RECIPES))
    ap.add_argument("--workdir", type=Path, default=Path("outputs/bench-wfm"))
    ap.add_argument(
        "--video2world",
        action="store_true",
        help="Condition on each clip's first latent frame; reward: the later frames keep its brightness.",
    )
    ap.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="A config override for every run (e.g. model.rl.data_beta=0.003).",
    )
    args = ap.parse_args()
    import torch

    from cosmos_train.wfm.synthetic_data import make_synthetic_wfm_data
    from cosmos_train.wfm.tiny_model import make_tiny_wfm

    work = args.workdir.resolve()
    if args.video2world:
        args.overrides = [*VIDEO2WORLD, *args.overrides]
    model = make_tiny_wfm(work / "tiny-wfm")
    data = make_synthetic_wfm_data(work / "wfm-data")
    load0 = os.getloadavg()
    t0 = time.time()
    results = [
        run_one(a, s, args.iters, args.nproc, model, data, work, args.overrides)
        for a in args.algorithms
        for s in args.seeds
    ]
    print(json.dumps(results, indent=1), file=sys.stderr)
    print(
        f"machine: {platform.node()} {os.cpu_count()} cores, torch {torch.__version__}, python "
        f"{platform.python_version()}; load {load0} -> {os.getloadavg()}; {args.nproc} process(es) per run, "
        f"{args.iters} iterations, seeds {args.seeds}, overrides {args.overrides}; total {time.time() - t0:.0f} s"
    )
    print(
        "\n| algorithm | eval reward before | eval reward after | train reward first 5 | last 5 | "
        "held-out diffusion loss before | after | follow slope before | after | wall s / run |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for a in args.algorithms:
        rs = [r for r in results if r["algorithm"] == a]
        cols = [
            _ms([r[k] for r in rs])
            for k in (
                "eval_before",
                "eval_after",
                "train_first5",
                "train_last5",
                "heldout_before",
                "heldout_after",
                "follow_before",
                "follow_after",
                "wall_s",
            )
        ]
        print(f"| {a} | " + " | ".join(cols) + " |")
    print("\nper seed, eval reward before -> after:")
    for r in results:
        print(
            f"- {r['algorithm']} seed {r['seed']}: {r['eval_before']:.3f} -> {r['eval_after']:.3f} "
            f"(follow slope {r['follow_before']:.3f} -> {r['follow_after']:.3f})"
        )


if __name__ == "__main__":
    main()
