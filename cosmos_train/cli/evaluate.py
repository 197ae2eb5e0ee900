"""`cosmos-train eval`: checkpoints evaluated on video benchmarks and compared (the evaluate flow).

    cosmos-train eval --config configs/eval-tiny.toml --model outputs/tiny-model --model RUN/safetensors/final

The config, the models and the benchmarks are checked (`preflight.check_eval`) before Prefect starts.
"""

from __future__ import annotations

import argparse

import cosmos_train.cli.prefect_server as prefect_server
from cosmos_train.cli.args import Subparsers, add_config_args


def _eval(args: argparse.Namespace) -> int:
    from cosmos_train.preflight import check_eval  # why: HEAVY

    check_eval(args.config, args.overrides, args.models)
    from flows.evaluate import EvaluateParams, evaluate

    prefect_server.prepare_prefect()

    out = evaluate(EvaluateParams(config=str(args.config), models=args.models, overrides=args.overrides))
    for r in out["results"]:
        print(r["label"], r["accuracy"], r["results_json"])
    return 0


def register(sub: Subparsers) -> None:
    ev = sub.add_parser("eval", help="Evaluate checkpoints on video benchmarks and compare them.")
    add_config_args(ev)
    ev.add_argument(
        "--model",
        dest="models",
        action="append",
        default=[],
        help="Checkpoint folder or hub id (repeatable: base, SFT, RL ...).",
    )
    ev.set_defaults(func=_eval)
