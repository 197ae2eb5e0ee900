"""The GRPO trainer: one process per rank, the policy on FSDP2 / TP as in SFT, a rollout source beside it.

    python -m torch.distributed.run --nproc_per_node=2 -m cosmos_train.train.grpo --config RUN/config.toml
    cosmos-train grpo --config configs/tiny-grpo.toml          # the same through the Prefect flow

What a step does, and what the run writes, is described once: docs/grpo.md ("A GRPO step"). Here: the wiring
(rewards, rows, sampler, reference model, rollout source) and the step (`train_step`: rollout, samples, the update
loop `train_on` over `grpo_update.micro_batch_loss`, weight sync).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from cosmos_train.config import Config
from cosmos_train.data.frame_memo import FrameMemo
from cosmos_train.distributed import DistInfo, all_reduce_sum, from_group_leader
from cosmos_train.train.data import load_train_samples
from cosmos_train.train.grpo_prompts import GRPOPrompts
from cosmos_train.train.grpo_update import (
    UpdateSettings,
    add_token_metrics,
    kept_slice,
    loss_scales,
    micro_batch_loss,
    micro_batches_per_rl_step,
    score_reference,
    step_update_metrics,
)
from cosmos_train.train.grpo_validation import improved, validate, validation_rewards
from cosmos_train.train.loop import run_main
from cosmos_train.train.rl_batch import RLSample
from cosmos_train.train.rollout.colocated import ColocatedRollout
from cosmos_train.train.rollout.groups import Rollout, derive_seed, grpo_policy, training_rewards, validation_sampling
from cosmos_train.train.rollout.sources import RolloutSource, asynchronous_rollout
from cosmos_train.train.rollout.stats import RolloutSums, completion_rows
from cosmos_train.train.rollout.worker import WorkerRollout
from cosmos_train.train.run_health import ratio_moves_of
from cosmos_train.train.sampler import DataPosition
from cosmos_train.train.step import apply_update, forward_micro_batches
from cosmos_train.train.trainer import Trainer, load_policy, peak_memory_gb
from cosmos_train.vision.processor import get_tokenizer


class GRPOTrainer(Trainer):
    name = "grpo"

    def __init__(self, cfg: Config, run_dir: Path, dist: DistInfo, dataset_script: str | None = None):
        super().__init__(cfg, run_dir, dist, dataset_script)
        self.policy_cfg = policy_cfg = grpo_policy(cfg)
        self.rewards = training_rewards(cfg, get_tokenizer(self.processor), dataset_script)
        self.val_rewards = validation_rewards(cfg, get_tokenizer(self.processor))
        self.rows = load_train_samples(cfg, run_dir, "train", dataset_script)
        self.val_rows = load_train_samples(cfg, run_dir, "val", dataset_script) if cfg.validation.enable else []
        prompts = cfg.prompts_per_step
        self.init_steps(
            len(self.rows),
            prompts,
            drop_last=True,
            indivisible=f"the {prompts} prompt(s) of a step (train.train_batch_per_replica / rollout.n_generation, "
            f"at least 1) must be divisible by the {dist.dp_size} data-parallel rank(s) "
            f"({dist.world_size} processes / tp_size {dist.tp} / cp_size {dist.cp}): each rank samples whole "
            "groups for an equal share of the prompts; raise "
            "train.train_batch_per_replica or run fewer data-parallel ranks",
            no_step=f"{len(self.rows)} training row(s) make no step of {prompts} prompts: add rows or lower "
            "train.train_batch_per_replica",
            ticks_per_step=cfg.rl_steps_per_step,
        )
        self.update = UpdateSettings.of(cfg)
        self.reference = load_policy(cfg, dist, trainable=False)[0] if policy_cfg.kl_beta > 0 else None
        self.rollout_source = self._rollout_source(dataset_script)
        # the prompts' clips, decoded once: an in-process engine has just decoded them into its own memo
        engine_frames = self.rollout_source.frames
        frames = engine_frames if engine_frames is not None else FrameMemo(max_bytes=1 << 30)
        self.prompts = GRPOPrompts(self.processor, frames, cfg)
        self.weight_version = 0
        self.best: dict[str, Any] | None = None
        # the run-health verdicts: RUN/result.json's "health"; with train.stop_when_stuck followed step by step
        t = cfg.train
        self.watch_health(t.run_health, ratio_moves_of(policy_cfg), world_model=False, stop=t.stop_when_stuck)

    def _rollout_source(self, dataset_script: str | None) -> RolloutSource:
        """Asynchronous rollout runs one engine per rank in a worker process; synchronous rollout the rank's
        colocated engine (`asynchronous_rollout` decides which, from on_policy, tp_size and the device)."""
        local_procs = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        worker, why = asynchronous_rollout(
            self.policy_cfg.on_policy, self.cfg.rollout.parallelism.tp_size, self.dist.device
        )
        self.log(f"rollout {'asynchronous' if worker else 'synchronous'}: {why}")
        if worker:  # a trainer and a worker process per rank compute at once
            return WorkerRollout(self.cfg, self.run_dir, dataset_script, self.dist, 2 * local_procs, self.model_dir)
        return ColocatedRollout(self.cfg, self.dist, self.rewards, self.rows, processes_per_host=local_procs)

    # ------------------------------------------------------------------ checkpoint contents
    def checkpoint_extra(self) -> dict[str, Any]:
        return {
            **super().checkpoint_extra(),
            "weight_version": self.weight_version,
            "best": self.best,
            "reference": "initial policy" if self.reference is not None else None,
        }

    def restore_extra(self, extra: dict[str, Any]) -> None:
        super().restore_extra(extra)
        self.weight_version = int(extra.get("weight_version", self.step))
        self.best = extra.get("best")

    def _seed(self, purpose: int = 0, step: int | None = None) -> int:
        """Sampling seed of this step (or `step`) and rank (`derive_seed`). Ranks of one policy TP group (same
        prompts) or one rollout TP group (one engine) share it. `run_rollout` derives its sampling and refill
        seeds from purpose 0; validation samples with purpose 3."""
        step = self.step if step is None else step
        return derive_seed(self.cfg.train.seed, step, self.rollout_source.seed_rank, purpose)

    # ------------------------------------------------------------------ one step
    def batches(self, pos: DataPosition) -> Iterator[tuple[list[dict], DataPosition]]:
        """The steps' rows; the rollout source is handed each step's prompts `steps_ahead` steps before it is
        trained (the asynchronous worker samples them meanwhile)."""
        ahead = iter(self.sampler.batches(pos))
        queued: list[tuple[list[dict], DataPosition]] = []
        step = self.step
        while True:
            while len(queued) <= self.rollout_source.steps_ahead:
                nxt = next(ahead, None)
                if nxt is None:
                    break
                rows = [self.rows[i] for i in nxt[0]]
                self.rollout_source.start(step + len(queued), rows, self._seed(step=step + len(queued)))
                queued.append((rows, nxt[1]))
            if not queued:
                return
            yield queued.pop(0)
            step += 1

    def train_step(self, rows: list[dict]) -> dict[str, Any]:
        """One step on the rollout of `rows` (the rollout source got them from `batches`, with their seed)."""
        t0 = time.perf_counter()
        sampled = self.rollout_source.result(self.step)
        # the ranks of one TP x CP group train on one batch: their group's first rank's rollout
        rollout = from_group_leader(sampled.rollout, self.dist)
        t_rollout = time.perf_counter() - t0
        self.prompts.vision_token_completions = 0
        samples = self.prompts.samples_of(rollout.groups)
        filler = self.prompts.filler(rollout, samples, self.pad_id)
        stats = RolloutSums.of(rollout, self.rewards.names).all_reduced(self.dist).stats(ranks=self.dist.dp_size)
        self._sample_completions(rollout)
        t1 = time.perf_counter()
        if stats["groups"] == 0:  # no rank has a group with signal (all rewards equal everywhere): no update
            values: dict[str, Any] = {"loss": 0.0, "grad_norm": 0.0, "updates": 0.0, "skipped": False}
            for _ in range(self.update.rl_steps_per_step):
                self.scheduler.step()  # the schedule stays on step numbers
        else:
            values = self.train_on(samples, filler)
        t_train = time.perf_counter() - t1
        if stats["groups"] != 0:  # the update's model FLOPs over its time (the rollout's are the engine's)
            values.update({f"update_{k}": v for k, v in self.flop_rates(self.update_flops, t_train).items()})
        if (self.step + 1) % self.cfg.train.sync_weight_interval == 0:
            self.sync_weights(version=self.step + 1)  # the weights after this step
        step_time = time.perf_counter() - t0
        seq_tokens = all_reduce_sum(sum(len(s.prompt.input_ids) + len(s.token_ids) for s in samples), self.dist.device)
        stats["vision_token_completions"] = (
            float(all_reduce_sum(self.prompts.vision_token_completions, self.dist.device)) / self.ranks_sharing_rows
        )
        return {
            **stats,
            **sampled.metrics,
            **values,
            "rollout_time": t_rollout,
            "train_time": t_train,
            "step_time": step_time,
            "tokens_per_s": float(seq_tokens) / self.ranks_sharing_rows / step_time,
            "weight_version": self.weight_version,
            "lr": self.scheduler.get_last_lr()[0],
            "peak_mem_gb": peak_memory_gb(self.dist.device),
            "epoch": self.pos.epoch,
        }

    def train_on(self, samples: list[RLSample], filler: RLSample) -> dict[str, Any]:
        """The step's optimizer updates on this rank's samples: for each part (one of cosmos-rl's steps, one
        schedule tick), mu_iterations passes, each a forward and backward of every micro-batch, then one update."""
        s, dist = self.update, self.dist
        rope_index = getattr(self.model.model, "get_rope_index", None)  # None: a text-only model
        parts = micro_batches_per_rl_step(samples, filler, s, rope_index, dist)
        every = [m for part in parts for m in part]
        # the update's model FLOPs: forward + backward (3 forwards' worth) per iteration, a forward per scoring pass
        forward = self.flop_counter.step_flops([m.batch for m in every], passes=1)
        flops = 3 * s.mu_iterations * forward
        if self.reference is not None:
            score_reference(self.reference, every, dist, s.temperature)
            flops += forward
        # Old log-probs: the trainer's own forward in a part's first iteration (ratio 1), kept for its later
        # iterations, as cosmos-rl does; a part trains mu_iterations times before the next starts, so its old
        # log-probs are of the weights the earlier parts left.
        sums: dict[str, float] = {}
        losses, norms, applied = [], [], True
        for micro in parts:
            scales = loss_scales(micro, s, dist, self.ranks_sharing_rows)
            for _ in range(s.mu_iterations):
                self.model.train()
                if scales.total == 0:  # every completion of this update is masked out (all truncated): nothing to learn
                    continue
                loss_sum = 0.0
                for f in forward_micro_batches(self.model, [m.batch for m in micro], dist):
                    kept = kept_slice(f.batch, f.keep, dist)
                    loss, values, tokens = micro_batch_loss(micro[f.index], f.logits, kept, scales, f.index, s)
                    add_token_metrics(sums, values, tokens)
                    loss_sum += float(loss.detach())
                    f.backward(loss)
                grad_norm = self.clip_gradients()
                loss_mean = float(all_reduce_sum(loss_sum, dist.device)) / self.ranks_sharing_rows / dist.dp_size
                applied &= apply_update(self.optimizer, None, math.isfinite(loss_mean) and math.isfinite(grad_norm))
                losses.append(loss_mean)
                norms.append(grad_norm)
            self.scheduler.step()  # one tick per part: each part is one of cosmos-rl's steps
        out, self.update_flops = step_update_metrics(sums, flops, dist, self.ranks_sharing_rows)
        out.update(
            loss=sum(losses) / max(len(losses), 1),
            grad_norm=max(norms) if norms else 0.0,
            updates=float(len(losses)),
            skipped=not applied,
        )
        return out

    def sync_weights(self, version: int | None = None) -> None:
        """The policy's weights into the rollout engine (`RolloutSource.sync_weights`: in place, or a
        safetensors folder for the worker); the version is the number of steps they have had."""
        version = self.step if version is None else version
        self.weight_version = self.rollout_source.sync_weights(self.model, version)

    def _sample_completions(self, rollout: Rollout) -> None:
        """Every logging.completion_sample_freq steps, rank 0 logs the first completion_sample_count completions."""
        every, count = self.cfg.logging.completion_sample_freq, self.cfg.logging.completion_sample_count
        step = self.step + 1  # the step this rollout belongs to
        if not self.dist.is_main or not every or step % every or not (rollout.groups or rollout.dropped):
            return
        self.metrics.log_samples(step, completion_rows(rollout)[:count])

    # ------------------------------------------------------------------ validation and the best weights
    def validate(self) -> dict[str, float]:
        """The engine, holding the current weights, answers every validation row ([validation] sampling)."""
        if self.weight_version != self.step:
            self.sync_weights()
        sampling = validation_sampling(self.cfg, self._seed(3))
        return validate(
            self.rollout_source, self.val_rows, self.val_rewards, sampling, self.dist, self.ranks_sharing_rows
        )

    def validate_and_keep_best(self) -> None:
        values = self.validate()
        self.log_validation(values)
        metric = improved(self.best, values)
        if metric is None:
            return
        path = self.export("best") if self.cfg.train.ckpt.export_safetensors else None
        self.best = {"step": self.step, "metric": metric, "value": values[metric], "path": str(path) if path else None}
        if self.dist.is_main:
            (self.run_dir / "best.json").write_text(json.dumps(self.best, indent=2))
            self.log(f"best validation {metric} {values[metric]:.4f} at step {self.step}")

    # ------------------------------------------------------------------ around the loop
    def describe(self) -> str:
        r = self.cfg.rollout
        return (
            f"{super().describe()} on {self.dist.world_size} process(es): {self.cfg.prompts_per_step} prompts x "
            f"{r.n_generation} completions a step, {self.update.rl_steps_per_step} update(s) x "
            f"{self.update.mu_iterations} pass(es), {len(self.rows)} rows, "
            f"rollout {self.rollout_source.description}"
        )

    @property
    def validating(self) -> bool:
        return self.cfg.validation.enable and bool(self.val_rows)

    def validate_and_log(self) -> None:
        self.validate_and_keep_best()

    def before_loop(self) -> None:
        if self.step:  # resumed: the engine starts from the loaded model, not the checkpoint
            self.sync_weights()
        if self.validating and self.best is None:
            self.validate_and_keep_best()  # the starting point: GRPO's best must beat it

    def after_loop(self) -> None:
        self.rollout_source.close()

    def result_extra(self) -> dict[str, Any]:
        return {"best": self.best}


def main(argv: list[str] | None = None) -> int:
    return run_main(GRPOTrainer, argv)


if __name__ == "__main__":
    sys.exit(main())
