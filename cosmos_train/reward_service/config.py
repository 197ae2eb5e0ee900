"""rewards.toml: the reward service's settings (every field described and bounded).

    cosmos-train reward-service --config rewards.toml

    queue_size = 256
    max_body_mb = 512
    result_ttl_s = 600
    workers = 2
    header_timeout_s = 10                    # slow clients: headers, body pauses, connections held
    body_timeout_s = 30
    max_connections = 512

    [handlers.vlm_judge]
    model_path = "outputs/tiny-model"

    [latent_decoder]                         # media_type "latent" (or none): Wan VAE latents -> pixels
    wan21_vae = "models/wan2.1-vae"          # a diffusers AutoencoderKLWan folder, z_dim 16

A missing file means the defaults; an unknown key or an out-of-range value is a ConfigError naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

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


class CosmosReason1Settings(Section):
    """[handlers.cosmos_reason1]: a Cosmos-Reason VLM asked whether a video has artifacts (the reference's
    cosmos_reason1 reward; docs/FACTS.md has its prompt and score rule)."""

    model_path: str | None = Field(
        None,
        description="Local model folder the trainer loads (Cosmos-Reason1-7B-Reward, or any supported VLM; "
        "unset: the handler is off).",
    )
    device: str = Field("cpu", pattern=r"^(cpu|cuda(:\d+)?|auto)$", description="cpu | cuda | cuda:N | auto.")
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = Field(
        "float32", description="Weights' dtype: float32 | bfloat16 | float16 | auto (bfloat16 on a GPU)."
    )
    prompt_source: Literal["request", "fixed"] = Field(
        "request",
        description="The user text after the video: \"request\" (the reference's: each item's prompt from the "
        'request, the fixed question where the request has none) or "fixed" (always the trained question).',
    )


class HandlerSettings(Section):
    """[handlers]: settings of the handlers that need any."""

    vlm_judge: JudgeSettings = Field(default_factory=JudgeSettings, description="The VLM-judge handler.")
    cosmos_reason1: CosmosReason1Settings = Field(
        default_factory=CosmosReason1Settings, description="The Cosmos-Reason1 video judge."
    )


class LatentDecoderSettings(Section):
    """[latent_decoder]: the Wan VAEs that turn media_type "latent" (and requests without a media_type) into
    uint8 pixels before the video handlers, as the reference service does; the channel count picks the VAE."""

    wan21_vae: str | None = Field(
        None,
        min_length=1,
        description="Local diffusers AutoencoderKLWan folder for 16-channel (Wan2.1) latents (unset: refused).",
    )
    wan22_vae: str | None = Field(
        None,
        min_length=1,
        description="Local diffusers AutoencoderKLWan folder for 48-channel (Wan2.2) latents (unset: refused).",
    )
    device: str = Field(
        "cpu", pattern=r"^(cpu|cuda(:\d+)?)$", description="Where the VAEs decode: cpu | cuda | cuda:N."
    )
    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="The VAEs' dtype (float32 | bfloat16 | float16); pixels come out uint8 either way."
    )


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
    max_decoded_mb: float = Field(
        1024.0,
        gt=0,
        le=256 * 1024,
        description="Largest tensor one request may decode to, in MiB (the array its header declares; for latents "
        "also the pixels they decode to), checked from the headers before anything is allocated; over it: 413.",
    )
    max_queued_mb: float = Field(
        4096.0,
        gt=0,
        le=1024 * 1024,
        description="MiB of decoded tensors all requests queued or being scored may hold together; a request that "
        "would pass it is answered 429 with Retry-After (like a full queue), one that never fits 413.",
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
    retry_after_s: int = Field(1, ge=1, le=3600, description="Retry-After (seconds) sent with a 429 or 503.")
    header_timeout_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="Seconds a connection has to send complete request headers, from connecting or from the "
        "previous response on a kept-alive connection; a slower one is closed.",
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="Seconds a request body may pause (no bytes arriving); a longer pause is answered 408 and "
        "the connection closed.",
    )
    max_connections: int = Field(
        512,
        ge=1,
        le=100_000,
        description="Connections held at once; one more is sent a 503 (Retry-After) and closed as soon as it is "
        "accepted, unread (clients retry). Keep it under the process's open-file limit (ulimit -n).",
    )
    state_dir: str | None = Field(
        None,
        description="Folder where queued requests and results are kept on disk, so a restarted service finishes "
        "queued work and still answers pulls and retried enqueues (unset: memory only).",
    )
    latency_window: int = Field(
        4096, ge=16, le=1_000_000, description="Latest latencies per handler that /metrics' p50 / p99 are over."
    )
    handlers: HandlerSettings = Field(default_factory=HandlerSettings, description="Per-handler settings.")
    latent_decoder: LatentDecoderSettings = Field(
        default_factory=LatentDecoderSettings, description="Wan VAEs for media_type latent."
    )

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * 1024 * 1024)

    @property
    def max_decoded_bytes(self) -> int:
        return int(self.max_decoded_mb * 1024 * 1024)

    @property
    def max_queued_bytes(self) -> int:
        return int(self.max_queued_mb * 1024 * 1024)


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
