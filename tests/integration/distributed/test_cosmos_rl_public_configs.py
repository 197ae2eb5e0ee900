"""A config that `config check` passes also runs: cosmos-rl's public job configs, as published
(tests/data/cosmos_rl_configs/public/, see its README), each through `config check` with the model types of the hub
models they name at hand (a Hugging Face cache holding each one's config.json, from
tests/data/cosmos_rl_public_models.json);
every one that passes trains 2 steps, in this process (the trainers' own entry points, one process each), with:

- policy.model_name_or_path: the tiny model of its family (`make-tiny-model --family`);
- the dataset: a local jsonl file in its format (its conversation column, or its prompt / response columns with
  references its reward reads), subset cleared; validation's, where enabled, a file of 32 such rows (the train file's
  1024, at test_simple_sft's batch_size 1 and freq 1, were thousands of one-row passes: minutes, no more proof);
- what one CPU process allows: policy.parallelism tp / cp / pp / dp sizes 1, rollout.parallelism.tp_size 1;
- cost only: train.max_num_steps 2, train.compile false (minutes of CPU compilation), rollout.max_response_length at
  most 8 (the random tiny model seldom stops), train.train_batch_per_replica at most 2 groups of n_generation (GRPO:
  up to 1024 completions a step otherwise), logging.logger console (no wandb account offline), train.output_dir.

Every other key runs as recorded, except that the 11 Qwen2.5 / Qwen3 GRPO configs (rollout.backend = "vllm", which
`config check` passes: the vLLM engine serves the text-only families,
tests/integration/services/test_vllm_families.py and
test_grpo_vllm.py in `make test-vllm`) train here with rollout.backend = "hf": this environment has no vLLM.

Measured (2026-11-26): 64 configs; 17 pass and run (SFT: Qwen2.5 x 5, Mistral; GRPO: Qwen2.5 x 9, Qwen3 x 2,
with the vLLM engine); 47 refused, 8 of them by model type (DeepSeek-V3 x 2, Qwen3-MoE x 3, gpt-oss, Gemma-3,
Phi-4), the rest by other keys (diffusers / VLA / world-model recipes, distillation, fp8, custom trainers,
a typo, ...)."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest

from tests.conftest import ROOT, _toml_value

pytestmark = pytest.mark.slow

PUBLIC = ROOT / "tests" / "data" / "cosmos_rl_configs" / "public"
CONFIGS = sorted(str(p.relative_to(PUBLIC)) for p in PUBLIC.rglob("*.toml"))
MODEL_TYPES = {
    k: v
    for k, v in json.loads((ROOT / "tests" / "data" / "cosmos_rl_public_models.json").read_text()).items()
    if not k.startswith("_")
}
# what `config check` passes today
SFT_PASS = [
    "configs/mistral/mistral-7b-fsdp4-sft.toml",
    "configs/qwen2-5/qwen2-5-32b-tp2-fsdp4-sft.toml",
    "configs/qwen2-5/qwen2-5-3b-tp1-sft.toml",
    "configs/qwen2-5/qwen2-5-7b-pp2-cp2-sft.toml",
    "tests/configs/sft_integration_test.toml",
    "tests/configs/test_simple_sft.toml",
]
# refused by the model type of the model they name, before anything starts
BY_MODEL_TYPE = {
    "configs/deepseek-v3/deepseek-v3-moe-670b-fsdp64-cp4-ep64-sft.toml": "deepseek_v3",
    "configs/gemma/gemma3-12b-vlm-fsdp4-sft.toml": "gemma3",
    "configs/gpt-oss/gpt-oss-20b-fsdp8-sft.toml": "gpt_oss",
    "configs/phi/phi4-14b-p-fsdp4-r-tp2-grpo.toml": "phi3",
    "configs/qwen3-moe/qwen3-moe-30b-fsdp2-tp4-sft.toml": "qwen3_moe",
    "configs/qwen3-moe/qwen3-moe-30b-p-tp4-r-tp2-grpo-trtllm.toml": "qwen3_moe",
    "configs/qwen3-moe/qwen3-moe-30b-tp4-sft.toml": "qwen3_moe",
    "tests/configs/sft_integration_deepseek_simple.toml": "deepseek_v3",
}
# GRPO on a text-only model with the vLLM rollout engine: they pass `config check`; trained here (no vLLM in this
# environment) with rollout.backend = "hf"
VLLM_TEXT = [
    "configs/qwen2-5/qwen2-5-32b-p-fsdp2-tp4-r-tp4-pp1-grpo.toml",
    "configs/qwen2-5/qwen2-5-3b-p-fsdp1-tp1-r-tp1-pp1-grpo.toml",
    "configs/qwen2-5/qwen2-5-3b-p-fsdp2-colocated-separated-grpo.toml",
    "configs/qwen2-5/qwen2-5-7b-p-fsdp2-cp2-r-tp2-pp1-grpo.toml",
    "configs/qwen2-5/qwen2-5-7b-p-fsdp2-tp2-r-tp2-pp1-fp8-grpo.toml",
    "configs/qwen2-5/qwen2-5-7b-p-fsdp4-r-tp2-grpo-trtllm.toml",
    "configs/qwen2-5/qwen2-5-7b-p-fsdp4-r-tp2-pp1-grpo.toml",
    "tests/configs/grpo_integration_test.toml",
    "tests/configs/test_simple_grpo.toml",
    # Qwen3 (dense): max_response_length 2048 over model_max_length 1024, which the engines cap as cosmos-rl's do;
    # the 32B one also trains a group of 16 as two of cosmos-rl's steps of train_batch_per_replica = 8
    "configs/qwen3/qwen3-32b-p-fsdp1-tp8-r-tp4-pp1-grpo.toml",
    "configs/qwen3/qwen3-8b-p-tp4-r-tp2-pp1-grpo.toml",
]
PASS = sorted(SFT_PASS + VLLM_TEXT)


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Hugging Face cache holding the config.json (its model_type) of every hub model the configs name."""
    import huggingface_hub.constants

    commit = "0" * 40
    for repo, model_type in MODEL_TYPES.items():
        folder = tmp_path / "hub" / f"models--{repo.replace('/', '--')}"
        (folder / "snapshots" / commit).mkdir(parents=True)
        (folder / "refs").mkdir()
        (folder / "refs" / "main").write_text(commit)
        (folder / "snapshots" / commit / "config.json").write_text(json.dumps({"model_type": model_type}))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def config_check(path: Path, *overrides: str) -> tuple[int, str]:
    """`cosmos-train config check PATH [--set ...]` in this process: (exit code, stderr)."""
    from cosmos_train import cli

    err = io.StringIO()
    argv = ["config", "check", str(path), *(a for o in overrides for a in ("--set", o))]
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(argv)
    return code, err.getvalue()


def test_config_check_over_every_public_config(hub_cache: Path) -> None:
    from cosmos_train.config import load_config

    results = {rel: config_check(PUBLIC / rel) for rel in CONFIGS}
    assert len(results) == 64
    assert sorted(rel for rel, (code, _) in results.items() if code == 0) == PASS
    for rel, (code, err) in results.items():
        assert code in (0, 2) and "Traceback" not in err, (rel, err)
        if code == 0:  # the model's type was found (in the cache) and is one of ours
            assert "# ok: " in err and "model type " in err and "checked when the model loads" not in err, (rel, err)
    for rel, model_type in BY_MODEL_TYPE.items():
        code, err = results[rel]
        model = next(k for k, v in MODEL_TYPES.items() if f"'{k}'" in err)
        assert code == 2 and f"policy.model_name_or_path = '{model}' is a '{model_type}' model" in err, (rel, err)
        assert "supported model types are qwen2_5_vl, qwen3_vl, cosmos3_edge, qwen2, qwen3, llama, mistral" in err
    assert len(PASS) == 17
    for rel in VLLM_TEXT:  # rollout.backend = "vllm" as published, on a text-only Qwen model
        assert load_config(PUBLIC / rel, env={}, check_paths=False).rollout.backend == "vllm", rel
        assert MODEL_TYPES[load_config(PUBLIC / rel, env={}, check_paths=False).policy.model_name_or_path] in (
            "qwen2",
            "qwen3",
        )


def test_a_hub_model_not_in_the_cache_is_checked_when_it_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    code, err = config_check(PUBLIC / "configs/qwen3-moe/qwen3-moe-30b-tp4-sft.toml")
    assert code == 0
    assert (
        "policy.model_name_or_path = 'Qwen/Qwen3-30B-A3B': not a local folder and not in the Hugging Face cache, "
        "so its model type (family) is checked when the model loads"
    ) in err


def _rows(path: Path, n: int, columns: dict[str, str], reward: str) -> Path:
    """n rows asking "What is i + 1?" in the config's columns; the reference as its reward reads it."""
    with path.open("w") as f:
        for i in range(n):
            answer = f"{i} + 1 = {i + 1}\n#### {i + 1}" if reward == "gsm8k" else str(i + 1)
            if "conversation" in columns:
                row = {
                    columns["conversation"]: [
                        {"role": "user", "content": f"What is {i} + 1?"},
                        {"role": "assistant", "content": answer},
                    ]
                }
            else:
                row = {columns["prompt"]: f"What is {i} + 1?", columns["response"]: answer}
            f.write(json.dumps(row) + "\n")
    return path


@pytest.mark.parametrize("rel", PASS)
def test_each_config_that_passes_trains_two_steps(
    rel: str, text_model_dirs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cosmos_train.config import load_config
    from cosmos_train.net import free_port
    from cosmos_train.train import grpo, sft

    recorded = load_config(PUBLIC / rel, env={}, check_paths=False)
    tp = recorded.train.train_policy
    reward = str(tp.reward_function)
    if recorded.policy_type == "sft":
        columns = {"conversation": tp.conversation_column_name}
    else:
        columns = {"prompt": str(tp.prompt_column_name), "response": str(tp.response_column_name)}
    reward_rows = "gsm8k" if "gsm8k" in reward else reward
    data = _rows(tmp_path / "rows.jsonl", 1024, columns, reward_rows)
    family = MODEL_TYPES[recorded.policy.model_name_or_path]
    swaps: dict[str, object] = {
        "policy.model_name_or_path": str(text_model_dirs[family]),
        "train.train_policy.dataset.name": str(data),
        "train.train_policy.dataset.subset": "",
        "policy.parallelism.tp_size": 1,
        "policy.parallelism.cp_size": 1,
        "policy.parallelism.pp_size": 1,
        "policy.parallelism.dp_shard_size": -1,
        "policy.parallelism.dp_replicate_size": 1,
        "train.max_num_steps": 2,
        "train.compile": False,
        "logging.logger": ["console"],
        "train.output_dir": str(tmp_path / "out"),
    }
    if recorded.validation.enable:
        val = _rows(tmp_path / "val.jsonl", 32, columns, reward_rows)
        swaps |= {"validation.dataset.name": str(val), "validation.dataset.subset": ""}
    if recorded.policy_type == "grpo":
        swaps |= {
            "rollout.parallelism.tp_size": 1,
            "rollout.max_response_length": min(8, recorded.rollout.max_response_length),
            "train.train_batch_per_replica": min(
                2 * recorded.rollout.n_generation, recorded.train.train_batch_per_replica
            ),
        }
        if rel in VLLM_TEXT:  # this environment has no vLLM (`make test-vllm` runs the engine on text models)
            swaps["rollout.backend"] = "hf"
    overrides = [f"{k}={_toml_value(v)}" for k, v in swaps.items()]
    code, err = config_check(PUBLIC / rel, *overrides)  # what a user runs first passes with the swaps too
    assert code == 0, err
    run = tmp_path / "run"
    load_config(PUBLIC / rel, overrides, env={}).write(run / "config.toml")
    for key, value in {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }.items():
        monkeypatch.setenv(key, value)
    trainer = sft if recorded.policy_type == "sft" else grpo
    assert trainer.main(["--config", str(run / "config.toml")]) == 0
    train = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [m for m in train if m["kind"] == "train"]
    assert [m["step"] for m in train] == [1, 2] and all(math.isfinite(m["loss"]) for m in train)
    if recorded.policy_type == "sft":
        assert all(m["label_tokens"] > 0 for m in train)
    else:
        assert all(m["completions"] > 0 and m["completions"] % recorded.rollout.n_generation == 0 for m in train)
