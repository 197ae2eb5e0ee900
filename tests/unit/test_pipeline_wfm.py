"""The pipeline file's world-model form: [wfm_rl] + [evaluate_wfm], its stage overrides, and what it refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosmos_train.errors import ConfigError
from cosmos_train.pipeline import is_pipeline_file, load_pipeline_config
from tests.conftest import ROOT

CONFIGS = ROOT / "configs"
WFM = f'[wfm_rl]\nconfig = "{CONFIGS / "tiny-wfm-flow-grpo.toml"}"\n'


def _pipeline(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(f'name = "w"\noutput_dir = "{tmp_path}"\n' + text)
    return path


def test_the_shipped_world_model_pipeline_and_stage_overrides(tmp_path: Path) -> None:
    cfg = load_pipeline_config(CONFIGS / "tiny-wfm-post-train.toml", ["wfm_rl.trainer.max_iter=2"])
    assert is_pipeline_file(CONFIGS / "tiny-wfm-post-train.toml")
    assert cfg.wfm_rl is not None and cfg.wfm_rl.config == str(CONFIGS / "tiny-wfm-flow-grpo.toml")
    assert cfg.wfm_rl.overrides == ["trainer.max_iter=2"]  # a key of the stage's job config, not of [wfm_rl]
    assert cfg.evaluate_wfm is not None and cfg.evaluate_wfm.prompts == 8 and cfg.evaluate_wfm.base
    assert [n for n, _ in cfg.training_stages()] == ["wfm_rl"]
    # a typo in the stage's job overrides is found before anything trains
    with pytest.raises(ConfigError, match=r"wfm_rl \(config .*\): .*trainer.max_itr"):
        load_pipeline_config(_pipeline(tmp_path, WFM + 'overrides = ["trainer.max_itr=2"]\n'))


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (WFM + f'[sft]\nconfig = "{CONFIGS / "tiny-sft.toml"}"\n', r"\[wfm_rl\] trains a world model; \[sft\] belong"),
        (f'[sft]\nconfig = "{CONFIGS / "tiny-sft.toml"}"\n[evaluate_wfm]\n', r"\[evaluate_wfm\] .* needs a \[wfm_rl\]"),
        (WFM + 'overrides = ["checkpoint.export_diffusers=false"]\n', "a pipeline stage must export"),
        (WFM + 'dataset_script = "x.py"\n', "wfm_rl.dataset_script: a world-model job reads its"),
        (WFM + "[evaluate_wfm]\nprompts = 0\n", r"evaluate_wfm.prompts"),
    ],
)
def test_what_a_world_model_pipeline_refuses(tmp_path: Path, text: str, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        load_pipeline_config(_pipeline(tmp_path, text))
