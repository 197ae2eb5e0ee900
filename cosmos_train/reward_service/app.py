"""The HTTP face of the reward service (FastAPI): the reference service's routes, authenticated.

    POST /api/reward/ping      -> {"message": "Ping request received"}
    POST /api/reward/enqueue   body `<JSON>\\n<tensor bytes>`, optional header X-Request-Id -> {"uuid": ...}
    POST /api/reward/pull      form (or JSON) fields uuid, type -> the scores document; 400 while not ready
    GET  /metrics              queue depth, in flight, counters, per-handler latency p50/p99 and errors (JSON)

Every route wants `Authorization: Bearer <token>` when the service has a token. Refusals are JSON
{"detail": "<field>: what is wrong"} with their status: 400 malformed, 401 credentials, 404 unknown or
expired uuid, 408 the body paused longer than body_timeout_s (the connection closes), 413 body too large,
415 pull body type, 429 queue full (+ Retry-After), 500 a handler failed or the service itself did (the
detail names the route and the error; the log has one line). Every response is counted in /metrics
(`responses_<status>`); a client that goes away before its body is read is one INFO line and
`responses_499` (nginx's "client closed request"; nothing is sent).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cosmos_train.reward_service.auth import check_request
from cosmos_train.reward_service.config import ServiceConfig
from cosmos_train.reward_service.errors import ProtocolError
from cosmos_train.reward_service.service import RewardService

log = logging.getLogger(__name__)

REQUEST_ID_HEADERS = ("x-request-id", "idempotency-key")
SMALL_BODY = 64 * 1024  # ping and pull bodies: a few form fields
CLIENT_GONE = 499  # nginx's "client closed request": counted, never sent (there is nobody to send it to)
DETAIL_CHARS = 300  # of an unexpected error's message in a 500's detail


class ClientGone(Exception):
    """The client closed its connection before its request body was read (logged where it is raised)."""


def _peer(request: Request) -> str:
    return f"{request.client.host}:{request.client.port}" if request.client else "unknown peer"


async def read_body(request: Request, limit: int, timeout_s: float) -> bytes:
    """The body, refused with 413 as soon as it is known to pass `limit` (before reading it when the
    client announced its length), with 408 (and the connection closed) when no bytes come for `timeout_s`;
    ClientGone when the client hangs up first."""
    announced = request.headers.get("content-length", "")
    if announced.isdigit() and int(announced) > limit:
        raise ProtocolError(413, f"body: {int(announced)} bytes is over the limit of {limit} bytes")
    chunks, size = [], 0
    stream = request.stream()
    try:
        while True:
            try:
                async with asyncio.timeout(timeout_s):
                    chunk = await anext(stream)
            except StopAsyncIteration:
                break
            size += len(chunk)
            if size > limit:
                raise ProtocolError(413, f"body: over the limit of {limit} bytes")
            chunks.append(chunk)
    except TimeoutError:
        log.info(
            "%s %s from %s: no body bytes for %g s after %d (body_timeout_s); answered 408",
            request.method,
            request.url.path,
            _peer(request),
            timeout_s,
            size,
        )
        raise ProtocolError(
            408,
            f"body: no bytes arrived for {timeout_s:g} s after {size} bytes (the service's body_timeout_s); "
            "send the whole body without pausing",
            {"Connection": "close"},
        ) from None
    except ClientDisconnect:
        log.info(
            "%s %s from %s: the client went away after %d body bytes",
            request.method,
            request.url.path,
            _peer(request),
            size,
        )
        raise ClientGone() from None
    return b"".join(chunks)


class StatusCounter:
    """ASGI middleware: counts every response as `responses_<status>` and answers an unexpected failure of
    the app with a JSON 500 naming the route and the error, logged as one line (the traceback at DEBUG).
    It sits inside Starlette's ServerErrorMiddleware, which would answer a bare "Internal Server Error" and
    re-raise to uvicorn's traceback log."""

    def __init__(self, app: ASGIApp, count: Callable[[str], None]):
        self.app, self.count = app, count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def counting_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                self.count(f"responses_{message['status']}")
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        except Exception as exc:
            what = f"{scope['method']} {scope['path']}"
            error = f"{type(exc).__name__}: {exc}"[:DETAIL_CHARS]
            log.error("%s failed: %s", what, error)
            log.debug("%s failed", what, exc_info=exc)
            if started:  # half a response went out: uvicorn closes the connection after we return
                return
            detail = f"{what} failed inside the reward service ({error}); its log has the details"
            await JSONResponse({"detail": detail}, status_code=500)(scope, receive, counting_send)


def form_fields(body: bytes, content_type: str) -> dict[str, Any]:
    """The pull request's fields: urlencoded form (what the reference clients send) or a JSON object."""
    if "multipart/" in content_type:
        raise ProtocolError(415, "body: send uuid and type as an urlencoded form or a JSON object, not multipart")
    text = body.decode("utf-8", errors="replace")
    if "json" in content_type or text.lstrip().startswith("{"):
        try:
            fields = json.loads(text)
        except json.JSONDecodeError as e:
            raise ProtocolError(400, f"body: not JSON ({e.msg})") from None
        if not isinstance(fields, dict):
            raise ProtocolError(400, "body: must be a JSON object with uuid and type")
        return fields
    return {k: v[0] for k, v in parse_qs(text, keep_blank_values=True).items()}


def create_app(config: ServiceConfig, token: str | None) -> FastAPI:
    service = RewardService(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await service.start()
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(
        title="cosmos-train reward service", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.service = service
    app.state.count = service.request_stats.count  # the HTTP layer's counters (http_limits) go there too
    app.add_middleware(StatusCounter, count=app.state.count)

    @app.exception_handler(ProtocolError)
    async def _refused(request: Request, exc: ProtocolError) -> JSONResponse:
        return JSONResponse({"detail": exc.message}, status_code=exc.status, headers=exc.headers)

    @app.exception_handler(ClientGone)
    async def _gone(request: Request, exc: ClientGone) -> Response:
        return Response(status_code=CLIENT_GONE)

    @app.api_route("/api/reward/ping", methods=["GET", "POST"])
    async def ping(request: Request) -> dict[str, str]:
        check_request(request, token)
        await read_body(request, SMALL_BODY, config.body_timeout_s)
        return {"message": "Ping request received"}

    @app.post("/api/reward/enqueue")
    async def enqueue(request: Request) -> dict[str, str]:
        check_request(request, token)
        body = await read_body(request, config.max_body_bytes, config.body_timeout_s)
        request_id = next((request.headers[h] for h in REQUEST_ID_HEADERS if request.headers.get(h)), None)
        return {"uuid": await service.enqueue(body, request_id)}

    @app.post("/api/reward/pull")
    async def pull(request: Request) -> dict[str, Any]:
        check_request(request, token)
        body = await read_body(request, SMALL_BODY, config.body_timeout_s)
        fields = form_fields(body, request.headers.get("content-type", ""))
        for key in ("uuid", "type"):
            if not isinstance(fields.get(key), str) or not fields[key]:
                raise ProtocolError(400, f"{key}: missing; send the form fields uuid and type")
        return service.pull(fields["uuid"], fields["type"])

    @app.get("/metrics")
    async def metrics(request: Request) -> dict[str, Any]:
        check_request(request, token)
        return service.metrics()

    return app
