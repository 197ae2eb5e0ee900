"""Webdataset shards on a real S3-compatible server (moto on loopback, IAM auth on), read with the seed's
PROD_S3_CHECKPOINT_* credentials: ranks x loader workers read disjoint samples that cover the set, a stream
resumed from its saved position gives the samples an uninterrupted one gives, bad samples fail or are counted by
on_bad_row, a world-model run with dataloader_train.type = "web" trains and resumes on 2 ranks, and an SFT run
trains on LLaVA rows in s3:// shards."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from cosmos_train.data.shards import ShardStream, shard_urls
from cosmos_train.errors import DataError
from cosmos_train.storage.s3 import s3_client, s3_settings
from cosmos_train.wfm.config import load_wfm_config
from cosmos_train.wfm.config_sections import VideoDataloaderConfig
from cosmos_train.wfm.web_data import WebRows, decode_sample
from tests.conftest import ROOT
from tests.s3_server import S3Server, s3_server
from tests.shards import clip_shards, llava_shards, put_shards, tar_bytes
from tests.torchrun import LAUNCH, torchrun


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto")) as server:
        media = tmp_path_factory.mktemp("media")
        put_shards(server, clip_shards(media, n_shards=4, per_shard=3))
        bad = clip_shards(media, n_shards=1, per_shard=3, prefix="bad")["bad/shard-000000.tar"]
        members = _members(bad)
        members = [m for m in members if m[0] != "s00i00.txt"]  # a clip without its caption
        members = [(n, b"not an mp4" if n == "s00i01.mp4" else d) for n, d in members]  # an undecodable clip
        put_shards(server, {"bad/shard-000000.tar": tar_bytes(members)})
        yield server


def _members(tar: bytes) -> list[tuple[str, bytes]]:
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        return [(m.name, t.extractfile(m).read()) for m in t.getmembers()]  # type: ignore[union-attr]


def _env(s3: S3Server) -> dict[str, str]:
    """The world-model seed's variables (and no AWS_*: these alone must reach the store)."""
    return {
        "PROD_S3_CHECKPOINT_ACCESS_KEY_ID": s3.access_key_id,
        "PROD_S3_CHECKPOINT_SECRET_ACCESS_KEY": s3.secret_access_key,
        "PROD_S3_CHECKPOINT_ENDPOINT_URL": s3.url,
        "PROD_S3_CHECKPOINT_REGION_NAME": "us-east-1",
    }


def _caption(sample: dict) -> str:
    return sample["txt"].decode()


def test_ranks_and_workers_read_disjoint_samples_covering_the_set(s3: S3Server) -> None:
    settings = s3_settings(_env(s3))
    urls = shard_urls(f"s3://{s3.bucket}/clips/", s3_client(settings))
    assert urls == [f"s3://{s3.bucket}/clips/shard-{i:06d}.tar" for i in range(4)]
    assert shard_urls(f"s3://{s3.bucket}/clips/shard-{{000000..000003}}.tar", None) == urls
    seen = []
    for rank in range(2):  # 2 ranks x 2 loader worker processes: 4 slots of one shard each, 6 samples per rank
        stream = ShardStream(urls, settings, dp_rank=rank, dp_size=2, num_workers=2, seed=3, decode=_caption)
        seen.append(stream.take(6))
        stream.close()
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == sorted(f"clip {s}-{i}" for s in range(4) for i in range(3))
    with pytest.raises(DataError, match="4 shard.*2 data-parallel rank.*3 loader worker"):
        ShardStream(urls, settings, dp_rank=0, dp_size=2, num_workers=3)


def test_resumed_stream_continues_where_it_stopped(s3: S3Server) -> None:
    settings = s3_settings(_env(s3))
    urls = shard_urls(f"s3://{s3.bucket}/clips/", s3_client(settings))
    kw = {"dp_rank": 0, "dp_size": 1, "num_workers": 2, "seed": 0, "decode": _caption}
    whole = ShardStream(urls, settings, **kw)
    expected = whole.take(17)  # 2 slots of 2 shards: past the first epoch (12 samples)
    whole.close()
    part = ShardStream(urls, settings, **kw)
    first = part.take(7)
    state = json.loads(json.dumps(part.state_dict()))  # what a checkpoint keeps
    part.close()  # the stopped run's workers are gone; a new stream starts from the state
    resumed = ShardStream(urls, settings, **kw, state=state)
    assert first + resumed.take(10) == expected
    resumed.close()
    with pytest.raises(DataError, match="same data-parallel size, num_workers"):
        ShardStream(urls, settings, **{**kw, "num_workers": 1}, state=state)


@pytest.mark.parametrize("on_bad_row", ["fail", "skip"])
def test_bad_samples_fail_or_are_counted(s3: S3Server, tmp_path: Path, on_bad_row: str) -> None:
    video = VideoDataloaderConfig(dataset_dir=f"s3://{s3.bucket}/bad/", num_frames=5, on_bad_row=on_bad_row)
    rows = WebRows.from_config(video, seed=0, dp_rank=0, dp_size=1, cache_dir=tmp_path, env=_env(s3))
    if on_bad_row == "fail":
        with pytest.raises(DataError, match=r"bad/shard-000000.tar:s00i00: no caption.*on_bad_row = \"skip\""):
            rows.take(1)
        return
    got = rows.take(1)  # the shard's one good row, after its two bad ones
    assert got[0]["prompt"] == "clip 0-2" and got[0]["video"].is_file()
    assert rows.report()["skipped_by_reason"] == {"missing_caption": 1, "bad_media": 1}
    assert rows.take(1)[0]["prompt"] == "clip 0-2"  # the next epoch: the bad rows are met (and counted) again
    assert rows.report()["skipped_by_reason"] == {"missing_caption": 2, "bad_media": 2}


def test_rows_given_back_are_taken_again(s3: S3Server, tmp_path: Path) -> None:
    """`rewind` to a `mark` (a world-model iteration that stopped on a lost reward service gives its rows back):
    the next rows are those taken since the mark, and the position a checkpoint keeps is the mark's."""
    video = VideoDataloaderConfig(dataset_dir=f"s3://{s3.bucket}/clips/", num_frames=5)
    rows = WebRows.from_config(video, seed=0, dp_rank=0, dp_size=1, cache_dir=tmp_path, env=_env(s3))
    rows.take(2)
    mark = rows.mark()
    given = [r["prompt"] for r in rows.take(3)]
    assert rows.mark() != mark
    rows.rewind(mark)
    assert rows.mark() == mark
    assert [r["prompt"] for r in rows.take(3)] == given
    rows.stream.close()


def test_samples_decode_with_their_embedding_or_name_what_is_missing(tmp_path: Path) -> None:
    """A shard sample as the loader worker decodes it: caption, clip written and probed, embedding from .npy (no
    pickle) or .pickle; each missing part is a bad row with its reason, named by shard URL and key."""
    import io
    import pickle

    import numpy as np

    from tests.media import moving_square_mp4

    clip = moving_square_mp4(tmp_path / "c.mp4", frames=5, size=32).read_bytes()
    emb = np.arange(12, dtype=np.float16).reshape(3, 4)
    npy = io.BytesIO()
    np.save(npy, emb)
    base = {"__url__": "s3://b/p/shard-1.tar", "__key__": "k1", "mp4": clip, "json": b'{"caption": " a cat "}'}
    kw = {"cache_dir": tmp_path, "offline_text_embedding": True, "min_frames": 5}
    row = decode_sample({**base, "npy": npy.getvalue()}, **kw)
    assert row["prompt"] == "a cat" and row["video"] == tmp_path / "shard-1__k1.mp4" and row["video"].is_file()
    assert row["embedding"].dtype == torch.float32 and row["embedding"].tolist() == emb.astype(np.float32).tolist()
    row = decode_sample({**base, "pickle": pickle.dumps({"t5_text_embeddings": emb})}, **kw)
    assert row["embedding"].shape == (3, 4)
    cases = {
        "missing_embedding": base,
        "short_video": {**base, "npy": npy.getvalue()},
        "missing_video": {k: v for k, v in base.items() if k != "mp4"},
        "bad_embedding": {**base, "npy": b"nonsense"},
    }
    for reason, sample in cases.items():
        got = decode_sample(sample, **{**kw, "min_frames": 9 if reason == "short_video" else 5})
        assert got["error"]["reason"] == reason and got["origin"].startswith("s3://b/p/shard-1.tar:k"), got


def _wfm_run(run: Path, s3: S3Server, wfm_dir: Path, overrides: list[str]) -> None:
    """The world-model trainer on 2 ranks reading the clips from the bucket, to its end (exit 0)."""
    run.mkdir(parents=True, exist_ok=True)
    cfg = load_wfm_config(
        ROOT / "configs" / "tiny-wfm-ddrl.toml",
        [
            f"model.model_name_or_path='{wfm_dir}'",
            f"job.output_dir='{run.parent}'",
            "dataloader_train.type='web'",
            f"dataloader_train.video_dataloader.dataset_dir='s3://{s3.bucket}/clips/'",
            "dataloader_train.video_dataloader.batch_size=1",
            "dataloader_train.video_dataloader.num_workers=1",
            "model.rl.sample_steps=4",
            "evaluation.num_prompts=2",
            "checkpoint.save_iter=1",
            *overrides,
        ],
        env={},
    )
    cfg.write(run / "config.toml")
    base = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env = {"COSMOS_CACHE": str(run.parent / "cache"), **_env(s3)}
    args = ["-m", "cosmos_train.wfm.trainer", "--config", str(run / "config.toml")]
    torchrun(2, *args, launcher=LAUNCH, env=env, base_env=base)


def test_wfm_rl_web_trains_on_two_ranks_and_checkpoints_where_each_stands(
    s3: S3Server, tiny_wfm_dir: Path, tmp_path: Path
) -> None:
    """DDRL (its data term reads the clips) for 2 iterations on 2 ranks, a checkpoint after each. A stream restored
    from step 1's positions and advanced by one iteration's takes (the rollout prompts, then the data-term clips)
    stands exactly where step 2's checkpoint says the trainer stood: the trainer took the stream's samples in the
    stream's order, and a resume from step 1 continues with the samples an uninterrupted run took."""
    run = tmp_path / "run"
    _wfm_run(run, s3, tiny_wfm_dir, ["trainer.max_iter=2"])
    result = json.loads((run / "result.json").read_text())
    assert result["data"]["type"] == "web" and result["data"]["shards"] == 4 and "data_loss" in result

    def saved(step: int) -> dict:
        state = json.loads((run / "checkpoints" / f"step_{step}" / "trainer_state.json").read_text())
        return state["extra"]["web_data"]["ranks"]

    step_1, step_2 = saved(1), saved(2)
    assert sorted(step_2) == ["0", "1"] and all(s["stream"]["taken"] == 4 for s in step_2.values())
    cfg = load_wfm_config(run / "config.toml", env={})
    names = []
    for rank in (0, 1):
        rows = WebRows.from_config(
            cfg.video, seed=cfg.trainer.seed, dp_rank=rank, dp_size=2, cache_dir=tmp_path / f"c{rank}", env=_env(s3)
        )
        rows.load_state_dict({"ranks": step_1})
        names += [r["name"] for r in rows.take(1) + rows.take(1)]
        assert rows.stream.state_dict() == step_2[str(rank)]["stream"]
        rows.stream.close()
    assert len(set(names)) == 4  # the two ranks' iteration-2 clips: four different samples


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_sft_on_llava_rows_in_s3_shards(
    s3: S3Server, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`[train.train_policy.dataset] name = "s3://..."`: the webdataset source streams the shards, writes each
    sample's media to the cache, and the sft flow trains on the rows; a sample with no json row is counted."""
    from flows.sft import SFTParams, sft

    shards = llava_shards(tmp_path / "media", n_shards=2, per_shard=2)
    shards["vlm/shard-000002.tar"] = tar_bytes([("orphan.mp4", b"\0")])  # no <key>.json: a bad row
    put_shards(s3, shards)
    for k, v in _env(s3).items():
        monkeypatch.setenv(k, v)
    for k in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("COSMOS_CACHE", str(tmp_path / "cache"))
    lines = [
        "[train]",
        f'output_dir = "{tmp_path / "out"}"',
        "max_num_steps = 2",
        "epoch = 4",
        "train_batch_per_replica = 2",
        "optm_lr = 1e-3",
        'param_dtype = "float32"',
        "[train.ckpt]",
        "enable_checkpoint = false",
        "export_safetensors = true",
        "[train.train_policy]",
        'type = "sft"',
        "micro_batch = 2",
        "dataloader_shuffle = false",
        "[train.train_policy.dataset]",
        f'name = "s3://{s3.bucket}/vlm/"',
        'on_bad_row = "skip"',
        "[train.train_policy.dataset.vision]",
        "min_pixels = 3136",
        "max_pixels = 3136",
        "[policy]",
        f'model_name_or_path = "{tiny_model_dir}"',
        "model_max_length = 1024",
        "model_gradient_checkpointing = false",
        "[launch]",
        "nproc_per_node = 1",
        "[logging]",
        'logger = ["console"]',
    ]
    (tmp_path / "job.toml").write_text("\n".join(lines) + "\n")
    state = sft(SFTParams(config=str(tmp_path / "job.toml"), train_retries=0), return_state=True)
    assert state.is_completed(), state
    run = Path(state.result()["run_dir"])
    report = json.loads((run / "prep_report.json").read_text())
    assert (report["rows_read"], report["rows_kept"], report["rows_skipped"]) == (5, 4, 1), report
    kept = [json.loads(x) for x in (run / "manifest.jsonl").read_text().splitlines()]
    assert sorted(k["id"] for k in kept) == ["v00i00", "v00i01", "v01i00", "v01i01"]
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if m["kind"] == "train"] == [1, 2]
