"""Evaluation config: the reference YAML as is, TOML, overrides, unknown keys named."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosmos_train.evaluation.config import EvalConfigError, load_eval_config

ROOT = Path(__file__).resolve().parents[2]

# tools/eval/configs/robovqa.yaml from the Cosmos-Reason1 evaluation guide, verbatim.
REFERENCE_YAML = """\
datasets:
  - robovqa

model:
  model_name: nvidia/Cosmos-Reason1-7B # or a safetensors folder path
  tokenizer_model_name: qwen2.5-vl-7b
  dtype: bfloat16
  tp_size: 4
  max_length: 128000

evaluation:
  answer_type: reasoning
  num_processes: 80
  skip_saved: false
  fps: 4
  seed: 1

generation:
  max_retries: 10
  max_tokens: 1024
  temperature: 0.6
  repetition_penalty: 1.0
  presence_penalty: 0.0
  frequency_penalty: 0.0
"""


def test_reference_yaml_accepted(tmp_path: Path) -> None:
    path = tmp_path / "robovqa.yaml"
    path.write_text(REFERENCE_YAML)
    cfg = load_eval_config(path)
    assert cfg.datasets == ["robovqa"]
    assert cfg.model.model_name == "nvidia/Cosmos-Reason1-7B"
    assert cfg.model.tp_size == 4 and cfg.model.dtype == "bfloat16"
    assert cfg.evaluation.answer_type == "reasoning" and cfg.evaluation.fps == 4
    assert cfg.generation.max_retries == 10 and cfg.generation.temperature == 0.6
    assert cfg.run_dir() == Path("results") / "Cosmos-Reason1-7B" / "reasoning"


def test_shipped_configs_load() -> None:
    for name in ("eval-robovqa.yaml", "eval-tiny.toml", "eval-cosmos-reason1-7b.toml"):
        cfg = load_eval_config(ROOT / "configs" / name)
        assert cfg.datasets
    assert load_eval_config(ROOT / "configs" / "eval-robovqa.yaml").datasets == ["robovqa"]


def test_unknown_key_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(REFERENCE_YAML.replace("  fps: 4", "  fsp: 4"))
    with pytest.raises(EvalConfigError, match=r"evaluation\.fsp: unknown key \(did you mean 'fps'\?\)"):
        load_eval_config(path)
    toml = tmp_path / "bad.toml"
    toml.write_text('datasets = ["a"]\nbatchsize = 3\n')
    with pytest.raises(EvalConfigError, match=r"batchsize: unknown key \(did you mean 'batch_size'\?\)"):
        load_eval_config(toml)


def test_bad_values_named(tmp_path: Path) -> None:
    path = tmp_path / "e.toml"
    path.write_text('datasets = ["a"]\n[evaluation]\nanswer_type = "essay"\n')
    with pytest.raises(EvalConfigError, match=r"evaluation\.answer_type"):
        load_eval_config(path)
    path.write_text("[model]\ndtype = 'float32'\n")
    with pytest.raises(EvalConfigError, match=r"datasets: Field required"):
        load_eval_config(path)
    with pytest.raises(EvalConfigError, match="does not exist"):
        load_eval_config(tmp_path / "missing.toml")


def test_overrides_and_limit(tmp_path: Path) -> None:
    path = tmp_path / "e.toml"
    path.write_text('datasets = ["a"]\nlimit = -1\n')
    cfg = load_eval_config(path)
    assert cfg.limit is None  # the reference's -1 means all
    cfg = load_eval_config(
        path,
        [
            "limit=4",
            'datasets=["x", "y"]',
            "generation.max_tokens=64",
            "model.model_name=out/run/final",
            "engine=hf",
            "evaluation.skip_saved=true",
        ],
    )
    assert cfg.limit == 4 and cfg.datasets == ["x", "y"] and cfg.generation.max_tokens == 64
    assert cfg.model_basename == "final" and cfg.engine == "hf" and cfg.evaluation.skip_saved
    cfg = load_eval_config(path, ["model.name=sft"])
    assert cfg.run_dir().parts[-2] == "sft"
    with pytest.raises(EvalConfigError, match="expected key.path=value"):
        load_eval_config(path, ["limit"])
    with pytest.raises(EvalConfigError, match="engine"):
        load_eval_config(path, ["engine=trt"])


def test_plugin_names_checked_against_registries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cosmos_train.generation import ENGINES
    from cosmos_train.rewards.parsing import PARSERS

    path = tmp_path / "e.toml"
    path.write_text('datasets = ["a"]\n')
    with pytest.raises(EvalConfigError) as e:
        load_eval_config(path, ["engine=hff", "evaluation.answer_type=reasonng"])
    assert sorted(e.value.problems) == [
        "engine: must be a registered engine: 'auto', 'hf', 'vllm' (got 'hff'); did you mean 'hf'?",
        "evaluation.answer_type: must be a registered answer type: 'freeform', 'letter', 'reasoning' "
        "(got 'reasonng'); did you mean 'reasoning'?",
    ]
    # A plug-in registered before the config is read is a valid name.
    monkeypatch.setitem(ENGINES, "mine", lambda cfg: None)
    monkeypatch.setitem(PARSERS, "json", PARSERS["freeform"])
    cfg = load_eval_config(path, ["engine=mine", "evaluation.answer_type=json"])
    assert (cfg.engine, cfg.evaluation.answer_type) == ("mine", "json")


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("limit=0", "limit"),
        ("limit=-2", "limit"),
        ("batch_size=0", "batch_size"),
        ("generation.top_p=nan", "generation.top_p"),
        ("generation.temperature=-1.0", "generation.temperature"),
        ("generation.presence_penalty=3.0", "generation.presence_penalty"),
        ("evaluation.fps=inf", "evaluation.fps"),
        ("evaluation.seed=-1", "evaluation.seed"),
        ("model.gpu_memory_utilization=0", "model.gpu_memory_utilization"),
    ],
)
def test_bad_eval_values_named(override: str, key: str, tmp_path: Path) -> None:
    path = tmp_path / "e.toml"
    path.write_text('datasets = ["a"]\n')
    with pytest.raises(EvalConfigError) as e:
        load_eval_config(path, [override])
    assert len(e.value.problems) == 1 and e.value.problems[0].startswith(f"{key}: must be")
