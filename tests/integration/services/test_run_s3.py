"""Runs on S3 (cosmos_train/run_sync.py) against a real S3-compatible server on loopback (moto_server, IAM auth):
an `output_dir = "s3://..."` run is mirrored to the bucket while it trains (checkpoints as they complete,
metrics.jsonl on a timer), is killed, its local copy wiped, and a new run with resume = true continues from the
bucket alone, skipping a newer checkpoint whose upload never finished: final weights bit-exact equal to an
uninterrupted run's, for SFT and for the world model."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from cosmos_train.metrics import read_metrics
from cosmos_train.wfm.config import load_wfm_config
from tests.conftest import ROOT, write_tiny_sft_config
from tests.run_outputs import finish, tensors_under
from tests.s3_server import S3Server, s3_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto")) as server:
        yield server


def _env(s3: S3Server, cache: Path) -> dict[str, str]:
    # the local working copies under `cache`; metrics synced every half second (default: 30 s)
    return {
        **os.environ,
        **s3.env,
        "COSMOS_RUN_CACHE": str(cache),
        "COSMOS_RUN_SYNC_INTERVAL": "0.5",
        "OMP_NUM_THREADS": "1",
    }


def _launch(module: str, config: Path, env: dict[str, str]) -> subprocess.Popen:
    # one process, no launcher (a one-process group: distributed.init_distributed); its own session, so a kill
    # of the group ends it and nothing else
    return subprocess.Popen(
        [sys.executable, "-m", module, "--config", str(config)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    )


def _copy_without_manifest(s3: S3Server, src: str, dst: str) -> None:
    """A newer checkpoint whose upload was cut off: every file but MANIFEST.json (written last)."""
    c = s3.client()
    for key in s3.objects(src):
        if not key.endswith("MANIFEST.json"):
            c.copy_object(Bucket=s3.bucket, Key=dst + key[len(src) :], CopySource={"Bucket": s3.bucket, "Key": key})


def test_sft_killed_wiped_and_resumed_from_the_bucket_is_bit_exact(
    s3: S3Server, tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path
) -> None:
    # 12 steps, a checkpoint every 2, killed once any checkpoint is in the bucket: waiting for step_2's alone, 6 steps
    # once ran to their end under load ~9 before the poll (which waits on the S3 server) saw it.
    steps, cache = 12, tmp_path / "cache"
    env = _env(s3, cache)
    straight = tmp_path / "straight"
    cfg = write_tiny_sft_config(
        straight / "config.toml", tiny_model_dir, synthetic_dir, tmp_path / "o", max_num_steps=steps
    )
    uninterrupted = _launch("cosmos_train.train.sft", cfg, env)  # beside the run on S3: they share nothing

    url = f"s3://{s3.bucket}/sft"
    first = cache / s3.bucket / "sft" / "first"  # where the flow makes it: run_cache_root(output_dir)/<name>
    cfg = write_tiny_sft_config(first / "config.toml", tiny_model_dir, synthetic_dir, url, max_num_steps=steps)
    p = _launch("cosmos_train.train.sft", cfg, env)
    deadline, seen = time.monotonic() + 240, {}
    while time.monotonic() < deadline and p.poll() is None:
        seen = s3.objects("sft/first/metrics.jsonl")
        if seen and any(k.endswith("/MANIFEST.json") for k in s3.objects("sft/first/checkpoints/")):
            break
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGKILL)  # no exit handler, no last sync: what is in the bucket is all there is
    p.communicate(timeout=60)
    rows = [json.loads(x) for x in seen["sft/first/metrics.jsonl"].decode().splitlines()]
    assert rows and rows[0]["step"] == 1  # synced while the run went on
    in_bucket = sorted({k.split("/")[3] for k in s3.objects("sft/first/checkpoints/") if k.endswith("MANIFEST.json")})
    newest = max(int(n.removeprefix("step_")) for n in in_bucket)
    assert newest < steps, "the run finished before it could be killed"
    _copy_without_manifest(s3, f"sft/first/checkpoints/step_{newest}/", "sft/first/checkpoints/step_99/")
    finish(uninterrupted)

    shutil.rmtree(cache)  # a fresh machine: nothing of the run on disk
    second = cache / s3.bucket / "sft" / "second"
    cfg = write_tiny_sft_config(
        second / "config.toml", tiny_model_dir, synthetic_dir, url, max_num_steps=steps, resume=True
    )
    out = finish(_launch("cosmos_train.train.sft", cfg, env))
    assert "step_99" in out and "has no MANIFEST.json" in out  # the partial upload was seen and skipped
    result = json.loads((second / "result.json").read_text())
    assert result["resumed_from"] == str(cache / s3.bucket / "sft" / "first" / "checkpoints" / f"step_{newest}")
    assert result["run_url"] == f"{url}/second" and all(u["ok"] for u in result["uploads"])
    a, b = tensors_under(straight / "safetensors" / "final"), tensors_under(second / "safetensors" / "final")
    assert a and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    stored = s3.objects("sft/second/")
    assert "sft/second/safetensors/final/MANIFEST.json" in stored and "sft/second/result.json" in stored
    assert f"sft/second/checkpoints/step_{steps}/COMPLETE" in stored
    synced = [json.loads(x) for x in stored["sft/second/metrics.jsonl"].decode().splitlines()]
    assert [r["step"] for r in synced if r["kind"] == "train"] == list(range(newest + 1, steps + 1))


def test_world_model_stopped_wiped_and_resumed_from_the_bucket_is_bit_exact(
    s3: S3Server, tiny_wfm_dir: Path, wfm_data_dir: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    env = _env(s3, cache)
    url = f"s3://{s3.bucket}/wfm"
    common = [
        f"model.model_name_or_path='{tiny_wfm_dir}'",
        "trainer.max_iter=2",
        "checkpoint.save_iter=1",
        "dataloader_train.type='local'",
        f"dataloader_train.video_dataloader.dataset_dir='{wfm_data_dir}'",
        "dataloader_train.video_dataloader.batch_size=1",
        "dataloader_train.video_dataloader.heldout_videos=2",
        "model.rl.sample_steps=2",
        "evaluation.num_prompts=1",
    ]

    def run(folder: Path, overrides: list[str]) -> subprocess.Popen:
        folder.mkdir(parents=True)
        load_wfm_config(ROOT / "configs" / "tiny-wfm-ddrl.toml", [*common, *overrides], env={}).write(
            folder / "config.toml"
        )
        return _launch("cosmos_train.wfm.trainer", folder / "config.toml", env)

    whole, first = tmp_path / "whole", cache / s3.bucket / "wfm" / "first"
    uninterrupted = run(whole, [f"job.output_dir='{tmp_path / 'o'}'"])
    finish(run(first, [f"job.output_dir='{url}'", "trainer.max_iter=1"]))  # stopped at iteration 1
    finish(uninterrupted)
    assert "wfm/first/checkpoints/step_1/MANIFEST.json" in s3.objects("wfm/first/")
    shutil.rmtree(cache)
    second = cache / s3.bucket / "wfm" / "second"
    finish(run(second, [f"job.output_dir='{url}'", "checkpoint.resume=true"]))
    assert json.loads((second / "result.json").read_text())["resumed_from"].endswith("wfm/first/checkpoints/step_1")
    a, b = tensors_under(whole / "diffusers" / "final"), tensors_under(second / "diffusers" / "final")
    assert a and a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    stored = s3.objects("wfm/second/")
    assert "wfm/second/diffusers/final/MANIFEST.json" in stored and "wfm/second/checkpoints/step_2/COMPLETE" in stored
    assert [json.loads(x)["step"] for x in stored["wfm/second/metrics.jsonl"].decode().splitlines()] == [
        json.loads(x)["step"] for x in (second / "metrics.jsonl").read_text().splitlines()
    ]  # synced at exit: the bucket's copy is the whole file
    assert [r["step"] for r in read_metrics(second) if r["kind"] == "train"] == [2]


def _checkpoint(run: Path, step: int) -> Path:
    folder = run / "checkpoints" / f"step_{step}"
    folder.mkdir(parents=True)
    (folder / "__0_0.distcp").write_bytes(os.urandom(1000))
    (folder / "COMPLETE").write_text(json.dumps({"step": step, "time": time.time()}))
    return folder


def test_a_failed_upload_keeps_the_checkpoint_and_says_so_then_rotation_follows_max_keep(
    s3: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from cosmos_train.net import free_port
    from cosmos_train.run_sync import RunSync
    from cosmos_train.storage.s3 import s3_settings

    run = tmp_path / "r"
    step_2 = _checkpoint(run, 2)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    down = s3_settings({**s3.env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}"})
    sync = RunSync(run, f"s3://{s3.bucket}/failing/r", down, interval_s=3600)
    sync.retry_sleep_s = 0.0
    records = sync.start().close()  # the thread stops at once; the last scans find the store unreachable
    assert [(r["what"], r["ok"]) for r in records] == [("checkpoints/step_2", False)]
    assert "unavailable" in records[0]["error"] and (step_2 / "COMPLETE").is_file()
    assert "cosmos-train upload" in caplog.text and str(step_2) in caplog.text

    sync = RunSync(run, f"s3://{s3.bucket}/ok/r", s3_settings(s3.env), interval_s=3600)
    assert [(r["what"], r["ok"]) for r in sync.start().close()] == [("checkpoints/step_2", True)]
    stored = s3.objects("ok/r/")
    assert {"ok/r/checkpoints/step_2/MANIFEST.json", "ok/r/metrics.jsonl"} <= stored.keys()
    # max_keep rotation removed step_2 locally after step_4: the bucket follows once step_4 is there
    _checkpoint(run, 4)
    shutil.rmtree(step_2)
    sync.scan()
    assert sorted({k.split("/")[3] for k in s3.objects("ok/r/checkpoints/")}) == ["step_4"]


def test_resume_from_a_bucket_without_a_complete_checkpoint(s3: S3Server, tmp_path: Path) -> None:
    from cosmos_train.errors import CheckpointError
    from cosmos_train.run_sync import fetch_checkpoint
    from cosmos_train.storage.s3 import s3_settings

    settings = s3_settings(s3.env)
    url = f"s3://{s3.bucket}/empty"
    assert fetch_checkpoint(url, settings, required=False) is None  # resume = true: a first run starts fresh
    with pytest.raises(CheckpointError) as e:  # resume = "s3://...": said, never a silent start from step 0
        fetch_checkpoint(f"{url}/run/checkpoints/step_3", settings, key="train.resume")
    assert "train.resume = 's3://" in str(e.value) and "no complete checkpoint" in str(e.value)
