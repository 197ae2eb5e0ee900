"""The `reward-service` flow: the reward service as a Prefect deployment, its token from a Secret block.

    prefect deployment run 'reward-service/reward-service' --param params='{"token_secret": "reward-token"}'
    cosmos-train reward-service ...                       # the same service without Prefect

Runs `cosmos-train reward-service` as a child process (it dies with this flow, even one killed with
SIGKILL), waits until it answers ping, logs where it listens, and keeps it up until the flow is
cancelled or `run_for_s` passes; then stops it (SIGTERM: batches being scored finish). Every minute it
logs the service's /metrics (queue depth, latency p50 / p99 per handler, errors), and a service that
exits by itself fails the flow with the tail of its log.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from prefect import flow, get_run_logger
from pydantic import BaseModel, Field

from tasks.reward_service import reward_service, secret_value

METRICS_EVERY_S = 60.0


class RewardServiceParams(BaseModel):
    """What a user passes from the UI, a schedule or `prefect deployment run`."""

    token_secret: str = Field(..., min_length=1, description="Prefect Secret block holding the service's token.")
    config: str | None = Field(None, description="rewards.toml (queue, limits, TTL, handlers).")
    host: str = Field("127.0.0.1", description="Address to listen on (loopback unless set).")
    port: int = Field(8080, ge=1, le=65535, description="Port to listen on.")
    log_dir: str = Field("outputs/reward-service", description="Where the service's log goes.")
    run_for_s: float | None = Field(None, gt=0, description="Stop after this many seconds (unset: until cancelled).")


@flow(name="reward-service", log_prints=True)
def reward_service_flow(params: RewardServiceParams) -> dict:
    logger = get_run_logger()
    log_path = Path(params.log_dir) / "reward_service.log"
    token = secret_value(params.token_secret)
    started = time.monotonic()
    with reward_service(log_path, params.host, params.port, token, params.config) as (proc, base, _):
        logger.info("reward service up at %s (enqueue %s/enqueue, pull %s/pull), log %s", base, base, base, log_path)
        last_metrics = started
        while params.run_for_s is None or time.monotonic() - started < params.run_for_s:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the reward service exited with code {proc.returncode}; log {log_path}:\n{tail}")
            if time.monotonic() - last_metrics >= METRICS_EVERY_S:
                last_metrics = time.monotonic()
                metrics = httpx.get(
                    base.removesuffix("/api/reward") + "/metrics",
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=5,
                ).json()
                logger.info("reward service metrics: %s", metrics)
            time.sleep(0.5)
    return {"url": base, "served_s": round(time.monotonic() - started, 1), "log": str(log_path)}
