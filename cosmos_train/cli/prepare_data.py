"""`cosmos-train prepare-data`: every row of a job's dataset validated; RUN/manifest.jsonl and a report written
(the prepare_data flow).

    cosmos-train prepare-data --config configs/tiny-sft.toml [my_dataset.py]
"""

from __future__ import annotations

import argparse

import cosmos_train.cli.prefect_server as prefect_server
from cosmos_train.cli.args import Subparsers, add_config_args


def _prepare_data(args: argparse.Namespace) -> int:
    from cosmos_train.preflight import check_job  # why: HEAVY

    check_job(args.config, args.overrides, args.script, args.run_dir)
    from flows.prepare_data import PrepareDataParams, prepare_data

    prefect_server.prepare_prefect()

    print(
        prepare_data(
            PrepareDataParams(
                config=str(args.config), overrides=args.overrides, dataset_script=args.script, run_dir=args.run_dir
            )
        )
    )
    return 0


def register(sub: Subparsers) -> None:
    prep = sub.add_parser("prepare-data", help="Validate every row; write RUN/manifest.jsonl and a report.")
    add_config_args(prep)
    prep.add_argument("script", nargs="?", default=None, help="Optional dataset script.")
    prep.add_argument("--run-dir", default=None, help="Write into this run folder (default: a new one).")
    prep.set_defaults(func=_prepare_data)
