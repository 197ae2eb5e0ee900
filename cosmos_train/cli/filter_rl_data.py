"""`cosmos-train filter-rl-data`: the model sampled k times per GRPO prompt, the prompts whose pass rate lies in a
band kept (flows/filter_rl_data.py); every input named by its option before Prefect starts.

    cosmos-train filter-rl-data --config configs/tiny-grpo.toml [--model RUN/safetensors/final] [--samples 8] [--out F]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import cosmos_train.cli.prefect_server as prefect_server
from cosmos_train.cli.args import Subparsers, add_config_args


def _filter_rl_data(args: argparse.Namespace) -> int:
    """Sample the model on the GRPO prompts and keep those it sometimes gets right (flows/filter_rl_data.py)."""
    from cosmos_train.preflight import check_job, check_model_family  # why: HEAVY
    from cosmos_train.train.rl_filter import FilterSettings, check_model_path  # why: HEAVY

    # every input error, named by its option, before Prefect starts (the flow checks the same for a deployment)
    cfg = check_job(args.config, args.overrides, args.dataset_script, read_rows=False, policy_type="grpo")
    settings = FilterSettings(samples=args.samples, min_pass=args.min_pass, max_pass=args.max_pass)
    settings.check(Path(args.out) if args.out else None)
    if args.model:
        check_model_path(args.model)
        check_model_family(args.model, vllm=cfg.rollout.backend == "vllm", key="--model")
    from flows.filter_rl_data import FilterRLDataParams, filter_rl_data

    prefect_server.prepare_prefect()

    result = filter_rl_data(
        FilterRLDataParams(
            config=str(args.config),
            overrides=args.overrides,
            model=args.model,
            samples=args.samples,
            min_pass=args.min_pass,
            max_pass=args.max_pass,
            out=args.out,
            threshold=args.threshold,
            seed=args.seed,
            dataset_script=args.dataset_script,
        )
    )
    print(result["dataset"])
    print(f"kept {result['kept']} prompts, dropped {result['dropped']}; report {result['report']}", file=sys.stderr)
    return 0


def register(sub: Subparsers) -> None:
    flt = sub.add_parser(
        "filter-rl-data",
        help="Sample the model k times per GRPO prompt; keep the prompts whose pass rate lies in a band.",
    )
    add_config_args(flt)
    flt.add_argument("--model", default=None, help="The model to sample (default: policy.model_name_or_path).")
    flt.add_argument("--samples", type=int, default=8, help="Completions per prompt (default 8).")
    flt.add_argument("--min-pass", type=float, default=0.0, help="Keep pass rate > this (default 0).")
    flt.add_argument("--max-pass", type=float, default=1.0, help="Keep pass rate < this (default 1).")
    flt.add_argument(
        "--threshold",
        type=float,
        default=1.0,
        help="Without an accuracy reward: a completion passes when its reward >= this (default 1).",
    )
    flt.add_argument("--seed", type=int, default=None, help="Sampling seed (default: train.seed).")
    flt.add_argument("--out", default=None, help="Filtered dataset, .json or .jsonl (default: RUN/filtered.json).")
    flt.add_argument("--dataset-script", default=None, help="Optional dataset script (rows, REWARD_FUNCTIONS).")
    flt.set_defaults(func=_filter_rl_data)
