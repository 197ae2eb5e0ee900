"""Pack a local world-model dataset (videos/*.mp4, metas/*.txt, text_embedding/*.pickle) into webdataset tar shards
on S3, the input of `dataloader_train.type = "web"`:

    python scripts/wfm_shards.py outputs/wfm-data s3://BUCKET/tiny-wfm-clips/ --shards 4 --heldout 4

Credentials and endpoint as the trainer reads them: PROD_S3_CHECKPOINT_{ACCESS_KEY_ID,SECRET_ACCESS_KEY,
ENDPOINT_URL,REGION_NAME} (else AWS_*). A sample is `<name>.mp4`, `<name>.txt` (the caption) and with
--embeddings `<name>.pickle` (the row's text embedding), the members of one sample next to each other (webdataset
groups consecutive `<key>.<ext>` files); the shards are `shard-000000.tar`, ... under the prefix, rows in the
dataset's order (sorted by name) dealt out in contiguous runs. The tars are built in memory (a shard of the tiny
clips is a few hundred kB; for large datasets write shards with webdataset's ShardWriter and upload them).

--heldout N leaves the last N rows out of the shards: they are the rows `cosmos-train eval-wfm` evaluates on with
`--set dataloader_train.type='local' --set dataloader_train.video_dataloader.dataset_dir=<the local folder>`
(dataloader_train.video_dataloader.heldout_videos = N), so the evaluation prompts and clips were never trained on.
Prints the shard URLs, one a line.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
import tarfile
from pathlib import Path

from cosmos_train.errors import DataError, user_error_of
from cosmos_train.storage.s3 import s3_client, s3_settings
from cosmos_train.storage.targets import parse_target
from cosmos_train.wfm.data import WfmSample, scan_dataset

log = logging.getLogger("wfm_shards")


def _tar(rows: list[WfmSample], embeddings: bool) -> bytes:
    """One shard: each row's members in a fixed order, with fixed metadata (the same rows give the same bytes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for row in rows:
            members = [(f"{row.name}.mp4", Path(str(row.video)).read_bytes()), (f"{row.name}.txt", row.prompt.encode())]
            if embeddings:
                members.append((f"{row.name}.pickle", Path(str(row.text_embedding)).read_bytes()))
            for name, data in members:
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write_shards(
    dataset_dir: str, url: str, *, shards: int, heldout: int, embeddings: bool, env: dict[str, str]
) -> list[str]:
    """Write the rows of `dataset_dir` but the last `heldout` as `shards` tars under `url`; their URLs."""
    target = parse_target(url)
    if target.scheme != "s3":
        raise DataError(f"{url}: shards go to S3; give s3://bucket/prefix/")
    samples, _ = scan_dataset(dataset_dir, offline_text_embedding=embeddings)
    rows = samples[: len(samples) - heldout] if heldout else samples
    dotted = [r.name for r in rows if "." in r.name]
    if dotted:  # webdataset's key is the member name up to its first dot
        raise DataError(
            f"{dataset_dir}: {', '.join(dotted[:5])}: a name with a dot would split into two samples; rename"
        )
    if len(rows) < shards:
        raise DataError(
            f"{dataset_dir}: {len(samples)} rows, {heldout} held out, leaves {len(rows)} for {shards} shards; "
            "lower --shards or --heldout"
        )
    client = s3_client(s3_settings(env))
    prefix = target.prefix.rstrip("/")
    urls = []
    for i in range(shards):
        part = rows[i * len(rows) // shards : (i + 1) * len(rows) // shards]
        key = f"{prefix}/shard-{i:06d}.tar" if prefix else f"shard-{i:06d}.tar"
        client.put_object(Bucket=target.bucket_or_repo, Key=key, Body=_tar(part, embeddings))
        urls.append(f"s3://{target.bucket_or_repo}/{key}")
        log.info("%s: %d samples", urls[-1], len(part))
    return urls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset_dir", help="A local world-model dataset: videos/*.mp4, metas/*.txt.")
    parser.add_argument("url", help="s3://bucket/prefix/ the shards go under.")
    parser.add_argument("--shards", type=int, default=4, help="How many shards (at least ranks x loader workers).")
    parser.add_argument("--heldout", type=int, default=0, help="Rows at the end left out (eval-wfm's held-out rows).")
    parser.add_argument("--embeddings", action="store_true", help="Add text_embedding/<name>.pickle to each sample.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.shards < 1 or args.heldout < 0:
            raise DataError(f"--shards {args.shards} --heldout {args.heldout}: give --shards >= 1 and --heldout >= 0")
        urls = write_shards(
            args.dataset_dir,
            args.url,
            shards=args.shards,
            heldout=args.heldout,
            embeddings=args.embeddings,
            env=dict(os.environ),
        )
    except Exception as e:
        error = user_error_of(e)
        if error is None:
            raise
        print(f"error: {error.paragraph}", file=sys.stderr)
        return error.exit_code
    print("\n".join(urls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
