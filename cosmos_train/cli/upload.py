"""`cosmos-train upload`: a run's final export (or any folder) uploaded to S3 or the Hugging Face Hub (the upload
flow); the source and an S3 target are checked before Prefect starts.

    cosmos-train upload RUN_OR_FOLDER --to s3://bucket/prefix | hf://org/repo
"""

from __future__ import annotations

import argparse
import os

import cosmos_train.cli.prefect_server as prefect_server
from cosmos_train.cli.args import Subparsers
from cosmos_train.storage.s3 import s3_settings
from cosmos_train.storage.s3_upload import check_s3_target
from cosmos_train.storage.targets import parse_target


def _upload(args: argparse.Namespace) -> int:
    from flows.upload import UploadParams, upload, upload_source

    folder, what = upload_source(args.source)  # input errors before Prefect starts
    target = parse_target(args.to)
    if target.scheme == "s3":  # an unreachable endpoint, refused credentials, no bucket: said in seconds, not minutes
        check_s3_target(target, s3_settings(os.environ, endpoint_url=args.s3_endpoint_url))
    prefect_server.prepare_prefect()

    report = upload(UploadParams(source=str(args.source), to=args.to, s3_endpoint_url=args.s3_endpoint_url))
    print(f"{folder} -> {target.url}: {report['files_sent']} files sent, {report['files_unchanged']} unchanged")
    return 0


def register(sub: Subparsers) -> None:
    up = sub.add_parser("upload", help="Upload a run's final export (or any folder) to S3 or the Hugging Face Hub.")
    up.add_argument("source", help="A run folder (its safetensors/final) or a folder.")
    up.add_argument("--to", required=True, help="s3://bucket/prefix or hf://org/repo")
    up.add_argument("--s3-endpoint-url", default=None, help="An S3-compatible store's endpoint (default: AWS_* env).")
    up.set_defaults(func=_upload)
