"""Upload to the Hugging Face Hub (huggingface_hub): the repo is created if missing (private unless told
otherwise), the folder goes up with `upload_folder`, with a commit message naming the run and step; from
huggingface_hub 2.0 (installed here: 2.4) that call is itself resumable and batches a large folder into several
commits; with an older library a folder above `large_folder_bytes` goes through its `upload_large_folder`. The
token: the one passed (a Prefect Secret the flow resolved), else HF_TOKEN. A refusal is an AuthError or
UploadError (a user error, never retried), a lost connection an UploadUnavailable (a retry resumes)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cosmos_train.errors import AuthError, UploadError, UploadUnavailable
from cosmos_train.storage.targets import MIB, Target, UploadReport, folder_files

LARGE_FOLDER_BYTES = 50 * 1024 * MIB  # the Hub's large-folder path above this


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
