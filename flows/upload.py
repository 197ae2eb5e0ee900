"""The `upload` flow: send an export (or any folder) to S3 or the Hugging Face Hub.

    cosmos-train upload outputs/tiny-sft/20261124193700 --to s3://my-bucket/tiny-sft
    cosmos-train upload RUN/safetensors/step_40 --to hf://my-org/tiny-sft
    prefect deployment run 'upload/upload' --param params='{"source": "RUN", "to": "s3://my-bucket/tiny"}'

A run folder means its final export (RUN/safetensors/final); its files go directly under the URL. S3:
unchanged files are skipped, a cut-off upload resumes, MANIFEST.json is written last; the Hub: the repo
is created (private) if missing, one commit naming the folder. Credentials as in tasks/upload.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from pydantic import BaseModel, Field

from cosmos_train.config import CheckpointConfig
from cosmos_train.errors import UploadError
from cosmos_train.storage.targets import parse_target
from tasks.errors import user_errors_reported
from tasks.upload import upload_task


class UploadParams(BaseModel):
    """Parameters, validated locally and by the server (a bad deployment run is refused up front)."""

    source: str = Field(..., description="A run folder (its safetensors/final is sent) or any folder.")
    to: str = Field(..., description="s3://bucket/prefix or hf://org/repo.")
    s3_endpoint_url: str | None = Field(None, description="Endpoint of an S3-compatible store (unset: AWS_* env).")
    s3_credentials_secret: str | None = Field(None, description="Prefect Secret block with the S3 credentials (JSON).")
    hf_token_secret: str | None = Field(None, description="Prefect Secret block with the Hub token (unset: HF_TOKEN).")
    hf_private: bool = Field(True, description="Create the Hub repo private when missing.")


def upload_source(source: str | Path) -> tuple[Path, str]:
    """(the folder to send, what it is): a run folder's final export, or the folder itself."""
    src = Path(source).expanduser().resolve()
    for kind in ("safetensors", "diffusers"):  # a VLM run's export, a world-model run's diffusers folder
        if (src / kind / "final").is_dir():
            return src / kind / "final", f"{src.name}/{kind}/final"
    if src.is_dir() and any(src.iterdir()):
        inside_run = src.parent.name in ("safetensors", "diffusers") and (src.parent.parent / "config.toml").is_file()
        return src, f"{src.parent.parent.name}/{src.parent.name}/{src.name}" if inside_run else src.name
    if (src / "config.toml").is_file():
        raise UploadError(
            f"{source}: this run folder has no safetensors/final (or diffusers/final) export (the run "
            "did not finish, or its export was off); upload a checkpoint's export folder instead"
        )
    raise UploadError(f"{source}: no such folder, or it is empty (a run folder or an export folder is uploaded)")


@flow(name="upload", log_prints=True)
def upload(params: UploadParams) -> dict[str, Any]:
    """Upload one folder to one target; returns the upload's report."""
    with user_errors_reported("upload"):
        folder, what = upload_source(params.source)
        target = parse_target(params.to)
        ckpt = CheckpointConfig(
            s3_endpoint_url=params.s3_endpoint_url,
            s3_credentials_secret=params.s3_credentials_secret,
            hf_token_secret=params.hf_token_secret,
            hf_private=params.hf_private,
        )
        report = upload_task(str(folder), target.url, {"what": what}, ckpt)
        create_markdown_artifact(
            f"# Uploaded `{folder}`\n\n- to: {target.url}\n- files sent: {report['files_sent']}, unchanged: "
            f"{report['files_unchanged']}, {report['bytes_sent'] / 1e6:.1f} MB in {report['seconds']:.1f} s\n",
            key="upload",
            description=f"{what} -> {target.url}",
        )
        return report
