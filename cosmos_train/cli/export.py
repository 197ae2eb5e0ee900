"""`cosmos-train export`: a saved checkpoint converted to the folder its model loads from (Hugging Face
safetensors, or diffusers for a world model), in this process.

    cosmos-train export RUN/checkpoints/step_N OUT
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cosmos_train.cli.args import Subparsers


def _export(args: argparse.Namespace) -> int:
    from cosmos_train.export import export_checkpoint  # why: HEAVY

    print(export_checkpoint(args.checkpoint, args.out))
    return 0


def register(sub: Subparsers) -> None:
    exp = sub.add_parser("export", help="Convert a saved checkpoint to Hugging Face safetensors.")
    exp.add_argument("checkpoint", type=Path, help="RUN/checkpoints/step_N")
    exp.add_argument("out", type=Path)
    exp.set_defaults(func=_export)
