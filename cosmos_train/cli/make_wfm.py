"""`cosmos-train make-tiny-wfm | make-synthetic-wfm-data`: an offline tiny world model (Cosmos-Predict2.5 layout)
and a small world-model dataset, the inputs of the tiny world-model recipes and the tests.

    cosmos-train make-tiny-wfm outputs/tiny-wfm
    cosmos-train make-synthetic-wfm-data outputs/wfm-data [--text-embeddings-from outputs/tiny-wfm]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cosmos_train.cli.args import Subparsers


def _make_tiny_wfm(args: argparse.Namespace) -> int:
    from cosmos_train.wfm.tiny_model import make_tiny_wfm  # why: HEAVY

    print(make_tiny_wfm(args.out, seed=args.seed))
    return 0


def _make_synthetic_wfm(args: argparse.Namespace) -> int:
    from cosmos_train.wfm.synthetic_data import make_synthetic_wfm_data, write_text_embeddings  # why: HEAVY

    out = make_synthetic_wfm_data(
        args.out, n=args.n, num_frames=args.num_frames, height=args.size, width=args.size, seed=args.seed
    )
    if args.text_embeddings_from:  # precomputed embeddings, as the seed's offline_text_embedding datasets have
        from cosmos_train.wfm.model import encode_prompts, load_wfm  # why: HEAVY

        parts = load_wfm(args.text_embeddings_from)
        write_text_embeddings(out, lambda prompts: encode_prompts(parts, prompts, args.max_prompt_length))
    print(out)
    return 0


def register(sub: Subparsers) -> None:
    twfm = sub.add_parser(
        "make-tiny-wfm",
        help="Build an offline tiny Cosmos-Predict2.5-layout diffusers folder (DiT, Wan VAE, text encoder).",
    )
    twfm.add_argument("out", type=Path)
    twfm.add_argument("--seed", type=int, default=0)
    twfm.set_defaults(func=_make_tiny_wfm)

    swfm = sub.add_parser("make-synthetic-wfm-data", help="Write a small world-model dataset (videos/, metas/).")
    swfm.add_argument("out", type=Path)
    swfm.add_argument("--n", type=int, default=32, help="Videos.")
    swfm.add_argument("--num-frames", type=int, default=9, help="Frames per video.")
    swfm.add_argument("--size", type=int, default=32, help="Width and height in pixels.")
    swfm.add_argument("--seed", type=int, default=0)
    swfm.add_argument(
        "--text-embeddings-from",
        default=None,
        metavar="WFM_DIR",
        help="Also write text_embedding/*.pickle with this model folder's text encoder.",
    )
    swfm.add_argument("--max-prompt-length", type=int, default=128)
    swfm.set_defaults(func=_make_synthetic_wfm)
