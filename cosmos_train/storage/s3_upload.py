"""Upload a folder to S3 (or any S3-compatible store), resumable.

    from cosmos_train.storage.s3_upload import upload_folder_s3
    upload_folder_s3(Path("RUN/safetensors/final"), parse_target("s3://my-bucket/cosmos/tiny/final"), settings)

Each file is compared with what the bucket holds (size and our sha256, kept in the object's
metadata): an unchanged file is not sent again. A file larger than one part goes up as a multipart
upload of `part_size` parts, `concurrency` at a time; an upload cut off half way (a killed process, a
lost network) is found again with ListMultipartUploads, and every part already in the bucket whose
ETag is the MD5 of the same local bytes is kept, so only the missing parts are sent. `MANIFEST.json`
(every file with its size and sha256, the run and step) is written last, after removing an older one
first: a reader that finds the manifest finds every file it lists, complete (reading it back:
storage/s3_download.py). `put_file_s3` puts one small file as it is now (a run's metrics and logs,
cosmos_train/run_sync.py).

`check_s3_target` makes an upload's first request alone, bounded (PROBE_ATTEMPTS tries of
PROBE_CONNECT_TIMEOUT_S to connect, PROBE_READ_TIMEOUT_S to answer), so the `upload` command says an
unreachable endpoint, refused credentials or a missing bucket before Prefect starts. The settings, the client
and what a failure means (an AuthError, UploadError or UploadUnavailable): storage/s3.py.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from cosmos_train.errors import UploadError, UploadUnavailable
from cosmos_train.storage.s3 import MANIFEST, S3Settings, s3_client, s3_error
from cosmos_train.storage.targets import MIB, Target, UploadReport, folder_files, sha256_file

S3_MIN_PART = 5 * MIB  # S3 refuses smaller parts (except the last): EntityTooSmall
COPY_LIMIT = 5 * 1024 * MIB  # the largest object CopyObject copies in one request
# check_s3_target's bounds: an endpoint that refuses connections fails both tries at once; one that drops them or
# never answers is given up on within about PROBE_ATTEMPTS x (connect + read) seconds, not the uploader's minutes.
PROBE_ATTEMPTS = 2
PROBE_CONNECT_TIMEOUT_S = 5
PROBE_READ_TIMEOUT_S = 10
RESUME_NOTE = (
    "an upload skips the files already stored whole (same size and sha256) and continues a cut-off multipart "
    "upload from its stored parts"
)


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
