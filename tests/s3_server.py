"""A real S3-compatible server on loopback for tests: `moto_server` in its own process group, with IAM
authentication on, so wrong credentials are refused as a real store refuses them.

    with s3_server(tmp_path) as s3:     # s3.env: AWS_* for a user allowed everything; s3.bucket exists
        ...

moto lets the first INITIAL_NO_AUTH_ACTION_COUNT requests through unauthenticated: those create the
user, its access key, its policy and the bucket; every later request must be signed with that key.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from cosmos_train.net import free_port

MOTO = str(Path(sys.executable).with_name("moto_server"))
SETUP_REQUESTS = 4  # create_user, create_access_key, put_user_policy, create_bucket


@dataclass
class S3Server:
    url: str
    bucket: str
    access_key_id: str
    secret_access_key: str

    @property
    def env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_ENDPOINT_URL": self.url,
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def client(self, **overrides: str):  # noqa: ANN201 (a boto3 client)
        import boto3

        keys = {"aws_access_key_id": self.access_key_id, "aws_secret_access_key": self.secret_access_key, **overrides}
        return boto3.client("s3", endpoint_url=self.url, region_name="us-east-1", **keys)

    def objects(self, prefix: str = "") -> dict[str, bytes]:
        c = self.client()
        keys = [
            o["Key"]
            for page in c.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
            for o in page.get("Contents", [])
        ]
        return {k: c.get_object(Bucket=self.bucket, Key=k)["Body"].read() for k in keys}


@contextmanager
def s3_server(workdir: Path, bucket: str = "cosmos-test-bucket") -> Iterator[S3Server]:
    import boto3

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    workdir.mkdir(parents=True, exist_ok=True)
    log = (workdir / "moto.log").open("w")
    proc = subprocess.Popen(
        [MOTO, "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=workdir,
        start_new_session=True,
        env={**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_REQUESTS)},
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/moto-api/", timeout=1.0)  # not counted as an S3 / IAM action
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"moto_server did not start: {(workdir / 'moto.log').read_text()[-2000:]}"
                    ) from None
                time.sleep(0.2)
        kw = {"endpoint_url": url, "region_name": "us-east-1"}
        iam = boto3.client("iam", aws_access_key_id="setup", aws_secret_access_key="setup", **kw)
        iam.create_user(UserName="trainer")
        key = iam.create_access_key(UserName="trainer")["AccessKey"]
        iam.put_user_policy(
            UserName="trainer",
            PolicyName="all",
            PolicyDocument=json.dumps(
                {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
            ),
        )
        server = S3Server(url, bucket, key["AccessKeyId"], key["SecretAccessKey"])
        server.client().create_bucket(Bucket=bucket)
        yield server
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
        log.close()
