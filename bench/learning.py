"""The learning benchmark's command: GRPO on synthetic video tasks it never saw, per task x recipe x seed
(flows/learning_benchmark.py does the work; this parses the command line and writes down the machine).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/learning.py --quick                    # 2 tasks x 2 seeds (the check)
    HF_HUB_OFFLINE=1 .venv/bin/python bench/learning.py --seeds 0 1 2              # every family x 3 seeds
    HF_HUB_OFFLINE=1 .venv/bin/python bench/learning.py --tasks speed --seeds 0 \
        --recipe default --recipe 'kl=train.train_policy.kl_beta=0.01,train.optm_decay_type="cosine"'

A `--recipe NAME=K=V,K=V` is overrides of configs/tiny-grpo.toml (`--recipe default`: none); several `--recipe`
compare recipes in one table. Runs under <output-dir> are kept and skipped when rerun with the same settings: run
it in parts (`--tasks a b`, then `--tasks c d`) into one folder, then once over everything to tabulate.
Prints the table (cosmos_train/sweep/learning.py) with the machine, versions, load and wall time, and writes
<output-dir>/table.md and learning.json.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

log = logging.getLogger("bench.learning")


def parse_recipe(text: str) -> tuple[str, list[str]]:
    """`name=k=v,k=v` -> (name, ["k=v", "k=v"]); `name`: no overrides. Commas inside quotes or brackets belong to
    a value (the sweep's `split_values`); a bad override is named when the flow loads the recipe."""
    from cosmos_train.sweep.spec import split_values

    name, _, rest = text.partition("=")
    return name, split_values(rest) if rest else []


def main() -> int:
    from cosmos_train.data.synthetic_families import FAMILIES

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="2 tasks x 2 seeds (the check; --tasks / --seeds override)")
    p.add_argument("--tasks", nargs="+", choices=list(FAMILIES), default=None, help="default: every family")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="default: 0 1 2")
    p.add_argument("--recipe", action="append", default=None, metavar="NAME=K=V,...", help="default: 'default'")
    p.add_argument("--baseline", default=None, help="the recipe the remedies table compares with (default: default)")
    p.add_argument("--format-sft-steps", type=int, default=None)
    p.add_argument("--grpo-steps", type=int, default=None)
    p.add_argument(
        "--own-sft-steps", type=int, default=None, help="also run each recipe from an SFT on the task's own answers"
    )
    p.add_argument("--ceiling-sft-steps", type=int, default=None, help="SFT on each task itself (0: not measured)")
    p.add_argument("--n-test", type=int, default=None, help="held-out clips per task (default 200)")
    p.add_argument("--output-dir", default="outputs/learning-benchmark")
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    from flows.learning_benchmark import QUICK_SEEDS, QUICK_TASKS, LearningBenchmarkParams, learning_benchmark
    from flows.terminal import prepare_prefect

    settings: dict = {"output_dir": args.output_dir}
    if args.quick:
        settings.update(tasks=QUICK_TASKS, seeds=QUICK_SEEDS)
    if args.tasks:
        settings["tasks"] = args.tasks
    if args.seeds is not None:
        settings["seeds"] = args.seeds
    if args.recipe:
        settings["recipes"] = dict(parse_recipe(r) for r in args.recipe)
    for key in ("baseline", "format_sft_steps", "own_sft_steps", "grpo_steps", "ceiling_sft_steps", "n_test"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    params = LearningBenchmarkParams(**settings)
    prepare_prefect()
    t0, load0 = time.time(), os.getloadavg()
    result = learning_benchmark(params)
    import torch
    import transformers

    log.info(
        "machine: %s, %d cores, %s; torch %s, transformers %s; load average %.2f at the start, %.2f at the end; "
        "wall %.0f s; command: %s",
        platform.node(), os.cpu_count(), platform.platform(), torch.__version__, transformers.__version__,
        load0[0], os.getloadavg()[0], time.time() - t0, " ".join(sys.argv),
    )  # fmt: skip
    log.info("table: %s", result["table"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
