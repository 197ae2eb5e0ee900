"""Reaching an S3 (or S3-compatible) store: its settings, a boto3 client, and what its errors mean.

Credentials, first found wins: what the caller passes (a Prefect Secret block the flow resolved), then
the world-model recipes' PROD_S3_CHECKPOINT_{ACCESS_KEY_ID,SECRET_ACCESS_KEY,ENDPOINT_URL,REGION_NAME},
then boto3's own chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_DEFAULT_REGION,
AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3, ~/.aws, instance roles); the config's `s3_endpoint_url` over
the environment's endpoint.

Refused credentials are an AuthError, another refusal (no such bucket, a bad name) an UploadError: user
errors, never retried. A lost connection, a timeout or a 5xx answer is an UploadUnavailable: a retry
may help, and a retry resumes where this attempt stopped (`s3_error`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cosmos_train.errors import AuthError, UploadError, UploadUnavailable
from cosmos_train.storage.targets import MIB

# written last by an upload, listing every file with its size and sha256: a folder with it is complete
MANIFEST = "MANIFEST.json"
# every S3 request of an upload: tried UPLOAD_ATTEMPTS times (the first included), each with these timeouts
UPLOAD_ATTEMPTS = 4
UPLOAD_CONNECT_TIMEOUT_S = 10
UPLOAD_READ_TIMEOUT_S = 120


@dataclass
class S3Settings:
    """How to reach the store. None means boto3's own resolution (environment, ~/.aws, roles)."""

    endpoint_url: str | None = None
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    part_size: int = 64 * MIB
    concurrency: int = 4
    extra: dict[str, Any] = field(default_factory=dict)


def s3_settings(
    env: Mapping[str, str],
    *,
    endpoint_url: str | None = None,
    part_size_mb: int = 64,
    concurrency: int = 4,
    credentials: Mapping[str, str] | None = None,
) -> S3Settings:
    """The store's settings: keys from `credentials` (access_key_id, secret_access_key, session_token,
    endpoint_url, region), else PROD_S3_CHECKPOINT_*, else AWS_* in `env`, else None (boto3's chain:
    ~/.aws, instance roles); the endpoint from the config key `endpoint_url`, else the chosen source's,
    else AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL."""
    prod = {
        k: env.get(f"PROD_S3_CHECKPOINT_{v}")
        for k, v in (
            ("access_key_id", "ACCESS_KEY_ID"),
            ("secret_access_key", "SECRET_ACCESS_KEY"),
            ("endpoint_url", "ENDPOINT_URL"),
            ("region", "REGION_NAME"),
        )
    }
    aws = {
        "access_key_id": env.get("AWS_ACCESS_KEY_ID"),
        "secret_access_key": env.get("AWS_SECRET_ACCESS_KEY"),
        "session_token": env.get("AWS_SESSION_TOKEN"),
        "region": env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION"),
        "endpoint_url": env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
    }
    src: Mapping[str, str | None] = {}
    for candidate in (credentials or {}, prod, aws):
        if candidate.get("access_key_id") and candidate.get("secret_access_key"):
            src = candidate
            break
    return S3Settings(
        endpoint_url=endpoint_url or src.get("endpoint_url") or aws["endpoint_url"],
        region=src.get("region") or aws["region"],
        access_key_id=src.get("access_key_id"),
        secret_access_key=src.get("secret_access_key"),
        session_token=src.get("session_token"),
        part_size=part_size_mb * MIB,
        concurrency=concurrency,
    )


def s3_client(
    settings: S3Settings,
    *,
    attempts: int = UPLOAD_ATTEMPTS,
    connect_timeout_s: float = UPLOAD_CONNECT_TIMEOUT_S,
    read_timeout_s: float = UPLOAD_READ_TIMEOUT_S,
) -> Any:
    """A boto3 S3 client; `attempts` per request (the first included), each with these timeouts."""
    import boto3  # why: boto3 / botocore are heavy and only s3:// targets need them
    from botocore.config import Config as BotoConfig  # why: only s3:// targets

    kwargs: dict[str, Any] = {}
    if settings.access_key_id:
        kwargs.update(
            aws_access_key_id=settings.access_key_id,
            aws_secret_access_key=settings.secret_access_key,
            aws_session_token=settings.session_token,
        )
    # boto3 asks for a region; an S3-compatible store on its own endpoint usually ignores it
    region = settings.region or "us-east-1"
    config = BotoConfig(
        retries={"total_max_attempts": attempts, "mode": "standard"},
        connect_timeout=connect_timeout_s,
        read_timeout=read_timeout_s,
        max_pool_connections=max(10, settings.concurrency * 2),
    )
    return boto3.client("s3", endpoint_url=settings.endpoint_url, region_name=region, config=config, **kwargs)


_REFUSED = {
    "InvalidAccessKeyId": "the access key is not known to the store",
    "SignatureDoesNotMatch": "the secret key does not match the access key",
    "AccessDenied": "these credentials may not write there",
    "ExpiredToken": "the session token has expired",
    "InvalidToken": "the session token is not valid",
    "NoSuchBucket": "the bucket does not exist (create it, or fix s3_bucket / the URL)",
    "InvalidBucketName": "that is not a valid bucket name",
    "AllAccessDisabled": "all access to this object has been disabled",
}
_CREDENTIALS_HINT = (
    "set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or PROD_S3_CHECKPOINT_ACCESS_KEY_ID / "
    "_SECRET_ACCESS_KEY, or train.ckpt.s3_credentials_secret), and AWS_ENDPOINT_URL or "
    "train.ckpt.s3_endpoint_url for an S3-compatible store"
)


def s3_error(exc: BaseException, target: str) -> Exception:
    """The UploadError (refused: do not retry) or UploadUnavailable (retry may help) an S3 failure means."""
    from botocore.exceptions import (  # why: only s3:// targets
        ClientError,
        NoCredentialsError,
        PartialCredentialsError,
    )

    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return AuthError(f"{target}: no S3 credentials found; {_CREDENTIALS_HINT}")
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in _REFUSED:
            if code in ("NoSuchBucket", "InvalidBucketName", "AllAccessDisabled"):
                return UploadError(f"{target}: the store refused the upload ({code}: {_REFUSED[code]})")
            return AuthError(
                f"{target}: the store refused the credentials ({code}: {_REFUSED[code]}); {_CREDENTIALS_HINT}"
            )
        if status in (401, 403) and not code.isalpha():  # a HEAD's refusal: a status, no code
            return AuthError(f"{target}: the store refused the credentials (HTTP {status}); {_CREDENTIALS_HINT}")
        if status >= 500 or code in ("SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable"):
            return UploadUnavailable(f"{target}: the store is unavailable ({code or status}); a retry resumes")
        return UploadError(f"{target}: the store refused the upload ({code or status}: {exc})")
    return UploadUnavailable(f"{target}: cannot reach the store ({type(exc).__name__}: {exc}); a retry resumes")
