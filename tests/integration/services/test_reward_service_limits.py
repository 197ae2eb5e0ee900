"""The reward service against slow, surplus and vanishing clients (raw sockets on loopback, the real server
with its http_limits): partial headers and stalled bodies are cut off after their timeouts, connections
over max_connections are refused, a client that hangs up is one log line, every response status is
counted in /metrics, and an unexpected failure is a JSON 500."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from cosmos_train.reward_service.config import ServiceConfig
from tests.reward_server import TOKEN, ServiceThread, auth, running_service

TIMEOUT_S = 1.0
MARGIN_S = 2.5  # loaded CI machines: the timer fires on time, the event loop may run it a little late
PING = "/api/reward/ping"


def _config(**extra: float) -> ServiceConfig:
    return ServiceConfig.model_validate(
        {"header_timeout_s": TIMEOUT_S, "body_timeout_s": TIMEOUT_S, "workers": 1, **extra}
    )


def _connect(url: str) -> socket.socket:
    port = int(url.rsplit(":", 1)[1])
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _head(path: str, length: int | None = None) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {TOKEN}"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _read_until_closed(sock: socket.socket, within_s: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when it closed it; fails the test
    if it is still open after `within_s`."""
    t0, got = time.monotonic(), b""
    sock.settimeout(0.1)
    while time.monotonic() - t0 < within_s:
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except ConnectionResetError:
            return got, time.monotonic() - t0
        if not chunk:
            return got, time.monotonic() - t0
        got += chunk
    pytest.fail(f"the server still holds the connection after {within_s:g} s (got {got[:200]!r})")


def _response(sock: socket.socket) -> bytes:
    """One whole response (status line to the end of its Content-Length body) off a kept-alive socket."""
    sock.settimeout(5)
    got = b""
    while b"\r\n\r\n" not in got:
        got += sock.recv(65536)
    head, _, rest = got.partition(b"\r\n\r\n")
    length = next(
        int(v) for k, _, v in (ln.partition(b":") for ln in head.split(b"\r\n")) if k.lower() == b"content-length"
    )
    while len(rest) < length:
        rest += sock.recv(65536)
    return head + b"\r\n\r\n" + rest


def _ping(url: str) -> httpx.Response:
    return httpx.post(url + PING, headers=auth(), timeout=10)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextmanager
def _service_log() -> Iterator[list[logging.LogRecord]]:
    """INFO and above from the service and from uvicorn (whose "uvicorn" logger does not propagate)."""
    handler = _Records()
    handler.setLevel(logging.INFO)
    loggers = [logging.getLogger("cosmos_train.reward_service"), logging.getLogger("uvicorn")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
        lg.setLevel(logging.INFO)
    try:
        yield handler.records
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.removeHandler(handler)
            lg.setLevel(level)


def _texts(records: list[logging.LogRecord]) -> list[str]:
    fmt = logging.Formatter("%(levelname)s %(name)s %(message)s")
    return [fmt.format(r) for r in records]


def test_partial_headers_are_closed_after_the_header_timeout() -> None:
    with running_service(_config()) as (url, _):
        quiet = _connect(url)
        quiet.sendall(b"POST /api/reward/ping HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # no blank line: never complete
        got, after = _read_until_closed(quiet, TIMEOUT_S + MARGIN_S)
        assert got == b"" and after >= TIMEOUT_S * 0.8
        # a byte every 0.3 s keeps uvicorn's own keep-alive timer restarting; the header timer is not fooled
        trickle = _connect(url)
        t0 = time.monotonic()
        closed = False
        for byte in b"POST /api/reward/ping HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 64:
            try:
                trickle.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            time.sleep(0.3)
            if time.monotonic() - t0 > TIMEOUT_S + MARGIN_S:
                break
        if not closed:
            got, _ = _read_until_closed(trickle, 0.5)
            assert got == b""
        assert time.monotonic() - t0 < TIMEOUT_S + MARGIN_S + 0.5
        # kept alive: the timer starts again after each response
        kept = _connect(url)
        kept.sendall(_head(PING, length=0))
        assert _response(kept).startswith(b"HTTP/1.1 200 ")
        time.sleep(TIMEOUT_S * 0.5)
        kept.sendall(_head(PING, length=0))  # a second request within the timeout is served
        assert _response(kept).startswith(b"HTTP/1.1 200 ")
        kept.sendall(b"POST /api/reward/ping HTTP/1.1\r\n")
        got, after = _read_until_closed(kept, TIMEOUT_S + MARGIN_S)
        assert got == b"" and after >= TIMEOUT_S * 0.8
        for sock in (quiet, trickle, kept):
            sock.close()
        assert _ping(url).status_code == 200


def test_a_stalled_body_is_answered_408_and_closed() -> None:
    with running_service(_config()) as (url, service):
        sock = _connect(url)
        sock.sendall(_head(PING, length=100) + b"0123456789")  # 10 of 100 bytes, then nothing
        got, after = _read_until_closed(sock, TIMEOUT_S + MARGIN_S)
        assert got.startswith(b"HTTP/1.1 408 "), got[:200]
        assert b"body_timeout_s" in got and b'"detail"' in got
        assert after >= TIMEOUT_S * 0.8
        sock.close()
        assert service.metrics()["counters"]["responses_408"] == 1


def test_fifty_stalled_connections_are_all_closed_and_the_service_still_answers() -> None:
    st = ServiceThread(_config()).start()
    try:
        socks = [_connect(st.url) for _ in range(50)]
        for i, sock in enumerate(socks):  # nothing; half a request line; headers and part of a body
            if i % 3 == 1:
                sock.sendall(b"POST /api/reward/pi")
            elif i % 3 == 2:
                sock.sendall(_head(PING, length=1000) + b"x" * 10)
        deadline = time.monotonic() + 5
        while st.open_connections < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert st.open_connections == 50
        t0 = time.monotonic()
        for sock in socks:
            _read_until_closed(sock, max(0.5, TIMEOUT_S + MARGIN_S - (time.monotonic() - t0)))
            sock.close()
        assert st.open_connections == 0
        assert _ping(st.url).status_code == 200
        counters = st.service.metrics()["counters"]
        assert counters["header_timeouts"] == 34 and counters["responses_408"] == 16
    finally:
        st.stop()


def test_connections_over_max_connections_are_refused_until_they_go() -> None:
    st = ServiceThread(_config(max_connections=5, header_timeout_s=60)).start()
    try:
        held = [_connect(st.url) for _ in range(5)]
        deadline = time.monotonic() + 5
        while st.open_connections < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert st.open_connections == 5
        t0 = time.monotonic()
        try:
            r = _ping(st.url)
            refused = r.status_code == 503 and "max_connections" in r.json()["detail"]
        except httpx.TransportError:  # closed before its request was read: a reset is as good as a 503
            refused = True
        assert refused and time.monotonic() - t0 < 2
        assert st.open_connections == 5
        assert st.service.metrics()["counters"]["connections_refused"] >= 1
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 5
        while st.open_connections and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _ping(st.url).status_code == 200
    finally:
        st.stop()


def test_a_client_gone_mid_body_is_one_log_line() -> None:
    with running_service(_config(body_timeout_s=30)) as (url, service), _service_log() as records:
        sock = _connect(url)
        sock.sendall(_head("/api/reward/enqueue", length=100_000) + b"{" * 100)
        time.sleep(0.3)  # the app is reading the body
        sock.close()
        deadline = time.monotonic() + 5
        while not records and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # anything else it would log
        texts = _texts(records)
        assert len(records) == 1, texts
        assert "went away" in texts[0] and records[0].exc_info is None
        assert not any("Traceback" in t for t in texts)
        assert service.metrics()["counters"]["responses_499"] == 1


def test_metrics_count_every_status_and_a_failure_is_a_json_500(monkeypatch: pytest.MonkeyPatch) -> None:
    with running_service(_config(max_body_mb=0.001)) as (url, service), _service_log() as records:
        assert httpx.post(url + PING, timeout=10).status_code == 401
        assert httpx.post(url + PING, headers=auth("x" * 20), timeout=10).status_code == 401
        big = httpx.post(url + "/api/reward/enqueue", headers=auth(), content=b"x" * 4096, timeout=10)
        assert big.status_code == 413
        assert httpx.get(url + "/no/such/route", headers=auth(), timeout=10).status_code == 404

        def broken(uuid: str, kind: str) -> dict:
            raise KeyError("the results table lost its row")

        monkeypatch.setattr(service, "pull", broken)
        r = httpx.post(url + "/api/reward/pull", headers=auth(), data={"uuid": "u", "type": "t"}, timeout=10)
        assert r.status_code == 500
        detail = r.json()["detail"]
        assert "POST /api/reward/pull" in detail and "KeyError" in detail and "lost its row" in detail
        texts = _texts(records)
        assert len([t for t in texts if "KeyError" in t]) == 1, texts
        assert not any(r.exc_info for r in records) and not any("Traceback" in t for t in texts), texts
        assert _ping(url).status_code == 200
        counters = httpx.get(url + "/metrics", headers=auth(), timeout=10).json()["counters"]
        assert counters["responses_401"] == 2
        assert counters["responses_413"] == 1
        assert counters["responses_404"] == 1
        assert counters["responses_500"] == 1
        assert counters["responses_200"] == 1  # the ping; this /metrics answer is counted after it is built
