"""Upload targets and what an upload sends: `parse_target` reads s3://bucket/prefix or hf://org/repo into a
`Target`; `folder_files` and `sha256_file` list a local folder's files and fingerprint them; `UploadReport` says
what one folder upload did. What the S3 (storage/s3_upload.py) and Hub (storage/hub.py) uploaders share."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from cosmos_train.errors import UploadError

MIB = 1024 * 1024


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
