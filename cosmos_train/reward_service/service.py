"""The service's state and work: a queue of parsed requests bounded by count and by decoded bytes, a pool
of worker threads that score them off the event loop, results held until pulled or expired, request ids
claimed exactly once.

Exactly once: a request id (X-Request-Id / Idempotency-Key) is claimed before its body is parsed, in
memory (the event loop runs the check and the claim with no await between them) and in `state_dir` (an
exclusive file), so concurrent retries of one request get one uuid and one scoring. The same id with a
different body or reward set is a 409 naming it.

`RewardService` knows nothing of HTTP (`app.py` maps it onto the routes): `enqueue(body, request_id)`
-> uuid, `pull(uuid, type)` -> the scores document, `metrics()`. `start()` / `stop()` run inside the
event loop (the app's lifespan); `stop()` lets batches being scored finish and record their results.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
import uuid as uuidlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from starlette.concurrency import run_in_threadpool

from cosmos_train.reward_service.config import ServiceConfig
from cosmos_train.reward_service.handlers import HANDLERS, Handler
from cosmos_train.reward_service.handlers.base import Batch, score_table
from cosmos_train.reward_service.latents import LatentDecoder
from cosmos_train.reward_service.metrics import Metrics
from cosmos_train.reward_service.protocol import (
    Enqueued,
    Incoming,
    ProtocolError,
    decode_enqueue,
    inspect_enqueue,
    parse_enqueue,
    reads_pixels,
    reward_names,
)
from cosmos_train.reward_service.state import DiskState


@dataclass
class Job:
    uuid: str
    request_id: str | None
    created: float
    parsed: Enqueued
    weight: int = 0  # bytes it holds (decoded tensor + decoded latents' pixels) until its result is recorded


@dataclass
class IdClaim:
    """A client request id: the uuid it got (None while its first request is being parsed), the body's hash and
    reward set to tell a retry from a different request, and when it was last seen."""

    uuid: str | None
    digest: str | None
    rewards: list[str] | None
    seen: float
    settled: asyncio.Future[str | None] | None = None  # resolves when the first request is accepted or refused

    def record(self) -> dict[str, Any]:
        return {"uuid": self.uuid, "digest": self.digest, "rewards": self.rewards, "seen": self.seen}


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
        self.decoder = LatentDecoder(config.latent_decoder)
        self.decoder.check()  # a wrong VAE folder is a ConfigError at start, not a failed request later
        self._ready: set[str] = set()
        self._setup_lock = threading.Lock()
        self.request_stats = Metrics(config.latency_window)  # request counters and handler latencies (/metrics)
        self.pending: dict[str, Job] = {}
        self.results: dict[str, Result] = {}
        self.request_ids: dict[str, IdClaim] = {}
        self.in_flight = 0
        self.held_bytes = 0  # weight of the pending jobs plus the requests being parsed
        self.parsing = 0  # requests past the room check, not yet accepted or refused
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
        for rec, body in self.state.load_pending():
            try:
                parsed = parse_enqueue(body, self.handlers, self.decoder, self.config.max_decoded_bytes)
            except ProtocolError:  # accepted under other handlers / settings: drop it, never crash the start
                self.state.remove_pending(rec["uuid"])
                continue
            self._accept(Job(rec["uuid"], rec.get("request_id"), rec["created"], parsed, rec.get("weight", 0)))
            self.request_stats.count("restored")
        # a request id maps to the uuid its request got: from its claim, or (a crash between accepting the
        # request and recording the uuid in the claim; a state_dir of an older version) from the request itself
        accepted = {j.request_id: u for u, j in self.pending.items() if j.request_id}
        accepted |= {r.request_id: u for u, r in self.results.items() if r.request_id}
        for rec in self.state.load_ids():
            rid = rec.get("request_id")
            if not rid:
                continue
            uuid = rec.get("uuid") or accepted.get(rid)
            if uuid in self.results or uuid in self.pending:
                self.request_ids[rid] = IdClaim(uuid, rec.get("digest"), rec.get("rewards"), now)
            else:  # claimed, then the process died before accepting it (or its result expired): free again
                self.state.release_id(rid)
        for rid, uuid in accepted.items():
            self.request_ids.setdefault(rid, IdClaim(uuid, None, None, now))

    def _accept(self, job: Job) -> None:
        assert self._queue is not None
        self.pending[job.uuid] = job
        self.held_bytes += job.weight
        self._queue.put_nowait(job)

    # ------------------------------------------------------------------ requests
    def _check_room(self, weight: int) -> None:
        c = self.config
        if weight > c.max_queued_bytes:
            raise ProtocolError(
                413,
                f"tensor: this request holds {weight / 2**20:.1f} MiB once decoded, more than the service's "
                f"max_queued_mb ({c.max_queued_mb:g} MiB) allows for all queued work; send smaller batches",
            )
        full = None
        if len(self.pending) + self.parsing >= c.queue_size:
            full = f"queue full ({c.queue_size} requests waiting)"
        elif self.held_bytes + weight > c.max_queued_bytes:
            full = (
                f"queue full by size ({self.held_bytes / 2**20:.1f} MiB of {c.max_queued_mb:g} MiB held, this "
                f"request needs {weight / 2**20:.1f} MiB)"
            )
        if full:
            self.request_stats.count("rejected_429")
            raise ProtocolError(429, f"{full}; retry after {c.retry_after_s} s", {"Retry-After": str(c.retry_after_s)})

    async def _claim(self, request_id: str, body: bytes) -> tuple[IdClaim, str | None]:
        """(the claim, the uuid a previous request with this id got); that uuid is None when this request
        is the first and must be parsed. 409 when the id was used for a different request."""
        digest = hashlib.sha256(body).hexdigest()
        while True:
            claim = self.request_ids.get(request_id)
            if claim is None:
                break
            self._check_same(request_id, claim, digest, body)
            if claim.uuid is not None:
                claim.seen = time.time()
                return claim, claim.uuid
            assert claim.settled is not None
            await asyncio.shield(claim.settled)  # the first request is being parsed: its outcome decides
        # no await between the lookup above and this line: one claim per id in this process
        claim = IdClaim(None, digest, reward_names(body), time.time(), asyncio.get_running_loop().create_future())
        self.request_ids[request_id] = claim
        if self.state is not None:
            try:
                other = await run_in_threadpool(self.state.claim_id, request_id, claim.record())
            except BaseException:
                self._release(request_id, claim)
                raise
            if other is not None:  # claimed on disk by another process sharing state_dir
                self._release(request_id, claim)
                other_claim = IdClaim(other.get("uuid"), other.get("digest"), other.get("rewards"), time.time())
                self._check_same(request_id, other_claim, digest, body)
                if other_claim.uuid is None:
                    raise ProtocolError(
                        409,
                        f"X-Request-Id: {request_id!r} is being enqueued by another service process sharing "
                        "state_dir; retry the same request in a moment",
                        {"Retry-After": str(self.config.retry_after_s)},
                    )
                return other_claim, other_claim.uuid
        return claim, None

    def _check_same(self, request_id: str, claim: IdClaim, digest: str, body: bytes) -> None:
        if claim.digest is None or claim.digest == digest:
            return
        rewards = reward_names(body)
        if claim.rewards is not None and rewards != claim.rewards:
            first = ", ".join(claim.rewards)
            what = f"a different reward set ({', '.join(rewards or [])}; it was first sent with {first})"
        else:
            what = "a different body (payload)"
        self.request_stats.count("rejected_409")
        raise ProtocolError(
            409,
            f"X-Request-Id: {request_id!r} was already used for another request; this one has {what}. "
            "Reuse an id only to retry the very same request; give each new request a new id",
        )

    def _release(self, request_id: str, claim: IdClaim) -> None:
        """The first request of an id was refused: free the id (a corrected retry may use it) and wake waiters."""
        if self.request_ids.get(request_id) is claim:
            del self.request_ids[request_id]
        if claim.settled is not None and not claim.settled.done():
            claim.settled.set_result(None)

    async def enqueue(self, body: bytes, request_id: str | None = None) -> str:
        claim = None
        if request_id:
            claim, known = await self._claim(request_id, body)
            if known is not None:
                self.request_stats.count("deduplicated")
                return known
        try:
            uuid = await self._enqueue_new(body, request_id)
        except BaseException:
            if claim is not None and request_id:
                self._release(request_id, claim)
                if self.state is not None:
                    await run_in_threadpool(self.state.release_id, request_id)
            raise
        if claim is not None and request_id:
            claim.uuid = uuid
            assert claim.settled is not None
            claim.settled.set_result(uuid)  # before any await: a cancelled request must not strand its waiters
            if self.state is not None:
                await run_in_threadpool(self.state.update_id, request_id, claim.record())
        return uuid

    async def _enqueue_new(self, body: bytes, request_id: str | None) -> str:
        """Parse, weigh and queue one request that no earlier one claimed."""
        max_decoded = self.config.max_decoded_bytes
        try:
            incoming: Incoming = await run_in_threadpool(
                inspect_enqueue, body, self.handlers, self.decoder, max_decoded
            )
        except ProtocolError as e:
            self.request_stats.count(f"rejected_{e.status}")
            raise
        self._check_room(incoming.weight)  # the weight is reserved before the arrays are allocated
        self.held_bytes += incoming.weight
        self.parsing += 1
        try:
            parsed = await run_in_threadpool(decode_enqueue, incoming)
            job = Job(str(uuidlib.uuid4()), request_id, time.time(), parsed, incoming.weight)
            if self.state is not None:
                record = {"uuid": job.uuid, "request_id": request_id, "created": job.created, "weight": job.weight}
                await run_in_threadpool(self.state.write_pending, job.uuid, record, body)
        except ProtocolError as e:
            self.request_stats.count(f"rejected_{e.status}")
            raise
        finally:
            self.held_bytes -= incoming.weight
            self.parsing -= 1
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
            if self.pending.pop(job.uuid, None) is not None:
                self.held_bytes -= job.weight

    def _handler(self, name: str) -> Handler:
        handler = self.handlers[name]
        if name not in self._ready:
            with self._setup_lock:  # set_up once, even when two workers meet a new handler together
                if name not in self._ready:
                    handler.set_up()
                    self._ready.add(name)
        return handler

    def _pixels(self, batch: Batch) -> tuple[Batch, float]:
        """The batch as uint8 video (latents decoded by the Wan VAE) and the decode's seconds."""
        assert batch.media is not None
        t0 = time.perf_counter()
        pixels = self.decoder.decode(batch.media)
        return replace(batch, media_type="video", media=pixels), time.perf_counter() - t0

    def _score(self, job: Job) -> Result:
        """In a worker thread: every asked reward over the batch, latents decoded once for the rewards that
        score pixels (a handler that reads latents gets them as sent), then the result recorded."""
        batch = job.parsed.batch
        decoded: Batch | None = None
        decode_s, decode_error = 0.0, None
        docs: dict[str, dict[str, Any]] = {}
        for name, weight in job.parsed.weights.items():
            t0 = time.perf_counter()
            try:
                scored = batch
                if reads_pixels(self.handlers[name], batch.media_type):
                    if decoded is None and decode_error is None:
                        try:
                            decoded, decode_s = self._pixels(batch)
                        except Exception as e:  # the decoder fails this request's pixel rewards, not the service
                            decode_error = f"latent decoding failed: {type(e).__name__}: {e}"
                    if decoded is None:
                        raise RuntimeError(decode_error)
                    scored = decoded
                scores = score_table(self._handler(name).score(scored), name, batch.size)
            except Exception as e:  # a failing handler fails this request only; the service keeps serving
                self.request_stats.handler_done(name, time.perf_counter() - t0, ok=False)
                docs[name] = {"error": f"{type(e).__name__}: {e}", "type": name}
                continue
            seconds = time.perf_counter() - t0
            self.request_stats.handler_done(name, seconds, ok=True)
            docs[name] = {
                "scores": scores,
                "input_info": job.parsed.input_info,
                "duration": f"{seconds:.2f}",
                "decoded_duration": f"{decode_s:.2f}",
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

    def _forget_id(self, request_id: str) -> None:
        self.request_ids.pop(request_id, None)
        if self.state is not None:
            self.state.release_id(request_id)  # one small unlink: cheap enough for the event loop

    def _drop(self, res: Result) -> None:
        self.results.pop(res.uuid, None)
        unpulled = len(res.pulled) < len(res.docs)
        self.request_stats.count("expired" if unpulled else "released")
        if unpulled and res.request_id:
            # never delivered: a retry of that request is scored anew instead of pointing at nothing
            self._forget_id(res.request_id)
        if self.state is not None:
            self.state.remove_done(res.uuid)

    async def _sweeper(self) -> None:
        c = self.config
        interval = max(0.05, min(1.0, c.result_ttl_s / 4, c.pulled_grace_s / 4 or 1.0))
        while True:
            await asyncio.sleep(interval)
            now = time.time()
            for res in [r for r in self.results.values() if self._expired(r, now)]:
                self._drop(res)
            for rid, claim in list(self.request_ids.items()):
                if claim.uuid is not None and now - claim.seen > c.request_id_ttl_s and claim.uuid not in self.pending:
                    self._forget_id(rid)
