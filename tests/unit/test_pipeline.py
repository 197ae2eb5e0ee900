"""cosmos_train/pipeline.py: the pipeline file's checks, stage keys and the record of finished stages."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cosmos_train.checkpoint_paths import newest_export
from cosmos_train.errors import ConfigError
from cosmos_train.pipeline import PipelineState, load_pipeline_config, stage_key
from tests.conftest import ROOT

CONFIGS = ROOT / "configs"


def _pipeline(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(text)
    return path


BASIC = f"""
output_dir = "{{out}}"
[sft]
config = "{CONFIGS / "tiny-sft.toml"}"
[grpo]
config = "{CONFIGS / "tiny-grpo.toml"}"
[evaluate]
config = "{CONFIGS / "eval-tiny.toml"}"
"""


def test_the_shipped_pipeline_loads_with_paths_from_its_own_folder() -> None:
    cfg = load_pipeline_config(CONFIGS / "tiny-post-train.toml")
    assert cfg.name == "tiny" and cfg.sft and cfg.grpo and cfg.evaluate and cfg.upload is None
    assert cfg.sft.config == str(CONFIGS / "tiny-sft.toml") and cfg.evaluate.config == str(CONFIGS / "eval-tiny.toml")
    assert [n for n, _ in cfg.training_stages()] == ["sft", "grpo"]


def test_overrides_reach_the_stage_config_or_the_pipeline(tmp_path: Path) -> None:
    path = _pipeline(tmp_path, BASIC.format(out=tmp_path))
    cfg = load_pipeline_config(
        path,
        [
            "sft.train.max_num_steps=7",
            'grpo.export="final"',
            "evaluate.limit=3",
            'upload.to=["s3://bucket/x"]',
            "evaluate.base=false",
        ],
    )
    assert cfg.name == "p"  # the file's stem when not given
    assert cfg.sft.overrides == ["train.max_num_steps=7"] and cfg.grpo.export == "final"
    assert cfg.evaluate.overrides == ["limit=3"] and cfg.evaluate.base is False
    assert cfg.upload.to == ["s3://bucket/x"] and cfg.folder == tmp_path.resolve() / "p"


def test_every_problem_is_named_at_once(tmp_path: Path) -> None:
    path = _pipeline(tmp_path, BASIC.format(out=tmp_path) + '[uplaod]\nto = ["x"]\n')
    with pytest.raises(ConfigError) as e:
        load_pipeline_config(path)
    assert any("uplaod" in p and "did you mean upload" in p for p in e.value.problems), e.value.problems

    with pytest.raises(ConfigError) as e:  # a typo inside a stage's own config, found before anything runs
        load_pipeline_config(
            _pipeline(tmp_path, BASIC.format(out=tmp_path)),
            ["grpo.train.max_num_stpes=3", "evaluate.batchsize=2", 'upload.to=["ftp://x"]'],
        )
    text = "\n".join(e.value.problems)
    assert "grpo (config" in text and "max_num_stpes" in text and "max_num_steps" in text
    assert "evaluate (config" in text and "batch_size" in text
    assert "upload.to: 'ftp://x' is not an s3://bucket/prefix or hf://org/repo URL" in text


@pytest.mark.parametrize(
    "text, message",
    [
        ('output_dir = "o"\n[evaluate]\nconfig = "eval.toml"\n', "needs an [sft] or a [grpo] section"),
        ('[sft]\nconfig = "missing.toml"\n', "sft.config: missing.toml does not exist"),
        (f'[sft]\nconfig = "{CONFIGS / "tiny-grpo.toml"}"\n', "is a grpo job config; the [sft] stage needs"),
        (
            f'[sft]\nconfig = "{CONFIGS / "tiny-sft.toml"}"\noverrides = ["train.ckpt.export_safetensors=false"]\n',
            "a pipeline stage must export",
        ),
        (f'name = "../x"\n[sft]\nconfig = "{CONFIGS / "tiny-sft.toml"}"\n', "name"),
        (f'[sft]\nconfig = "{CONFIGS / "tiny-sft.toml"}"\ntrain_retries = -1\n', "train_retries"),
    ],
)
def test_refused_pipelines(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_pipeline_config(_pipeline(tmp_path, text))
    assert message in "\n".join(e.value.problems), e.value.problems


def test_stage_key_follows_config_and_inputs(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "w.bin").write_bytes(b"1234")
    key = stage_key("sft", {"a": 1}, [model])
    assert key == stage_key("sft", {"a": 1}, [model])
    assert key != stage_key("sft", {"a": 2}, [model]) and key != stage_key("grpo", {"a": 1}, [model])
    (model / "w.bin").write_bytes(b"12345")  # the input changed in place: a new key
    assert key != stage_key("sft", {"a": 1}, [model])


def test_state_finished_unfinished_and_reload(tmp_path: Path) -> None:
    out = tmp_path / "export"
    out.mkdir()
    state = PipelineState(tmp_path)
    state.start("sft", "k1", None)
    state.set_run_dir("sft", str(tmp_path))
    assert state.finished("sft", "k1") is None and state.unfinished_run_dir("sft", "k1") == str(tmp_path)
    assert state.unfinished_run_dir("sft", "other") is None  # changed config: a fresh run folder
    state.finish("sft", {"export": str(out)}, [out])
    again = PipelineState(tmp_path)  # from pipeline.json
    assert again.finished("sft", "k1") == {"export": str(out)} and again.finished("sft", "k2") is None
    out.rmdir()  # its output is gone: run again
    assert again.finished("sft", "k1") is None
    (tmp_path / "pipeline.json").write_text("{not json")
    assert PipelineState(tmp_path).stages == {}


def test_failed_stage_keeps_its_run_folder(tmp_path: Path) -> None:
    state = PipelineState(tmp_path)
    state.start("grpo", "k", str(tmp_path))
    state.fail("grpo", "TorchrunFailed: boom")
    rec = json.loads((tmp_path / "pipeline.json").read_text())["stages"]["grpo"]
    assert rec["status"] == "failed" and rec["error"].endswith("boom")
    assert PipelineState(tmp_path).unfinished_run_dir("grpo", "k") == str(tmp_path)


def test_newest_export(tmp_path: Path) -> None:
    assert newest_export(tmp_path / "none") is None and newest_export(tmp_path) is None
    older, newer = tmp_path / "a" / "run1" / "safetensors" / "final", tmp_path / "b" / "safetensors" / "final"
    for i, p in enumerate((older, newer)):
        p.mkdir(parents=True)
        (p / "config.json").write_text("{}")
        os.utime(p, ns=(10**18 + i, 10**18 + i))
    (tmp_path / "c" / "safetensors" / "final").mkdir(parents=True)  # no config.json: not an export
    assert newest_export(tmp_path) == newer


def test_gate_and_filter_sections(tmp_path: Path) -> None:
    path = _pipeline(tmp_path, BASIC.format(out=tmp_path) + "[gate]\nmin_gain = 2.5\n[filter]\nsamples = 4\n")
    cfg = load_pipeline_config(path, ['gate.blocking_flags=["unreadable"]', "filter.max_pass=0.75"])
    assert cfg.gate and cfg.gate.min_gain == 2.5 and cfg.gate.blocking_flags == ["unreadable"]
    assert cfg.filter and (cfg.filter.samples, cfg.filter.min_pass, cfg.filter.max_pass) == (4, 0.0, 0.75)
    default = load_pipeline_config(_pipeline(tmp_path, BASIC.format(out=tmp_path) + "[gate]\n"))
    assert default.gate and default.gate.min_gain == 0.0  # not worse than the parent, and
    assert default.gate.blocking_flags == ["constant_answer", "unreadable", "not_above_chance"]  # every flag blocks
    assert (
        load_pipeline_config(path, []).gate is not None
        and load_pipeline_config(_pipeline(tmp_path, BASIC.format(out=tmp_path))).gate is None
    )  # no [gate]: every export goes on, as before gates existed


@pytest.mark.parametrize(
    "extra, overrides, message",
    [
        ("[gate]\nmin_gain = 101\n", [], "gate.min_gain"),
        ('[gate]\nblocking_flags = ["constant"]\n', [], "gate.blocking_flags"),
        ("[gate]\n", ["evaluate.base=false"], "[gate] compares each export with its parent's evaluation"),
        ("[filter]\nmin_pass = 0.5\nmax_pass = 0.5\n", [], "no row would be kept"),
        ("[filter]\nsamples = 0\n", [], "filter.samples"),
        ("[filter]\nsampels = 4\n", [], "did you mean filter.samples?"),
    ],
)
def test_refused_gates_and_filters(tmp_path: Path, extra: str, overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_pipeline_config(_pipeline(tmp_path, BASIC.format(out=tmp_path) + extra), overrides)
    assert message in "\n".join(e.value.problems), e.value.problems


def test_gate_needs_evaluation_and_filter_needs_grpo(tmp_path: Path) -> None:
    sft_only = f'[sft]\nconfig = "{CONFIGS / "tiny-sft.toml"}"\n'
    with pytest.raises(ConfigError, match=r"\[gate\] compares each export .* needs an \[evaluate\] section"):
        load_pipeline_config(_pipeline(tmp_path, sft_only + "[gate]\n"))
    with pytest.raises(ConfigError, match=r"\[filter\] selects the GRPO stage's rows: it needs a \[grpo\] section"):
        load_pipeline_config(_pipeline(tmp_path, sft_only + "[filter]\n"))
    script = tmp_path / "rows.py"
    script.write_text("")
    with pytest.raises(ConfigError, match="filter: the GRPO stage reads its rows through dataset_script"):
        load_pipeline_config(
            _pipeline(tmp_path, BASIC.format(out=tmp_path) + "[filter]\n"), [f'grpo.dataset_script="{script}"']
        )


def test_the_model_card_does_not_change_an_export_s_key(tmp_path: Path) -> None:
    """README.md (the card written into a promoted export) is left out: the evaluation of that export, the next
    stage and the upload must not run again because the card was written. Any other file counts."""
    export = tmp_path / "final"
    export.mkdir()
    (export / "model.safetensors").write_bytes(b"w")
    key = stage_key("grpo", {}, [export])
    (export / "README.md").write_text("# card")
    assert stage_key("grpo", {}, [export]) == key
    (export / "sub").mkdir()
    (export / "sub" / "README.md").write_text("nested: counts")
    assert stage_key("grpo", {}, [export]) != key


def test_gate_decisions_are_recorded_per_run(tmp_path: Path) -> None:
    state = PipelineState(tmp_path)
    state.record_gate("sft", {"promoted": True})
    state.record_gate("grpo", {"promoted": False})
    saved = json.loads((tmp_path / "pipeline.json").read_text())
    assert saved["gates"] == {"sft": {"promoted": True}, "grpo": {"promoted": False}} and saved["stages"] == {}
    again = PipelineState(tmp_path)
    assert again.gates == saved["gates"]
    again.clear_gates()  # a new run: its own decisions only
    assert "gates" not in json.loads((tmp_path / "pipeline.json").read_text()) and PipelineState(tmp_path).gates == {}
