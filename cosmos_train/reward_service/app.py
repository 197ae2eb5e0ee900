"""The HTTP face of the reward service (FastAPI): the reference service's routes, authenticated.

    POST /api/reward/ping      -> {"message": "Ping request received"}
    POST /api/reward/enqueue   body `<JSON>\\n<tensor bytes>`, optional header X-Request-Id -> {"uuid": ...}
    POST /api/reward/pull      form (or JSON) fields uuid, type -> the scores document; 400 while not ready
    GET  /metrics              queue depth, in flight, counters, per-handler latency p50/p99 and errors (JSON)

Every route wants `Authorization: Bearer <token>` when the service has a token. Refusals are JSON
{"detail": "<field>: what is wrong"} with their status: 400 malformed, 401 credentials, 404 unknown or
expired uuid, 413 body too large, 415 pull body type, 429 queue full (+ Retry-After), 500 a handler failed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from cosmos_train.reward_service.auth import check_request
from cosmos_train.reward_service.config import ServiceConfig
from cosmos_train.reward_service.protocol import ProtocolError
from cosmos_train.reward_service.service import RewardService

REQUEST_ID_HEADERS = ("x-request-id", "idempotency-key")
SMALL_BODY = 64 * 1024  # ping and pull bodies: a few form fields


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refused with 413 as soon as it is known to pass `limit` (before reading it when the
    client announced its length)."""
    announced = request.headers.get("content-length", "")
    if announced.isdigit() and int(announced) > limit:
        raise ProtocolError(413, f"body: {int(announced)} bytes is over the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ProtocolError(413, f"body: over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


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

    @app.exception_handler(ProtocolError)
    async def _refused(request: Request, exc: ProtocolError) -> JSONResponse:
        return JSONResponse({"detail": exc.message}, status_code=exc.status, headers=exc.headers)

    @app.api_route("/api/reward/ping", methods=["GET", "POST"])
    async def ping(request: Request) -> dict[str, str]:
        check_request(request, token)
        await read_body(request, SMALL_BODY)
        return {"message": "Ping request received"}

    @app.post("/api/reward/enqueue")
    async def enqueue(request: Request) -> dict[str, str]:
        check_request(request, token)
        body = await read_body(request, config.max_body_bytes)
        request_id = next((request.headers[h] for h in REQUEST_ID_HEADERS if request.headers.get(h)), None)
        return {"uuid": await service.enqueue(body, request_id)}

    @app.post("/api/reward/pull")
    async def pull(request: Request) -> dict[str, Any]:
        check_request(request, token)
        fields = form_fields(await read_body(request, SMALL_BODY), request.headers.get("content-type", ""))
        for key in ("uuid", "type"):
            if not isinstance(fields.get(key), str) or not fields[key]:
                raise ProtocolError(400, f"{key}: missing; send the form fields uuid and type")
        return service.pull(fields["uuid"], fields["type"])

    @app.get("/metrics")
    async def metrics(request: Request) -> dict[str, Any]:
        check_request(request, token)
        return service.metrics()

    return app
