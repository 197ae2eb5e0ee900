"""Start the reward service: `cosmos-train reward-service [--config rewards.toml] [--host H] [--port P]
[--insecure-no-token]`.

The token comes from REWARD_SERVICE_TOKEN and must be at least 16 characters, at least 8 of them different
(`auth.MIN_TOKEN_CHARS`, `auth.MIN_DISTINCT_TOKEN_CHARS`). Without one the service refuses
to start, unless --insecure-no-token is given and the host is a loopback address (nothing off this machine
can reach it). Slow and surplus clients are bounded by `http_limits` (rewards.toml's header_timeout_s,
body_timeout_s, max_connections).
"""

from __future__ import annotations

import copy
import ipaddress
import os
from collections.abc import Mapping
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from cosmos_train.errors import AuthError
from cosmos_train.reward_service.app import create_app
from cosmos_train.reward_service.auth import MAKE_TOKEN, MIN_DISTINCT_TOKEN_CHARS, MIN_TOKEN_CHARS, TOKEN_ENV
from cosmos_train.reward_service.config import ServiceConfig
from cosmos_train.reward_service.http_limits import uvicorn_options

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080
SERVICE_LOGGER = "cosmos_train.reward_service"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_token(host: str, insecure_no_token: bool, env: Mapping[str, str] = os.environ) -> str | None:
    """The token the service checks, or None when it may run without one; AuthError otherwise."""
    token = env.get(TOKEN_ENV, "").strip()
    if token and len(token) < MIN_TOKEN_CHARS:
        raise AuthError(
            f"reward service: {TOKEN_ENV} is {len(token)} characters; a token needs at least {MIN_TOKEN_CHARS} "
            f"(a short one can be guessed by anyone who can reach the service); make one with {MAKE_TOKEN} "
            "and give the same value to the clients"
        )
    distinct = len(set(token))
    if token and distinct < MIN_DISTINCT_TOKEN_CHARS:
        raise AuthError(
            f"reward service: {TOKEN_ENV} is made of only {distinct} different character(s); a token needs at least "
            f"{MIN_DISTINCT_TOKEN_CHARS} different ones (and {MIN_TOKEN_CHARS} characters in all): a long run of "
            "few symbols is among the first a guesser tries; make a random one with "
            f"{MAKE_TOKEN} and give the same value to the clients"
        )
    if token:
        return token
    if insecure_no_token and is_loopback(host):
        return None
    if insecure_no_token:
        raise AuthError(
            f"reward service: --insecure-no-token is only allowed on a loopback host, not {host!r} "
            f"(anyone who can reach it could queue work); set {TOKEN_ENV} to a secret token, or "
            "serve on --host 127.0.0.1"
        )
    raise AuthError(
        f"reward service: no token; set {TOKEN_ENV} to a secret token of at least {MIN_TOKEN_CHARS} characters, "
        f"{MIN_DISTINCT_TOKEN_CHARS} of them different (make one with {MAKE_TOKEN}; clients send it as "
        "'Authorization: Bearer <token>'), or pass --insecure-no-token to run without one on a loopback host for "
        "local testing"
    )


def log_config() -> dict[str, Any]:
    """uvicorn's logging config, plus the service's own INFO lines (timeouts, clients gone) on stderr."""
    cfg = copy.deepcopy(LOGGING_CONFIG)
    cfg["loggers"][SERVICE_LOGGER] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return cfg


def serve(
    config: ServiceConfig, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, insecure_no_token: bool = False
) -> None:
    """Run until interrupted (SIGINT / SIGTERM stop it gracefully: batches being scored finish)."""
    token = resolve_token(host, insecure_no_token)
    app = create_app(config, token)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        log_config=log_config(),
        timeout_graceful_shutdown=30,
        **uvicorn_options(config, app.state.count),
    )
