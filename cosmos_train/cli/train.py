"""`cosmos-train sft | grpo`: a training run through its Prefect flow, every input checked before Prefect starts.

    cosmos-train sft --config configs/tiny-sft.toml [--set k=v ...] [my_dataset.py]
    cosmos-train grpo --config configs/tiny-grpo.toml [--set k=v ...] [--dataset-script my_dataset.py] [--run-dir RUN]
    cosmos-train --config configs/tiny-grpo.toml [my_rewards.py]    # cosmos-rl's form: sft or grpo by the config

A training command ends with its run folder, then GRPO's run-health verdicts (flows/terminal.py `finished`).
"""

from __future__ import annotations

import argparse

import cosmos_train.cli.prefect_server as prefect_server
from cosmos_train.cli.args import Subparsers, add_config_args


def _train(args: argparse.Namespace) -> int:
    """`sft` and `grpo`: the same inputs and checks, a different flow."""
    from cosmos_train.preflight import check_job  # why: HEAVY

    script = args.dataset_script or args.script
    check_job(args.config, args.overrides, script, args.run_dir, policy_type=args.command)
    if args.command == "grpo":
        from flows.grpo import GRPOParams, grpo

        prefect_server.prepare_prefect()
        result = grpo(
            GRPOParams(config=str(args.config), overrides=args.overrides, dataset_script=script, run_dir=args.run_dir)
        )
    else:
        from flows.sft import SFTParams, sft

        prefect_server.prepare_prefect()
        result = sft(
            SFTParams(config=str(args.config), overrides=args.overrides, dataset_script=script, run_dir=args.run_dir)
        )
    from flows.terminal import finished

    return finished(result["run_dir"], {"": result.get("health")})  # GRPO's run-health verdicts last


def register(sub: Subparsers) -> None:
    for name, what in (("sft", "SFT"), ("grpo", "GRPO")):
        train = sub.add_parser(name, help=f"Run {what} through the Prefect flow (local ephemeral API by default).")
        add_config_args(train)
        script = train.add_mutually_exclusive_group()
        script.add_argument("script", nargs="?", default=None, help="Optional dataset script (see examples/).")
        script.add_argument("--dataset-script", default=None, help="The same, as an option.")
        train.add_argument("--run-dir", default=None, help="Continue in this run folder (default: a new one).")
        train.set_defaults(func=_train)
