"""What `GET /metrics` reports (JSON): queue depth, requests in flight, counters, and per handler the
latency p50 / p99 (seconds, over the latest `latency_window` batches), batches scored and errors.

    {"queue_depth": 3, "in_flight": 2, "results_held": 10,
     "counters": {"enqueued": 120, "deduplicated": 4, "rejected_400": 2, "rejected_429": 1, ...},
     "handlers": {"brightness": {"scored": 118, "errors": 0, "latency_p50_s": 0.004, "latency_p99_s": 0.02}}}

Counters besides the service's own: `responses_<status>` for every response the app gave (401 from auth, 404,
408, 413, 500, ...; `responses_499`: the client went away before its body was read), `header_timeouts`
(connections closed for not sending their headers in time) and `connections_refused` (over max_connections;
they get a 503 that the app never sees).
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict, deque
from typing import Any

import numpy as np


class Metrics:
    """Thread-safe: worker threads record latencies while the event loop counts requests."""

    def __init__(self, window: int):
        self._lock = threading.Lock()
        self.counters: Counter[str] = Counter()
        self.latency: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=window))
        self.scored: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()

    def count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self.counters[key] += n

    def handler_done(self, name: str, seconds: float, ok: bool) -> None:
        with self._lock:
            if ok:
                self.latency[name].append(seconds)
                self.scored[name] += 1
            else:
                self.errors[name] += 1

    def snapshot(self, **gauges: Any) -> dict[str, Any]:
        with self._lock:
            handlers = {}
            for name in sorted(set(self.scored) | set(self.errors)):
                lat = np.asarray(self.latency[name], dtype=np.float64)
                handlers[name] = {
                    "scored": self.scored[name],
                    "errors": self.errors[name],
                    "latency_p50_s": float(np.percentile(lat, 50)) if lat.size else None,
                    "latency_p99_s": float(np.percentile(lat, 99)) if lat.size else None,
                }
            return {**gauges, "counters": dict(self.counters), "handlers": handlers}
