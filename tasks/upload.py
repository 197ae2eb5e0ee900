"""Uploads from flows: credentials from Prefect Secret blocks, a retried task, and a run's uploads.

    with run_uploads(cfg, run) as uploads:      # tasks/training_run.py, around the training attempts
        train(...)                               # upload_s3 = "all": checkpoints and exports go up meanwhile
    result["uploads"] = uploads.finish()      # the final export to every target

- `upload_task(local, url, meta, ckpt)`: one folder to one target (cosmos_train/storage/), retried
  after an UploadUnavailable (lost connection, 5xx; each retry resumes), never after an AuthError or
  UploadError (refused: the same every time). On its last attempt an UploadUnavailable becomes an UploadError:
  one paragraph (the target, the attempts, the last error, the command that resumes), no traceback.
- `RunUploads`: with upload_s3 = "all", a thread in the flow process sends each complete checkpoint
  (step_N with COMPLETE) and each export as it appears; the trainer never waits for it. A checkpoint
  that max_keep rotation deletes before its upload finished is noted and skipped. `finish` sends the
  final export (upload_s3 = "final" / "all", upload_hf) through `upload_task` and returns one record
  per upload: {"what", "url", "ok", "error" | files_sent, files_unchanged, bytes_sent, ...}. A failed
  upload never fails the training run: the files stay in the run folder, the record says why, and the
  summary shows what was and was not uploaded.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import get_run_logger, task
from prefect.blocks.system import Secret
from prefect.cache_policies import NO_CACHE
from prefect.context import TaskRunContext

from cosmos_train.config import CheckpointConfig, Config
from cosmos_train.errors import AuthError, UploadError, UploadUnavailable, UserError
from cosmos_train.run_sync import written_folders
from cosmos_train.storage.hub import hf_token, upload_folder_hf
from cosmos_train.storage.s3 import UPLOAD_ATTEMPTS, UPLOAD_CONNECT_TIMEOUT_S, UPLOAD_READ_TIMEOUT_S, s3_settings
from cosmos_train.storage.s3_upload import RESUME_NOTE, upload_folder_s3
from cosmos_train.storage.targets import Target, parse_target
from tasks.errors import retry_only_crashes

SCAN_INTERVAL_S = 5.0
BACKGROUND_ATTEMPTS = 3
UPLOAD_RETRY_DELAYS_S: list[float] = [2, 10, 30]


def _secret(name: str | None) -> str | None:
    if not name:
        return None
    try:
        block = Secret.load(name)
    except ValueError as e:
        raise AuthError(
            f"Prefect Secret block {name!r} not found ({e}); create it in the UI (Blocks) or with "
            f"`Secret(value=...).save({name!r})`"
        ) from None
    assert isinstance(
        block, Secret
    )  # prefect's async_dispatch types results as value | coroutine; sync callers get the value
    value = block.get()
    return value if isinstance(value, str) else json.dumps(value)


def _s3_credentials(name: str | None) -> dict[str, str] | None:
    text = _secret(name)
    if text is None:
        return None
    try:
        creds = json.loads(text)
    except json.JSONDecodeError:
        creds = None
    if not isinstance(creds, dict) or not creds.get("access_key_id") or not creds.get("secret_access_key"):
        raise AuthError(
            f'Prefect Secret block {name!r}: expected JSON {{"access_key_id": ..., '
            '"secret_access_key": ..., optional "session_token", "endpoint_url", "region"}'
        )
    return creds


def trainer_s3_env(ckpt: CheckpointConfig) -> dict[str, str]:
    """train.ckpt.s3_credentials_secret as the PROD_S3_CHECKPOINT_* variables `storage.s3.s3_settings` reads first: for
    the ranks of a run whose output_dir is s3:// (they mirror it to the bucket themselves, without Prefect)."""
    creds = _s3_credentials(ckpt.s3_credentials_secret) or {}
    names = {
        "access_key_id": "ACCESS_KEY_ID",
        "secret_access_key": "SECRET_ACCESS_KEY",
        "endpoint_url": "ENDPOINT_URL",
        "region": "REGION_NAME",
    }
    return {f"PROD_S3_CHECKPOINT_{v}": str(creds[k]) for k, v in names.items() if creds.get(k)}


def upload_folder(local: str | Path, url: str, meta: dict[str, Any], ckpt: CheckpointConfig | None = None) -> dict:
    """One folder to one target with the run's settings (no Prefect task: the background thread's path)."""
    ckpt = ckpt or CheckpointConfig()
    target = parse_target(url)
    if target.scheme == "s3":
        settings = s3_settings(
            os.environ,
            endpoint_url=ckpt.s3_endpoint_url,
            part_size_mb=ckpt.upload_part_size_mb,
            concurrency=ckpt.upload_concurrency,
            credentials=_s3_credentials(ckpt.s3_credentials_secret),
        )
        report = upload_folder_s3(Path(local), target, settings, meta=meta)
    else:
        token = hf_token(os.environ, _secret(ckpt.hf_token_secret))
        message = f"cosmos-train {meta.get('run', '')}: {meta.get('what', Path(local).name)} at step {meta.get('step')}"
        report = upload_folder_hf(
            Path(local), target, token=token, commit_message=message.strip(), private=ckpt.hf_private
        )
    return report.as_dict()


def unreachable_paragraph(error: UploadUnavailable, local: str, url: str, attempts: int, seconds: float) -> str:
    """The paragraph of a target that stayed unreachable through every attempt of `upload_task`."""
    last = str(error).removeprefix(f"{url}: ").removesuffix("; a retry resumes")
    if url.startswith("s3://"):
        where = (
            f"the S3 store stayed unreachable through {attempts} attempts over {seconds:.0f} s (each request tried "
            f"{UPLOAD_ATTEMPTS} times, with {UPLOAD_CONNECT_TIMEOUT_S} s to connect and {UPLOAD_READ_TIMEOUT_S} s to "
            "answer)"
        )
        resume = RESUME_NOTE
    else:
        where = f"the Hugging Face Hub stayed unreachable through {attempts} attempts over {seconds:.0f} s"
        resume = "files the Hub already holds are not sent again"
    return (
        f"{url}: {where}; last error: {last}. What was sent is kept: check the endpoint, the network and the "
        f"credentials, then run `cosmos-train upload {local} --to {url}` (with the same endpoint settings) again: "
        f"{resume}"
    )


@task(
    name="upload",
    cache_policy=NO_CACHE,
    retries=len(UPLOAD_RETRY_DELAYS_S),
    retry_delay_seconds=UPLOAD_RETRY_DELAYS_S,
    retry_condition_fn=retry_only_crashes,
)
def upload_task(local: str, url: str, meta: dict[str, Any], ckpt: CheckpointConfig | None = None) -> dict:
    """Upload `local` to `url` (s3://bucket/prefix or hf://org/repo); retried only when a retry can help."""
    try:
        report = upload_folder(local, url, meta, ckpt)
    except UploadUnavailable as e:
        context = TaskRunContext.get()
        if context is None or context.task_run.run_count <= context.task.retries:
            raise  # a retry resumes it
        started = context.task_run.start_time
        seconds = (datetime.now(UTC) - started).total_seconds() if started else 0.0
        raise UploadError(unreachable_paragraph(e, local, url, context.task_run.run_count, seconds)) from None
    get_run_logger().info(
        "uploaded %s -> %s (%d files sent, %d unchanged, %.1f MB)",
        local,
        url,
        report["files_sent"],
        report["files_unchanged"],
        report["bytes_sent"] / 1e6,
    )
    return report


def run_targets(cfg: Config, run: Path) -> list[Target]:
    """The targets a run's config asks for: S3 under <s3_prefix>/<run folder name>, the Hub repo."""
    ck = cfg.train.ckpt
    out: list[Target] = []
    if cfg.launch.node_rank != 0:
        return out  # a multi-node job's files are on shared storage: node 0's flow run uploads them
    if ck.upload_s3:
        out.append(Target("s3", str(ck.s3_bucket), "/".join(p for p in (ck.s3_prefix.strip("/"), run.name) if p)))
    if ck.upload_hf:
        out.append(Target("hf", str(ck.hf_repo_name)))
    return out


def _step(run: Path) -> int | None:
    try:
        return int(json.loads((run / "result.json").read_text()).get("step"))
    except (OSError, ValueError, TypeError):
        return None


class RunUploads:
    """The uploads of one training run (see the module docstring)."""

    def __init__(self, cfg: Config, run: Path):
        self.cfg, self.run = cfg, run
        self.ckpt = cfg.train.ckpt
        self.targets = run_targets(cfg, run)
        self.records: list[dict[str, Any]] = []
        self.sent: set[str] = set()  # "what" already uploaded (or given up) by the background thread
        self.attempts: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------ upload_s3 = "all"
    def start(self) -> None:
        if self.ckpt.upload_s3 == "all":
            self._thread = threading.Thread(target=self._watch, name="run-uploads", daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(SCAN_INTERVAL_S):
            self.scan()

    def _written(self) -> list[tuple[str, Path]]:
        """(what, folder) of every complete checkpoint and export in the run folder now (`final` waits for finish())."""
        return written_folders(self.run, include_final=False)

    def scan(self) -> None:
        """Send what appeared since the last scan to the S3 target (the Hub only gets the final export)."""
        s3 = [t for t in self.targets if t.scheme == "s3"]
        for what, path in self._written():
            try:  # an export folder (safetensors/best) is replaced whole when re-exported: a new version
                version = path.stat().st_mtime_ns
            except FileNotFoundError:
                continue  # rotated away since the listing
            for target in s3:
                key = f"{what}@{version} -> {target.url}"
                if key in self.sent:
                    continue
                self._send(what, path, target, key)

    def _send(self, what: str, path: Path, target: Target, key: str) -> None:
        url = target.child(what).url
        # a checkpoint or step export names its step; result.json (the run's last step) exists only at the end
        step = int(path.name.removeprefix("step_")) if path.name.removeprefix("step_").isdigit() else _step(self.run)
        meta = {"run": self.run.name, "what": what, "step": step}
        try:
            report = upload_folder(path, url, meta, self.ckpt)
        except FileNotFoundError:
            self._record(
                {
                    "what": what,
                    "url": url,
                    "ok": False,
                    "error": "removed from the run folder (max_keep rotation) before its upload finished",
                },
                key,
            )
            return
        except UploadUnavailable as e:
            self.attempts[key] = self.attempts.get(key, 0) + 1
            if self.attempts[key] >= BACKGROUND_ATTEMPTS:
                self._record({"what": what, "url": url, "ok": False, "error": str(e)}, key)
            return  # else the next scan tries again, resuming
        except (UserError, OSError) as e:
            self._record({"what": what, "url": url, "ok": False, "error": str(e)}, key)
            return
        self._record({"what": what, "url": url, "ok": True, **report}, key)

    def _record(self, record: dict[str, Any], key: str) -> None:
        with self._lock:
            self.sent.add(key)
            self.records.append(record)

    # ------------------------------------------------------------ the end
    def finish(self) -> list[dict[str, Any]]:
        """After training finished: stop the background thread (after its last scan) and send the final
        export to every target. Returns every upload's record."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self.scan()  # the checkpoints written since the last scan, the final one included
        final = self.run / "safetensors" / "final"
        if final.is_dir():
            meta = {"run": self.run.name, "what": "safetensors/final", "step": _step(self.run)}
            for target in self.targets:
                url = target.child("safetensors/final").url if target.scheme == "s3" else target.url
                try:
                    report = upload_task(str(final), url, meta, self.ckpt)
                    self.records.append({"what": "safetensors/final", "url": url, "ok": True, **report})
                except (UserError, UploadUnavailable, UploadError) as e:
                    get_run_logger().error("upload of %s to %s failed: %s", final, url, e)
                    self.records.append({"what": "safetensors/final", "url": url, "ok": False, "error": str(e)})
        return self.records


@contextmanager
def run_uploads(cfg: Config, run: Path) -> Iterator[RunUploads]:
    """The run's uploads around its training; the background thread is stopped however training ends."""
    uploads = RunUploads(cfg, run)
    uploads.start()
    try:
        yield uploads
    finally:
        uploads._stop.set()
