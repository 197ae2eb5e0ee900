"""A flow reads the user's job TOML once: the later steps (prepare-data, the trainer's launch) get the resolved job
object, and what they read is RUN/config.toml, never the user's file with its overrides again.

The trainer's launch is replaced by a stand-in task (no processes start): it records what it was given.
"""

from __future__ import annotations

import json
import tomllib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import write_tiny_sft_config

pytestmark = pytest.mark.usefixtures("prefect_harness")


@pytest.fixture
def toml_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """How often each .toml file is read in this process (by Path.read_text / read_bytes, how the loaders read)."""
    reads: Counter[str] = Counter()
    read_text, read_bytes = Path.read_text, Path.read_bytes

    def counting_text(self: Path, *args: Any, **kwargs: Any) -> str:
        if self.suffix == ".toml":
            reads[str(self.resolve())] += 1
        return read_text(self, *args, **kwargs)

    def counting_bytes(self: Path) -> bytes:
        if self.suffix == ".toml":
            reads[str(self.resolve())] += 1
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_text", counting_text)
    monkeypatch.setattr(Path, "read_bytes", counting_bytes)
    yield reads


def test_prepare_flow_reads_the_job_toml_once(
    tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path, toml_reads: Counter[str]
) -> None:
    from flows.prepare_data import PrepareDataParams, prepare_data

    job = write_tiny_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, tmp_path / "out")
    manifest = Path(prepare_data(PrepareDataParams(config=str(job), overrides=["train.max_num_steps=3"])))
    run = manifest.parent
    assert toml_reads[str(job.resolve())] == 1, toml_reads
    assert toml_reads[str(run / "config.toml")] == 0, toml_reads  # written once, handed on as an object
    with open(run / "config.toml", "rb") as f:
        assert tomllib.load(f)["train"]["max_num_steps"] == 3


def test_sft_flow_reads_the_job_toml_once_and_the_ranks_get_the_resolved_file(
    tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path, toml_reads: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect import task

    import tasks.training_run
    from flows.sft import SFTParams, sft

    job = write_tiny_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, tmp_path / "out", max_num_steps=2)
    launched: dict[str, Any] = {}

    @task(name="torchrun")
    def stand_in(cfg: Any, module: str, run_dir: str, args: list[str], **_: Any) -> str:
        # The user edits the file after the run started: nothing later may see it.
        with open(job) as f:  # the test's own reads go around the counter
            text = f.read()
        job.write_text(text.replace("max_num_steps = 2", "max_num_steps = 99"))
        launched.update(module=module, run_dir=run_dir, args=args, steps=cfg.train.max_num_steps)
        Path(run_dir, "result.json").write_text(json.dumps({"step": 2, "final": None}))
        return run_dir

    monkeypatch.setattr(tasks.training_run, "run_torchrun", stand_in)
    result = sft(SFTParams(config=str(job), overrides=["train.optm_lr=2e-3", "redis='12800'"]))
    run = Path(result["run_dir"])
    assert launched["module"] == "cosmos_train.train.sft" and launched["steps"] == 2
    assert launched["args"][:2] == ["--config", str(run / "config.toml")]  # the ranks read the resolved file
    with open(run / "config.toml", "rb") as f:
        resolved = tomllib.load(f)
    assert resolved["train"]["optm_lr"] == 2e-3 and resolved["train"]["max_num_steps"] == 2
    assert (run / "manifest.jsonl").is_file()
    assert [line.split(":")[0] for line in result["no_effect"]] == ["redis = '12800'"]
    # The flow's process: the user's TOML read once, the resolved file never read back (the ranks read it).
    assert toml_reads[str(job.resolve())] == 1, toml_reads
    assert toml_reads[str(run / "config.toml")] == 0, toml_reads


def test_post_train_hands_each_stage_its_resolved_config_and_no_overrides(
    tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pipeline resolves a stage's job config (its file, the stage's overrides, the model, the output folder)
    and writes it as the run folder's config.toml; the stage's flow gets that file and no overrides, so nothing
    applies the overrides to the user's file again. The stage flows are stand-ins here: they record their
    parameters."""
    import flows.post_train
    from flows.post_train import PostTrainParams, post_train

    job = write_tiny_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, tmp_path / "unused")
    job.write_text("redis = '12800'\n" + job.read_text())  # a cosmos-rl key with no effect here
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(
        f'name = "p"\noutput_dir = "{tmp_path / "pipelines"}"\nmodel = "{tiny_model_dir}"\n'
        f'[sft]\nconfig = "{job}"\noverrides = ["train.optm_lr=2e-3"]\n'
    )
    given: dict[str, Any] = {}

    def prepare_stand_in(params: Any) -> str:
        given["prepare"] = params
        manifest = Path(params.run_dir) / "manifest.jsonl"
        manifest.write_text("")
        return str(manifest)

    def sft_stand_in(params: Any) -> dict[str, Any]:
        given["sft"] = params
        export = Path(params.run_dir) / "safetensors" / "final"
        export.mkdir(parents=True)
        return {"run_dir": params.run_dir, "final": str(export), "step": 2}

    monkeypatch.setattr(flows.post_train, "prepare_data", prepare_stand_in)
    monkeypatch.setattr(flows.post_train, "sft", sft_stand_in)
    summary = post_train(PostTrainParams(config=str(pipeline)))
    folder = tmp_path / "pipelines" / "p"
    for stage, parent in (("prepare", folder / "prepare" / "sft"), ("sft", folder / "sft")):
        params = given[stage]
        run = Path(params.run_dir)
        assert run.parent == parent and params.config == str(run / "config.toml") and params.overrides == []
        with open(run / "config.toml", "rb") as f:
            resolved = tomllib.load(f)
        assert resolved["train"]["optm_lr"] == 2e-3 and resolved["train"]["output_dir"] == str(parent)
        assert resolved["policy"]["model_name_or_path"] == str(tiny_model_dir)
        with open(run / "config.toml") as f:
            assert "# redis = '12800'" in f.read()  # the record of what the stage's file asked for stays whole
    record = summary["runs"]["sft"]
    assert [line.split(":")[0] for line in record["result"]["no_effect"]] == ["redis = '12800'"]
