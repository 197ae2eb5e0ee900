"""Upload a run's exports and checkpoints to S3 (or any S3-compatible store) and the Hugging Face Hub.

    cosmos-train upload outputs/tiny-sft/20261124-1937 --to s3://my-bucket/cosmos/tiny
    cosmos-train upload RUN/safetensors/final --to hf://my-org/tiny-sft

    from cosmos_train.storage import parse_target, s3_settings, upload_folder_s3
    upload_folder_s3(Path("RUN/safetensors/final"), "my-bucket", "cosmos/tiny/final", s3_settings(os.environ))

S3 (boto3): each file is compared with what the bucket holds (size and our sha256, kept in the object's
metadata): an unchanged file is not sent again. A file larger than one part goes up as a multipart
upload of `part_size` parts, `concurrency` at a time; an upload cut off half way (a killed process, a
lost network) is found again with ListMultipartUploads, and every part already in the bucket whose
ETag is the MD5 of the same local bytes is kept, so only the missing parts are sent. `MANIFEST.json`
(every file with its size and sha256, the run and step) is written last, after removing an older one
first: a reader that finds the manifest finds every file it lists, complete.

Back from S3: `download_folder_s3(target, local, settings)` fetches a folder whose MANIFEST.json exists (a
complete upload), checks every file's size and sha256 against it and renames the download into place whole;
`list_keys_s3` lists a prefix, `put_file_s3` puts one small file as it is now (a run's metrics and logs,
cosmos_train/run_sync.py).

The Hub (huggingface_hub): the repo is created if missing (private unless told otherwise), the folder
goes up with `upload_folder`, with a commit message naming the run and step; from huggingface_hub 2.0
(installed here: 2.4) that call is itself resumable and batches a large folder into several commits;
with an older library a folder above `large_folder_bytes` goes through its `upload_large_folder`.

Credentials, first found wins: what the caller passes (a Prefect Secret block the flow resolved), then
the world-model recipes' PROD_S3_CHECKPOINT_{ACCESS_KEY_ID,SECRET_ACCESS_KEY,ENDPOINT_URL,REGION_NAME},
then boto3's own chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, AWS_DEFAULT_REGION,
AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3, ~/.aws, instance roles); the config's `s3_endpoint_url` over
the environment's endpoint. The Hub: the token passed, else HF_TOKEN.

Refused credentials are an AuthError, another refusal (no such bucket, a bad name) an UploadError: user
errors, never retried. A lost connection, a timeout or a 5xx answer is an UploadUnavailable: a retry
may help, and a retry resumes where this attempt stopped. `check_s3_target` makes an upload's first request
alone, bounded (PROBE_ATTEMPTS tries of PROBE_CONNECT_TIMEOUT_S to connect, PROBE_READ_TIMEOUT_S to answer), so
the `upload` command says an unreachable endpoint, refused credentials or a missing bucket before Prefect starts.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cosmos_train.errors import AuthError, UploadError, UploadUnavailable

MANIFEST = "MANIFEST.json"
MIB = 1024 * 1024
S3_MIN_PART = 5 * MIB
COPY_LIMIT = (
    5 * 1024 * MIB
)  # the largest object CopyObject copies in one request  # S3 refuses smaller parts (except the last): EntityTooSmall
LARGE_FOLDER_BYTES = 50 * 1024 * MIB  # the Hub's large-folder path above this
# every S3 request of an upload: tried UPLOAD_ATTEMPTS times (the first included), each with these timeouts
UPLOAD_ATTEMPTS = 4
UPLOAD_CONNECT_TIMEOUT_S = 10
UPLOAD_READ_TIMEOUT_S = 120
# check_s3_target's bounds: an endpoint that refuses connections fails both tries at once; one that drops them or
# never answers is given up on within about PROBE_ATTEMPTS x (connect + read) seconds, not the uploader's minutes.
PROBE_ATTEMPTS = 2
PROBE_CONNECT_TIMEOUT_S = 5
PROBE_READ_TIMEOUT_S = 10
RESUME_NOTE = (
    "an upload skips the files already stored whole (same size and sha256) and continues a cut-off multipart "
    "upload from its stored parts"
)


# ----------------------------------------------------------------------------- targets
@dataclass(frozen=True)
class Target:
    """Where an upload goes: s3://bucket/prefix or hf://org/repo."""

    scheme: str  # "s3" | "hf"
    bucket_or_repo: str
    prefix: str = ""

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.bucket_or_repo}" + (f"/{self.prefix}" if self.prefix else "")

    def child(self, *parts: str) -> Target:
        """The same target one folder down (S3: a longer prefix; the Hub: a path inside the repo)."""
        prefix = "/".join(p.strip("/") for p in (self.prefix, *parts) if p and p.strip("/"))
        return Target(self.scheme, self.bucket_or_repo, prefix)


def parse_target(url: str) -> Target:
    """`s3://bucket[/prefix]` or `hf://org/repo[/path]`; anything else is an UploadError saying the forms."""
    scheme, sep, rest = url.partition("://")
    rest = rest.strip("/")
    if sep and scheme == "s3" and rest:
        bucket, _, prefix = rest.partition("/")
        return Target("s3", bucket, prefix)
    if sep and scheme == "hf" and rest and all(rest.split("/")[:2]):
        parts = rest.split("/")
        if len(parts) == 1:  # a bare name: the repo goes under the token's own user (the seed guides' form)
            return Target("hf", parts[0])
        return Target("hf", f"{parts[0]}/{parts[1]}", "/".join(parts[2:]))
    raise UploadError(f"{url!r}: not an upload target; use s3://bucket/prefix or hf://org/repo")


def folder_files(local: Path) -> list[Path]:
    """Every file under `local` in a stable order, leaving out atomic writers' temporaries (`.*.tmp`)."""
    local = Path(local)
    if local.is_file():
        return [local]
    return sorted(
        p for p in local.rglob("*") if p.is_file() and not (p.name.startswith(".") and p.name.endswith(".tmp"))
    )


def sha256_file(path: Path, chunk: int = 8 * MIB) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@dataclass
class UploadReport:
    """What one folder upload did: what a summary and a retry need to know."""

    source: str
    url: str
    files_sent: int = 0
    files_unchanged: int = 0
    bytes_sent: int = 0
    parts_sent: int = 0
    parts_reused: int = 0
    seconds: float = 0.0
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------------------- S3 settings
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


# ----------------------------------------------------------------------------- S3 upload
def _parts(size: int, part_size: int) -> list[tuple[int, int, int]]:
    """(part number, offset, length) of a file cut into `part_size` parts (S3 numbers them from 1)."""
    return [(i + 1, off, min(part_size, size - off)) for i, off in enumerate(range(0, size, part_size))]


def _read(path: Path, offset: int, length: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


def _same_object(client: Any, bucket: str, key: str, size: int, sha: str) -> bool:
    from botocore.exceptions import ClientError  # why: only s3:// targets

    try:
        head = client.head_object(Bucket=bucket, Key=key)
    except ClientError as e:
        if str(e.response.get("Error", {}).get("Code")) in ("404", "NoSuchKey", "NotFound"):
            return False
        raise
    return int(head.get("ContentLength", -1)) == size and head.get("Metadata", {}).get("sha256") == sha


def _multipart(
    client: Any,
    bucket: str,
    key: str,
    path: Path,
    size: int,
    sha: str,
    settings: S3Settings,
    report: UploadReport,
    on_part: Callable[[int], None] | None,
) -> None:
    """Upload `path` in parts, reusing the parts of an earlier cut-off upload of the same bytes."""
    parts = _parts(size, settings.part_size)
    earlier = [
        u for u in client.list_multipart_uploads(Bucket=bucket, Prefix=key).get("Uploads", []) if u["Key"] == key
    ]
    earlier.sort(key=lambda u: u["Initiated"])
    done: dict[int, str] = {}
    upload_id, reused_from_earlier = None, False
    for u in earlier[::-1]:  # the newest earlier upload whose parts match this file's bytes is continued
        listed = client.list_parts(Bucket=bucket, Key=key, UploadId=u["UploadId"]).get("Parts", [])
        sizes = {n: length for n, _, length in parts}
        matching = {}
        for p in listed:
            n = int(p["PartNumber"])
            if sizes.get(n) == int(p["Size"]):
                _, off, length = parts[n - 1]
                if hashlib.md5(_read(path, off, length)).hexdigest() == p["ETag"].strip('"'):  # noqa: S324 (S3's ETag)
                    matching[n] = p["ETag"]
        if matching and upload_id is None:
            upload_id, done, reused_from_earlier = u["UploadId"], matching, True
        else:
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=u["UploadId"])  # a stale one
    if upload_id is None:
        upload_id = client.create_multipart_upload(Bucket=bucket, Key=key, Metadata={"sha256": sha})["UploadId"]
    report.parts_reused += len(done)

    def send(part: tuple[int, int, int]) -> tuple[int, str]:
        n, off, length = part
        etag = client.upload_part(
            Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=_read(path, off, length)
        )["ETag"]
        if on_part:
            on_part(n)
        return n, etag

    todo = [p for p in parts if p[0] not in done]
    with concurrent.futures.ThreadPoolExecutor(max_workers=settings.concurrency) as pool:
        for n, etag in pool.map(send, todo):
            done[n] = etag
            report.parts_sent += 1
            report.bytes_sent += parts[n - 1][2]
    client.complete_multipart_upload(
        Bucket=bucket,
        Key=key,
        UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": done[n]} for n in sorted(done)]},
    )
    if report.parts_reused and reused_from_earlier:
        # The continued upload carries the sha256 its first attempt was created with, and the file may have
        # changed since in parts that attempt never sent: write this file's sha256, so an unchanged-file
        # skip is never decided on a stale one (a copy in place; S3 copies up to 5 GiB in one request).
        if size <= COPY_LIMIT:
            client.copy_object(
                Bucket=bucket,
                Key=key,
                CopySource={"Bucket": bucket, "Key": key},
                Metadata={"sha256": sha},
                MetadataDirective="REPLACE",
            )
        else:
            client.delete_object(Bucket=bucket, Key=key)  # no trustworthy checksum: the next upload re-sends
            raise UploadUnavailable(
                f"s3://{bucket}/{key}: a continued upload over 5 GiB cannot be re-stamped; "
                "it was removed and a retry uploads it whole"
            )


def upload_folder_s3(
    local: Path,
    target: Target,
    settings: S3Settings,
    *,
    meta: Mapping[str, Any] | None = None,
    client: Any = None,
    on_part: Callable[[int], None] | None = None,
) -> UploadReport:
    """Upload the folder (or file) `local` under `target` (s3://bucket/prefix), MANIFEST.json last."""
    local = Path(local)
    if not local.exists():
        raise FileNotFoundError(local)
    started = time.monotonic()
    report = UploadReport(str(local), target.url)
    client = client or s3_client(settings)
    bucket, prefix = target.bucket_or_repo, target.prefix
    manifest_key = f"{prefix}/{MANIFEST}" if prefix else MANIFEST
    try:  # a listing (not a HEAD, whose error has no body) names what is wrong before anything is sent
        client.list_objects_v2(Bucket=bucket, Prefix=manifest_key, MaxKeys=1)
    except Exception as e:  # noqa: BLE001 (mapped: refused vs unavailable)
        raise _listing_error(e, target) from None
    try:
        files = folder_files(local)
        root = local if local.is_dir() else local.parent
        entries = []
        client.delete_object(Bucket=bucket, Key=manifest_key)  # incomplete from here until the new one is written
        for path in files:
            rel = path.relative_to(root).as_posix()
            key = f"{prefix}/{rel}" if prefix else rel
            size, sha = path.stat().st_size, sha256_file(path)
            entries.append({"path": rel, "size": size, "sha256": sha})
            if _same_object(client, bucket, key, size, sha):
                report.files_unchanged += 1
                continue
            if size > settings.part_size:
                _multipart(client, bucket, key, path, size, sha, settings, report, on_part)
            else:
                with open(path, "rb") as f:
                    client.put_object(Bucket=bucket, Key=key, Body=f, Metadata={"sha256": sha})
                report.bytes_sent += size
            report.files_sent += 1
        manifest = {"files": entries, "source": str(local), "uploaded_at": time.time(), **dict(meta or {})}
        client.put_object(
            Bucket=bucket,
            Key=manifest_key,
            Body=json.dumps(manifest, indent=1).encode(),
            ContentType="application/json",
        )
    except (UploadError, UploadUnavailable, FileNotFoundError):
        raise
    except Exception as e:  # noqa: BLE001 (botocore's errors mapped to ours)
        raise s3_error(e, target.url) from e
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _listing_error(exc: BaseException, target: Target) -> Exception:
    """What a failed first listing of `target` means: s3_error's mapping, with a missing bucket said as such."""
    from botocore.exceptions import ClientError  # why: only s3:// targets

    if isinstance(exc, ClientError) and str(exc.response.get("Error", {}).get("Code")) in ("404", "NoSuchBucket"):
        return UploadError(
            f"{target.url}: the bucket {target.bucket_or_repo!r} does not exist (create it, or fix s3_bucket / the URL)"
        )
    return s3_error(exc, target.url)


def check_s3_target(target: Target, settings: S3Settings) -> None:
    """The first request of an upload to `target`, alone and bounded (PROBE_*): refused credentials are an
    AuthError, a missing bucket an UploadError, and an endpoint that cannot be reached an UploadError too (not
    UploadUnavailable: nothing was sent, so there is nothing to retry yet) naming the endpoint, the bounds and the
    last error. The `upload` command calls it before Prefect starts."""
    client = s3_client(
        settings,
        attempts=PROBE_ATTEMPTS,
        connect_timeout_s=PROBE_CONNECT_TIMEOUT_S,
        read_timeout_s=PROBE_READ_TIMEOUT_S,
    )
    manifest_key = f"{target.prefix}/{MANIFEST}" if target.prefix else MANIFEST
    try:
        client.list_objects_v2(Bucket=target.bucket_or_repo, Prefix=manifest_key, MaxKeys=1)
    except Exception as e:  # noqa: BLE001 (mapped: refused vs unreachable)
        error = _listing_error(e, target)
        if not isinstance(error, UploadUnavailable):
            raise error from None
        raise UploadError(
            f"{target.url}: cannot reach the S3 endpoint {client.meta.endpoint_url}: {PROBE_ATTEMPTS} tries, each "
            f"allowed {PROBE_CONNECT_TIMEOUT_S} s to connect and {PROBE_READ_TIMEOUT_S} s to answer, failed (last "
            f"error: {type(e).__name__}: {e}); nothing was sent. Check the endpoint (--s3-endpoint-url, "
            "AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3, PROD_S3_CHECKPOINT_ENDPOINT_URL or train.ckpt.s3_endpoint_url), "
            "that the store is running and reachable from this machine, and the credentials (AWS_ACCESS_KEY_ID / "
            "AWS_SECRET_ACCESS_KEY or PROD_S3_CHECKPOINT_*), then run the same command again: "
            f"{RESUME_NOTE}"
        ) from None


def read_manifest(target: Target, settings: S3Settings, client: Any = None) -> dict[str, Any] | None:
    """The MANIFEST.json under `target`, or None while an upload there is incomplete."""
    from botocore.exceptions import ClientError  # why: only s3:// targets

    client = client or s3_client(settings)
    key = f"{target.prefix}/{MANIFEST}" if target.prefix else MANIFEST
    try:
        return json.loads(client.get_object(Bucket=target.bucket_or_repo, Key=key)["Body"].read())
    except ClientError as e:
        if str(e.response.get("Error", {}).get("Code")) in ("404", "NoSuchKey"):
            return None
        raise s3_error(e, target.url) from e


def list_keys_s3(target: Target, settings: S3Settings, client: Any = None, suffix: str = "") -> list[str]:
    """Every key under `target`'s prefix (as a folder: `prefix/`) ending with `suffix`, sorted."""
    client = client or s3_client(settings)
    prefix = f"{target.prefix.rstrip('/')}/" if target.prefix else ""
    try:
        pages = client.get_paginator("list_objects_v2").paginate(Bucket=target.bucket_or_repo, Prefix=prefix)
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []) if o["Key"].endswith(suffix))
    except Exception as e:  # noqa: BLE001 (botocore's errors mapped to ours)
        raise s3_error(e, target.url) from e


def download_folder_s3(target: Target, local: Path, settings: S3Settings, client: Any = None) -> dict[str, Any] | None:
    """Download the folder `target` that an `upload_folder_s3` completed (its MANIFEST.json lists every file)
    into `local`: each file checked against the manifest's size and sha256, written into a temporary sibling
    folder that is renamed into place whole, so `local` never holds half a download. Returns the manifest, or
    None when there is none (an upload there is incomplete: nothing is downloaded)."""
    import shutil  # why: only the download path removes folders

    client = client or s3_client(settings)
    manifest = read_manifest(target, settings, client)
    if manifest is None:
        return None
    local = Path(local)
    tmp = local.with_name(f".{local.name}.download.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for entry in manifest["files"]:
            rel = str(entry["path"])
            if rel.startswith("/") or ".." in Path(rel).parts:
                raise UploadError(f"{target.url}: {MANIFEST} names {rel!r}, outside the folder")
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            key = f"{target.prefix}/{rel}" if target.prefix else rel
            client.download_file(target.bucket_or_repo, key, str(dest))
            if dest.stat().st_size != int(entry["size"]) or sha256_file(dest) != entry["sha256"]:
                raise UploadUnavailable(f"{target.url}/{rel}: the downloaded bytes differ from {MANIFEST}; retry")
        if local.exists():
            shutil.rmtree(local)
        tmp.rename(local)
    except (UploadError, UploadUnavailable):
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    except Exception as e:  # noqa: BLE001 (botocore's errors mapped to ours)
        shutil.rmtree(tmp, ignore_errors=True)
        raise s3_error(e, target.url) from e
    return manifest


def put_file_s3(path: Path, target: Target, settings: S3Settings, client: Any = None) -> None:
    """One small file to the key `target.prefix` as it is now (a run's metrics and logs, re-sent as they grow)."""
    client = client or s3_client(settings)
    try:
        with open(path, "rb") as f:
            client.put_object(Bucket=target.bucket_or_repo, Key=target.prefix, Body=f.read())
    except OSError:
        raise
    except Exception as e:  # noqa: BLE001 (botocore's errors mapped to ours)
        raise s3_error(e, target.url) from e


# ----------------------------------------------------------------------------- Hugging Face Hub
def hf_token(env: Mapping[str, str], token: str | None = None) -> str:
    """The token passed (a Prefect Secret the flow resolved), else HF_TOKEN; none is an UploadError."""
    token = token or env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN")
    if not token:
        raise AuthError(
            "Hugging Face upload: no token; set HF_TOKEN to a token with write access "
            "(or train.ckpt.hf_token_secret to a Prefect Secret block holding one)"
        )
    return token


def hf_error(exc: BaseException, repo: str) -> Exception:
    status = getattr(getattr(exc, "response", None), "status_code", None)
    name = type(exc).__name__
    if status in (401, 403) or name in ("RepositoryNotFoundError", "GatedRepoError"):
        return AuthError(
            f"hf://{repo}: the Hub refused the upload ({status or name}): the token needs write "
            "access to that repo (or to the org it is created in)"
        )
    if status is not None and 400 <= status < 500:
        return UploadError(f"hf://{repo}: the Hub refused the upload ({status}: {exc})")
    return UploadUnavailable(f"hf://{repo}: cannot reach the Hub ({name}: {exc}); a retry resumes")


def upload_folder_hf(
    local: Path,
    target: Target,
    *,
    token: str,
    commit_message: str,
    private: bool = True,
    api: Any = None,
    large_folder_bytes: int = LARGE_FOLDER_BYTES,
) -> UploadReport:
    """Create the repo if missing and upload `local` in one commit (or the resumable large-folder path)."""
    local = Path(local)
    started = time.monotonic()
    report = UploadReport(str(local), target.url)
    if api is None:
        from huggingface_hub import HfApi  # why: the hub client only for hf:// targets

        api = HfApi(token=token)
    repo = target.bucket_or_repo
    files = folder_files(local)
    total = sum(p.stat().st_size for p in files)
    try:
        api.create_repo(repo_id=repo, repo_type="model", private=private, exist_ok=True, token=token)
        if total > large_folder_bytes and not target.prefix and hasattr(api, "upload_large_folder"):
            # huggingface_hub < 2: its resumable large-folder path, in several commits (no commit message).
            # From 2.0 on, upload_folder itself batches large folders and resumes (committed files skipped,
            # uploaded data deduplicated), and upload_large_folder is gone.
            api.upload_large_folder(repo_id=repo, folder_path=str(local), repo_type="model", private=private)
            report.note = "large-folder upload (several commits)"
        else:
            api.upload_folder(
                repo_id=repo,
                folder_path=str(local),
                path_in_repo=target.prefix or None,
                repo_type="model",
                commit_message=commit_message,
                token=token,
            )
    except Exception as e:  # noqa: BLE001 (mapped: refused vs unavailable)
        raise hf_error(e, repo) from e
    report.files_sent, report.bytes_sent = len(files), total
    report.seconds = round(time.monotonic() - started, 3)
    return report
