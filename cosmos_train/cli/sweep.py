"""`cosmos-train sweep`: a grid or random search over config keys, each trial an sft / grpo / wfm-rl run, then a
comparison (flows/sweep.py; a rerun skips the finished trials); every spec checked before Prefect starts.

    cosmos-train sweep --config configs/tiny-sft.toml --grid train.optm_lr=1e-5,3e-5 [--random 'k=loguniform(a,b)']
"""

from __future__ import annotations

import argparse

import cosmos_train.cli.prefect_server as prefect_server
from cosmos_train.cli.args import Subparsers, add_config_args


def _sweep(args: argparse.Namespace) -> int:
    from cosmos_train.errors import ConfigError
    from cosmos_train.sweep import plan_sweep  # why: HEAVY

    settings = {k: getattr(args, k) for k in ("grid", "random", "trials", "seed", "kind", "name", "output_dir")}
    settings.update(metric=args.metric, mode=args.mode, dataset_script=args.dataset_script)
    plan = plan_sweep(args.config, args.overrides, **settings)  # every bad spec before Prefect starts
    if not 1 <= args.parallel <= 64 or not 0 <= args.stop_after <= 1 or (args.stop_margin or 0) < 0:
        raise ConfigError(
            [
                f"--parallel {args.parallel} / --stop-after {args.stop_after} / --stop-margin {args.stop_margin}: "
                "parallel from 1 to 64, stop-after from 0 to 1, stop-margin >= 0"
            ],
            what="sweep spec",
        )
    from flows.sweep import SweepParams, sweep

    prefect_server.prepare_prefect()

    summary = sweep(
        SweepParams(
            config=str(args.config),
            overrides=args.overrides,
            parallel=args.parallel,
            deployment=args.deployment,
            stop_margin=args.stop_margin,
            stop_after=args.stop_after,
            **settings,
        )
    )
    best = summary["best"]
    print(
        f"{plan.folder}: best {best['name']} ({best['metric']} {best['value']}), {best['export']}"
        if best
        else plan.folder
    )
    return 0


def register(sub: Subparsers) -> None:
    sw = sub.add_parser(
        "sweep",
        help="A grid or random search over config keys: each trial an sft / grpo / wfm-rl run, then a comparison "
        "(a rerun skips the finished trials).",
    )
    add_config_args(sw)
    sw.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2", help="A grid axis (repeatable).")
    sw.add_argument(
        "--random",
        action="append",
        default=[],
        metavar="KEY=DIST",
        help="A random axis: KEY=loguniform(a,b) | uniform(a,b) | choice(a,b,c) (repeatable).",
    )
    sw.add_argument("--trials", type=int, default=8, help="Random draws (crossed with the grid; default 8).")
    sw.add_argument("--seed", type=int, default=0, help="Seed of the random draws (default 0).")
    sw.add_argument(
        "--kind", choices=["sft", "grpo", "wfm-rl"], default=None, help="The trials' flow (default: the config's)."
    )
    sw.add_argument("--parallel", type=int, default=2, help="Trials at once (default 2).")
    sw.add_argument(
        "--metric", default=None, help="What picks the best: val_loss, val_accuracy, loss ... (default: by kind)."
    )
    sw.add_argument(
        "--mode", choices=["max", "min"], default=None, help="Best is the max or the min (default: min for a loss)."
    )
    sw.add_argument("--name", default=None, help="The sweep folder's name (default: the config file's stem).")
    sw.add_argument("--output-dir", default=None, help="Where the sweep folder goes (default: <output_dir>/sweeps).")
    sw.add_argument("--dataset-script", default=None, help="Dataset script of sft / grpo trials (see examples/).")
    sw.add_argument("--deployment", default=None, help="Run each trial as a run of this deployment, e.g. sft/sft.")
    sw.add_argument(
        "--stop-margin", type=float, default=None, help="Early stop: stop a trial trailing the best by more than this."
    )
    sw.add_argument(
        "--stop-after", type=float, default=0.3, help="Early stop only after this fraction of a trial's steps."
    )
    sw.set_defaults(func=_sweep)
