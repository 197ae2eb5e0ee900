"""Webdataset tar shards streamed from S3: each rank and loader worker reads its own shards, member by member,
straight off the object's HTTP body (never a whole shard on disk first), with a position that resumes exactly.

    from cosmos_train.data.shards import ShardStream, shard_urls
    from cosmos_train.storage.s3 import s3_client, s3_settings
    settings = s3_settings(os.environ)              # PROD_S3_CHECKPOINT_* first, then AWS_*, then boto3's chain
    urls = shard_urls("s3://bucket/clips/", s3_client(settings))  # or "s3://bucket/clips/shard-{000..099}.tar"
    stream = ShardStream(urls, settings, dp_rank=0, dp_size=2, num_workers=2, seed=0)
    for sample in stream:                           # {"__key__", "__url__", "mp4": bytes, "txt": bytes, ...}
        ...
    state = stream.state_dict()                     # JSON: saved in the checkpoint; ShardStream(..., state=state)

Reading: webdataset's own tar iterator and key grouping (`webdataset.tariterators`: `tar_file_expander`,
`group_by_keys`: the files `<key>.<ext>` of one sample become one dict) over boto3's streaming GetObject body, so a
shard is read as it arrives. The credentials and endpoint are `cosmos_train.storage.s3`'s (`s3_settings`: the
world-model recipes' PROD_S3_CHECKPOINT_{ACCESS_KEY_ID,SECRET_ACCESS_KEY,ENDPOINT_URL,REGION_NAME}, else AWS_*).

Splitting: there are `dp_size x W` reading slots (W = max(1, num_workers)); in epoch e the shards are taken in a
seeded order (seed + e; or as listed with shuffle off) and slot s reads shards s, s + n_slots, ... of it, so each
sample of an epoch is read by exactly one (rank, worker). Rank r owns slots r*W .. r*W + W-1 and takes one sample
from each in turn (what torch's DataLoader does with W workers and an IterableDataset); each slot runs through
its epochs on its own, endlessly. Fewer shards than slots is a DataError: a slot would have nothing to read.

Position: per slot (epoch, shard index in the slot's list, samples of that shard already taken), plus which of
the rank's slots comes next. Only the samples handed to the trainer count (workers read ahead), so a resumed
stream continues with exactly the sample an uninterrupted one would have given next: it reopens that shard and
passes over the samples already taken. A state saved with another dp_size or num_workers, or other shards,
is refused: the slots would be others.
"""

from __future__ import annotations

import logging
import re
import signal
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from cosmos_train.errors import DataError
from cosmos_train.storage.s3 import S3Settings, s3_client
from cosmos_train.storage.targets import parse_target

SHARD_SUFFIXES = (".tar",)
READ_RETRIES = 3  # a shard whose connection is lost mid-read is reopened this many times
log = logging.getLogger(__name__)
CREDENTIALS = (
    "set PROD_S3_CHECKPOINT_ACCESS_KEY_ID / _SECRET_ACCESS_KEY / _ENDPOINT_URL / _REGION_NAME (or AWS_ACCESS_KEY_ID "
    "/ AWS_SECRET_ACCESS_KEY / AWS_ENDPOINT_URL)"
)

Sample = dict[str, Any]
Decode = Callable[[Sample], Any]  # raw sample -> what the consumer gets (runs in the loader worker)


def is_shard_url(name: str) -> bool:
    return name.strip().startswith("s3://")


def _bucket_key(url: str) -> tuple[str, str]:
    t = parse_target(url)
    return t.bucket_or_repo, t.prefix


def _read_error(url: str, exc: BaseException) -> DataError:
    from botocore.exceptions import ClientError, NoCredentialsError  # why: only s3:// data needs botocore

    if isinstance(exc, NoCredentialsError):
        return DataError(f"{url}: no S3 credentials found; {CREDENTIALS}")
    if isinstance(exc, ClientError):
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("NoSuchKey", "404", "NotFound"):
            return DataError(f"{url}: no such object; fix the shard URL or pattern")
        if code == "NoSuchBucket":
            return DataError(f"{url}: the bucket does not exist; fix the URL")
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "403"):
            return DataError(f"{url}: the store refused the credentials ({code}); {CREDENTIALS}")
        return DataError(f"{url}: the store refused the read ({code or exc})")
    return DataError(f"{url}: cannot read the shard ({type(exc).__name__}: {exc})")


def shard_urls(spec: str | Iterable[str], client: Any) -> list[str]:
    """The shard URLs `spec` names: a list of s3:// URLs, a brace pattern (`s3://b/p/shard-{000..009}.tar`,
    webdataset's expansion; `::` joins several), or a prefix ending in `/` (every .tar object under it, sorted
    by key). DataError when it names none or a URL is not s3://."""
    from webdataset.shardlists import expand_urls  # why: webdataset imports only for s3:// data

    specs = [spec] if isinstance(spec, str) else list(spec)
    urls: list[str] = []
    for one in specs:
        one = one.strip()
        if not is_shard_url(one):
            raise DataError(f"{one!r}: not an s3:// shard URL (s3://bucket/prefix/ or s3://bucket/shard-{{0..9}}.tar)")
        if one.endswith("/") or not one.endswith(SHARD_SUFFIXES) and "{" not in one:
            bucket, prefix = _bucket_key(one)
            prefix = prefix.rstrip("/") + "/" if prefix else ""
            try:
                pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
                keys = sorted(o["Key"] for page in pages for o in page.get("Contents", []))
            except Exception as e:  # noqa: BLE001 - turned into one DataError naming the URL
                raise _read_error(one, e) from None
            urls += [f"s3://{bucket}/{k}" for k in keys if k.endswith(SHARD_SUFFIXES)]
        else:
            urls += expand_urls(one)
    if not urls:
        raise DataError(f"{', '.join(specs)}: no .tar shards there; write the shards there or fix the URL")
    return urls


def shard_samples(client: Any, url: str) -> Iterator[Sample]:
    """The samples of one shard, in tar order, read off the streaming GetObject body (webdataset's tar iterator
    and key grouping). A shard the store refuses or that is not a tar is a DataError naming it; a lost connection
    is raised as it is (boto3 has retried the request; `resumed_shard` reopens a shard cut off mid-read)."""
    from botocore.exceptions import ClientError, NoCredentialsError  # why: only s3:// data needs botocore
    from webdataset.tariterators import group_by_keys, tar_file_expander  # why: only s3:// data

    bucket, key = _bucket_key(url)
    try:
        body = client.get_object(Bucket=bucket, Key=key)["Body"]
    except (ClientError, NoCredentialsError) as e:  # a refusal; a lost connection propagates (resumed_shard retries)
        raise _read_error(url, e) from None
    try:
        yield from group_by_keys(tar_file_expander([{"url": url, "stream": body}]))
    except tarfile.TarError as e:
        raise DataError(f"{url}: not a readable tar shard ({e}); write it again") from None
    finally:
        body.close()


# ------------------------------------------------------------------------------------ slots and positions
@dataclass(frozen=True)
class SlotPos:
    """Where one slot is: its epoch, the shard (index into its list of that epoch), samples of it taken."""

    epoch: int = 0
    shard: int = 0
    sample: int = 0


@dataclass(frozen=True)
class ShardPlan:
    """Which shards each slot reads in each epoch (see the module docstring)."""

    urls: tuple[str, ...]
    n_slots: int
    seed: int
    shuffle: bool

    def slot_shards(self, slot: int, epoch: int) -> list[str]:
        if self.shuffle:
            order = torch.randperm(len(self.urls), generator=torch.Generator().manual_seed(self.seed + epoch))
            urls = [self.urls[i] for i in order.tolist()]
        else:
            urls = list(self.urls)
        return urls[slot :: self.n_slots]


def resumed_shard(client: Any, url: str, skip: int, retries: int = READ_RETRIES) -> Iterator[Sample]:
    """The samples of one shard after the first `skip`; a connection lost mid-shard reopens it (up to `retries`
    times) and passes over the samples already given, so the sequence is the same as an unbroken read."""
    given, attempt = skip, 0
    while True:
        try:
            for k, sample in enumerate(shard_samples(client, url)):
                if k >= given:
                    given += 1
                    yield sample
            return
        except DataError:
            raise
        except Exception as e:  # noqa: BLE001 - a lost connection or timeout (botocore / urllib3 types)
            attempt += 1
            if attempt > retries:
                raise DataError(f"{url}: the read failed {attempt} times ({type(e).__name__}: {e})") from None
            log.warning("%s: read failed (%s); reopening at sample %d", url, e, given)
            time.sleep(min(2.0**attempt, 30.0))


def slot_samples(plan: ShardPlan, slot: int, pos: SlotPos, client: Any) -> Iterator[tuple[Sample, SlotPos]]:
    """(sample, this slot's position after it) from `pos` on, endlessly (epoch after epoch)."""
    epoch, shard, skip = pos.epoch, pos.shard, pos.sample
    while True:
        shards = plan.slot_shards(slot, epoch)
        given = 0
        for i in range(shard, len(shards)):
            start = skip if i == shard else 0  # the samples taken before a resume are passed over
            for k, sample in enumerate(resumed_shard(client, shards[i], start), start=start):
                given += 1
                yield sample, SlotPos(epoch, i, k + 1)
        if not given and (shard, skip) == (0, 0):
            raise DataError(f"{', '.join(shards)}: these shards hold no samples (files named <key>.<ext>)")
        epoch, shard, skip = epoch + 1, 0, 0


class _SlotDataset(IterableDataset):
    """What one loader worker reads: its slot's samples from the saved position, each decoded in the worker and
    tagged (slot, position after it) for the main process's bookkeeping."""

    def __init__(self, plan: ShardPlan, slots: list[int], start: dict[int, SlotPos], settings: S3Settings, decode):
        self.plan, self.slots, self.start, self.settings, self.decode = plan, slots, start, settings, decode

    def __iter__(self) -> Iterator[tuple[int, SlotPos, Any]]:
        info = get_worker_info()
        slot = self.slots[info.id if info is not None else 0]
        client = s3_client(self.settings)  # one per worker process: boto3 clients do not cross a fork
        for sample, pos in slot_samples(self.plan, slot, self.start[slot], client):
            yield slot, pos, self.decode(sample) if self.decode else sample


def _as_is(item: Any) -> Any:
    return item


def _leave_stopping_to_the_rank(worker_id: int) -> None:
    """A loader worker ignores SIGTERM / SIGINT: a preemption or a cancel signals the rank's whole process group
    (torchrun does), and the rank stops at a step's end, saving this stream's position, only if its workers are
    still there to read it; the loader stops them when the rank is done (and they exit when it dies)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


class ShardStream:
    """This rank's endless sample stream over its slots, and its resumable position (`state_dict`)."""

    def __init__(
        self,
        urls: list[str],
        settings: S3Settings,
        *,
        dp_rank: int,
        dp_size: int,
        num_workers: int = 0,
        seed: int = 0,
        shuffle: bool = True,
        decode: Decode | None = None,
        state: dict[str, Any] | None = None,
    ):
        self.workers = max(1, num_workers)
        self.use_processes = num_workers > 0
        self.plan = ShardPlan(tuple(urls), dp_size * self.workers, seed, shuffle)
        if len(urls) < self.plan.n_slots:
            raise DataError(
                f"{len(urls)} shard(s) for {dp_size} data-parallel rank(s) x {self.workers} loader worker(s): "
                "every worker of every rank reads whole shards of its own; write the data as at least "
                f"{self.plan.n_slots} shards, or lower num_workers"
            )
        self.settings, self.decode = settings, decode
        self.slots = [dp_rank * self.workers + w for w in range(self.workers)]
        self.pos = {s: SlotPos() for s in self.slots}
        self.next = 0  # index into self.slots of the slot whose sample comes next
        self.taken = 0
        self._iter: Iterator[tuple[int, SlotPos, Any]] | None = None
        self._loader: Any = None
        if state:
            self.load_state_dict(state)

    # -------------------------------------------------------------- the position
    def _layout(self) -> dict[str, Any]:
        return {"n_slots": self.plan.n_slots, "workers": self.workers, "shards": len(self.plan.urls)}

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable: the layout it belongs to, each slot's position, the next slot, samples taken."""
        return {
            **self._layout(),
            "slots": {str(s): [p.epoch, p.shard, p.sample] for s, p in self.pos.items()},
            "next": self.next,
            "taken": self.taken,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = {k: state.get(k) for k in self._layout()}
        if saved != self._layout():
            raise DataError(
                f"the checkpoint's data position was saved with {saved} (reading slots = ranks x workers, "
                f"loader workers, shards); this run has {self._layout()}: resume with the same data-parallel "
                "size, num_workers and shards, or start a fresh run"
            )
        self.pos = {s: SlotPos(*state["slots"][str(s)]) for s in self.slots}
        self.next, self.taken = int(state["next"]), int(state["taken"])
        self.close()

    def position(self) -> str:
        p = self.pos[self.slots[self.next]]
        return f"shard stream: {self.taken} samples taken, next slot {self.slots[self.next]} epoch {p.epoch}"

    # -------------------------------------------------------------- reading
    def _start(self) -> Iterator[tuple[int, SlotPos, Any]]:
        # worker w reads slot next + w: torch's loader starts its round robin at worker 0, which must be the slot
        # an uninterrupted stream would give next
        order = self.slots[self.next :] + self.slots[: self.next]
        ds = _SlotDataset(self.plan, order, dict(self.pos), self.settings, self.decode)
        if not self.use_processes:
            return iter(ds)
        self._loader = DataLoader(
            ds,
            batch_size=None,
            num_workers=self.workers,
            collate_fn=_as_is,
            prefetch_factor=2,
            persistent_workers=False,
            worker_init_fn=_leave_stopping_to_the_rank,
        )
        return iter(self._loader)

    def __iter__(self) -> Iterator[Any]:
        return self

    def __next__(self) -> Any:
        if self._iter is None:
            self._iter = self._start()
        slot, pos, item = next(self._iter)
        expected = self.slots[self.next]
        if slot != expected:  # a worker died or the loader changed its order: never hand out a misplaced sample
            raise RuntimeError(f"shard stream: a sample of slot {slot} came where slot {expected} was due")
        self.pos[slot] = pos
        self.next = (self.next + 1) % self.workers
        self.taken += 1
        return item

    def take(self, n: int) -> list[Any]:
        return [next(self) for _ in range(n)]

    def close(self) -> None:
        """Stop the loader workers (a later read starts them again from the position)."""
        self._iter = None
        self._loader = None


def gather_states(local: dict[str, Any], dp_rank: int) -> dict[str, dict[str, Any]]:
    """Every data-parallel rank's stream state by dp rank (a collective: all ranks call it; ranks that share a dp
    rank, e.g. context-parallel peers, hold the same state)."""
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_world_size() == 1:
        return {str(dp_rank): local}
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, (dp_rank, local))
    return {str(r): s for r, s in gathered}


SHARD_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


def sample_name(sample: Mapping[str, Any]) -> str:
    """A file-system-safe unique name for a sample: its shard's file stem and its key."""
    shard = str(sample.get("__url__", "")).rsplit("/", 1)[-1]
    for suffix in SHARD_SUFFIXES:
        shard = shard.removesuffix(suffix)
    return SHARD_NAME.sub("_", f"{shard}__{sample['__key__']}")
