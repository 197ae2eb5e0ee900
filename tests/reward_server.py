"""The real reward service on loopback for tests: uvicorn in a thread of the test process (so a test
can register its own handler), on a free or given port, with the connection limits `serve` uses
(http_limits), stopped gracefully; waits are bounded."""

from __future__ import annotations

import io
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import uvicorn

from cosmos_train.net import free_port
from cosmos_train.reward_service.app import create_app
from cosmos_train.reward_service.config import ServiceConfig
from cosmos_train.reward_service.http_limits import uvicorn_options

TOKEN = "test-token-3f9a-71c2"  # the service refuses tokens under 16 characters


class ServiceThread:
    """One server on 127.0.0.1:port; start() / stop() may be called again to restart it on the same port."""

    def __init__(self, config: ServiceConfig | None = None, token: str | None = TOKEN, port: int | None = None):
        self.config, self.token, self.port = config or ServiceConfig(), token, port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app: Any = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def service(self) -> Any:
        return self.app.state.service

    @property
    def open_connections(self) -> int:
        """Connections the server holds now (uvicorn's own set: accepted and not yet lost)."""
        return len(self._server.server_state.connections) if self._server is not None else 0

    def start(self, timeout: float = 20.0) -> ServiceThread:
        self.app = create_app(self.config, self.token)
        self._server = uvicorn.Server(
            uvicorn.Config(
                self.app,
                host="127.0.0.1",
                port=self.port,
                log_level="error",
                lifespan="on",
                timeout_graceful_shutdown=10,
                **uvicorn_options(self.config, self.app.state.count),
            )
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"reward service did not start on port {self.port}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        if self._server is None or self._thread is None:
            return
        self._server.should_exit = True
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "reward service thread did not stop"
        self._server = self._thread = None


@contextmanager
def running_service(
    config: ServiceConfig | None = None, token: str | None = TOKEN, port: int | None = None
) -> Iterator[tuple[str, Any]]:
    """Yields (base URL, the RewardService) while the server runs."""
    st = ServiceThread(config, token, port).start()
    try:
        yield st.url, st.service
    finally:
        st.stop()


def npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def body(meta: dict[str, Any], tensor: bytes = b"") -> bytes:
    return json.dumps(meta).encode() + b"\n" + tensor


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
