"""The one exception of the reward service's request path: a refusal answered with its HTTP status."""

from __future__ import annotations

from collections.abc import Mapping


class ProtocolError(Exception):
    """`status` and a message naming the field (`"tensor: ..."`, `"reward_fn.x: ..."`) and what to send instead."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
