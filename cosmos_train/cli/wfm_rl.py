"""`cosmos-train wfm-rl`: world-model RL (Flow-GRPO / DDRL) of a Cosmos-Predict DiT through the wfm_rl flow, the
config checked (and the model folder found) before Prefect starts.

    cosmos-train wfm-rl --config configs/tiny-wfm-flow-grpo.toml [--set k=v ...]    # or cosmos-train --config FILE
"""

from __future__ import annotations

import argparse
import sys

import cosmos_train.cli.prefect_server as prefect_server
from cosmos_train.cli.args import Subparsers, add_config_args


def _wfm_rl(args: argparse.Namespace) -> int:
    """World-model RL: the config checked (and the model folder found) before Prefect starts."""
    from cosmos_train.wfm.config import load_wfm_config  # why: HEAVY

    load_wfm_config(args.config, args.overrides)
    if args.wfm_mode:
        print(
            f"note: --wfm-mode {args.wfm_mode}: cosmos-rl's entry script is not needed here (ignored)", file=sys.stderr
        )
    from flows.terminal import finished
    from flows.wfm_rl import WfmRLParams, wfm_rl

    prefect_server.prepare_prefect()
    result = wfm_rl(WfmRLParams(config=str(args.config), overrides=args.overrides, run_dir=args.run_dir))
    return finished(result["run_dir"], {"": result.get("health")})


def register(sub: Subparsers) -> None:
    wfm = sub.add_parser(
        "wfm-rl", help="World-model RL (Flow-GRPO / DDRL) of a Cosmos-Predict DiT through the wfm_rl flow."
    )
    add_config_args(wfm)
    wfm.add_argument("--run-dir", default=None, help="Continue in this run folder (default: a new one).")
    wfm.add_argument("--wfm-mode", default=None, help="cosmos-rl's entry script argument (accepted, not needed).")
    wfm.set_defaults(func=_wfm_rl)
