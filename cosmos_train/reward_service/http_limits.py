"""Slow and surplus clients, at the HTTP layer: uvicorn's h11 protocol with a header read timeout and a
connection cap, which uvicorn has neither of (a client that sends half its headers holds its connection
and its file descriptor for as long as it likes; its keep-alive timer restarts on every byte).

- header timeout: a connection that has not sent complete request headers within `header_timeout_s` of
  connecting, or of the previous response on a kept-alive connection, is closed (one INFO line);
- connection cap: a connection accepted while `max_connections` are held is sent a 503 at once and closed,
  unread, so a flood holds no file descriptor or memory (uvicorn's limit_concurrency answers 503 only once
  a request's headers arrive, which a stalled client never sends). Clients see that 503 or a reset, and
  retry (cosmos_train.rewards.remote does both);
- the body timeout is the app's (`app.read_body`), which answers 408 with a JSON detail.

Both servers use `uvicorn_options`: `server.serve` and the tests' ServiceThread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from cosmos_train.reward_service.config import ServiceConfig

log = logging.getLogger(__name__)

REFUSAL_LOG_EVERY_S = 10.0  # a flood of refused connections is one WARNING per this many seconds


def _no_count(key: str) -> None:
    return None


@dataclass
class ConnectionLimits:
    """The limits one server enforces, shared by all its connections; `count` records events in /metrics."""

    header_timeout_s: float
    max_connections: int
    count: Callable[[str], None] = _no_count
    refused_unlogged: int = field(default=0, init=False)
    last_refusal_log: float = field(default=-math.inf, init=False)

    def refused(self, peer: str) -> None:
        self.count("connections_refused")
        self.refused_unlogged += 1
        now = time.monotonic()
        if now - self.last_refusal_log >= REFUSAL_LOG_EVERY_S:
            log.warning(
                "refused %d connection(s) (latest from %s): %d already held (max_connections)",
                self.refused_unlogged,
                peer,
                self.max_connections,
            )
            self.refused_unlogged, self.last_refusal_log = 0, now


def _refusal_bytes(retry_after_s: int) -> bytes:
    body = json.dumps({"detail": "connections: the service holds its max_connections; retry later"}).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
        f"retry-after: {retry_after_s}\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class LimitedH11Protocol(H11Protocol):
    """H11Protocol plus the header timer and the connection cap; `limits` is set by `protocol_class`."""

    limits: ConnectionLimits
    refusal: bytes = _refusal_bytes(1)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._refused = False
        self._cycle_seen: object = None

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "unknown peer"

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        # server_state.connections holds every connection H11Protocol.connection_made added and not yet lost
        if len(self.connections) >= self.limits.max_connections:
            self._refused = True
            self.transport = transport
            peer = transport.get_extra_info("peername")
            # counted before the write: the 503 may reach the client (and its next /metrics) at once
            self.limits.refused(f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "unknown peer")
            transport.write(self.refusal)
            transport.close()
            return
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        if not self._refused:  # a refused connection never got H11Protocol's per-connection state
            super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        # H11Protocol starts a new request cycle when h11 yields a Request event: its headers are complete
        if self.cycle is not self._cycle_seen:
            self._cycle_seen = self.cycle
            self._disarm_header_timer()

    def on_response_complete(self) -> None:
        # armed first: a pipelined request that H11Protocol goes on to parse disarms it in handle_events
        if not self.transport.is_closing():
            self._arm_header_timer()
        super().on_response_complete()

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(self.limits.header_timeout_s, self._header_timeout)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        log.info(
            "closed the connection from %s: no complete request headers within %g s (header_timeout_s)",
            self._peer(),
            self.limits.header_timeout_s,
        )
        self.limits.count("header_timeouts")
        try:
            self.conn.send(h11.ConnectionClosed())
        except h11.LocalProtocolError:  # h11 mid-response state: the transport closes all the same
            pass
        self.transport.close()


def protocol_class(limits: ConnectionLimits, retry_after_s: int = 1) -> type[LimitedH11Protocol]:
    """A LimitedH11Protocol subclass bound to `limits` (uvicorn instantiates the class it is given)."""
    attrs = {"limits": limits, "refusal": _refusal_bytes(retry_after_s)}
    return type("LimitedH11Protocol", (LimitedH11Protocol,), attrs)


def uvicorn_options(config: ServiceConfig, count: Callable[[str], None] = _no_count) -> dict[str, Any]:
    """Keyword arguments of uvicorn.Config / uvicorn.run that enforce `config`'s connection limits."""
    limits = ConnectionLimits(config.header_timeout_s, config.max_connections, count)
    return {"http": protocol_class(limits, config.retry_after_s)}
