"""The reward service's client, and the batch scorer GRPO plugs into its RewardSet.

    from cosmos_train.rewards.remote import RemoteRewardClient
    client = RemoteRewardClient.for_world_model()            # WFM_REWARD_TOKEN / _ENQUEUE_URL / _FETCH_URL
    docs = client.score({"reward_fn": {"brightness": 1.0}, "media_type": "video", "prompts": [...]}, npy_bytes)
    docs["brightness"]["scores"]["brightness"]                # one score per video

A VLM run names the service in [train.train_policy.remote_reward] (enqueue_url / fetch_url, else env
REMOTE_REWARD_ENQUEUE_URL / REMOTE_REWARD_FETCH_URL; the token from the variable `token_env` names,
REMOTE_REWARD_TOKEN by default).

Every call has a timeout; a call that cannot connect, times out, or gets 429 / 502 / 503 / 504 is retried
with exponential backoff and jitter (a 429's Retry-After honoured); past max_retries it raises
RewardServiceUnreachable (URL, tries, seconds, last error), on which a GRPO run stops saved. Each request
carries a client request id (X-Request-Id) that stays the same across its retries, so the service scores it
once: a retry after a lost answer or a service restart gets the first uuid back. A uuid the service no longer
knows (a restart without its state_dir) is enqueued again under the same request id, a bounded number of times.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from cosmos_train.data.prompt import reference_answer, user_text
from cosmos_train.errors import AuthError, ConfigError

RETRY_STATUSES = frozenset({429, 502, 503, 504})
RESUBMITS = 3  # times a request is enqueued again after the service forgot its uuid
WFM_ENV = ("WFM_REWARD_TOKEN", "WFM_REWARD_ENQUEUE_URL", "WFM_REWARD_FETCH_URL")
VLM_ENV = ("REMOTE_REWARD_ENQUEUE_URL", "REMOTE_REWARD_FETCH_URL")


class RemoteRewardError(RuntimeError):
    """The service failed a request (a handler error, a refusal) or stayed unreachable through every retry."""


class RewardServiceUnreachable(RemoteRewardError):
    """No usable answer through every retry (refused, reset, timed out, 429 / 502 / 503 / 504): the service is
    down, not wrong. A GRPO run stops saved on it (`rollout.sources.agree_on_outage`); anything else stays a crash."""

    def __init__(self, url: str, tries: int, waited_s: float, last: str):
        self.url, self.tries, self.waited_s, self.last = url, tries, waited_s, last
        super().__init__(f"reward service {url}: no answer after {tries} tries in {waited_s:.0f} s (last: {last})")

    def __reduce__(self) -> tuple[Any, ...]:  # crosses from the rollout worker process with its fields
        return (type(self), (self.url, self.tries, self.waited_s, self.last))


class _Forgotten(Exception):
    """The service answered 404 for a uuid it accepted (restarted without its state)."""


@dataclass
class ClientSettings:
    enqueue_url: str
    fetch_url: str
    token: str | None = None
    timeout_s: float = 30.0
    max_retries: int = 8
    backoff_s: float = 0.5
    backoff_max_s: float = 30.0
    poll_interval_s: float = 0.2
    result_timeout_s: float = 600.0


class RemoteRewardClient:
    def __init__(self, settings: ClientSettings):
        self.settings = settings
        self._http = httpx.Client(timeout=settings.timeout_s)

    @classmethod
    def from_config(cls, rc: Any, env: Mapping[str, str] = os.environ) -> RemoteRewardClient:
        """From a `config.RemoteRewardConfig`; URLs missing from it come from REMOTE_REWARD_*."""
        enqueue = rc.enqueue_url or env.get("REMOTE_REWARD_ENQUEUE_URL", "")
        fetch = rc.fetch_url or env.get("REMOTE_REWARD_FETCH_URL", "")
        where = "train.train_policy.remote_reward"
        missing = [
            f"{where}.{key}: unset, and so is env {var}; give the reward service's URL"
            for key, var, value in (("enqueue_url", VLM_ENV[0], enqueue), ("fetch_url", VLM_ENV[1], fetch))
            if not value
        ]
        if missing:
            raise ConfigError(missing)
        return cls(
            ClientSettings(
                enqueue_url=enqueue,
                fetch_url=fetch,
                token=env.get(rc.token_env) or None,
                timeout_s=rc.timeout_s,
                max_retries=rc.max_retries,
                backoff_s=rc.backoff_s,
                backoff_max_s=rc.backoff_max_s,
                poll_interval_s=rc.poll_interval_s,
                result_timeout_s=rc.result_timeout_s,
            )
        )

    @classmethod
    def for_world_model(cls, env: Mapping[str, str] = os.environ, **overrides: Any) -> RemoteRewardClient:
        """From WFM_REWARD_TOKEN, WFM_REWARD_ENQUEUE_URL, WFM_REWARD_FETCH_URL (the reference trainer's names)."""
        token_var, enqueue_var, fetch_var = WFM_ENV
        missing = [f"env {v}: unset; give the reward service's URL" for v in (enqueue_var, fetch_var) if not env.get(v)]
        if missing:
            raise ConfigError(missing, what="world-model reward service settings")
        return cls(
            ClientSettings(
                enqueue_url=env[enqueue_var], fetch_url=env[fetch_var], token=env.get(token_var) or None, **overrides
            )
        )

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------ one call, retried
    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        h = dict(extra or {})
        if self.settings.token:
            h["Authorization"] = f"Bearer {self.settings.token}"
        return h

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        s = self.settings
        delay = min(s.backoff_max_s, s.backoff_s * 2**attempt) * random.uniform(0.5, 1.0)  # jitter: no herd
        retry_after = response.headers.get("retry-after", "") if response is not None else ""
        if retry_after.isdigit():
            delay = max(delay, min(float(retry_after), s.backoff_max_s))
        return delay

    def _post(self, url: str, **kw: Any) -> httpx.Response:
        """POST with retries; returns the first answer that is not retryable (any other status)."""
        last: str = ""
        t0 = time.monotonic()
        for attempt in range(self.settings.max_retries + 1):
            response = None
            try:
                response = self._http.post(url, **kw)
                if response.status_code not in RETRY_STATUSES:
                    if response.status_code == 401:
                        raise AuthError(
                            f"reward service {url}: {_detail(response)}; set the token variable "
                            "(REMOTE_REWARD_TOKEN, remote_reward.token_env, or WFM_REWARD_TOKEN)"
                        )
                    return response
                last = f"HTTP {response.status_code}: {_detail(response)}"
            except httpx.TransportError as e:  # refused, reset, timed out: the service may be restarting
                last = f"{type(e).__name__}: {e}"
            if attempt < self.settings.max_retries:
                time.sleep(self._delay(attempt, response))
        raise RewardServiceUnreachable(url, self.settings.max_retries + 1, time.monotonic() - t0, last)

    # ------------------------------------------------------------------ protocol
    def enqueue(self, meta: Mapping[str, Any], tensor: bytes = b"", request_id: str | None = None) -> str:
        payload = json.dumps(meta).encode("utf-8") + b"\n" + tensor
        headers = self._headers(
            {"Content-Type": "application/octet-stream", "X-Request-Id": request_id or str(uuidlib.uuid4())}
        )
        r = self._post(self.settings.enqueue_url, content=payload, headers=headers)
        if r.status_code != 200:
            raise RemoteRewardError(f"reward service refused the request (HTTP {r.status_code}): {_detail(r)}")
        return r.json()["uuid"]

    def pull(self, uuid: str, kind: str, deadline: float | None = None) -> dict[str, Any]:
        """The scores document of `kind` for `uuid`, polling while it is not ready (bounded)."""
        deadline = deadline or time.monotonic() + self.settings.result_timeout_s
        while True:
            r = self._post(self.settings.fetch_url, data={"uuid": uuid, "type": kind}, headers=self._headers())
            if r.status_code == 200:
                return r.json()
            if r.status_code == 404:
                raise _Forgotten(uuid)
            if r.status_code != 400 or not _detail(r).startswith("not ready"):
                raise RemoteRewardError(
                    f"reward service: {kind} for {uuid} failed (HTTP {r.status_code}): {_detail(r)}"
                )
            if time.monotonic() > deadline:
                raise RemoteRewardError(
                    f"reward service: {kind} for {uuid} not ready after "
                    f"{self.settings.result_timeout_s:g} s (remote_reward.result_timeout_s)"
                )
            time.sleep(self.settings.poll_interval_s)

    def submit(self, meta: Mapping[str, Any], tensor: bytes = b"", request_id: str | None = None) -> PendingScores:
        rid = request_id or str(uuidlib.uuid4())
        return PendingScores(self, dict(meta), tensor, rid, self.enqueue(meta, tensor, rid))

    def score(self, meta: Mapping[str, Any], tensor: bytes = b"", request_id: str | None = None) -> dict[str, Any]:
        """{reward name: scores document} for every reward in meta["reward_fn"]."""
        return self.submit(meta, tensor, request_id).result()


@dataclass
class PendingScores:
    """An enqueued request; `result()` pulls its documents (enqueued again, same request id, if forgotten)."""

    client: RemoteRewardClient
    meta: dict[str, Any]
    tensor: bytes
    request_id: str
    uuid: str

    def result(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.client.settings.result_timeout_s
        for _ in range(RESUBMITS + 1):
            try:
                return {name: self.client.pull(self.uuid, name, deadline) for name in self.meta["reward_fn"]}
            except _Forgotten:
                self.uuid = self.client.enqueue(self.meta, self.tensor, self.request_id)
        raise RemoteRewardError(
            f"reward service forgot request {self.request_id} {RESUBMITS + 1} times "
            "(restarting without a state_dir, or result_ttl_s too short)"
        )


def _detail(r: httpx.Response) -> str:
    try:
        return str(r.json().get("detail", r.text))
    except ValueError:
        return r.text[:300]


# ---------------------------------------------------------------------------------- GRPO's batch scorer
@dataclass
class RemoteScorer:
    """The rewards of [train.train_policy.remote_reward], scored by the service in requests of batch_size
    completions (all enqueued before the first pull, so the service works on them together).

    Parts are the service's scores (a score_key "a+b" sums two of them) clipped to [clip_min, clip_max];
    their total is scale x clip(sum of weight x part, reward_clip_min, reward_clip_max), as cosmos-rl computes
    it. `weights` (scale x weight) say what each part counts for while the total is inside the clip."""

    client: RemoteRewardClient
    fns: Sequence[Any]  # config.RemoteRewardFn
    scale: float = 1.0
    batch_size: int = 8
    total_min: float | None = None
    total_max: float | None = None

    @classmethod
    def from_config(cls, rc: Any, env: Mapping[str, str] = os.environ) -> RemoteScorer:
        return cls(
            RemoteRewardClient.from_config(rc, env),
            list(rc.reward_fns),
            rc.scale,
            rc.batch_size,
            rc.reward_clip_min,
            rc.reward_clip_max,
        )

    @property
    def weights(self) -> dict[str, float]:
        return {f.name: self.scale * f.weight for f in self.fns}

    def total(self, parts: Mapping[str, float]) -> float:
        raw = sum(f.weight * parts[f.name] for f in self.fns)
        if self.total_min is not None:
            raw = max(raw, self.total_min)
        if self.total_max is not None:
            raw = min(raw, self.total_max)
        return self.scale * raw

    def score_batch(self, completions: Sequence[str], samples: Sequence[Mapping[str, Any]]) -> list[dict[str, float]]:
        reward_fn = {f.name: 1.0 for f in self.fns}  # the service scores; weights apply here (they may be < 0)
        pending = []
        for start in range(0, len(completions), self.batch_size):
            rows = samples[start : start + self.batch_size]
            meta = {
                "media_type": "text",
                "reward_fn": reward_fn,
                "completions": list(completions[start : start + self.batch_size]),
                "prompts": [user_text(s.get("messages", [])) for s in rows],
                "samples": [{"reference": reference_answer(s), "options": s.get("options")} for s in rows],
            }
            pending.append((len(rows), self.client.submit(meta)))
        parts: list[dict[str, float]] = []
        for n, job in pending:
            docs = job.result()
            for i in range(n):
                parts.append(
                    {f.name: _clip(_score(docs[f.name]["scores"], f.score_key or f.name, i), f) for f in self.fns}
                )
        return parts


def _score(scores: Mapping[str, Any], key: str, i: int) -> float:
    """Score i under `key`; a key the reply lacks that joins others with '+' is their sum (cosmos-rl's form)."""
    if key in scores or "+" not in key:
        return float(scores[key][i])
    return sum(float(scores[k.strip()][i]) for k in key.split("+") if k.strip())


def _clip(v: float, f: Any) -> float:
    if f.clip_min is not None:
        v = max(v, f.clip_min)
    if f.clip_max is not None:
        v = min(v, f.clip_max)
    return v
