"""Runs on S3: `output_dir = "s3://bucket/prefix"` trains in a local working copy mirrored to the bucket, and
`resume = true` continues from the bucket on a machine whose disk holds nothing of the run.

    sync = RunSync(run_dir, "s3://bucket/prefix/<run name>", settings)   # rank 0 of the trainer (train/loop.py)
    sync.start()              # a thread: a scan every interval_s, and at once after `poke()` (a save, an export)
    records = sync.close()    # stop the thread, the last scan (retried), one record per folder; never raises

    local = fetch_checkpoint("s3://bucket/prefix", settings)   # the newest complete checkpoint there, downloaded

The run folder RUN = `<run_cache_root(output_dir)>/<name>` (config/paths.py: $COSMOS_RUN_CACHE, default
$COSMOS_CACHE/runs, then the bucket and prefix) is the local copy of `s3://bucket/prefix/<name>`; the flows and
the CLI read it as they read any run folder. A scan sends:
- each complete checkpoint (`checkpoints/step_N` holding COMPLETE) and each export (`safetensors/<name>`,
  `diffusers/<name>`) as a folder, once, through `storage.s3_upload.upload_folder_s3`: resumable, unchanged files
  skipped, MANIFEST.json written last. MANIFEST.json is the bucket's completeness marker: a checkpoint whose manifest is
  missing (an upload cut off) or does not list COMPLETE is never resumed from;
- every other file of the run (config.toml, metrics.jsonl, completions.jsonl, logs/, samples/, result.json,
  error.json) again whenever its size or modification time changed.

A failed upload never loses a checkpoint: the files stay in RUN; an unreachable store (UploadUnavailable) is
retried at the next scan and `CLOSE_ATTEMPTS` times at the end (each try resumes the parts already sent); a
refusal (AuthError / UploadError) is not retried. Every failure is logged with the local folder and the
`cosmos-train upload` command that sends it later, and is a record with "ok": false in RUN/result.json.
Checkpoints in the bucket are kept as the run's max_keep keeps them locally: when rotation removed a local
checkpoint, its copy in the bucket is removed (its manifest first) once a newer one is there.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cosmos_train.checkpoint_paths import COMPLETE, complete_checkpoints, step_of
from cosmos_train.config import CheckpointConfig
from cosmos_train.config.paths import is_s3, run_cache_root
from cosmos_train.errors import AuthError, CheckpointError, ModelError, UploadError, UploadUnavailable
from cosmos_train.storage.s3 import MANIFEST, S3Settings, s3_client, s3_settings
from cosmos_train.storage.s3_download import download_folder_s3, list_keys_s3, read_manifest
from cosmos_train.storage.s3_upload import put_file_s3, upload_folder_s3
from cosmos_train.storage.targets import parse_target, sha256_file

log = logging.getLogger(__name__)

INTERVAL_ENV = "COSMOS_RUN_SYNC_INTERVAL"  # seconds between scans (metrics and logs go up this often)
DEFAULT_INTERVAL_S = 30.0
CLOSE_ATTEMPTS = 3
EXPORT_ROOTS = ("safetensors", "diffusers")  # VLM and world-model exports: folders renamed into place whole
EXPORT_MARKERS = ("config.json", "model_index.json")
_CKPT_MANIFEST = re.compile(r"(?:^|.*/)checkpoints/step_(\d+)/" + re.escape(MANIFEST) + "$")


def settings_for(ckpt: CheckpointConfig, env: Mapping[str, str] | None = None) -> S3Settings:
    """The store's settings for a training process: credentials as `storage.s3.s3_settings` reads them
    (PROD_S3_CHECKPOINT_*, then AWS_*, then boto3's chain), train.ckpt's endpoint, part size and concurrency."""
    return s3_settings(
        os.environ if env is None else env,
        endpoint_url=ckpt.s3_endpoint_url,
        part_size_mb=ckpt.upload_part_size_mb,
        concurrency=ckpt.upload_concurrency,
    )


def run_url(output_dir: str, run_dir: Path) -> str | None:
    """s3://bucket/prefix/<run name> for a run folder of an s3:// output_dir; None for a local one."""
    return parse_target(output_dir).child(Path(run_dir).name).url if is_s3(output_dir) else None


def written_folders(run: Path, include_final: bool = True) -> list[tuple[str, Path]]:
    """(path in the run, folder) of every complete checkpoint and every export in RUN now, checkpoints first.
    An export folder appears whole (renamed into place); `include_final=False` leaves out the exports named
    `final` (the flows' uploads send those after training)."""
    found = [(f"checkpoints/{p.name}", p) for p in complete_checkpoints(run / "checkpoints")]
    for root in EXPORT_ROOTS:
        if not (run / root).is_dir():
            continue
        found += [
            (f"{root}/{p.name}", p)
            for p in sorted((run / root).iterdir())
            if p.is_dir()
            and not p.name.startswith(".")
            and ".tmp" not in p.name
            and (include_final or p.name != "final")
            and any((p / m).is_file() for m in EXPORT_MARKERS)
        ]
    return found


def _version(path: Path) -> int:
    """What changes when a folder is written again (a re-export replaces it whole; a checkpoint's COMPLETE)."""
    marker = path / COMPLETE
    return (marker if marker.is_file() else path).stat().st_mtime_ns


class RunSync:
    """The mirror of one run folder to its s3:// URL (see the module docstring)."""

    def __init__(self, run: Path, url: str, settings: S3Settings, interval_s: float | None = None):
        self.run, self.target, self.settings = Path(run), parse_target(url), settings
        env_interval = os.environ.get(INTERVAL_ENV)
        self.interval_s = interval_s if interval_s is not None else float(env_interval or DEFAULT_INTERVAL_S)
        self.records: list[dict[str, Any]] = []
        self.retry_sleep_s = 2.0  # between the last scans while the store is unreachable (times the attempt)
        self._sent: dict[str, int] = {}  # folder (path in the run) -> the version sent
        self._failed: dict[str, str] = {}  # folder -> why its last try failed (retried while it stays here)
        self._files: dict[str, tuple[int, int]] = {}  # run file -> (size, mtime_ns) sent
        self._client: Any = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = s3_client(self.settings)
        return self._client

    # ------------------------------------------------------------ the thread
    def start(self) -> RunSync:
        self._thread = threading.Thread(target=self._loop, name="run-sync", daemon=True)
        self._thread.start()
        return self

    def poke(self) -> None:
        """Scan now (after a checkpoint or an export): a completed folder goes up without waiting a period."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            self.scan()

    def close(self) -> list[dict[str, Any]]:
        """Stop the thread, then the last scans: every folder and file, an unreachable store retried
        CLOSE_ATTEMPTS times. Returns one record per folder sent or failed; never raises."""
        if self._thread is not None:
            self._stop.set()
            self._wake.set()
            self._thread.join()
            self._thread = None
        for attempt in range(CLOSE_ATTEMPTS):
            self.scan()
            if not self._retryable():
                break
            time.sleep(self.retry_sleep_s * (attempt + 1))
        for what, why in sorted(self._failed.items()):
            log.error(
                "run sync: %s was not uploaded (%s); it stays in %s; send it later with "
                "`cosmos-train upload %s --to %s`",
                what,
                why,
                self.run / what,
                self.run / what,
                self.target.child(what).url,
            )
            self.records.append({"what": what, "url": self.target.child(what).url, "ok": False, "error": why})
        return self.records

    def _retryable(self) -> bool:
        return any(why.startswith("unavailable:") for why in self._failed.values())

    # ------------------------------------------------------------ one scan
    def scan(self) -> None:
        """Send what is new: complete checkpoints and exports (whole folders), then changed run files. Never
        raises: a failure is kept for the next scan (and reported at the end)."""
        try:
            self._scan_folders()
            self._scan_files()
        except Exception as e:  # noqa: BLE001 (the thread must go on; a failure of this scan is retried)
            log.warning("run sync: a scan of %s failed (%s: %s); the next one retries", self.run, type(e).__name__, e)

    def _scan_folders(self) -> None:
        for what, path in written_folders(self.run):
            try:
                version = _version(path)
            except FileNotFoundError:
                continue  # rotated away since the listing
            if self._sent.get(what) == version:
                continue
            if self._failed.get(what, "").startswith("refused:"):
                continue  # the same refusal every time
            self._send(what, path, version)
        self._rotate_bucket()

    def _send(self, what: str, path: Path, version: int) -> None:
        url = self.target.child(what).url
        step = step_of(path) if what.startswith("checkpoints/") else None
        meta: dict[str, Any] = {"run": self.run.name, "what": what, "step": step}
        if step is not None:
            meta["written_at"] = _complete_time(path)
        try:
            report = upload_folder_s3(path, self.target.child(what), self.settings, meta=meta, client=self.client)
        except FileNotFoundError:
            self._failed.pop(what, None)
            self.records.append(
                {"what": what, "url": url, "ok": False, "error": "removed locally (rotation) before its upload"}
            )
            self._sent[what] = version
            return
        except UploadUnavailable as e:
            self._failed[what] = f"unavailable: {e}"
            log.warning("run sync: %s -> %s failed (%s); retried at the next scan", what, url, e)
            return
        except (AuthError, UploadError) as e:
            self._failed[what] = f"refused: {e}"
            return
        self._failed.pop(what, None)
        self._sent[what] = version
        self.records.append({"what": what, "url": url, "ok": True, **report.as_dict()})
        log.info(
            "run sync: %s -> %s (%d files sent, %d unchanged)", what, url, report.files_sent, report.files_unchanged
        )

    def _scan_files(self) -> None:
        skip = ("checkpoints", *EXPORT_ROOTS)
        for path in sorted(self.run.rglob("*")):
            rel = path.relative_to(self.run)
            if rel.parts[0] in skip or not path.is_file() or any(p.startswith(".") for p in rel.parts):
                continue
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            key, seen = rel.as_posix(), (stat.st_size, stat.st_mtime_ns)
            if self._files.get(key) == seen:
                continue
            put_file_s3(path, self.target.child(key), self.settings, client=self.client)
            self._files[key] = seen

    def _rotate_bucket(self) -> None:
        """Checkpoints in the bucket follow the local max_keep rotation: one that is gone locally is removed
        there (manifest first, so a reader never takes it for complete) once a newer one was sent."""
        local = {p.name for p in complete_checkpoints(self.run / "checkpoints")}
        sent = [w for w in self._sent if w.startswith("checkpoints/step_") and w.split("/")[1] in local]
        if not sent:
            return
        newest = max(step_of(Path(w)) for w in sent)
        for what in [w for w in self._sent if w.startswith("checkpoints/step_")]:
            name = what.split("/")[1]
            if name in local or step_of(Path(name)) >= newest:
                continue
            prefix = self.target.child(what)
            keys = list_keys_s3(prefix, self.settings, self.client)
            manifest = [k for k in keys if k.endswith(f"/{MANIFEST}")]
            for key in manifest + [k for k in keys if k not in manifest]:
                self.client.delete_object(Bucket=prefix.bucket_or_repo, Key=key)
            del self._sent[what]


def _complete_time(ckpt: Path) -> float:
    """When the checkpoint was written (its COMPLETE marker's time): how resume orders checkpoints of several runs."""
    import json  # why: only checkpoints' markers are read here

    try:
        return float(json.loads((ckpt / COMPLETE).read_text())["time"])
    except (ValueError, KeyError, TypeError, OSError):
        return (ckpt / COMPLETE).stat().st_mtime


# ----------------------------------------------------------------------------- resume from the bucket
def remote_checkpoints(url: str, settings: S3Settings, client: Any = None) -> list[tuple[str, dict[str, Any]]]:
    """(path under `url`, manifest) of every complete checkpoint in the bucket under `url` (a step_N folder,
    a run, an output_dir of runs), oldest first: a step_N folder whose MANIFEST.json exists and lists COMPLETE.
    One whose upload was cut off (no manifest yet) is left out and logged."""
    target = parse_target(url)
    client = client or s3_client(settings)
    if re.fullmatch(r"step_\d+", target.prefix.rsplit("/", 1)[-1]):
        candidates = [""]
    else:
        base = f"{target.prefix}/" if target.prefix else ""
        keys = list_keys_s3(target, settings, client)
        candidates = [k[len(base) : -len(MANIFEST) - 1] for k in keys if _CKPT_MANIFEST.fullmatch(k[len(base) :])]
        partial = sorted(
            {
                k[len(base) :].rsplit("/", 1)[0]
                for k in keys
                if re.fullmatch(r"(?:.*/)?checkpoints/step_\d+/.+", k[len(base) :])
            }
            - set(candidates)
        )
        for rel in partial:
            log.warning("resume: %s/%s has no %s (its upload did not finish): skipped", url, rel, MANIFEST)
    found = []
    for rel in candidates:
        manifest = read_manifest(target.child(rel), settings, client)
        if manifest is None or COMPLETE not in {f["path"] for f in manifest.get("files", [])}:
            log.warning("resume: %s/%s is not a complete checkpoint upload: skipped", url, rel)
            continue
        found.append((rel, manifest))
    return sorted(found, key=lambda f: (float(f[1].get("written_at") or f[1].get("uploaded_at") or 0), f[0]))


def fetch_checkpoint(url: str, settings: S3Settings, key: str = "resume", required: bool = True) -> Path | None:
    """Download the newest complete checkpoint in the bucket under `url` into its local copy
    (`run_cache_root(url)/<path>`, the same layout) unless a complete copy is there already; returns the
    local folder. None in the bucket: None, or a CheckpointError naming `key` and the URL when `required`."""
    found = remote_checkpoints(url, settings)
    if not found:
        if not required:
            return None
        raise CheckpointError(
            f"{key} = {url!r}: there is no complete checkpoint in the bucket there (a step_N folder whose "
            f"{MANIFEST} lists {COMPLETE}); point {key} at one, or set it to false to start fresh"
        )
    rel, _ = found[-1]
    local = run_cache_root(url).joinpath(*[p for p in rel.split("/") if p])
    if (local / COMPLETE).is_file():
        return local
    local.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if download_folder_s3(parse_target(url).child(rel), local, settings) is None:
        raise CheckpointError(f"{key}: {url}/{rel} was removed from the bucket while it was being downloaded; retry")
    log.info("resume: downloaded %s/%s to %s in %.1f s", url.rstrip("/"), rel, local, time.monotonic() - started)
    return local


def fetch_folder(url: str, settings: S3Settings, key: str = "--model") -> Path:
    """Download a folder whose upload completed (an export: s3://bucket/prefix/RUN/diffusers/final) into its local
    copy `run_cache_root(url)`, unless every file the manifest lists is there already with its size and sha256 (on
    the machine that trained, the run's working copy); returns the local folder. No MANIFEST.json at `url` (no upload
    there, or one cut off) is a ModelError naming `key`."""
    target, local = parse_target(url), run_cache_root(url)
    client = s3_client(settings)
    manifest = read_manifest(target, settings, client)
    if manifest is None:
        raise ModelError(
            f"{key} {url}: no complete upload there (no {MANIFEST}: the path is wrong, or its upload has not "
            "finished); a run's export is s3://bucket/prefix/<run>/diffusers/final"
        )
    files = manifest.get("files", [])
    if all(
        (local / f["path"]).is_file()
        and (local / f["path"]).stat().st_size == int(f["size"])
        and sha256_file(local / f["path"]) == f["sha256"]
        for f in files
    ):
        return local
    local.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if download_folder_s3(target, local, settings, client) is None:
        raise ModelError(f"{key} {url}: removed from the bucket while it was being downloaded; retry")
    log.info("downloaded %s to %s in %.1f s", url, local, time.monotonic() - started)
    return local
