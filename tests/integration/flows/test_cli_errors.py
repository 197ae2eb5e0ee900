"""Bad input through the CLI, as a new user makes it: each case exits 2, names the key / file / row in its
last lines, and prints no traceback. Config, path and flag mistakes are caught before Prefect starts
(the `fast` cases: run in this process by tests/cli_inprocess.py, which fails a case that reaches Prefect); the
rest fail inside a flow run, as real `python -m cosmos_train.cli` processes against one real Prefect server shared
by the session (tests/integration/conftest.py's prefect_server: a run with no API URL would start a temporary server
per command; one case does, for the paragraph that ends such a run)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.cli_inprocess import CliResult, RunCli
from tests.conftest import ROOT, write_tiny_sft_config
from tests.integration.prefect_server import PrefectServer, isolated_env

pytestmark = pytest.mark.slow


@dataclass
class Case:
    name: str
    args: list[str]  # {job}, {eval}, {dir}, {model}, {data} are filled in from the fixtures
    names: str  # what the last lines must name
    fast: bool = True  # answered before any Prefect server or model starts
    files: dict[str, str] = field(default_factory=dict)  # extra files to write under {dir}


SFT = ["sft", "--config", "{job}"]
CHECK = ["config", "check", "{job}"]
EVAL = ["eval", "--config", "{eval}", "--model", "{model}"]
PREP = ["prepare-data", "--config", "{job}"]
SWEEP = ["sweep", "--config", "{job}"]


def setting(key: str, value: str, base: list[str] = CHECK) -> list[str]:
    return [*base, "--set", f"{key}={value}"]


CASES = [
    # ---- config: syntax, keys, types
    Case("missing config file", ["config", "check", "{dir}/nope.toml"], "nope.toml"),
    Case(
        "toml syntax",
        ["config", "check", "{dir}/broken.toml"],
        "broken.toml",
        files={"broken.toml": "[train\noptm_lr = 1\n"},
    ),
    Case("typo in a key", setting("train.optm_lrr", "1e-4"), "train.optm_lrr"),
    Case("typo in a section", setting("trian.epoch", "1"), "trian"),
    Case("wrong type", setting("train.epoch", '"many"'), "train.epoch"),
    Case("--set without =", [*CHECK, "--set", "train.epoch"], "--set"),
    Case("unknown dataset source", setting("train.train_policy.dataset.source", '"lavla"'), "dataset.source"),
    Case("micro_batch does not divide the batch", setting("train.train_policy.micro_batch", "3"), "micro_batch"),
    # ---- config: ranges
    Case("lr zero", setting("train.optm_lr", "0"), "train.optm_lr"),
    Case("lr negative", setting("train.optm_lr", "-1e-4"), "train.optm_lr"),
    Case("lr nan", setting("train.optm_lr", "nan"), "train.optm_lr"),
    Case("lr inf", setting("train.optm_lr", "inf"), "train.optm_lr"),
    Case("batch zero", setting("train.train_batch_per_replica", "0"), "train.train_batch_per_replica"),
    Case("micro-batch zero", setting("train.train_policy.micro_batch", "0"), "train.train_policy.micro_batch"),
    Case("max_keep zero", setting("train.ckpt.max_keep", "0"), "train.ckpt.max_keep"),
    Case("epoch zero", setting("train.epoch", "0"), "train.epoch"),
    Case("beta above 1", setting("train.optm_betas", "[0.9, 1.5]"), "train.optm_betas"),
    Case("negative clip", setting("train.optm_grad_norm_clip", "-1.0"), "train.optm_grad_norm_clip"),
    Case("fps zero", setting("train.train_policy.dataset.vision.fps", "0"), "dataset.vision.fps"),
    Case("nframes zero", setting("train.train_policy.dataset.vision.nframes", "0"), "dataset.vision.nframes"),
    Case("model_max_length zero", setting("policy.model_max_length", "0"), "policy.model_max_length"),
    Case("validation freq zero", setting("validation.freq", "0"), "validation.freq"),
    Case("empty output_dir", setting("train.output_dir", '""'), "train.output_dir"),
    Case("save_freq zero", setting("train.ckpt.save_freq", "0"), "train.ckpt.save_freq"),
    Case("tp_size zero", setting("policy.parallelism.tp_size", "0"), "policy.parallelism.tp_size"),
    # ---- config: a setting missing what it needs, or not implemented: refused, never ignored
    Case("upload to the hub without a repo", setting("train.ckpt.upload_hf", "true", SFT), "train.ckpt.hf_repo_name"),
    Case("upload to s3 without a bucket", setting("train.ckpt.upload_s3", "true", SFT), "train.ckpt.s3_bucket"),
    Case(
        "lora with tensor parallelism",
        [*setting("policy.lora.r", "8", SFT), "--set", "policy.parallelism.tp_size=2"],
        "LoRA with tensor parallelism",
    ),
    Case(
        "flash attention on a CPU",
        setting("policy.attn_implementation", '"flash_attention_2"', SFT),
        "policy.attn_implementation",
    ),
    # ---- the command and the config's trainer disagree (the other settings valid for it)
    Case(
        "grpo in the sft command",
        [*SFT, "--set", 'train.train_policy.type="grpo"', "--set", "rollout.max_response_length=4"],
        "cosmos-train grpo",
    ),
    Case("sft in the grpo command", ["grpo", "--config", "{job}"], "cosmos-train sft"),
    # ---- paths: model, data, checkpoints (before Prefect starts)
    Case(
        "model folder missing",
        setting("policy.model_name_or_path", '"{dir}/no-model"', SFT),
        "policy.model_name_or_path",
    ),
    Case("dataset folder missing", setting("train.train_policy.dataset.name", '"{dir}/no-data"', SFT), "no-data"),
    Case(
        "llava annotation missing",
        setting("train.train_policy.dataset.annotation_path", '"{dir}/no.json"', SFT),
        "annotation_path",
    ),
    Case("media root missing", setting("train.train_policy.dataset.media_path", '"{dir}/no-media"', SFT), "media_path"),
    Case("dataset script missing", [*SFT, "{dir}/no_script.py"], "no_script.py"),
    Case("resume path missing", setting("train.resume", '"{dir}/old/step_40"', SFT), "train.resume"),
    Case(
        "resume from an interrupted save",
        setting("train.resume", '"{dir}/run/checkpoints/step_8"', SFT),
        "not a complete checkpoint",
        files={"run/checkpoints/step_8/.metadata": ""},
    ),
    Case("export of a folder that is not a checkpoint", ["export", "{dir}", "{dir}/exported"], "{dir}"),
    # ---- evaluation config and benchmarks
    Case("eval config missing", ["eval", "--config", "{dir}/no-eval.toml"], "no-eval.toml"),
    Case("eval config typo", [*EVAL, "--set", "evaluation.answer_typ=letter"], "evaluation.answer_typ"),
    Case("eval unknown answer type", [*EVAL, "--set", 'evaluation.answer_type="letters"'], "answer_type"),
    Case("benchmark missing", [*EVAL, "--set", 'datasets=["nope"]'], "nope"),
    Case(
        "empty benchmark",
        [*EVAL, "--set", 'data_dir="{dir}/empty-bench"'],
        "holds no questions",
        files={"empty-bench/benchmark/synthetic/synthetic_benchmark_qa_pairs.json": "[]"},
    ),
    Case(
        "benchmark with a bad answer letter",
        [*EVAL, "--set", 'data_dir="{dir}/bad-bench"'],
        "synthetic_benchmark_qa_pairs.json",
        files={
            "bad-bench/benchmark/synthetic/synthetic_benchmark_qa_pairs.json": json.dumps(
                [
                    {
                        "video": "clips/a.mp4",
                        "qa_pairs": {"question": "Which?", "index2ans": {"A": "x", "B": "y"}, "answer": "E"},
                    }
                ]
            )
        },
    ),
    # ---- flags
    Case("unknown command", ["trian"], "invalid choice"),
    Case("sft without --config", ["sft"], "--config"),
    # ---- inside a flow run: what needs decoding, tokenizing or the model
    Case("split that does not exist", setting("train.train_policy.dataset.split", '"nope"', PREP), "nope"),
    Case(
        "malformed llava json",
        [
            *PREP,
            "--set",
            'train.train_policy.dataset.annotation_path="{dir}/bad.json"',
            "--set",
            'train.train_policy.dataset.media_path="{data}"',
        ],
        "bad.json",
        files={"bad.json": '[{"id": "a", "video": "x.mp4", "conversations": ['},
    ),
    Case(
        "bad row",
        [
            *PREP,
            "--set",
            'train.train_policy.dataset.annotation_path="{dir}/rows.json"',
            "--set",
            'train.train_policy.dataset.media_path="{data}"',
        ],
        "rows.json:1",
        fast=False,
        files={
            "rows.json": json.dumps(
                [
                    {
                        "id": "ok",
                        "video": "videos/train/VIDEO",
                        "conversations": [
                            {"from": "human", "value": "<video>\nWhat moves?"},
                            {"from": "gpt", "value": "A"},
                        ],
                    },
                    {
                        "id": "no-answer",
                        "video": "videos/train/VIDEO",
                        "conversations": [{"from": "human", "value": "<video>\nWhat moves?"}],
                    },
                ]
            )
        },
    ),
    Case(
        "video that does not decode",
        [
            *PREP,
            "--set",
            'train.train_policy.dataset.annotation_path="{dir}/v.json"',
            "--set",
            'train.train_policy.dataset.media_path="{dir}"',
        ],
        "broken.mp4",
        fast=False,
        files={
            "broken.mp4": "not a video",
            "v.json": json.dumps(
                [
                    {
                        "id": "v",
                        "video": "broken.mp4",
                        "conversations": [
                            {"from": "human", "value": "<video>\nWhat moves?"},
                            {"from": "gpt", "value": "A"},
                        ],
                    }
                ]
            ),
        },
    ),
    Case(
        "media outside the media root",
        [
            *PREP,
            "--set",
            'train.train_policy.dataset.annotation_path="{dir}/o.json"',
            "--set",
            'train.train_policy.dataset.media_path="{dir}/media"',
        ],
        "o.json:0",
        files={
            "media/.keep": "",
            "o.json": json.dumps(
                [
                    {
                        "id": "o",
                        "video": "../../../etc/passwd.mp4",
                        "conversations": [
                            {"from": "human", "value": "<video>\nWhat moves?"},
                            {"from": "gpt", "value": "A"},
                        ],
                    }
                ]
            ),
        },
    ),
    Case(
        "model folder without tokenizer files",
        setting("policy.model_name_or_path", '"{dir}/no-tokenizer"', PREP),
        "no-tokenizer",
        fast=False,
    ),
    # ---- sweep specs: each names the spec, before Prefect starts
    Case("sweep unknown key", [*SWEEP, "--grid", "train.optm_lrr=1e-5,2e-5"], "--grid train.optm_lrr"),
    Case("sweep value out of bounds", [*SWEEP, "--grid", "train.optm_lr=0,1e-5"], "train.optm_lr"),
    Case("sweep bad distribution", [*SWEEP, "--random", "train.optm_lr=gauss(0,1)"], "gauss(0,1)"),
]


def _fill(text: str, ctx: dict[str, str]) -> str:
    for key, value in ctx.items():
        text = text.replace("{" + key + "}", value)
    return text


def _prepare(case: Case, tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path) -> tuple[list[str], dict[str, str]]:
    """The case's files under tmp_path: (its command's arguments, the values filled in)."""
    job = write_tiny_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, tmp_path / "out")
    eval_cfg = tmp_path / "eval.toml"
    eval_cfg.write_text(
        (ROOT / "configs" / "eval-tiny.toml")
        .read_text()
        .replace('data_dir = "outputs/synthetic"', f'data_dir = "{synthetic_dir}"')
        .replace('results_dir = "outputs/eval"', f'results_dir = "{tmp_path / "eval"}"')
    )
    if any("{dir}/no-tokenizer" in a for a in case.args):
        no_tok = tmp_path / "no-tokenizer"
        shutil.copytree(tiny_model_dir, no_tok)
        for f in no_tok.iterdir():
            if f.name.startswith(("tokenizer", "vocab", "merges", "special_tokens", "chat_template")):
                f.unlink()
    video = next((synthetic_dir / "videos" / "train").glob("*.mp4")).name
    ctx = {
        "job": str(job),
        "eval": str(eval_cfg),
        "dir": str(tmp_path),
        "model": str(tiny_model_dir),
        "data": str(synthetic_dir),
    }
    for rel, content in case.files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content.replace("VIDEO", video))
    return [_fill(a, ctx) for a in case.args], ctx


def _run(
    case: Case, tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess, dict[str, str]]:
    """The case as a real `python -m cosmos_train.cli` process in tmp_path."""
    args, ctx = _prepare(case, tmp_path, tiny_model_dir, synthetic_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "cosmos_train.cli", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc, ctx


def _check(case: Case, proc: subprocess.CompletedProcess | CliResult, ctx: dict[str, str]) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, f"{case.name}: exit {proc.returncode}\n{out[-3000:]}"
    assert "Traceback" not in out, f"{case.name}: traceback printed\n{out[-5000:]}"
    assert "Error logging to API" not in out, f"{case.name}: Prefect log lines lost\n{out[-3000:]}"
    last = "\n".join(proc.stderr.strip().splitlines()[-6:])
    assert _fill(case.names, ctx) in last, f"{case.name}: {case.names!r} not in the last lines:\n{last}"


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 40
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", [c for c in CASES if c.fast], ids=lambda c: c.name)
def test_input_error_before_any_server(
    case: Case, tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path, run_cli: RunCli
) -> None:
    # in this process: run_cli fails the case if the command reaches Prefect (cli.prefect_server.prepare_prefect)
    args, ctx = _prepare(case, tmp_path, tiny_model_dir, synthetic_dir)
    _check(case, run_cli(*args, cwd=tmp_path), ctx)


@pytest.mark.parametrize("case", [c for c in CASES if not c.fast], ids=lambda c: c.name)
def test_input_error_inside_a_flow_run(
    case: Case, tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path, prefect_server: PrefectServer
) -> None:
    proc, ctx = _run(case, tmp_path, tiny_model_dir, synthetic_dir, prefect_server.env(OMP_NUM_THREADS="1"))
    _check(case, proc, ctx)


def test_debug_shows_the_traceback(tmp_path: Path, run_cli: RunCli) -> None:
    proc = run_cli("--debug", "config", "check", tmp_path / "nope.toml")
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr and proc.stderr.strip().splitlines()[-2].startswith("error: invalid config")


def test_temporary_server_run_ends_with_the_paragraph(
    tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path
) -> None:
    """Without PREFECT_API_URL the CLI runs on Prefect's temporary server: the paragraph is still the
    last thing printed (the server is stopped, its log lines flushed, before it)."""
    case = next(c for c in CASES if c.name == "bad row")
    env = isolated_env(tmp_path / "prefect")
    proc, ctx = _run(case, tmp_path, tiny_model_dir, synthetic_dir, env)
    _check(case, proc, ctx)
    last = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert last[-3].startswith("error: 1 bad row(s)"), "\n".join(last[-6:])
