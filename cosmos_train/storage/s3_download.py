"""Back from S3: what an upload (storage/s3_upload.py) completed, read again. `read_manifest` is the MANIFEST.json
under a target (None while an upload there is incomplete); `download_folder_s3(target, local, settings)` fetches
a folder whose MANIFEST.json exists, checks every file's size and sha256 against it and renames the download into
place whole; `list_keys_s3` lists a prefix (a run's files on S3: cosmos_train/run_sync.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from cosmos_train.errors import UploadError, UploadUnavailable
from cosmos_train.storage.s3 import MANIFEST, S3Settings, s3_client, s3_error
from cosmos_train.storage.targets import Target, sha256_file


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
