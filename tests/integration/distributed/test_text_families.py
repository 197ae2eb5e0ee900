"""Every text-only family on its tiny model (`make-tiny-model --family qwen2|qwen3|llama|mistral`), one process (the
trainers' own entry points, in this process), text rows without media: SFT trains (loss falls), the export equals the
trained weights and loads with plain `AutoModelForCausalLM.from_pretrained`, evaluation runs on the export (text-only
benchmark questions), and a GRPO run (HF rollout engine) trains and exports; and, on 2 processes, one text spec's
tensor-parallel plan and checkpointing units against FSDP2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import TEXT_FAMILIES, _toml_value
from tests.torchrun import sft_runs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def text_rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rows.jsonl: 64 "What is i + 1?" chats (the answer one token of the tiny tokenizer's digits); bench/: the same
    questions as a text-only multiple-choice benchmark (rows without "video")."""
    root = tmp_path_factory.mktemp("text-rows")
    with (root / "rows.jsonl").open("w") as f:
        for i in range(64):
            f.write(
                json.dumps(
                    {
                        "conversations": [
                            {"role": "user", "content": f"What is {i % 8} + 1?"},
                            {"role": "assistant", "content": str(i % 8 + 1)},
                        ],
                        "reference": str(i % 8 + 1),
                    }
                )
                + "\n"
            )
    bench = root / "bench" / "benchmark" / "arith"
    bench.mkdir(parents=True)
    (bench / "arith_benchmark_qa_pairs.json").write_text(
        json.dumps(
            [
                {
                    "id": f"q{i}",
                    "qa_pairs": {
                        "question": f"What is {i} + 1?",
                        "index2ans": {"A": str(i + 1), "B": str(i + 2)},
                        "answer": "A",
                    },
                }
                for i in range(6)
            ]
        )
    )
    return root


def _train(module: str, keys: dict[str, object], run: Path, monkeypatch: pytest.MonkeyPatch, *extra: str) -> list[dict]:
    """Write the run's config.toml from `keys` (dotted) and run the trainer `module` ("sft" / "grpo") in this
    process; its logged train rows."""
    from cosmos_train.config import load_config
    from cosmos_train.net import free_port
    from cosmos_train.train import grpo, sft

    load_config(None, [f"{k}={_toml_value(v)}" for k, v in keys.items()], env={}).write(run / "config.toml")
    for key, value in {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }.items():
        monkeypatch.setenv(key, value)
    assert {"sft": sft, "grpo": grpo}[module].main(["--config", str(run / "config.toml"), *extra]) == 0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    return [m for m in rows if m["kind"] == "train"]


def _tensors(folder: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(folder.glob("*.safetensors")):
        out.update(load_file(f))
    return out


# this module's rows, rewarded as tests/conftest.py's LEADING_SPACE_SCRIPT rewards (about half of a random tiny
# model's first tokens start with a space, so every group has signal from step 1)
REWARD_SCRIPT = """import json
from pathlib import Path


def get_dataset(config):
    return [json.loads(x) for x in Path(config.custom["rows"]).read_text().splitlines()]


REWARD_FUNCTIONS = {"leading_space": lambda completion, reference, sample: float(completion.startswith(" "))}
"""
COMMON = {
    "train.epoch": 10,
    "train.optm_lr": 1e-3,
    "train.param_dtype": "float32",
    "train.seed": 1,
    "train.ckpt.save_freq": 2,
    "train.ckpt.max_keep": -1,
    "policy.model_max_length": 256,
    "policy.model_gradient_checkpointing": False,
    "logging.logger": ["console"],
}


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_sft_export_and_evaluation(
    family: str, text_model_dirs: dict[str, Path], text_rows: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model_dir = text_model_dirs[family]
    run = tmp_path / "run"
    train = _train(
        "sft",
        COMMON
        | {
            "train.output_dir": str(tmp_path / "out"),
            "train.max_num_steps": 6,
            "train.train_batch_per_replica": 8,
            "train.optm_warmup_steps": 1,
            "train.train_policy.type": "sft",
            "train.train_policy.mini_batch": 4,
            "train.train_policy.dataset.name": str(text_rows / "rows.jsonl"),
            "policy.model_name_or_path": str(model_dir),
        },
        run,
        monkeypatch,
    )
    assert [m["step"] for m in train] == [1, 2, 3, 4, 5, 6] and all(m["label_tokens"] == 16 for m in train)
    assert train[-1]["loss"] < train[0]["loss"] - 0.5

    from transformers import AutoConfig, AutoModelForCausalLM

    from cosmos_train.export import export_checkpoint

    final = run / "safetensors" / "final"
    assert AutoConfig.from_pretrained(final).model_type == family
    assert not (final / "preprocessor_config.json").exists()  # a language model has a tokenizer, no processor
    base, trained = _tensors(model_dir), _tensors(final)
    assert trained.keys() == base.keys() and any(not torch.equal(base[k], trained[k]) for k in base)
    offline = _tensors(export_checkpoint(run / "checkpoints" / "step_6", tmp_path / "offline"))
    assert offline.keys() == trained.keys() and all(torch.equal(offline[k], trained[k]) for k in trained)
    loaded = AutoModelForCausalLM.from_pretrained(final).state_dict()  # plain transformers
    assert all(torch.equal(loaded[k], v) for k, v in trained.items())

    from cosmos_train.evaluation.config import eval_config_from_dict
    from cosmos_train.evaluation.predictions import read_dataset_predictions
    from cosmos_train.evaluation.runner import evaluate_model

    result = evaluate_model(
        eval_config_from_dict(
            {
                "datasets": ["arith"],
                "data_dir": str(text_rows / "bench"),
                "results_dir": str(tmp_path / "results"),
                "engine": "hf",
                "device": "cpu",
                "batch_size": 3,
                "model": {"model_name": str(final), "dtype": "float32", "max_length": 256},
                "evaluation": {"answer_type": "letter"},
                "generation": {"max_retries": 0, "letter_max_tokens": 4},
            }
        )
    )
    records = read_dataset_predictions(result.run_dir / "arith")
    assert result.scores.micro.total == len(records) == 6
    assert all(isinstance(r["prompt"][-1]["content"], str) for r in records)  # the question alone, no media part
    assert all(r["is_correct"] == (r["answer"] == r["correct_answer"]) for r in records)


@pytest.mark.parametrize("family", TEXT_FAMILIES)
def test_grpo_trains_and_exports(
    family: str, text_model_dirs: dict[str, Path], text_rows: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cosmos_train import rewards

    # the script's reward registers in this process: a copy of the registry keeps it out of later tests
    monkeypatch.setattr(rewards, "REWARDS", dict(rewards.REWARDS))
    run = tmp_path / "run"
    (tmp_path / "toy_rewards.py").write_text(REWARD_SCRIPT)
    train = _train(
        "grpo",
        COMMON
        | {
            "train.output_dir": str(tmp_path / "out"),
            "train.max_num_steps": 2,
            "train.train_batch_per_replica": 16,
            "train.optm_warmup_steps": 0,
            "train.train_policy.type": "grpo",
            "train.train_policy.micro_batch": 4,
            "train.train_policy.on_policy": True,
            "train.train_policy.reward_function": ["leading_space"],
            "train.train_policy.kl_beta": 0.1,
            "custom.rows": str(text_rows / "rows.jsonl"),
            "rollout.backend": "hf",
            "rollout.batch_size": 4,
            "rollout.n_generation": 4,
            "rollout.max_response_length": 3,
            "rollout.sampling_config.top_k": 4,
            "policy.model_name_or_path": str(text_model_dirs[family]),
        },
        run,
        monkeypatch,
        "--dataset-script",
        str(tmp_path / "toy_rewards.py"),
    )
    assert [m["step"] for m in train] == [1, 2] and all(m["completions"] == 16 for m in train)
    assert train[1]["kl"] > 0  # the policy moved after the first update
    assert _tensors(run / "safetensors" / "final").keys() == _tensors(text_model_dirs[family]).keys()


def test_tensor_parallel_with_checkpointing_equals_fsdp2(
    text_model_dirs: dict[str, Path], text_rows: Path, tmp_path: Path
) -> None:
    """A text-only spec's TP plan and checkpointing units on 2 processes (Qwen3: q / k norms on the sharded heads):
    tensor parallel with activation checkpointing computes FSDP2's losses on the same 4 rows a step (the two runs one
    after another in one launch)."""
    from cosmos_train.config import load_config

    runs = {}
    for name, par, ckpt in (
        ("fsdp2", {"dp_shard_size": 2}, False),
        ("tp_ckpt", {"dp_shard_size": 1, "tp_size": 2}, True),
    ):
        run = tmp_path / name
        keys = COMMON | {
            "train.output_dir": str(tmp_path / f"out-{name}"),
            "train.max_num_steps": 3,
            "train.train_batch_per_replica": 4,
            "train.optm_warmup_steps": 1,
            "train.train_policy.type": "sft",
            "train.train_policy.mini_batch": 2,
            "train.train_policy.dataset.name": str(text_rows / "rows.jsonl"),
            "train.ckpt.enable_checkpoint": False,
            "train.ckpt.export_safetensors": False,
            "policy.model_name_or_path": str(text_model_dirs["qwen3"]),
            "policy.model_gradient_checkpointing": ckpt,
            **{f"policy.parallelism.{k}": v for k, v in par.items()},
        }
        load_config(None, [f"{k}={_toml_value(v)}" for k, v in keys.items()], env={}).write(run / "config.toml")
        runs[name] = run
    sft_runs([run / "config.toml" for run in runs.values()], 2, timeout=300)
    losses = {}
    for name, run in runs.items():
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
        losses[name] = [r["loss"] for r in rows if r["kind"] == "train"]
    assert len(losses["fsdp2"]) == 3 and losses["tp_ckpt"] == pytest.approx(losses["fsdp2"], rel=2e-4)


def test_lora_on_a_text_model_trains_its_targets_and_exports_merged(
    text_model_dirs: dict[str, Path], text_rows: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """[policy.lora] without target_modules adapts the text spec's targets (every attention / MLP projection of
    model.layers.N); the merged export changes those weights only and loads with plain transformers."""
    run = tmp_path / "run"
    train = _train(
        "sft",
        COMMON
        | {
            "train.output_dir": str(tmp_path / "out"),
            "train.max_num_steps": 3,
            "train.train_batch_per_replica": 8,
            "train.optm_warmup_steps": 1,
            "train.train_policy.type": "sft",
            "train.train_policy.mini_batch": 4,
            "train.train_policy.dataset.name": str(text_rows / "rows.jsonl"),
            "policy.model_name_or_path": str(text_model_dirs["llama"]),
            "policy.lora": {"r": 4, "lora_alpha": 8},
        },
        run,
        monkeypatch,
    )
    assert [m["step"] for m in train] == [1, 2, 3]
    base, merged = _tensors(text_model_dirs["llama"]), _tensors(run / "safetensors" / "final")
    assert merged.keys() == base.keys()
    changed = {k for k in base if not torch.equal(base[k], merged[k])}
    projections = {k for k in base if k.startswith("model.layers.") and k.endswith("_proj.weight")}
    assert changed == projections and len(projections) == 4 * 7

    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(run / "safetensors" / "final")
