"""`cosmos-train demo`: a tiny model and synthetic videos, then the base score, SFT, GRPO, each scored
(flows/demo.py), ending with the table and GRPO's run-health verdicts.

    cosmos-train demo
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cosmos_train.cli.prefect_server as prefect_server
from cosmos_train.cli.args import Subparsers


def _demo(args: argparse.Namespace) -> int:
    from flows.demo import demo
    from flows.terminal import finished

    prefect_server.prepare_prefect()
    summary = demo(output_dir=str(args.output_dir))
    return finished(str(args.output_dir), summary.get("health") or {})  # the table, then GRPO's verdicts


def register(sub: Subparsers) -> None:
    demo = sub.add_parser("demo", help="Tiny model + synthetic videos: base score, SFT, GRPO, each scored.")
    demo.add_argument("--output-dir", type=Path, default=Path("outputs/demo"))
    demo.set_defaults(func=_demo)
