"""Runs on S3 without a store: where the local working copy of an s3:// output_dir is, the run folder the flows
make there, the run's URL, which folders a sync sends, and cosmos-rl's object-store keys on the world model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cosmos_train.config import load_config
from cosmos_train.config.paths import is_s3, run_cache_root
from cosmos_train.errors import ConfigError
from cosmos_train.run_sync import run_url, written_folders
from cosmos_train.wfm.config import load_wfm_config
from tests.conftest import ROOT


def test_the_local_copy_of_an_s3_output_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSMOS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("COSMOS_RUN_CACHE", raising=False)
    assert is_s3("s3://b/p") and not is_s3("outputs/s3:")
    assert run_cache_root("s3://bucket/a/b/") == tmp_path / "cache" / "runs" / "bucket" / "a" / "b"
    assert run_cache_root("s3://bucket/../x") == tmp_path / "cache" / "runs" / "bucket" / "x"  # never above the root
    monkeypatch.setenv("COSMOS_RUN_CACHE", str(tmp_path / "work"))
    assert run_cache_root("s3://bucket") == tmp_path / "work" / "bucket"
    assert run_cache_root("outputs/x") == Path("outputs/x")  # a local output_dir is its own run root
    assert run_url("s3://bucket/p", tmp_path / "20261126") == "s3://bucket/p/20261126"
    assert run_url("outputs", tmp_path / "20261126") is None


def test_the_flows_make_the_run_folder_in_the_local_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.run_folder import new_run_dir

    monkeypatch.setenv("COSMOS_RUN_CACHE", str(tmp_path / "work"))
    cfg = load_config(
        ROOT / "configs" / "tiny-sft.toml", ["train.output_dir='s3://bucket/sft'"], env={}, check_paths=False
    )
    run = new_run_dir(cfg)
    assert run.parent == (tmp_path / "work" / "bucket" / "sft").resolve() and run.is_dir()
    wfm = load_wfm_config(WFM, ["job.output_dir='s3://bucket/wfm'"], env={}, check_paths=False)
    assert Path(wfm.run_root) == tmp_path / "work" / "bucket" / "wfm"


def test_written_folders_are_complete_checkpoints_and_whole_exports(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for name, marker in (("step_2", "COMPLETE"), ("step_4", None)):
        (run / "checkpoints" / name).mkdir(parents=True)
        if marker:
            (run / "checkpoints" / name / marker).write_text(json.dumps({"time": 1}))
    (run / "checkpoints" / "step_6.tmp-ab12").mkdir()
    for folder, marker in (("safetensors/final", "config.json"), ("diffusers/final", "model_index.json")):
        (run / folder).mkdir(parents=True)
        (run / folder / marker).write_text("{}")
    (run / "diffusers" / ".final.123.tmp").mkdir()
    assert [w for w, _ in written_folders(run)] == ["checkpoints/step_2", "safetensors/final", "diffusers/final"]
    assert [w for w, _ in written_folders(run, include_final=False)] == ["checkpoints/step_2"]


WFM = ROOT / "configs" / "tiny-wfm-ddrl.toml"


def test_cosmos_rl_object_store_keys_map_onto_an_s3_output_dir() -> None:
    base = ["model.model_name_or_path='/tmp'"]
    store = "checkpoint.save_to_object_store={enabled=true, bucket='ckpts', credentials='c.secret'}"
    cfg = load_wfm_config(WFM, [*base, store, "job.output_dir='s3://ckpts/run'"], env={}, check_paths=False)
    assert cfg.job.output_dir == "s3://ckpts/run"
    with pytest.raises(ConfigError) as e:
        load_wfm_config(WFM, [*base, store, "job.output_dir='s3://other/run'"], env={}, check_paths=False)
    assert 'job.output_dir = "s3://ckpts/PREFIX"' in "\n".join(e.value.problems)
    load = "checkpoint.load_from_object_store={enabled=true}"
    with pytest.raises(ConfigError) as e:
        load_wfm_config(WFM, [*base, load], env={}, check_paths=False)
    assert "checkpoint.load_from_object_store.enabled" in "\n".join(e.value.problems)
