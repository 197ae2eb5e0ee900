"""GRPO's rollout, in the trainer's process or in a worker process of its own that runs ahead of training.

    rollout = run_rollout(engine, rows, rewards, cfg, step_seed, all_rows)       # one batch, here
    worker = RolloutWorker(run_dir, cfg, dataset_script, rank, local_procs)     # asynchronous: [train.train_
    worker.submit(step, rows, step_seed); worker.push_weights(version, folder)  #  policy] on_policy = false
    result = worker.result(step)          # (Rollout, weight version it was sampled with, timings)

Asynchronous rollout (`on_policy = false`): each trainer rank starts one worker process with its own
engine (HF on CPU; vLLM on the rank's GPU), hands it the prompts of the next `max_inflight_steps` steps
ahead of the step it trains, and pushes new weights as a safetensors folder every `sync_weight_interval`
steps; the worker loads the newest weights before each batch it samples and stamps the batch with that
version. The trainer drops a batch older than `allowed_outdated_steps` versions and has it sampled
again. Rewards are scored in the worker, so a slow reward (the remote service) overlaps training too.
The worker stops when the trainer closes it or dies (it watches its parent); a worker that dies fails
the trainer's wait naming its exit code, never a hang.
"""

from __future__ import annotations

import os
import queue
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cosmos_train.config import Config
from cosmos_train.generation import GenerationEngine, SamplingParams
from cosmos_train.rewards import RewardSet
from cosmos_train.train.rollout import Overlong, Rollout, Shaping, collect_rollouts

SEED_MOD = 2**31
POLL_S = 0.5  # how often a waiting trainer checks that its worker is alive


def sampling_for(cfg: Config, step_seed: int) -> SamplingParams:
    r = cfg.rollout
    sc = r.sampling_config
    return SamplingParams(n=r.n_generation, max_new_tokens=r.max_response_length, temperature=sc.temperature,
                          top_p=sc.top_p, top_k=sc.top_k, repetition_penalty=sc.repetition_penalty,
                          seed=(step_seed + 7) % SEED_MOD)


def validation_sampling(cfg: Config, seed: int) -> SamplingParams:
    """How validation answers are drawn ([validation]; max_response_length unset: the rollout's)."""
    v = cfg.validation
    return SamplingParams(n=v.n_generation, max_new_tokens=v.max_response_length or cfg.rollout.max_response_length,
                          temperature=v.temperature, top_p=v.top_p, top_k=v.top_k,
                          repetition_penalty=v.repetition_penalty, seed=seed)


def run_rollout(engine: GenerationEngine, rows: Sequence[Mapping[str, Any]], rewards: RewardSet, cfg: Config,
                step_seed: int, all_rows: Sequence[Mapping[str, Any]],
                any_rank_needs: Callable[[bool], bool] | None = None) -> Rollout:
    """One rollout batch as the config says (overlong penalty, Dr.GRPO, DAPO dynamic sampling whose extra
    prompts are drawn from `all_rows` with seeds of (step_seed, round), outside the epoch order)."""
    tp, r = cfg.train.train_policy, cfg.rollout
    ol = tp.overlong_reward
    overlong = Overlong(r.max_response_length, ol.buffer_length, ol.penalty_factor) if ol.enable_overlong_penalty else None
    dapo = tp.variant == "dapo"
    rounds = [0]

    def more(k: int) -> list[Mapping[str, Any]]:
        rounds[0] += 1
        g = torch.Generator().manual_seed((step_seed + 14 + rounds[0]) % SEED_MOD)
        return [all_rows[i] for i in torch.randint(len(all_rows), (k,), generator=g).tolist()]

    metric = tp.filter_reward_metric
    shaping = Shaping(scale_by_std=tp.scale_rewards, std=tp.advantage_std, overlong=overlong,
                      advantage_clip=(tp.advantage_low, tp.advantage_high) if tp.clip_advantages else None,
                      min_filter_prefix_tokens=tp.min_filter_prefix_tokens,
                      filter_reward_metric=(metric,) if isinstance(metric, str) else tuple(metric))
    return collect_rollouts(engine, rows, rewards, sampling_for(cfg, step_seed), shaping=shaping,
                            refill=more if dapo else None,
                            max_refill_rounds=tp.dynamic_sampling_max_rounds if dapo else 0,
                            any_rank_needs=any_rank_needs)


@dataclass
class RolloutResult:
    step: int
    rollout: Rollout
    weight_version: int  # the weights it was sampled with (steps they had had)
    generate_s: float  # the worker's time on it (sampling and scoring)
    worker_idle_s: float  # how long the worker waited for this request


class RolloutWorkerDied(RuntimeError):
    """The rollout worker process ended while the trainer waited for it (a crash; the flow's retry resumes)."""


class RolloutWorker:
    """The trainer's handle on its worker process (module docstring)."""

    def __init__(self, run_dir: Path, dataset_script: str | None, device: torch.device, processes_per_host: int):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")  # a fresh interpreter: no torch / CUDA / process-group state inherited
        self.requests: Any = ctx.Queue()
        self.results: Any = ctx.Queue()
        self.pending: dict[tuple[str, int], Any] = {}
        self._asked = 0
        gpu = device.index if device.type == "cuda" else None
        self.proc = ctx.Process(target=_worker_main, name="cosmos-rollout",
                                args=(str(run_dir), dataset_script, gpu, processes_per_host,
                                      self.requests, self.results), daemon=True)
        self.proc.start()

    def submit(self, step: int, rows: list[dict], step_seed: int) -> None:
        self.requests.put(("rollout", step, rows, step_seed))

    def push_weights(self, version: int, folder: str) -> None:
        # the same queue as the requests: one queue keeps their order (two would race), so a batch
        # submitted after a push is sampled with those weights or newer
        self.requests.put(("weights", version, folder))

    def generate(self, chats: list[Any], sampling: SamplingParams) -> list[list[Any]]:
        """Completions of `chats` with the newest weights pushed (validation), after the queued rollouts."""
        self._asked += 1
        key = ("generate", self._asked)
        self.requests.put(("generate", self._asked, chats, sampling))
        return self._wait(key)[0]

    def result(self, step: int) -> tuple[RolloutResult, float]:
        """The rollout of `step` and the seconds the trainer waited for it."""
        return self._wait(("rollout", step))

    def _wait(self, key: tuple[str, int]) -> tuple[Any, float]:
        t0 = time.perf_counter()
        while key not in self.pending:
            try:
                kind, payload = self.results.get(timeout=POLL_S)
            except queue.Empty:
                if not self.proc.is_alive():
                    raise RolloutWorkerDied(f"the rollout worker (pid {self.proc.pid}) exited with code "
                                            f"{self.proc.exitcode} while the trainer waited for its {key[0]} "
                                            f"{key[1]}") from None
                continue
            if kind == "error":  # a user error keeps its kind (exit 2, its paragraph); a crash its traceback
                from cosmos_train.errors import error_from_record

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


def _worker_main(run_dir: str, dataset_script: str | None, gpu: int | None, processes_per_host: int,
                 requests: Any, results: Any) -> None:
    """The worker process: its own engine on the rank's device, rewards scored here, newest weights first."""
    # before anything touches CUDA or reads these: the rank's GPU as device 0, and an engine of its own
    # rather than a member of the trainer's process group (vLLM's external launcher)
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(var, None)
    from cosmos_train.process_tree import watch_parent

    watch_parent(grace_s=5)
    try:
        from cosmos_train.config import load_config
        from cosmos_train.generation import create_engine, from_rollout
        from cosmos_train.rewards import combine, register_script_rewards
        from cosmos_train.train.data import load_train_samples

        cfg = load_config(Path(run_dir) / "config.toml", env={})
        tp = cfg.train.train_policy
        if dataset_script:
            register_script_rewards(dataset_script)
        rewards = combine(tp.reward_function, remote=tp.remote_reward if tp.use_remote_reward else None)
        all_rows = load_train_samples(cfg, Path(run_dir), "train", dataset_script)
        engine = create_engine(from_rollout(cfg, processes_per_host=processes_per_host))
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
                break
            if msg[0] == "generate":
                _, ask, chats, sampling = msg
                results.put(("generate", (ask, engine.generate(chats, sampling))))
                continue
            _, step, rows, step_seed = msg
            t0 = time.perf_counter()
            rollout = run_rollout(engine, rows, rewards, cfg, step_seed, all_rows)
            results.put(("rollout", RolloutResult(step, rollout, version, time.perf_counter() - t0, idle)))
        engine.close()
    except BaseException as e:
        # an exception object may not pickle: send its kind (a user error keeps it) and its text
        from cosmos_train.errors import UserError

        results.put(("error", {"kind": e.kind if isinstance(e, UserError) else None, "message": str(e),
                               "traceback": traceback.format_exc()}))
        raise
