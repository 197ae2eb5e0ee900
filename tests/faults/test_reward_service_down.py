"""A GRPO run's reward service killed mid-run, for real (SIGKILL to the service process, real HTTP, real ranks).

- The flow's own service (`remote_reward.local_service = true`) is restarted by the flow on the same port, with
  the same token and state: the run finishes (exit 0) with the final weights of a run that never lost its service.
- An external service killed for good: every rank stops after the same step, saves it, and the command ends with
  exit 75 and one paragraph naming the URL and the last error, not retried; once the service is back, the resumed
  run ends with the uninterrupted run's weights. The rollout worker (on_policy = false) ends the same way.

The remote reward is the service's `single_choice` rule beside the local `leading_space` toy reward (the signal the
tiny model learns from; the rule scores the tiny model's 3-token answers 0 either way). Every step's rewards are
real: each remote part is the rule's value for its completion, and the final weights equal those of the run that
never lost its service, so no step's rollout was dropped, skipped, resampled or scored otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cosmos_train.checkpoint_paths import complete_checkpoints
from cosmos_train.errors import EXIT_SERVICE_DOWN
from cosmos_train.net import free_port
from cosmos_train.rewards import REWARDS
from tasks.reward_service import reward_service
from tests.conftest import processes_with, write_tiny_grpo_config
from tests.faults.conftest import (
    CliRun,
    assert_stopped_for_the_service,
    fault_env,
    processes_in,
    resume_to_the_end,
    start_cli,
    train_steps,
    wait_train_steps,
)
from tests.run_outputs import same_weights
from tests.torchrun import LAUNCH, start_torchrun
from tests.torchrun import grpo_args as trainer_args

pytestmark = pytest.mark.slow

STEPS = 6
REMOTE = "single_choice"
# The external case's client: 5 tries 0.2 s apart, doubling (about 3 s at most, with jitter less): a dead service
# is given up in seconds. The local case keeps the defaults (8 retries from 0.5 s: 45 s or more), which a restart
# (a few seconds) must fit in.
QUICK_GIVE_UP = {"train.train_policy.remote_reward.max_retries": 4, "train.train_policy.remote_reward.backoff_s": 0.2}
# From the kill to the command's exit; measured on 2 shared cores (load 4-5): 12-16 s through the CLI, 4-7 s for the
# launcher alone; and to the end of the run whose own service came back (4-11 s) with 4 steps still to train: 23-25 s.
STOP_BOUND_S = 60
FINISH_BOUND_S = 180


def grpo_job(path: Path, model: Path, data: Path, out: Path, **keys: object) -> Path:
    """The tiny GRPO job scored partly by the service; a checkpoint only at the end (and at a stop)."""
    return write_tiny_grpo_config(
        path,
        model,
        data,
        out,
        **{
            "train.max_num_steps": STEPS,
            "train.ckpt.save_freq": 100,
            "train.train_policy.use_remote_reward": True,
            "train.train_policy.remote_reward.reward_fns": [{"name": REMOTE}],
            **keys,
        },
    )


def grpo_args(cfg: Path, *more: str) -> list[str]:
    """`cosmos-train grpo` on two ranks, as `launch_grpo` runs the trainer."""
    script = str(cfg.parent / "toy_rewards.py")
    return ["grpo", "--config", str(cfg), "--dataset-script", script, "--set", "launch.nproc_per_node=2", *more]


def service_config(folder: Path) -> str:
    """A rewards.toml with a state_dir: a restarted service answers what the killed one accepted."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rewards.toml").write_text(f"state_dir = {json.dumps(str(folder / 'state'))}\n")
    return str(folder / "rewards.toml")


def service_env(base: str, token: str) -> dict[str, str]:
    return {
        "REMOTE_REWARD_ENQUEUE_URL": f"{base}/enqueue",
        "REMOTE_REWARD_FETCH_URL": f"{base}/pull",
        "REMOTE_REWARD_TOKEN": token,
    }


def launch_grpo(cfg: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """The trainer on 2 ranks through our torchrun wrapper (no Prefect), in a session of its own; `env` on top of
    the test's environment."""
    return start_torchrun(2, *trainer_args(cfg), launcher=LAUNCH, env=env)


def assert_remote_parts_are_the_rule(run: Path) -> None:
    """Each sampled completion's remote part is what the service's rule gives it (the same function as local)."""
    rows = [json.loads(x) for x in (run / "completions.jsonl").read_text().splitlines() if x.strip()]
    assert rows
    for r in rows:
        assert r["parts"][REMOTE] == REWARDS[REMOTE](r["completion"], {"reference": r["reference"], "messages": []})


@pytest.fixture(scope="module")
def uninterrupted_grpo(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, synthetic_dir: Path) -> Path:
    """The run folder of the job trained start to end against a service that stays up."""
    from cosmos_train.config import load_config
    from cosmos_train.data.prepare import prepare_split
    from cosmos_train.models.load import load_processor

    tmp = tmp_path_factory.mktemp("uninterrupted-grpo")
    run = tmp / "run"
    cfg = grpo_job(run / "config.toml", tiny_model_dir, synthetic_dir, tmp / "out")
    # the flow's data step (RUN/manifest.jsonl, the rows the ranks then read), without the flow around it
    job = load_config(cfg, env={})
    prepare_split(job, "train", run, load_processor(str(tiny_model_dir)), str(run / "toy_rewards.py"))
    with reward_service(tmp / "service.log") as (_, base, token):
        p = launch_grpo(cfg, service_env(base, token))
        out = p.communicate(timeout=600)[0]
    assert p.returncode == 0, out[-4000:]
    assert train_steps(run) == list(range(1, STEPS + 1))
    return run


def test_the_runs_own_service_killed_is_restarted_and_the_run_goes_on(
    uninterrupted_grpo: Path, tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path, cli_runs: list[CliRun]
) -> None:
    out = tmp_path / "out"
    cfg = grpo_job(
        tmp_path / "job" / "job.toml",
        tiny_model_dir,
        synthetic_dir,
        out,
        **{"train.train_policy.remote_reward.local_service": True},
    )
    cli = start_cli(grpo_args(cfg), tmp_path, out)
    cli_runs.append(cli)
    run = cli.wait_steps(2)
    # the flow gave its service a state_dir in the run folder: the ids it claimed are there
    assert list((run / ".reward_service" / "state" / "ids").glob("*.json"))
    (service,) = processes_with("reward-service", str(run))
    os.kill(service, signal.SIGKILL)

    code, seconds = cli.wait(timeout=600)
    output = cli.output()
    assert code == 0, output[-4000:]
    assert seconds < FINISH_BOUND_S, seconds
    assert train_steps(run) == list(range(1, STEPS + 1))
    # one line per restart, saying how the dead one ended; the service's log says it too
    assert output.count("restarting it on port") == 1, output[-4000:]
    assert f"reward service (pid {service}) was killed by SIGKILL" in output
    assert "the run restarts its reward service" in (run / "logs" / "reward_service.log").read_text()
    # the ranks waited the restart out: one launch, no crash, no retry
    assert not (run / "failures.jsonl").exists() and "Traceback" not in output
    assert_remote_parts_are_the_rule(run)
    assert same_weights(run / "safetensors" / "final", uninterrupted_grpo / "safetensors" / "final")
    assert not (run / ".reward_service").exists()  # the service's scratch is gone with it
    assert cli.sessions_left() == []


def test_an_external_service_down_for_good_stops_the_run_saved_and_it_resumes(
    uninterrupted_grpo: Path, tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path, cli_runs: list[CliRun]
) -> None:
    out = tmp_path / "out"
    cfg = grpo_job(tmp_path / "job" / "job.toml", tiny_model_dir, synthetic_dir, out, **QUICK_GIVE_UP)
    port, token, rewards_toml = free_port(), secrets.token_urlsafe(24), service_config(tmp_path / "service")
    with contextlib.ExitStack() as stack:
        proc, base, _ = stack.enter_context(
            reward_service(tmp_path / "service.log", port=port, token=token, config=rewards_toml)
        )
        env = fault_env(tmp_path, **service_env(base, token))
        cli = start_cli(grpo_args(cfg), tmp_path, out, env)
        cli_runs.append(cli)
        run = cli.wait_steps(2)
        os.killpg(proc.pid, signal.SIGKILL)  # for good: nothing restarts it
        assert_stopped_for_the_service(cli, run, base, STEPS, STOP_BOUND_S)

    # the service back (same port, token and state): the same command with --run-dir continues to the end
    with reward_service(tmp_path / "service-2.log", port=port, token=token, config=rewards_toml):
        resume_to_the_end(grpo_args(cfg, "--run-dir", str(run)), tmp_path, out, cli_runs, **service_env(base, token))
    assert train_steps(run) == list(range(1, STEPS + 1))
    assert same_weights(run / "safetensors" / "final", uninterrupted_grpo / "safetensors" / "final")


def test_the_rollout_worker_stops_the_same_way(tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path) -> None:
    """on_policy = false: the rewards are scored in each rank's worker process; a dead service there ends the run
    as in the trainer: exit 75 on every rank after the same step, saved, the paragraph once, nothing left."""
    run = tmp_path / "run"
    cfg = grpo_job(
        run / "config.toml",
        tiny_model_dir,
        synthetic_dir,
        tmp_path / "out",
        **QUICK_GIVE_UP,
        **{"train.train_policy.on_policy": False},
    )
    with reward_service(tmp_path / "service.log") as (service, base, token):
        trainer = launch_grpo(cfg, service_env(base, token))
        try:
            wait_train_steps(run, 2, trainer)
            os.killpg(service.pid, signal.SIGKILL)
            t0 = time.monotonic()
            output = trainer.communicate(timeout=STOP_BOUND_S + 60)[0]
            seconds = time.monotonic() - t0
        finally:
            if trainer.poll() is None:
                os.killpg(trainer.pid, signal.SIGKILL)
    assert trainer.returncode == EXIT_SERVICE_DOWN, output[-4000:]
    assert seconds < STOP_BOUND_S, seconds
    record = json.loads((run / "error.json").read_text())
    assert record["kind"] == "service" and f"{base}/" in record["message"], record
    step = train_steps(run)[-1]
    assert [p.name for p in complete_checkpoints(run / "checkpoints")] == [f"step_{step}"]
    assert output.count("error: reward service") == 1 and "Traceback" not in output, output[-4000:]
    assert processes_in({trainer.pid}) == []  # the launcher's session: ranks and their workers
