"""Bearer-token checks: constant-time comparison, tokens in URLs refused (URLs end up in access logs,
proxies and shell history)."""

from __future__ import annotations

import hmac

from starlette.requests import Request

from cosmos_train.reward_service.errors import ProtocolError

QUERY_TOKEN_NAMES = frozenset({"token", "access_token", "api_key", "apikey", "key", "auth", "authorization"})
TOKEN_ENV = "REWARD_SERVICE_TOKEN"
MIN_TOKEN_CHARS = 16  # shorter ones can be guessed; the service refuses to start with one
# A long token of few symbols ("aaaaaaaaaaaaaaaa", "abababab...") is among the first a guesser tries: ask for some
# variety too. Any random token (secrets.token_urlsafe / token_hex) has far more distinct characters than this.
MIN_DISTINCT_TOKEN_CHARS = 8
MAKE_TOKEN = 'python -c "import secrets; print(secrets.token_urlsafe(32))"'


def check_request(request: Request, token: str | None) -> None:
    """Raise a 401 ProtocolError unless `request` carries `Authorization: Bearer <token>` (and no token in
    its query string). token None: the service runs without one (loopback only, --insecure-no-token)."""
    named = QUERY_TOKEN_NAMES & {k.lower() for k in request.query_params}
    if named:
        raise ProtocolError(
            401,
            f"query string: a credential ({', '.join(sorted(named))}) in the URL is refused; "
            "send it as the header 'Authorization: Bearer <token>'",
        )
    if token is None:
        return
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise ProtocolError(
            401,
            f"Authorization: missing; send 'Authorization: Bearer <token>' (the service's {TOKEN_ENV})",
            {"WWW-Authenticate": "Bearer"},
        )
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise ProtocolError(401, "Authorization: wrong token", {"WWW-Authenticate": "Bearer"})
