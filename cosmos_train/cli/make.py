"""`cosmos-train make-tiny-model | make-synthetic-data`: an offline tiny model folder and a synthetic video dataset,
the inputs of the tiny recipes and the tests.

    cosmos-train make-tiny-model outputs/tiny-model [--family qwen3_vl|qwen2|qwen3|llama|...]
    cosmos-train make-synthetic-data outputs/synthetic --n-train 400
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cosmos_train.cli.args import Subparsers
from cosmos_train.data.synthetic import build_arg_parser, run_from_args


def _make_tiny_model(args: argparse.Namespace) -> int:
    from cosmos_train.models.tiny import make_tiny_model  # why: HEAVY

    out = make_tiny_model(args.out, size=args.size, seed=args.seed, family=args.family)
    print(out)
    return 0


def _make_synthetic(args: argparse.Namespace) -> int:
    print(run_from_args(args))
    return 0


def register(sub: Subparsers) -> None:
    tiny = sub.add_parser("make-tiny-model", help="Build an offline tiny model folder (Qwen2.5-VL by default).")
    tiny.add_argument("out", type=Path)
    tiny.add_argument(
        "--family",
        default="qwen2_5_vl",
        choices=["qwen2_5_vl", "qwen3_vl", "cosmos3_edge", "qwen2", "qwen3", "llama", "mistral"],
        help="Architecture: Qwen2.5-VL (Cosmos-Reason1), Qwen3-VL (Cosmos-Reason2), Cosmos3-Edge, or a "
        "text-only language model: qwen2 (Qwen2.5), qwen3 (dense), llama, mistral.",
    )
    tiny.add_argument("--size", default="tiny", choices=["tiny", "small"])
    tiny.add_argument("--seed", type=int, default=0)
    tiny.set_defaults(func=_make_tiny_model)

    syn = sub.add_parser("make-synthetic-data", help="Generate synthetic physical-reasoning videos + rows.")
    build_arg_parser(syn)  # the options of `python -m cosmos_train.data.synthetic`
    syn.set_defaults(func=_make_synthetic)
