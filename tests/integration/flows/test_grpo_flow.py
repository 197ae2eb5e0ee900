"""The `grpo` Prefect flow on configs/tiny-grpo.toml (tiny model, synthetic RL rows, CPU): prepare ->
torchrun -> result.json, the summary / completions / plots artifacts, and a crash that a task retry
resumes from the newest checkpoint.

    pytest -x -q tests/integration/flows/test_grpo_flow.py
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, kill_a_rank_after_step_2
from tests.integration.prefect_server import flow_run_artifacts as _artifacts

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

TINY_GRPO = ROOT / "configs" / "tiny-grpo.toml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _overrides(model: Path, data: Path, out: Path, steps: int, *more: str) -> list[str]:
    """The recipe on the session's tiny model and data, small enough for a few CPU steps."""
    return [
        f'policy.model_name_or_path="{model}"',
        f'train.train_policy.dataset.name="{data}"',
        f'train.output_dir="{out}"',
        f"train.max_num_steps={steps}",
        "rollout.n_generation=4",
        "rollout.max_response_length=4",
        # one optimizer update per step of 2 prompts x 4 completions; completions sampled every step
        "train.train_batch_per_replica=8",
        "train.train_policy.micro_batch=8",
        "logging.completion_sample_freq=1",
        *more,
    ]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_grpo_flow_trains_and_reports(tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    from flows.grpo import GRPOParams, grpo

    steps = 3
    overrides = _overrides(
        tiny_model_dir,
        synthetic_dir,
        tmp_path / "out",
        steps,
        "validation.enable=true",
        "validation.freq=2",
        "train.train_policy.kl_beta=0.01",
    )  # the recipe's 0 logs no KL: the plot needs one
    state = grpo(GRPOParams(config=str(TINY_GRPO), overrides=overrides), return_state=True)
    assert state.is_completed(), state
    result = state.result()
    run = Path(result["run_dir"])
    assert run.parent == tmp_path / "out" and (run / "manifest.jsonl").is_file()
    assert {"run_dir": str(run), **json.loads((run / "result.json").read_text())} == result
    assert result["step"] == steps and Path(result["final"]).joinpath("config.json").is_file()

    metrics = _jsonl(run / "metrics.jsonl")
    train = [m for m in metrics if m["kind"] == "train"]
    val = [m for m in metrics if m["kind"] == "val"]
    assert [m["step"] for m in train] == list(range(1, steps + 1))
    assert val and all(0.0 <= v["accuracy"] <= 1.0 for v in val)
    completions = _jsonl(run / "completions.jsonl")
    assert completions and all({"prompt", "completion", "reward", "parts", "advantage"} <= set(c) for c in completions)

    arts = _artifacts(state.state_details.flow_run_id)
    assert {"grpo-summary", "grpo-completions", "training-curves", "training-metrics", "grpo-export"} <= set(arts)
    summary = arts["grpo-summary"].data
    first, last = train[0]["reward_mean"], train[-1]["reward_mean"]
    assert f"- steps: {steps}" in summary and f"{first:.3f} (step 1) -> {last:.3f} (step {steps})" in summary
    assert "validation accuracy: best" in summary and f"`{result['final']}`" in summary
    assert f"KL: last {train[-1]['kl']:.4g}" in summary and f"`{result['best']['path']}`" in summary
    # The table: the last sampled step's completions as the trainer wrote them, rewards included.
    table = json.loads(arts["grpo-completions"].data)
    last_step = completions[-1]["step"]
    written = [c for c in completions if c["step"] == last_step]
    assert 0 < len(table) <= 20 and {row["step"] for row in table} == {last_step}
    assert [row["reward"] for row in table] == [round(c["reward"], 4) for c in written[-len(table) :]]
    curves = arts["training-curves"].data
    png = run / "plots" / "curves.png"
    encoded = curves.split("data:image/png;base64,")[1].split(")")[0]
    assert png.read_bytes().startswith(PNG_MAGIC) and base64.b64decode(encoded) == png.read_bytes()
    table = json.loads(arts["training-metrics"].data)
    assert [r["step"] for r in table] == list(range(1, steps + 1))
    assert all({"reward_mean", "accuracy", "kl", "lr", "grad_norm"} <= set(r) for r in table)
    assert f"- final: `{result['final']}`" in arts["grpo-export"].data


def test_crashed_rank_is_retried_and_resumes(tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    """A trainer rank killed with SIGKILL after the step-2 checkpoint: Prefect retries the task, and the
    retry continues from that checkpoint (--resume-own-run) instead of step 0."""
    from flows.grpo import GRPOParams, grpo

    steps, out = 6, tmp_path / "out"
    watcher, killed = kill_a_rank_after_step_2(out, "cosmos_train.train.grpo")
    state = grpo(
        GRPOParams(
            config=str(TINY_GRPO),
            train_retries=1,
            overrides=_overrides(tiny_model_dir, synthetic_dir, out, steps, "train.ckpt.save_freq=2"),
        ),
        return_state=True,
    )
    watcher.join(timeout=5)
    assert killed, "the watcher never found a trainer rank to kill"
    assert state.is_completed(), state
    result = state.result()
    run = Path(result["run_dir"])
    assert result["step"] == steps and result["resumed_from"], result
    assert int(Path(result["resumed_from"]).name.removeprefix("step_")) >= 2
    train_steps = [r["step"] for r in _jsonl(run / "metrics.jsonl") if r["kind"] == "train"]
    # Not started over (step 1 once), finished, and the crashed attempt's rows past the resume point replaced.
    assert train_steps == list(range(1, steps + 1)), train_steps
    arts = _artifacts(state.state_details.flow_run_id)
    assert f"resumed from `{result['resumed_from']}`" in arts["grpo-summary"].data
    # The crashed attempt left what a user needs to look at: the run folder and the log's last lines.
    failure = arts["training-failure"].data
    assert f"- run folder: `{run}`" in failure and "TorchrunFailed" in failure and "exited with code -9" in failure


def test_rewards_from_the_runs_own_reward_service(tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    """configs/tiny-grpo-remote.toml: the flow starts a reward service for the run, the trainer's only reward
    is scored there over HTTP (each completion scored as the local reward would), and the service is gone
    after the flow (no process left)."""
    from flows.grpo import GRPOParams, grpo
    from tests.conftest import processes_with

    steps = 2
    overrides = _overrides(tiny_model_dir, synthetic_dir, tmp_path / "out", steps)
    state = grpo(
        GRPOParams(config=str(ROOT / "configs" / "tiny-grpo-remote.toml"), overrides=overrides), return_state=True
    )
    assert state.is_completed(), state
    run = Path(state.result()["run_dir"])
    train = [m for m in _jsonl(run / "metrics.jsonl") if m["kind"] == "train"]
    assert [m["step"] for m in train] == [1, 2] and all("reward/choice_letter" in m for m in train)
    from cosmos_train.rewards import combine

    local = combine(["choice_letter"])
    rows = _jsonl(run / "completions.jsonl")
    assert rows
    for r in rows:  # the service's score is the one the local reward gives the same completion
        sample = {"reference": r["reference"], "messages": []}
        assert r["parts"]["choice_letter"] == local(r["completion"], sample)[1]["choice_letter"]
    log = run / "logs" / "reward_service.log"
    assert log.exists()
    assert not processes_with("reward-service", "--exit-with-parent", str(run))  # this run's (its config is in it)
