"""The real reward service on loopback for tests: uvicorn in a thread of the test process (so a test
can register its own handler), on a free or given port, stopped gracefully; waits are bounded."""

from __future__ import annotations

import io
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import uvicorn

from cosmos_train.reward_service.app import create_app
from cosmos_train.reward_service.config import ServiceConfig

TOKEN = "test-token-3f9a"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_service(config: ServiceConfig | None = None, token: str | None = TOKEN, port: int | None = None,
                    start_timeout: float = 20.0) -> Iterator[tuple[str, Any]]:
    """Yields (base URL, the RewardService) while the server runs."""
    app = create_app(config or ServiceConfig(), token)
    port = port or free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="on",
                                           timeout_graceful_shutdown=10))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"reward service did not start on port {port}")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", app.state.service
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        assert not thread.is_alive(), "reward service thread did not stop"


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def body(meta: dict[str, Any], tensor: bytes = b"") -> bytes:
    return json.dumps(meta).encode() + b"\n" + tensor


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
