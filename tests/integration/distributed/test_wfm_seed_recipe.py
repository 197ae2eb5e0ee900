"""The world-model seed's recipe (configs/tiny-wfm-seed-recipe.toml) with every part at once, against a real
S3-compatible server (moto on loopback, IAM auth on) reached with the seed's PROD_S3_CHECKPOINT_* variables alone:
DDRL, video2world (one given latent frame, the first_frame_brightness reward), context parallel 2 on 2 gloo processes
(one data-parallel rank), the clips as webdataset shards written by scripts/wfm_shards.py, the run on S3.

The run is preempted (SIGTERM) once a checkpoint is written and stops at a step's end with a checkpoint that the
run's sync uploads as it exits; the machine's cache is wiped (working copy and clip cache), and a new run with
checkpoint.resume = true continues from the bucket alone: its diffusers export is bit-exact the uninterrupted run's,
and it read the shards in the same order (the same metrics, rewards and data loss bit for bit, at every iteration
after the resume; the same stream position at the end). Then, on a wiped machine again, the export in the bucket is
fetched and evaluated against the base model on the held-out clips the shard writer left out (eval-wfm's library
functions).

    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q tests/integration/distributed/test_wfm_seed_recipe.py --durations=0
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from cosmos_train.errors import ModelError
from cosmos_train.metrics import read_metrics
from cosmos_train.wfm.config import load_wfm_config
from tests.conftest import ROOT
from tests.integration.distributed.test_wfm_dist import TIMED
from tests.run_outputs import finish, same_weights
from tests.s3_server import S3Server, s3_server
from tests.torchrun import LAUNCH, start_torchrun

pytestmark = pytest.mark.slow

RECIPE = ROOT / "configs" / "tiny-wfm-seed-recipe.toml"
ITERS, HELDOUT = 3, 4


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto")) as server:
        yield server


def _seed_env(s3: S3Server, cache: Path) -> dict[str, str]:
    """The seed's variables and no AWS_* (these alone must reach the store); this machine's cache under `cache`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return env | {
        "PROD_S3_CHECKPOINT_ACCESS_KEY_ID": s3.access_key_id,
        "PROD_S3_CHECKPOINT_SECRET_ACCESS_KEY": s3.secret_access_key,
        "PROD_S3_CHECKPOINT_ENDPOINT_URL": s3.url,
        "PROD_S3_CHECKPOINT_REGION_NAME": "us-east-1",
        "COSMOS_CACHE": str(cache),  # the clip cache and the runs' working copies ($COSMOS_CACHE/runs)
        "COSMOS_RUN_CACHE": "",
        "COSMOS_RUN_SYNC_INTERVAL": "0.5",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
    }


def _launch(folder: Path, overrides: list[str], env: dict[str, str]) -> subprocess.Popen:
    """The recipe on 2 processes (cp = 2) in its own session, so a kill of the group ends it and nothing else."""
    folder.mkdir(parents=True)
    load_wfm_config(RECIPE, overrides, env={}).write(folder / "config.toml")
    args = ["-m", "cosmos_train.wfm.trainer", "--config", str(folder / "config.toml")]
    return start_torchrun(2, *args, launcher=LAUNCH, base_env=env)


def _train_rows(run: Path) -> dict[int, dict]:
    return {
        r["step"]: {k: v for k, v in r.items() if k not in TIMED} for r in read_metrics(run) if r["kind"] == "train"
    }


def _web_state(run: Path) -> dict:
    state = json.loads((run / "checkpoints" / f"step_{ITERS}" / "trainer_state.json").read_text())
    return state["extra"]["web_data"]


def test_seed_recipe_preempted_wiped_resumed_from_the_bucket_and_evaluated(
    s3: S3Server, tiny_wfm_dir: Path, wfm_data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cosmos_train.wfm.eval_report import comparison_rows
    from cosmos_train.wfm.evaluate import eval_plan, evaluate_wfm_model, fetch_models

    cache = tmp_path / "machine"
    env = _seed_env(s3, cache)
    clips = f"s3://{s3.bucket}/recipe-clips/"
    put = [sys.executable, str(ROOT / "scripts" / "wfm_shards.py"), str(wfm_data_dir), clips]
    done = subprocess.run([*put, "--shards", "2", "--heldout", str(HELDOUT)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [f"{clips}shard-00000{i}.tar" for i in range(2)]

    url = f"s3://{s3.bucket}/recipe"
    common = [
        f"model.model_name_or_path='{tiny_wfm_dir}'",
        f"dataloader_train.video_dataloader.dataset_dir='{clips}'",
        "dataloader_train.video_dataloader.batch_size=1",
        f"trainer.max_iter={ITERS}",
        "checkpoint.save_iter=1",
        "model.rl.sample_steps=4",
        "evaluation.num_prompts=1",
    ]
    # the uninterrupted run, beside the one on S3 (they share nothing: its own cache, a local output_dir)
    whole = tmp_path / "whole"
    uninterrupted = _launch(
        whole / "run", [*common, f"job.output_dir='{whole}'"], _seed_env(s3, tmp_path / "other-machine")
    )
    first = cache / "runs" / s3.bucket / "recipe" / "first"  # as the flow makes it: run_cache_root(output_dir)/<name>
    p = _launch(first, [*common, f"job.output_dir='{url}'"], env)
    # preempted once a checkpoint is written: SIGTERM to the launcher's group (a pod's eviction, a Prefect cancel;
    # torchrun passes it to each rank's group, the shard-reading loader workers included): the ranks stop together
    # at a step's end with a checkpoint holding the stream's position, which the run's sync uploads as it exits
    deadline = time.monotonic() + 240
    while not (first / "checkpoints" / "step_1" / "COMPLETE").is_file():
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()[0][-3000:]
        time.sleep(0.01)
    os.killpg(p.pid, signal.SIGTERM)
    out = p.communicate(timeout=120)[0]
    stopped = [line for line in out.splitlines() if "stopped by signal 15 at step" in line]
    assert stopped and "DataLoader worker" not in out, out[-3000:]
    newest = int(stopped[0].rsplit(" ", 1)[1])
    assert newest < ITERS, "the run finished before it could be stopped"
    key = f"recipe/first/checkpoints/step_{newest}/"
    stored = s3.objects(key)
    assert f"{key}MANIFEST.json" in stored  # uploaded at exit
    web = json.loads(stored[f"{key}trainer_state.json"])["extra"]["web_data"]["ranks"]["0"]
    assert web["stream"]["taken"] == 2 * newest  # per iteration: the rollout prompt, then the data term's clip
    finish(uninterrupted)

    shutil.rmtree(cache)  # a fresh machine: no working copy, no cached clips
    second = cache / "runs" / s3.bucket / "recipe" / "second"
    out = finish(_launch(second, [*common, f"job.output_dir='{url}'", "checkpoint.resume=true"], env))
    result = json.loads((second / "result.json").read_text())
    assert result["resumed_from"].endswith(f"recipe/first/checkpoints/step_{newest}"), out[-3000:]
    assert result["data"]["type"] == "web" and result["data"]["shards"] == 2 and "data_loss" in result
    # the same weights, and the same shard samples in the same order: every later iteration's rewards and data
    # loss (computed from the rows and clips taken) bit for bit, and the same stream position at the end
    assert same_weights(whole / "run" / "diffusers" / "final", second / "diffusers" / "final")
    want, got = _train_rows(whole / "run"), _train_rows(second)
    assert sorted(got) == list(range(newest + 1, ITERS + 1))
    assert all(got[s] == want[s] for s in got), (got, want)
    assert all(r["num_conditional_frames"] == 1 and "reward_first_frame_brightness" in r for r in got.values())
    assert _web_state(second) == _web_state(whole / "run")
    stored = s3.objects("recipe/second/diffusers/final/MANIFEST.json") | s3.objects("recipe/second/metrics.jsonl")
    assert len(stored) == 2

    # evaluation on another fresh machine: the export fetched from the bucket, against the base model, on the clips
    # the shard writer held out (the trainer never saw them), each continuing its first latent frame
    shutil.rmtree(cache)
    monkeypatch.setenv("COSMOS_CACHE", str(cache))  # this process is that machine now
    monkeypatch.delenv("COSMOS_RUN_CACHE", raising=False)
    export = f"{url}/second/diffusers/final"
    fetched = fetch_models([str(tiny_wfm_dir), export], env)
    assert fetched == [str(tiny_wfm_dir), str(cache / "runs" / s3.bucket / "recipe" / "second" / "diffusers" / "final")]
    assert same_weights(Path(fetched[1]), whole / "run" / "diffusers" / "final")
    stamps = {f: f.stat().st_mtime_ns for f in Path(fetched[1]).rglob("*") if f.is_file()}
    assert fetch_models([export], env) == fetched[1:]  # a complete local copy (checked file by file) is kept
    assert stamps == {f: f.stat().st_mtime_ns for f in Path(fetched[1]).rglob("*") if f.is_file()}
    eval_overrides = [
        *common,
        "dataloader_train.type='local'",
        f"dataloader_train.video_dataloader.dataset_dir='{wfm_data_dir}'",
        f"dataloader_train.video_dataloader.heldout_videos={HELDOUT}",
    ]
    plan = eval_plan(load_wfm_config(RECIPE, eval_overrides, env={}), num_prompts=2, seed=0)
    assert plan.conditional_frames == 1 and len(plan.heldout) == HELDOUT
    shard_names = sorted(p.stem for p in (wfm_data_dir / "videos").glob("*.mp4"))[:-HELDOUT]
    assert not {r["name"] for r in plan.heldout} & set(shard_names)
    results = [
        evaluate_wfm_model(plan, model, label, tmp_path / "eval")
        for model, label in zip(fetched, ["base", "final"], strict=True)
    ]
    base, final = (np.load(r["samples"]) for r in results)
    assert base.shape == final.shape and not np.array_equal(base, final)
    assert np.array_equal(base[:, :, 0], final[:, :, 0])  # the given frame, decoded alike for both models
    table = {row["metric"]: row for row in comparison_rows(results)}
    assert table["gain in total reward over base (paired)"]["final"].startswith(("+", "-"))
    assert all(np.isfinite(r["heldout_diffusion_loss"]["mean"]) for r in results)
    with pytest.raises(ModelError, match=r"--model s3://.*/recipe/third/diffusers/final: no complete upload there"):
        fetch_models([f"{url}/third/diffusers/final"], env)  # a run that never exported


def test_shard_writer_refuses_what_it_cannot_write(wfm_data_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main = runpy.run_path(str(ROOT / "scripts" / "wfm_shards.py"))["main"]
    assert main([str(wfm_data_dir), "s3://bucket/clips/", "--shards", "9", "--heldout", str(HELDOUT)]) == 2
    assert "12 rows, 4 held out, leaves 8 for 9 shards; lower --shards or --heldout" in capsys.readouterr().err
    assert main([str(wfm_data_dir), "hf://org/repo", "--shards", "2"]) == 2
    assert "hf://org/repo: shards go to S3; give s3://bucket/prefix/" in capsys.readouterr().err
