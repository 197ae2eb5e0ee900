"""A world-model RL run's reward service killed mid-run, for real (SIGKILL to the service process, real HTTP, the
real world-model trainer on 2 ranks).

- An external service killed for good, through `cosmos-train wfm-rl`: every rank stops after the same iteration,
  saves it, and the command ends with exit 75 and one paragraph naming the URL, the tries and the last error, with
  the command that continues the run; not retried, nothing left.
- The run's own service (`reward.local_service = true`) is the GRPO flow's supervised one under the world model's
  variable names (WFM_REWARD_*): SIGKILLed mid-run, it is started again on the same port with the same token and
  state, and the ranks' client rides through the restart, so the run finishes (exit 0); the retry condition the
  flow gives the torchrun task waits for the restart. This one runs the trainer under the flow's `wfm_reward`
  without the Prefect flow around it (~25 s less): the flow's part is `run_torchrun` with that retry condition, as
  in the grpo flow, whose run through the CLI is tests/faults/test_reward_service_down.py.
"""

from __future__ import annotations

import logging
import os
import signal
from pathlib import Path

import pytest
from prefect.states import Failed

from cosmos_train.rewards.remote import WFM_ENV
from cosmos_train.wfm.config import load_wfm_config
from tasks import reward_service as supervised
from tasks.reward_service import reward_service
from tasks.wfm_job import wfm_reward
from tests.conftest import ROOT, processes_with
from tests.faults.conftest import (
    CliRun,
    assert_stopped_for_the_service,
    fault_env,
    processes_in,
    start_cli,
    train_steps,
    wait_train_steps,
)
from tests.torchrun import LAUNCH, finish, running

pytestmark = pytest.mark.slow

RECIPE = ROOT / "configs" / "tiny-wfm-flow-grpo.toml"
# ~0.4 s an iteration on 2 CPU ranks: the kill after iteration 2 lands mid-run with seconds to spare (and every
# iteration after it, and the final evaluation, asks the service)
ITERATIONS = 20
RESTARTED_ITERATIONS = 8  # the run that finishes: what follows the restart is trained, so fewer
# The external case's client: 5 tries 0.2 s apart, doubling (about 3 s at most): a dead service is given up in
# seconds. The local case keeps the defaults (8 retries from 0.5 s: 45 s or more), which a restart must fit in.
QUICK_GIVE_UP = ("reward.max_retries=4", "reward.backoff_s=0.2")
# From the kill to the command's exit; measured on 2 shared cores: see docs/failures.md, "Faults, measured".
STOP_BOUND_S = 60
FINISH_BOUND_S = 180


def wfm_overrides(model: Path, data: Path, out: Path, *more: str, iterations: int = ITERATIONS) -> list[str]:
    """The tiny world model on the tiny dataset, its rewards from the service; a checkpoint only at the end (and at
    a stop)."""
    return [
        f"model.model_name_or_path='{model}'",
        f"job.output_dir='{out}'",
        f"trainer.max_iter={iterations}",
        "dataloader_train.type='local'",
        f"dataloader_train.video_dataloader.dataset_dir='{data}'",
        "dataloader_train.video_dataloader.batch_size=1",
        "model.rl.sample_steps=4",
        "evaluation.num_prompts=2",
        "checkpoint.save_iter=100",
        "reward.backend='service'",
        *more,
    ]


def test_an_external_service_down_for_good_stops_the_world_model_run_saved(
    tiny_wfm_dir: Path, wfm_data_dir: Path, tmp_path: Path, cli_runs: list[CliRun]
) -> None:
    out = tmp_path / "out"
    args = ["wfm-rl", "--config", str(RECIPE), "--set", "launch.nproc_per_node=2"]
    for o in wfm_overrides(tiny_wfm_dir, wfm_data_dir, out, *QUICK_GIVE_UP):
        args += ["--set", o]
    with reward_service(tmp_path / "service.log") as (proc, base, token):
        urls = {"WFM_REWARD_ENQUEUE_URL": f"{base}/enqueue", "WFM_REWARD_FETCH_URL": f"{base}/pull"}
        env = fault_env(tmp_path, **urls, WFM_REWARD_TOKEN=token)
        cli = start_cli(args, tmp_path, out, env)
        cli_runs.append(cli)
        run = cli.wait_steps(2)
        os.killpg(proc.pid, signal.SIGKILL)  # for good: nothing restarts it
        said = assert_stopped_for_the_service(cli, run, base, ITERATIONS, STOP_BOUND_S)
    assert f"To continue from there: cosmos-train wfm-rl --config {RECIPE}" in said


def test_the_runs_own_service_killed_is_restarted_under_the_world_model_names(
    tiny_wfm_dir: Path, wfm_data_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=supervised.__name__)
    run = tmp_path / "run"
    overrides = wfm_overrides(
        tiny_wfm_dir, wfm_data_dir, tmp_path / "out", "reward.local_service=true", iterations=RESTARTED_ITERATIONS
    )
    cfg = load_wfm_config(RECIPE, overrides, env={})
    cfg.write(run / "config.toml")
    args = ["-m", "cosmos_train.wfm.trainer", "--config", str(run / "config.toml")]
    with wfm_reward(cfg, run, logging.getLogger(supervised.__name__)) as reward:
        assert sorted(reward.env) == sorted(WFM_ENV)  # the names the world-model client reads
        with running(2, *args, launcher=LAUNCH, env=reward.env) as trainer:
            wait_train_steps(run, 2, trainer)
            (service,) = processes_with("reward-service", str(run))
            os.kill(service, signal.SIGKILL)
            # the torchrun task's retry condition: a relaunch after a crash waits for the restart, then goes ahead
            assert reward.retry_if(None, None, Failed(data=RuntimeError("a rank crashed"))) is True
            (restarted_pid,) = processes_with("reward-service", str(run))
            assert restarted_pid != service
            output = finish(trainer, timeout=FINISH_BOUND_S)
    assert trainer.returncode == 0, output[-4000:]
    assert train_steps(run) == list(range(1, RESTARTED_ITERATIONS + 1))
    restarted = [r.getMessage() for r in caplog.records if "restarting it on port" in r.getMessage()]
    assert len(restarted) == 1 and f"(pid {service}) was killed by SIGKILL" in restarted[0], restarted
    assert "Traceback" not in output and (run / "diffusers" / "final").is_dir(), output[-4000:]
    assert processes_in({trainer.pid}) == [] and not processes_with("reward-service", str(run))
    assert not (run / ".reward_service").exists()  # the service's scratch is gone with it
