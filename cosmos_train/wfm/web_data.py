"""The world-model dataset as webdataset shards on S3 (`dataloader_train.type = "web"`): rows streamed by
`cosmos_train.data.shards`, decoded in the loader workers, bad rows failed or skipped by `on_bad_row`.

    [dataloader_train]
    type = "web"
    [dataloader_train.video_dataloader]
    dataset_dir = "s3://bucket/clips/"            # every .tar under it; or "s3://bucket/clips/shard-{000..099}.tar"
    num_workers = 2                               # loader workers per rank, each reading its own shards

    cache = clip_cache_dir(RUN, rank=0)
    rows = WebRows.from_config(cfg.video, seed=0, dp_rank=0, dp_size=1, cache_dir=cache, env=os.environ)
    batch = rows.take(2)                          # [{"name", "prompt", "video": Path, "embedding": tensor | None}]

A sample is the files `<key>.<ext>` of a shard: `<key>.mp4` (the clip), `<key>.txt` (its caption) or
`<key>.json` ({"caption": ...}; "prompt" or "text" are read too), and with offline_text_embedding `<key>.npy`
(float [n_tokens, dim], read without pickle) or `<key>.pickle` / `.pkl` (what offline_text_embedding datasets
hold; a pickle runs code when loaded: only buckets you trust). Each clip is written to `cache_dir` as it is
taken (load_clip decodes files; the trainer's are under $COSMOS_CACHE/webdataset/clips, `clip_cache_dir`) and
only the newest KEEP_FILES of them are kept.

Bad rows are the local dataset's reasons (`cosmos_train.wfm.data`): missing_caption, bad_caption, missing_video,
bad_media, short_video, missing_embedding, bad_embedding, each named `shard URL:key`. on_bad_row = "fail" stops
at the first with a DataError; "skip" counts them by reason (the counts are in the checkpointed state).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
from collections import Counter, deque
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from cosmos_train.config.paths import cosmos_cache
from cosmos_train.data.shards import ShardStream, gather_states, sample_name, shard_samples, shard_urls
from cosmos_train.data.sources.common import RowError
from cosmos_train.errors import DataError
from cosmos_train.storage.s3 import s3_client, s3_settings
from cosmos_train.wfm.config_sections import VideoDataloaderConfig
from cosmos_train.wfm.data import ON_BAD_ROW_KEY, _as_float_matrix, _probe_video, _unwrap

KEEP_FILES = 256  # cached clip files kept on disk (the trainer keeps the latents of recent clips in memory)
CAPTION_KEYS = ("caption", "prompt", "text")
EMBEDDING_EXTS = ("npy", "pickle", "pkl")


def _caption(sample: Mapping[str, Any], where: str) -> str:
    if "txt" in sample:
        raw = sample["txt"]
    elif "json" in sample:
        try:
            meta = json.loads(sample["json"])
        except ValueError as e:
            raise RowError("bad_caption", f"{where}.json: not JSON ({e})") from None
        raw = next((meta[k] for k in CAPTION_KEYS if isinstance(meta, dict) and isinstance(meta.get(k), str)), None)
        if raw is None:
            raise RowError("missing_caption", f"{where}.json: no {' / '.join(CAPTION_KEYS)} string")
        raw = raw.encode()
    else:
        raise RowError("missing_caption", f"{where}: no caption ({where}.txt or .json); write the clip's prompt")
    try:
        text = bytes(raw).decode("utf-8").strip()
    except UnicodeDecodeError:
        raise RowError("bad_caption", f"{where}.txt: not UTF-8 text; save the caption as UTF-8") from None
    if not text:
        raise RowError("bad_caption", f"{where}.txt: empty caption; write the video's prompt in it")
    return text


def _embedding(sample: Mapping[str, Any], where: str) -> Any:
    ext = next((e for e in EMBEDDING_EXTS if e in sample), None)
    if ext is None:
        raise RowError(
            "missing_embedding",
            f"{where}: no .npy / .pickle embedding; offline_text_embedding = true reads one per row",
        )
    try:
        if ext == "npy":
            obj = np.load(io.BytesIO(sample[ext]), allow_pickle=False)
        else:
            obj = pickle.loads(sample[ext])  # noqa: S301 - the bucket the user named; see the module docstring
        return _as_float_matrix(_unwrap(obj), Path(f"{where}.{ext}"))
    except DataError as e:
        raise RowError("bad_embedding", str(e)) from None
    except Exception as e:  # a corrupt or foreign file can fail with almost any exception type
        raise RowError("bad_embedding", f"{where}.{ext}: not readable ({type(e).__name__}: {e})") from None


def decode_sample(
    sample: Mapping[str, Any], *, cache_dir: Path, offline_text_embedding: bool, min_frames: int | None
) -> dict[str, Any]:
    """One shard sample -> a row {"name", "prompt", "video", "embedding", "origin"} or {"error", "origin"}
    (runs in a loader worker: the clip is written to cache_dir and probed there)."""
    where = f"{sample.get('__url__')}:{sample.get('__key__')}"
    try:
        prompt = _caption(sample, where)
        if "mp4" not in sample:
            raise RowError("missing_video", f"{where}: no {sample.get('__key__')}.mp4 in the shard")
        name = sample_name(sample)
        path = cache_dir / f"{name}.mp4"
        tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
        tmp.write_bytes(sample["mp4"])
        tmp.replace(path)
        try:
            _probe_video(path, min_frames)
        except RowError as e:
            path.unlink(missing_ok=True)
            raise RowError(e.reason, str(e).replace(str(path), f"{where}.mp4")) from None
        emb = _embedding(sample, where) if offline_text_embedding else None
    except RowError as e:
        return {"error": {"reason": e.reason, "message": str(e)}, "origin": where}
    return {"name": name, "prompt": prompt, "video": path, "embedding": emb, "origin": where}


def clip_cache_dir(run_dir: Path, rank: int) -> Path:
    """Where a rank writes the clips it takes: $COSMOS_CACHE/webdataset/clips/<run>-<hash>/rank<r>, outside the run
    folder (a run on S3 mirrors its folder to the bucket; the clips are already there, in the shards)."""
    digest = hashlib.sha256(str(Path(run_dir).resolve()).encode()).hexdigest()[:10]
    return cosmos_cache() / "webdataset" / "clips" / f"{Path(run_dir).name}-{digest}" / f"rank{rank}"


class WebRows:
    """This rank's rows from the shards: `take(n)` gives the next n usable ones (bad ones failed or counted)."""

    def __init__(self, stream: ShardStream, urls: list[str], on_bad_row: str, decode: partial[Any], dp_rank: int):
        self.stream, self.urls, self.on_bad_row, self.decode, self.dp_rank = stream, urls, on_bad_row, decode, dp_rank
        self.skipped: Counter[str] = Counter()
        self.problems: list[str] = []
        self._files: deque[Path] = deque()  # the clips handed out, oldest first
        self._refs: Counter[Path] = Counter()  # a clip met again (a later epoch) is the same file: delete it last

    @classmethod
    def from_config(
        cls,
        video: VideoDataloaderConfig,
        *,
        seed: int,
        dp_rank: int,
        dp_size: int,
        cache_dir: Path,
        env: Mapping[str, str],
    ) -> WebRows:
        settings = s3_settings(env)
        urls = shard_urls(video.dataset_dir, s3_client(settings))
        cache_dir.mkdir(parents=True, exist_ok=True)
        decode = partial(
            decode_sample,
            cache_dir=cache_dir,
            offline_text_embedding=video.offline_text_embedding,
            min_frames=video.num_frames,
        )
        stream = ShardStream(
            urls, settings, dp_rank=dp_rank, dp_size=dp_size, num_workers=video.num_workers, seed=seed, decode=decode
        )
        return cls(stream, urls, video.on_bad_row, decode, dp_rank)

    def _usable(self, row: dict[str, Any]) -> bool:
        if "error" not in row:
            return True
        if self.on_bad_row == "fail":
            raise DataError(
                f'{row["error"]["message"]}. Fix the shard, or set {ON_BAD_ROW_KEY} = "skip" to leave such rows '
                "out (counted in the report)"
            )
        self.skipped[row["error"]["reason"]] += 1
        if len(self.problems) < 20:
            self.problems.append(row["error"]["message"])
        return False

    def take(self, n: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while len(out) < n:
            row = next(self.stream)
            if self._usable(row):
                out.append(row)
                self._files.append(row["video"])
                self._refs[row["video"]] += 1
        while len(self._files) > KEEP_FILES:
            old = self._files.popleft()
            self._refs[old] -= 1
            if not self._refs[old]:
                del self._refs[old]
                old.unlink(missing_ok=True)
        return out

    def first_rows(self, n: int) -> list[dict[str, Any]]:
        """The first n usable rows of the shards in their listed order (fixed evaluation prompts), read apart from
        the stream (its position does not move); bad rows are passed over here, the stream judges them."""
        client = s3_client(self.stream.settings)
        # their own folder: the stream's clean-up of old clips must not delete an evaluation row's clip
        decode = partial(
            self.decode.func, **{**self.decode.keywords, "cache_dir": self.decode.keywords["cache_dir"] / "eval"}
        )
        decode.keywords["cache_dir"].mkdir(parents=True, exist_ok=True)
        out: list[dict[str, Any]] = []
        for url in self.urls:
            for sample in shard_samples(client, url):
                row = decode(sample)
                if "error" not in row:
                    out.append(row)
                if len(out) == n:
                    return out
        return out

    # ------------------------------------------------------------------ the checkpointed position
    def mark(self) -> dict[str, Any]:
        """This rank's position and skip counts (no collective): `rewind` returns to it."""
        return {"stream": self.stream.state_dict(), "skipped": dict(self.skipped)}

    def rewind(self, mark: dict[str, Any]) -> None:
        """Back to `mark`: the rows taken since are the next ones again (an iteration that stopped before its update
        gives its rows back)."""
        self.stream.load_state_dict(mark["stream"])
        self.skipped = Counter(mark["skipped"])

    def state_dict(self) -> dict[str, Any]:
        """Every dp rank's position and skip counts (a collective: every rank calls it when saving)."""
        return {"ranks": gather_states(self.mark(), self.dp_rank)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mine = state.get("ranks", {}).get(str(self.dp_rank))
        if mine is None:
            raise DataError(
                f"the checkpoint holds the shard positions of data-parallel ranks {sorted(state.get('ranks', {}))}, "
                f"not of rank {self.dp_rank}: resume with the same number of ranks, or start a fresh run"
            )
        self.rewind(mine)

    def report(self) -> dict[str, Any]:
        return {
            "type": "web",
            "shards": len(self.urls),
            "taken": self.stream.taken,
            "skipped": sum(self.skipped.values()),
            "skipped_by_reason": dict(self.skipped),
            "problems": self.problems[:20],
        }
