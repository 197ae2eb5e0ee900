"""`cosmos-train reward-service`: rewards served over HTTP (the reference service's protocol), the token from
REWARD_SERVICE_TOKEN refused or taken before anything loads.

    REWARD_SERVICE_TOKEN=... cosmos-train reward-service [--config rewards.toml] [--host 127.0.0.1] [--port 8080]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cosmos_train.cli.args import Subparsers
from cosmos_train.process_tree import watch_parent
from cosmos_train.reward_service.config import load_service_config


def _reward_service(args: argparse.Namespace) -> int:
    from cosmos_train.reward_service.server import resolve_token, serve  # why: HEAVY

    resolve_token(args.host, args.insecure_no_token)  # refuse before loading anything
    if args.exit_with_parent:
        watch_parent(grace_s=10)
    serve(load_service_config(args.config), host=args.host, port=args.port, insecure_no_token=args.insecure_no_token)
    return 0


def register(sub: Subparsers) -> None:
    rs = sub.add_parser(
        "reward-service",
        help="Serve rewards over HTTP (the reference service's protocol, token from REWARD_SERVICE_TOKEN).",
    )
    rs.add_argument("--config", type=Path, default=None, help="rewards.toml (queue, limits, TTL, handlers).")
    rs.add_argument("--host", default="127.0.0.1", help="Address to listen on (default: loopback only).")
    rs.add_argument("--port", type=int, default=8080)
    rs.add_argument(
        "--insecure-no-token",
        action="store_true",
        help="Run without a token (allowed on a loopback host only, for local testing).",
    )
    rs.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="Stop when the process that started this one dies (a service a flow manages).",
    )
    rs.set_defaults(func=_reward_service)
