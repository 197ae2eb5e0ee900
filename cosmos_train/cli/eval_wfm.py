"""`cosmos-train eval-wfm`: world models compared on held-out prompts, the same noise for each
(flows/evaluate_wfm.py).

    cosmos-train eval-wfm --config configs/tiny-wfm-flow-grpo.toml --model outputs/tiny-wfm --model RUN/diffusers/final
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cosmos_train.cli.prefect_server as prefect_server
from cosmos_train.cli.args import Subparsers, add_config_args


def _eval_wfm(args: argparse.Namespace) -> int:
    """World models compared on held-out prompts (flows/evaluate_wfm.py); every input checked before Prefect starts."""
    from flows.evaluate_wfm import checked_params, evaluate_wfm, table_text

    params = checked_params(args.config, args.overrides, args.models, args.prompts, args.seed, args.out)
    prefect_server.prepare_prefect()

    print(table_text(evaluate_wfm(params)))
    return 0


def register(sub: Subparsers) -> None:
    evw = sub.add_parser("eval-wfm", help="Compare world models on held-out prompts, the same noise for each.")
    add_config_args(evw)
    evw.add_argument("--model", dest="models", action="append", default=[], help="Folder or s3:// export (repeatable).")
    evw.add_argument("--prompts", type=int, default=None, help="Held-out prompts (default: evaluation.num_prompts).")
    evw.add_argument("--seed", type=int, default=None, help="Seed of the per-prompt noise (default: evaluation.seed).")
    evw.add_argument("--out", type=Path, default=None, help="Results folder (default: <job.output_dir>/eval-wfm/...).")
    evw.set_defaults(func=_eval_wfm)
