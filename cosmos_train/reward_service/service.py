"""The service's state and work: a bounded queue of parsed requests, a pool of worker threads that
score them off the event loop, results held until pulled or expired, request ids remembered.

`RewardService` knows nothing of HTTP (`app.py` maps it onto the routes): `enqueue(body, request_id)`
-> uuid, `pull(uuid, type)` -> the scores document, `metrics()`. `start()` / `stop()` run inside the
event loop (the app's lifespan); `stop()` lets batches being scored finish and record their results.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid as uuidlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool

from cosmos_train.reward_service.config import ServiceConfig
from cosmos_train.reward_service.handlers import HANDLERS, Handler
from cosmos_train.reward_service.handlers.base import as_floats
from cosmos_train.reward_service.metrics import Metrics
from cosmos_train.reward_service.protocol import Enqueued, ProtocolError, parse_enqueue
from cosmos_train.reward_service.state import DiskState


@dataclass
class Job:
    uuid: str
    request_id: str | None
    created: float
    parsed: Enqueued


@dataclass
class Result:
    uuid: str
    request_id: str | None
    done_at: float
    docs: dict[str, dict[str, Any]]
    pulled: dict[str, float] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "request_id": self.request_id, "done_at": self.done_at, "docs": self.docs}


class RewardService:
    def __init__(self, config: ServiceConfig):
        self.config = config
        self.handlers: dict[str, Handler] = {name: cls(name, config) for name, cls in HANDLERS.items()}
        self._ready: set[str] = set()
        self._setup_lock = threading.Lock()
        self.request_stats = Metrics(config.latency_window)  # request counters and handler latencies (/metrics)
        self.pending: dict[str, Job] = {}
        self.results: dict[str, Result] = {}
        self.request_ids: dict[str, tuple[str, float]] = {}
        self.in_flight = 0
        self.state = DiskState(config.state_dir) if config.state_dir else None
        self._executor = ThreadPoolExecutor(config.workers, thread_name_prefix="reward-worker")
        self._queue: asyncio.Queue[Job] | None = None
        self._tasks: list[asyncio.Task] = []

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._queue = asyncio.Queue()
        if self.state is not None:
            await run_in_threadpool(self._restore)
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._worker()) for _ in range(self.config.workers)]
        self._tasks.append(loop.create_task(self._sweeper()))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        # batches being scored finish and write their results (state_dir), so a restart never re-scores them
        await run_in_threadpool(self._executor.shutdown, True)

    def _restore(self) -> None:
        assert self.state is not None and self._queue is not None
        now = time.time()
        for rec in self.state.load_done():
            if now - rec["done_at"] > self.config.result_ttl_s:
                self.state.remove_done(rec["uuid"])
                continue
            self.results[rec["uuid"]] = Result(rec["uuid"], rec.get("request_id"), rec["done_at"], rec["docs"])
            if rec.get("request_id"):
                self.request_ids[rec["request_id"]] = (rec["uuid"], now)
        for rec, body in self.state.load_pending():
            try:
                parsed = parse_enqueue(body, self.handlers)
            except ProtocolError:  # accepted under other handlers / settings: drop it, never crash the start
                self.state.remove_pending(rec["uuid"])
                continue
            job = Job(rec["uuid"], rec.get("request_id"), rec["created"], parsed)
            self._accept(job)
            self.request_stats.count("restored")

    def _accept(self, job: Job) -> None:
        assert self._queue is not None
        self.pending[job.uuid] = job
        if job.request_id:
            self.request_ids[job.request_id] = (job.uuid, time.time())
        self._queue.put_nowait(job)

    # ------------------------------------------------------------------ requests
    def _known(self, request_id: str | None) -> str | None:
        if not request_id or request_id not in self.request_ids:
            return None
        return self.request_ids[request_id][0]

    def _check_room(self) -> None:
        if len(self.pending) >= self.config.queue_size:
            self.request_stats.count("rejected_429")
            raise ProtocolError(
                429,
                f"queue full ({self.config.queue_size} requests waiting); retry after {self.config.retry_after_s} s",
                {"Retry-After": str(self.config.retry_after_s)},
            )

    async def enqueue(self, body: bytes, request_id: str | None = None) -> str:
        if (known := self._known(request_id)) is not None:
            self.request_stats.count("deduplicated")
            return known
        self._check_room()
        try:
            parsed = await run_in_threadpool(parse_enqueue, body, self.handlers)
        except ProtocolError as e:
            self.request_stats.count(f"rejected_{e.status}")
            raise
        # checked again: a retry of the same request may have been accepted while this one was parsed
        if (known := self._known(request_id)) is not None:
            self.request_stats.count("deduplicated")
            return known
        self._check_room()
        job = Job(str(uuidlib.uuid4()), request_id, time.time(), parsed)
        if self.state is not None:
            await run_in_threadpool(
                self.state.write_pending,
                job.uuid,
                {"uuid": job.uuid, "request_id": request_id, "created": job.created},
                body,
            )
        self._accept(job)
        self.request_stats.count("enqueued")
        return job.uuid

    def pull(self, uuid: str, kind: str) -> dict[str, Any]:
        res = self.results.get(uuid)
        if res is not None and self._expired(res, time.time()):
            self._drop(res)
            res = None
        if res is None:
            if uuid in self.pending:
                raise ProtocolError(400, "not ready: the scores are being computed; pull again later")
            raise ProtocolError(
                404,
                f"uuid: {uuid!r} is unknown or its result expired (kept "
                f"{self.config.result_ttl_s:g} s, or {self.config.pulled_grace_s:g} s after a pull)",
            )
        doc = res.docs.get(kind)
        if doc is None:
            raise ProtocolError(400, f"type: {kind!r} was not asked for this uuid; asked: {', '.join(res.docs)}")
        res.pulled[kind] = time.time()
        if "error" in doc:
            raise ProtocolError(500, f"reward {kind!r} failed on this request: {doc['error']}")
        self.request_stats.count("pulled")
        return doc

    def metrics(self) -> dict[str, Any]:
        queued = self._queue.qsize() if self._queue is not None else 0
        return self.request_stats.snapshot(
            queue_depth=queued,
            in_flight=self.in_flight,
            results_held=len(self.results),
            queue_size=self.config.queue_size,
        )

    # ------------------------------------------------------------------ work
    async def _worker(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            job = await self._queue.get()
            self.in_flight += 1
            try:
                result = await loop.run_in_executor(self._executor, self._score, job)
            finally:
                self.in_flight -= 1
            self.results[job.uuid] = result
            self.pending.pop(job.uuid, None)

    def _handler(self, name: str) -> Handler:
        handler = self.handlers[name]
        if name not in self._ready:
            with self._setup_lock:  # set_up once, even when two workers meet a new handler together
                if name not in self._ready:
                    handler.set_up()
                    self._ready.add(name)
        return handler

    def _score(self, job: Job) -> Result:
        """In a worker thread: every asked reward over the batch, then the result recorded."""
        batch = job.parsed.batch
        docs: dict[str, dict[str, Any]] = {}
        for name, weight in job.parsed.weights.items():
            t0 = time.perf_counter()
            try:
                scores = as_floats(self._handler(name).score(batch), name)
                if len(scores) != batch.size:
                    raise ValueError(f"{len(scores)} scores for a batch of {batch.size}")
            except Exception as e:  # a failing handler fails this request only; the service keeps serving
                self.request_stats.handler_done(name, time.perf_counter() - t0, ok=False)
                docs[name] = {"error": f"{type(e).__name__}: {e}", "type": name}
                continue
            seconds = time.perf_counter() - t0
            self.request_stats.handler_done(name, seconds, ok=True)
            docs[name] = {
                "scores": {name: scores},
                "input_info": job.parsed.input_info,
                "duration": f"{seconds:.2f}",
                "decoded_duration": "0.00",
                "type": name,
                "weight": weight,
            }
        result = Result(job.uuid, job.request_id, time.time(), docs)
        if self.state is not None:
            self.state.write_done(job.uuid, result.record())
        return result

    # ------------------------------------------------------------------ expiry
    def _expired(self, res: Result, now: float) -> bool:
        if now - res.done_at > self.config.result_ttl_s:
            return True
        all_pulled = res.pulled and len(res.pulled) == len(res.docs)
        return bool(all_pulled and now - max(res.pulled.values()) > self.config.pulled_grace_s)

    def _drop(self, res: Result) -> None:
        self.results.pop(res.uuid, None)
        unpulled = len(res.pulled) < len(res.docs)
        self.request_stats.count("expired" if unpulled else "released")
        if unpulled and res.request_id:
            # never delivered: a retry of that request is scored anew instead of pointing at nothing
            self.request_ids.pop(res.request_id, None)
        if self.state is not None:
            self.state.remove_done(res.uuid)  # one small unlink: cheap enough for the event loop

    async def _sweeper(self) -> None:
        c = self.config
        interval = max(0.05, min(1.0, c.result_ttl_s / 4, c.pulled_grace_s / 4 or 1.0))
        while True:
            await asyncio.sleep(interval)
            now = time.time()
            for res in [r for r in self.results.values() if self._expired(r, now)]:
                self._drop(res)
            for rid, (uuid, seen) in list(self.request_ids.items()):
                if now - seen > c.request_id_ttl_s and uuid not in self.pending:
                    del self.request_ids[rid]
