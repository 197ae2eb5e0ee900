"""cosmos-rl users' habits: `cosmos-train --config FILE [SCRIPT.py]` runs the trainer the config names, and a
world-model (Cosmos-Predict) recipe goes to `wfm-rl` (and a VLM command says so in one paragraph)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cosmos_train.cli import cosmos_rl_form
from cosmos_train.config import ConfigError, load_config
from tests.cli_inprocess import RunCli
from tests.conftest import ROOT

CONFIGS = ROOT / "configs"

# The layout of cosmos-rl's world-model recipes (section names are facts; the values here are ours).
WORLD_MODEL_RECIPE = """
[model]
fsdp_shard_size = 8
dp_replicate_size = 1
[model_parallel]
context_parallel_size = 1
[trainer]
max_iter = 100
[optimizer]
lr = 1e-5
[dataloader_train]
batch_size = 1
[job]
name = "wfm-grpo"
[checkpoint]
save_iter = 50
"""


def test_config_form_dispatches_by_trainer_type() -> None:
    sft, grpo = str(CONFIGS / "tiny-sft.toml"), str(CONFIGS / "tiny-grpo.toml")
    assert cosmos_rl_form(["--config", sft]) == ["sft", "--config", sft]
    assert cosmos_rl_form(["--config", grpo, "my_rewards.py", "--set", "train.epoch=2"]) == [
        "grpo",
        "--config",
        grpo,
        "my_rewards.py",
        "--set",
        "train.epoch=2",
    ]
    assert cosmos_rl_form(["--debug", f"--config={grpo}"]) == ["--debug", "grpo", f"--config={grpo}"]
    assert cosmos_rl_form(["sft", "--config", sft]) == ["sft", "--config", sft]  # our own form: unchanged
    assert cosmos_rl_form(["--config", "missing.toml"]) == ["sft", "--config", "missing.toml"]  # sft says why


def test_world_model_recipe_goes_to_wfm_rl(tmp_path: Path, run_cli: RunCli) -> None:
    """A world-model recipe is not a vision-language job: the VLM loader says in one paragraph where it runs,
    cosmos-rl's form dispatches it to `wfm-rl`, and `config check` checks it against the world-model schema."""
    path = tmp_path / "wfm.toml"
    path.write_text(WORLD_MODEL_RECIPE)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    [problem] = e.value.problems
    assert "world-model (Cosmos-Predict) recipe" in problem and "[model_parallel]" in problem
    assert "cosmos-train wfm-rl --config FILE" in problem
    # one section alone is an ordinary unknown key (a typo of ours, perhaps), with a suggestion
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(None, ["model.x=1"], env={}, check_paths=False)
    assert cosmos_rl_form(["--config", str(path), "--wfm-mode", "wfm_rl.py"]) == [
        "wfm-rl",
        "--config",
        str(path),
        "--wfm-mode",
        "wfm_rl.py",
    ]

    # cosmos-rl's own key in a place ours differs (its loader nests batch_size deeper): named, with the valid keys
    done = run_cli("config", "check", path, cwd=ROOT)
    assert done.returncode == 2 and "dataloader_train.batch_size: unknown key" in done.stderr
    assert "Traceback" not in done.stderr
    recipe = CONFIGS / "wfm" / "cosmos_predict2-5_2b_480_grpo_mock_data.toml"
    done = run_cli("config", "check", recipe, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "(wfm_rl: flow_grpo)" in done.stderr and "trainer.callbacks[iter_speed]" in done.stderr
    assert 'algorithm = "flow_grpo"' in done.stdout


def test_config_form_runs_the_grpo_command_checks(tmp_path: Path, run_cli: RunCli) -> None:
    """The dispatched command is the real one: a GRPO recipe whose model folder is missing is refused by the
    grpo command's own checks, before any Prefect server or process starts (in this process: run_cli fails the
    test if the command reaches Prefect)."""
    no_model = f'policy.model_name_or_path="{tmp_path / "no-model"}"'
    done = run_cli("--config", CONFIGS / "tiny-grpo.toml", "--set", no_model, cwd=ROOT)
    assert done.returncode == 2 and "policy.model_name_or_path" in done.stderr and "does not exist" in done.stderr
    assert "Traceback" not in done.stderr
