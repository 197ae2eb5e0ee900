"""rewards.toml: the reward service's settings (every field described and bounded).

    cosmos-train reward-service --config rewards.toml

    queue_size = 256
    max_body_mb = 512
    result_ttl_s = 600
    workers = 2

    [handlers.vlm_judge]
    model_path = "outputs/tiny-model"

A missing file means the defaults; an unknown key or an out-of-range value is a ConfigError naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from cosmos_train.config.base import Section, read_toml
from cosmos_train.config.explain import explain_errors, unknown_keys
from cosmos_train.errors import ConfigError

WHAT = "reward service config"


class JudgeSettings(Section):
    """[handlers.vlm_judge]: a local VLM asked a yes/no question about each completion."""

    model_path: str | None = Field(
        None, description="Local model folder loaded through the generation layer (unset: the handler is off)."
    )
    device: str = Field("cpu", description="HF engine device: cpu | cuda | cuda:N | auto.")
    dtype: str = Field("float32", description="float32 | bfloat16 | float16 | auto.")
    question: str = Field(
        "Is the answer correct and well reasoned? Answer yes or no.",
        description="The yes/no question asked after the prompt and the completion.",
    )
    max_length: int = Field(4096, ge=64, le=1 << 20, description="Prompt + answer tokens the judge accepts.")


class HandlerSettings(Section):
    """[handlers]: settings of the handlers that need any."""

    vlm_judge: JudgeSettings = Field(default_factory=JudgeSettings, description="The VLM-judge handler.")


class ServiceConfig(Section):
    """The whole rewards.toml."""

    queue_size: int = Field(
        256,
        ge=1,
        le=1_000_000,
        description="Requests waiting to be scored; one more is answered 429 with Retry-After (never dropped).",
    )
    max_body_mb: float = Field(
        512.0, gt=0, le=64 * 1024, description="Largest enqueue body in MiB; a larger one is answered 413."
    )
    result_ttl_s: float = Field(
        600.0, gt=0, le=7 * 24 * 3600, description="Seconds a finished result waits to be pulled before it is dropped."
    )
    pulled_grace_s: float = Field(
        30.0,
        ge=0,
        le=3600,
        description="Seconds a result stays after its last pull, so a pull whose answer was lost can be retried.",
    )
    request_id_ttl_s: float = Field(
        3600.0,
        gt=0,
        le=7 * 24 * 3600,
        description="Seconds a client request id is remembered, so a retried enqueue returns the same uuid.",
    )
    workers: int = Field(2, ge=1, le=256, description="Threads scoring requests off the event loop.")
    retry_after_s: int = Field(1, ge=1, le=3600, description="Retry-After (seconds) sent with a 429.")
    state_dir: str | None = Field(
        None,
        description="Folder where queued requests and results are kept on disk, so a restarted service finishes "
        "queued work and still answers pulls and retried enqueues (unset: memory only).",
    )
    latency_window: int = Field(
        4096, ge=16, le=1_000_000, description="Latest latencies per handler that /metrics' p50 / p99 are over."
    )
    handlers: HandlerSettings = Field(default_factory=HandlerSettings, description="Per-handler settings.")

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 1024 * 1024)


def load_service_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> ServiceConfig:
    """The file's settings (defaults when `path` is None), with `overrides` on top."""
    raw, source = read_toml(path, what=WHAT)
    raw.update(overrides or {})
    # the job config's error wording: the key path, its bounds in words, the closest valid key for a typo
    problems = unknown_keys(raw, ServiceConfig)
    if problems:
        raise ConfigError(problems, source, what=WHAT)
    try:
        return ServiceConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(explain_errors(e, ServiceConfig), source, what=WHAT) from None
