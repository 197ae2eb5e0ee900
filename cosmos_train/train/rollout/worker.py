"""GRPO's rollout in a worker process of its own per rank, sampling ahead of training
(`train_policy.on_policy = false`).

    source = WorkerRollout(cfg, run_dir, dataset_script, dist, processes_per_host, model_dir)
    source.start(step, rows, step_seed)      # up to max_inflight_steps steps ahead of the one trained
    got = source.result(step)                # StepRollout; metrics: staleness, waits
    source.sync_weights(model, version)      # a safetensors folder the worker loads

Each trainer rank starts one worker process with its own engine (HF on CPU; vLLM on the rank's GPU),
hands it the prompts of the next `max_inflight_steps` steps ahead of the step it trains, and pushes new
weights as a safetensors folder (RUN/rollout_weights/v<version>, the 3 newest kept) every
`sync_weight_interval` steps; the worker loads the newest weights before each batch it samples and
stamps the batch with that version. The trainer drops a batch older than `allowed_outdated_steps`
versions and has it sampled again. Rewards are scored in the worker, so a slow reward (the remote
service) overlaps training too. The worker stops when the trainer closes it or dies (it watches its
parent); a worker that dies fails the trainer's wait naming its exit code, never a hang; one whose reward
service stayed unreachable sends that error, and the ranks stop saved together (`rollout.sources.outage_agreed`).
On the CPU the trainer and its worker each take their share of the cores (`share_cores`).
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import shutil
import time
import traceback
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from cosmos_train.config import Config, load_config
from cosmos_train.distributed import DistInfo, any_rank
from cosmos_train.errors import EXIT_SERVICE_DOWN, UserError, error_from_record
from cosmos_train.generation import (
    Chat,
    Completion,
    GenerationEngine,
    SamplingParams,
    create_engine,
    from_rollout,
)
from cosmos_train.models.hf_folder import export_safetensors
from cosmos_train.models.load import load_processor
from cosmos_train.process_tree import watch_parent
from cosmos_train.rewards import RewardSet
from cosmos_train.rewards.remote import RewardServiceUnreachable
from cosmos_train.train.data import load_train_samples
from cosmos_train.train.rollout.groups import Rollout, grpo_policy, run_rollout, training_rewards
from cosmos_train.train.rollout.sources import RolloutSource, StepRollout, outage_agreed
from cosmos_train.vision.processor import get_tokenizer

POLL_S = 0.5  # how often a waiting trainer checks that its worker is alive
KEEP_WEIGHTS = 3  # newest weight folders kept under RUN/rollout_weights (the worker may still be loading one)


@dataclass
class WorkerBatch:
    """A rollout the worker sampled, with the weights it was sampled with and the worker's times."""

    step: int
    rollout: Rollout
    weight_version: int  # the weights it was sampled with (steps they had had)
    generate_s: float  # the worker's time on it (sampling and scoring)
    worker_idle_s: float  # how long the worker waited for this request


class RolloutWorkerDied(RuntimeError):
    """The rollout worker process ended while the trainer waited for it (a crash; the flow's retry resumes)."""


class WorkerProcess:
    """The trainer's handle on its worker process: one queue of requests in, one of results out."""

    def __init__(self, run_dir: Path, dataset_script: str | None, device: torch.device, processes_per_host: int):
        ctx = multiprocessing.get_context("spawn")  # a fresh interpreter: no torch / CUDA / process-group state
        self.requests: Any = ctx.Queue()
        self.results: Any = ctx.Queue()
        self.pending: dict[tuple[str, int], Any] = {}
        self._asked = 0
        gpu = device.index if device.type == "cuda" else None
        self.proc = ctx.Process(
            target=_worker_main,
            name="cosmos-rollout",
            args=(str(run_dir), dataset_script, gpu, processes_per_host, self.requests, self.results),
            daemon=True,
        )
        self.proc.start()

    def submit(self, step: int, rows: list[dict[str, Any]], step_seed: int) -> None:
        self.requests.put(("rollout", step, rows, step_seed))

    def push_weights(self, version: int, folder: str) -> None:
        # the same queue as the requests: one queue keeps their order (two would race), so a batch
        # submitted after a push is sampled with those weights or newer
        self.requests.put(("weights", version, folder))

    def generate(self, chats: list[Chat], sampling: SamplingParams) -> list[list[Completion]]:
        """Completions of `chats` with the newest weights pushed (validation), after the queued rollouts."""
        self._asked += 1
        key = ("generate", self._asked)
        self.requests.put(("generate", self._asked, chats, sampling))
        return self._wait(key)[0]

    def result(self, step: int) -> tuple[WorkerBatch, float]:
        """The rollout of `step` and the seconds the trainer waited for it."""
        return self._wait(("rollout", step))

    def _wait(self, key: tuple[str, int]) -> tuple[Any, float]:
        t0 = time.perf_counter()
        while key not in self.pending:
            try:
                kind, payload = self.results.get(timeout=POLL_S)
            except queue.Empty:
                if not self.proc.is_alive():
                    raise RolloutWorkerDied(
                        f"the rollout worker (pid {self.proc.pid}) exited with code "
                        f"{self.proc.exitcode} while the trainer waited for its {key[0]} "
                        f"{key[1]}"
                    ) from None
                continue
            if kind == "error":  # a user error keeps its kind (exit 2, its paragraph); a crash its traceback
                if payload.get("unreachable") is not None:  # the reward service stayed down: the trainer agrees
                    raise payload["unreachable"]
                raise error_from_record(payload) or RuntimeError(f"rollout worker failed:\n{payload['traceback']}")
            self.pending[(kind, payload[0] if kind == "generate" else payload.step)] = payload
        got = self.pending.pop(key)
        return (got[1] if key[0] == "generate" else got), time.perf_counter() - t0

    def close(self) -> None:
        if self.proc.is_alive():
            self.requests.put(None)
            self.proc.join(timeout=30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(timeout=5)


class WorkerRollout(RolloutSource):
    """The rank's worker process, `max_inflight_steps` steps ahead, batches kept within
    `allowed_outdated_steps` weight versions (module docstring)."""

    description = "worker (asynchronous)"

    def __init__(
        self,
        cfg: Config,
        run_dir: Path,
        dataset_script: str | None,
        dist: DistInfo,
        processes_per_host: int,
        model_dir: Path,
    ):
        policy_cfg = grpo_policy(cfg)
        self.run_dir, self.dist, self.model_dir = run_dir, dist, model_dir
        self.allowed_outdated = policy_cfg.allowed_outdated_steps
        self.steps_ahead = 1 if policy_cfg.max_inflight_steps is None else policy_cfg.max_inflight_steps
        self.seed_rank = dist.dp_rank
        if dist.device.type == "cpu":
            share_cores(cfg, processes_per_host)
        self.worker = WorkerProcess(run_dir, dataset_script, dist.device, processes_per_host)
        self._asked: dict[int, tuple[list[dict[str, Any]], int]] = {}
        self.staleness: list[int] = []  # weight versions behind, of every step trained so far
        self.stale_dropped = 0

    def start(self, step: int, rows: list[dict[str, Any]], seed: int) -> None:
        self._asked[step] = (rows, seed)
        self.worker.submit(step, rows, seed)

    def result(self, step: int) -> StepRollout:
        rows, seed = self._asked.pop(step)
        waited = 0.0
        while True:
            # the worker scored the rewards: every rank agrees on a reward service outage before the next collective
            got, wait_s = outage_agreed(partial(self.worker.result, step))
            waited += wait_s
            stale = step - got.weight_version
            # every rank drops together (their collectives must pair): when any rank's batch is too old
            if not any_rank(stale > self.allowed_outdated, self.dist.device):
                break
            self.stale_dropped += 1
            self.worker.submit(step, rows, seed)  # sampled again with the newest weights
        self.staleness.append(stale)
        ranked = sorted(self.staleness)
        return StepRollout(
            got.rollout,
            {
                "staleness": float(stale),
                "staleness_p50": float(ranked[len(ranked) // 2]),
                "staleness_p99": float(ranked[min(len(ranked) - 1, int(0.99 * len(ranked)))]),
                "stale_dropped": float(self.stale_dropped),
                "trainer_idle_time": waited,
                "rollout_idle_time": got.worker_idle_s,
                "rollout_generate_time": got.generate_s,
            },
        )

    def sync_weights(self, model: nn.Module, version: int) -> int:
        root = self.run_dir / "rollout_weights"
        folder = export_safetensors(model, root / f"v{version}", self.model_dir)  # collective
        self.worker.push_weights(version, str(folder or root / f"v{version}"))
        if self.dist.is_main:
            for old in sorted(root.glob("v*"), key=lambda p: int(p.name[1:]))[:-KEEP_WEIGHTS]:
                shutil.rmtree(old, ignore_errors=True)
        return version

    def generate_for_validation(
        self, chats: list[Chat], sampling: SamplingParams, *, together: int, filler: Chat
    ) -> list[list[Completion]]:
        # each rank's worker is an engine of its own: no rank waits for another, no padding (a reward outage of a
        # rollout queued before it is raised here: the trainer's validation agrees on it)
        return self.worker.generate(chats, sampling) if chats else []

    def close(self) -> None:
        self.worker.close()


def share_cores(cfg: Config, processes_per_host: int) -> int:
    """The trainer's torch threads on the CPU while its worker samples: the same share of the cores as the
    worker's engine takes (`GenerationConfig.threads`), so that trainer and worker together use each core
    once: with the trainer on all cores beside its worker, the cores ran more busy threads than they have, several
    times slower a step (bench/grpo_step.py; bench/RESULTS.md, "GRPO step time"). Returns the count."""
    threads = from_rollout(cfg, processes_per_host=processes_per_host).threads()
    torch.set_num_threads(threads)
    return threads


def _worker_main(
    run_dir: str, dataset_script: str | None, gpu: int | None, processes_per_host: int, requests: Any, results: Any
) -> None:
    """The worker process: its own engine on the rank's device, rewards scored here, newest weights first."""
    # before anything touches CUDA or reads these: the rank's GPU as device 0, and an engine of its own
    # rather than a member of the trainer's process group (vLLM's external launcher)
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(var, None)
    watch_parent(grace_s=5)
    try:
        cfg = load_config(Path(run_dir) / "config.toml", env={})
        # the policy's tokenizer, loaded only when a reward counts tokens (`overlong`)
        rewards = training_rewards(
            cfg, lambda: get_tokenizer(load_processor(cfg.policy.model_name_or_path)), dataset_script
        )
        all_rows = load_train_samples(cfg, Path(run_dir), "train", dataset_script)
        engine = create_engine(from_rollout(cfg, processes_per_host=processes_per_host))
        _serve(engine, cfg, rewards, all_rows, requests, results)
        engine.close()
    except BaseException as e:
        # an exception object may not pickle: send its kind (a user error keeps it) and its text
        results.put(
            (
                "error",
                {
                    "kind": e.kind if isinstance(e, UserError) else None,
                    "message": str(e),
                    "traceback": traceback.format_exc(),
                    "unreachable": e if isinstance(e, RewardServiceUnreachable) else None,  # it pickles
                },
            )
        )
        if isinstance(e, RewardServiceUnreachable):  # the trainer says it, once, as one paragraph: no traceback
            raise SystemExit(EXIT_SERVICE_DOWN) from None
        raise


def _serve(
    engine: GenerationEngine,
    cfg: Config,
    rewards: RewardSet,
    all_rows: list[dict[str, Any]],
    requests: Any,
    results: Any,
) -> None:
    """Answer requests in order until the trainer sends None; weights pushed meanwhile load first."""
    version = 0
    backlog: list[Any] = []
    while True:
        t_wait = time.perf_counter()
        if not backlog:
            backlog.append(requests.get())
        while True:  # everything already sent: weights pushed after a queued request still count for it
            try:
                backlog.append(requests.get_nowait())
            except queue.Empty:
                break
        idle = time.perf_counter() - t_wait
        pushed = [m for m in backlog if m is not None and m[0] == "weights"]
        backlog = [m for m in backlog if m is None or m[0] != "weights"]
        if pushed:  # the newest only: older folders are skipped
            version = engine.update_weights(pushed[-1][2], version=pushed[-1][1])
        if not backlog:
            continue
        msg = backlog.pop(0)
        if msg is None:
            return
        if msg[0] == "generate":
            _, ask, chats, sampling = msg
            results.put(("generate", (ask, engine.generate(chats, sampling))))
            continue
        _, step, rows, step_seed = msg
        t0 = time.perf_counter()
        rollout = run_rollout(engine, rows, rewards, cfg, step_seed, all_rows)
        results.put(("rollout", WorkerBatch(step, rollout, version, time.perf_counter() - t0, idle)))


__all__ = ["RolloutWorkerDied", "WorkerBatch", "WorkerProcess", "WorkerRollout", "share_cores"]
