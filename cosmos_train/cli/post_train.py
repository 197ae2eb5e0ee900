"""`cosmos-train post-train`: the post-training pipeline (prepare-data, SFT, evaluate, GRPO, evaluate, upload; a
rerun skips the stages that finished), its file checked before Prefect starts.

    cosmos-train post-train --config configs/tiny-post-train.toml [--set sft.train.max_num_steps=40]
"""

from __future__ import annotations

import argparse

import cosmos_train.cli.prefect_server as prefect_server
from cosmos_train.cli.args import Subparsers, add_config_args


def _post_train(args: argparse.Namespace) -> int:
    from cosmos_train.pipeline import load_pipeline_config  # why: HEAVY

    load_pipeline_config(args.config, args.overrides)  # every input error before Prefect starts
    from flows.post_train import PostTrainParams, post_train
    from flows.terminal import finished

    prefect_server.prepare_prefect()
    summary = post_train(PostTrainParams(config=str(args.config), overrides=args.overrides))
    return finished(summary["folder"], summary.get("health") or {})  # each RL stage's verdicts


def register(sub: Subparsers) -> None:
    pt = sub.add_parser(
        "post-train",
        help="The pipeline: prepare-data, SFT, evaluate, GRPO, evaluate, upload "
        "(a rerun skips the stages that finished).",
    )
    add_config_args(pt)
    pt.set_defaults(func=_post_train)
