"""The SFT trainer: one process per rank, FSDP2 over the device mesh, read top to bottom.

    python -m torch.distributed.run --nproc_per_node=2 -m cosmos_train.train.sft --config RUN/config.toml

RUN/config.toml is the resolved config the flow wrote into the run folder; everything this process
writes (metrics.jsonl, checkpoints/, safetensors/) goes next to it. Rows come from RUN/manifest.jsonl
when the data-prep step wrote one (validated rows), else from the dataset sources directly.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from cosmos_train.config import Config, ConfigError, load_config, unsupported_settings
from cosmos_train.distributed import DistInfo, all_reduce_sum, init_distributed, teardown
from cosmos_train.errors import DataError, TrainingDiverged, report_rank_failure
from cosmos_train.metrics import MetricsLogger
from cosmos_train.signals import install_exit_handlers
from cosmos_train.train.batching import collate_packed, collate_padded, split_micro_batches
from cosmos_train.train.data import SFTDataset, load_train_samples
from cosmos_train.train.losses import kept_ce_sum, label_positions
from cosmos_train.train.optim import apply_freeze_patterns, build_optimizer, build_scheduler
from cosmos_train.train.sampler import DataPosition, GlobalBatchSampler
from cosmos_train.train.vision_forward import forward_micro_batch, media_in_micro_batches


def seed_everything(seed: int, rank: int, deterministic: bool) -> None:
    random.seed(seed + rank)
    np.random.seed(seed + rank)
    torch.manual_seed(seed + rank)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


class SFTTrainer:
    def __init__(self, cfg: Config, run_dir: Path, dist: DistInfo, dataset_script: str | None = None):
        from cosmos_train.checkpoint import CheckpointManager
        from cosmos_train.models.load import load_model, load_processor
        from cosmos_train.models.parallelize import parallelize

        self.cfg, self.run_dir, self.dist = cfg, run_dir, dist
        problems = unsupported_settings(cfg)
        if problems:
            raise ConfigError(problems, str(run_dir / "config.toml"))
        t, tp = cfg.train, cfg.train.train_policy
        model_path = cfg.policy.model_name_or_path
        self.processor = load_processor(model_path)
        self.model_dir = Path(model_path)
        rows = load_train_samples(cfg, run_dir, "train", dataset_script)
        self.dataset = SFTDataset(rows, self.processor, cfg.policy.model_max_length, tp.overlength,
                                  clip_cache=tp.dataset.cache_dir)
        val_rows = (load_train_samples(cfg, run_dir, "val", dataset_script)
                    if cfg.validation.enable else [])
        val_cache = (cfg.validation.dataset or tp.dataset).cache_dir
        self.val_dataset = SFTDataset(val_rows, self.processor, cfg.policy.model_max_length, tp.overlength,
                                      clip_cache=val_cache)

        model = load_model(model_path, dtype=torch.float32, device="cpu")
        self.trainable, self.total_params = apply_freeze_patterns(model, cfg.policy)
        model.to(dist.device)
        self.model: nn.Module = parallelize(model, dist, cfg)
        self.pad_id = _pad_token_id(model)
        self.optimizer = build_optimizer(self.model, t, dist.device)
        # A replica is one model copy: its dp_shard ranks split the replica's batch. The global batch is
        # thus independent of dp_shard, so a run resumed on another number of GPUs sees the same batches.
        global_batch = t.train_batch_per_replica * dist.dp_replicate
        if global_batch % dist.dp_size:
            raise ValueError(
                f"train.train_batch_per_replica ({t.train_batch_per_replica}) must be divisible by "
                f"policy.parallelism.dp_shard_size ({dist.dp_shard}): each shard rank takes an equal part"
            )
        self.sampler = GlobalBatchSampler(
            len(self.dataset), global_batch, dist.dp_size, dist.dp_rank,
            shuffle=tp.dataloader_shuffle, seed=tp.dataloader_seed, drop_last=tp.dataloader_drop_last,
        )
        per_epoch = self.sampler.steps_per_epoch()
        if per_epoch == 0:  # training nothing would export the untrained model as `final`
            raise DataError(
                f"{len(self.dataset)} training row(s) make no full global batch of {global_batch} "
                f"(train.train_batch_per_replica x dp_replicate) with train.train_policy.dataloader_drop_last = "
                "true: add rows, lower train.train_batch_per_replica, or set dataloader_drop_last = false"
            )
        self.total_steps = per_epoch * t.epoch
        if t.max_num_steps is not None:
            self.total_steps = min(self.total_steps, t.max_num_steps)
        self.scheduler = build_scheduler(self.optimizer, t, self.total_steps)
        self.ckpt = CheckpointManager(run_dir, t.ckpt, seed=t.seed)
        self.metrics = MetricsLogger(run_dir, cfg, enabled=dist.is_main)
        self.step = 0
        self.pos = DataPosition()
        self.resumed_from: str | None = None
        self.resume_note: str | None = None
        self.skipped_steps: list[int] = []
        # SIGTERM/SIGUSR1 (Prefect cancel, preemption): checkpoint and leave at a step's end. Ranks get the
        # signal at different moments, so they agree (one all-reduce) to stop after the same step.
        self.exit_request = install_exit_handlers()
        self.stopped = False

    # ------------------------------------------------------------------ resume / save
    def maybe_resume(self, own_run_first: bool = False) -> None:
        """Continue from this run folder's newest checkpoint (a retried launch) when asked and present,
        else as train.resume says (`checkpoint_paths.resolve_resume`: a path that is not a complete checkpoint
        is an error listing the complete ones; true with none found starts fresh and says so)."""
        from cosmos_train.checkpoint import CheckpointManager
        from cosmos_train.checkpoint_paths import resolve_resume

        ckpt = CheckpointManager.find_latest(self.run_dir) if own_run_first else None
        resume = self.cfg.train.resume
        if ckpt is None:
            ckpt = resolve_resume(resume, self.cfg.train.output_dir)
            if ckpt is None and resume is True:
                self.resume_note = (f"train.resume = true: no complete checkpoint under "
                                    f"{self.cfg.train.output_dir}; started from step 0")
                self._log(self.resume_note)
        if ckpt is None:
            return
        extra = self.ckpt.load(ckpt, self.model, self.optimizer, self.scheduler)
        self.step = int(extra["step"])
        self.pos = DataPosition(int(extra["epoch"]), int(extra["consumed"]))
        self.resumed_from = str(ckpt)
        # A relaunch after a crash: the failed attempt's metrics past this step are replaced, not repeated.
        self.metrics.drop_after(self.step)
        self._log(f"resumed from {ckpt} at step {self.step} (epoch {self.pos.epoch}, sample {self.pos.consumed})")

    def save(self, blocking: bool = False) -> Path:
        extra = {"step": self.step, "epoch": self.pos.epoch, "consumed": self.pos.consumed,
                 "world_size": self.dist.world_size}
        path = self.ckpt.save(self.step, self.model, self.optimizer, self.scheduler, extra, blocking=blocking)
        self._log(f"checkpoint {'saved' if blocking or self.cfg.train.ckpt.save_mode == 'sync' else 'saving'} "
                  f"at {path}")
        return path

    def export(self, name: str) -> Path | None:
        from cosmos_train.export import export_safetensors

        out = self.run_dir / "safetensors" / name
        path = export_safetensors(self.model, out, self.model_dir)
        if self.dist.is_main:
            self._log(f"Exported safetensors to {out}")
        return path

    # ------------------------------------------------------------------ one optimizer step
    def _collate(self, samples: list[Any]):
        if self.cfg.train.sequence_packing:
            return collate_packed(samples)
        return collate_padded(samples, self.pad_id)

    def train_step(self, samples: list[Any]) -> dict[str, float]:
        t0 = time.perf_counter()
        self.model.train()
        micro = [self._collate(m) for m in split_micro_batches(samples, self.cfg.train.train_policy.mini_batch)]
        local_tokens = sum(mb.n_label_tokens for mb in micro)
        # ranks of one TP group see the same rows: count them once
        global_tokens = float(all_reduce_sum(local_tokens, self.dist.device)) / self.dist.tp
        if global_tokens == 0:
            raise DataError(f"step {self.step}: the global batch has no assistant tokens to learn from (check that "
                            "the rows have assistant turns, and train.train_policy.overlength)")
        # ranks run the vision tower in the same micro-batches (FSDP collectives): where any has media
        run_vision = media_in_micro_batches(micro, self.dist.device)
        loss_sum = 0.0
        for i, mb in enumerate(micro):
            last = i == len(micro) - 1
            # reduce-scatter gradients once per step, not once per micro-batch
            if hasattr(self.model, "set_requires_gradient_sync"):
                self.model.set_requires_gradient_sync(last)
            mb = mb.to(self.dist.device)
            keep = label_positions(mb.labels)
            out, blank = forward_micro_batch(self.model, mb, run_vision[i], use_cache=False, logits_to_keep=keep)
            ce_sum, _ = kept_ce_sum(out.logits, mb.labels, keep)
            # FSDP averages gradients over dp ranks; x dp_size turns that into the sum, so the
            # step's gradient is d(sum of token CE over the global batch) / global_tokens.
            loss = ce_sum * (self.dist.dp_size / global_tokens)
            (loss if blank is None else loss + blank).backward()
            loss_sum += float(ce_sum.detach())
        grad_norm = self._clip_grad_norm()
        loss = float(all_reduce_sum(loss_sum, self.dist.device)) / self.dist.tp / global_tokens
        # Both values are global (all-reduced), so every rank takes the same branch here.
        finite = math.isfinite(loss) and math.isfinite(grad_norm)
        if finite:
            self.optimizer.step()
        self.scheduler.step()  # a skipped update keeps the schedule on step numbers (as AMP's scaler does)
        self.optimizer.zero_grad(set_to_none=True)
        if not finite:
            return {"loss": loss, "grad_norm": grad_norm, "skipped": True}
        step_time = time.perf_counter() - t0
        tokens = float(all_reduce_sum(sum(mb.n_tokens for mb in micro), self.dist.device)) / self.dist.tp
        return {
            "loss": loss, "lr": self.scheduler.get_last_lr()[0], "grad_norm": grad_norm,
            "tokens_per_s": tokens / step_time, "samples_per_s": self.sampler.global_batch / step_time,
            "step_time": step_time, "peak_mem_gb": _peak_memory_gb(self.dist.device),
            "label_tokens": int(global_tokens), "epoch": self.pos.epoch,
        }

    def _clip_grad_norm(self) -> float:
        """Global grad norm, then clip. With TP + FSDP, parameters live on different meshes (2D for the
        language model, 1D for the vision tower), which one foreach norm cannot mix: norm each group of
        gradients sharing a mesh and placement, gather those to plain tensors, combine."""
        from torch.distributed.tensor import DTensor

        groups: dict[Any, list[torch.Tensor]] = {}
        for p in self.model.parameters():
            if p.grad is not None:
                g = p.grad
                key = (g.device_mesh, tuple(g.placements)) if isinstance(g, DTensor) else None
                groups.setdefault(key, []).append(p)
        norms = []
        for params in groups.values():
            n = torch.nn.utils.get_total_norm([p.grad for p in params], norm_type=2.0, foreach=True)
            norms.append(n.full_tensor() if isinstance(n, DTensor) else n)
        total = torch.linalg.vector_norm(torch.stack(norms))
        clip = self.cfg.train.optm_grad_norm_clip
        if clip > 0:
            for params in groups.values():
                torch.nn.utils.clip_grads_with_norm_(params, clip, total, foreach=True)
        return float(total)

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        self.model.eval()
        n = len(self.val_dataset)
        share = -(-n // self.dist.dp_size)
        mine = list(range(self.dist.dp_rank * share, min(n, (self.dist.dp_rank + 1) * share)))
        ce, tokens = 0.0, 0
        bs = self.cfg.validation.batch_size
        # every rank runs the same number of forwards (FSDP all-gathers are collective)
        n_batches = -(-share // bs)
        for b in range(n_batches):
            idx = mine[b * bs:(b + 1) * bs] or [0]
            mb = self._collate([self.val_dataset[i] for i in idx]).to(self.dist.device)
            keep = label_positions(mb.labels)
            # no gradients here: a blank vision call on a text-only batch costs less than agreeing on one
            out, _ = forward_micro_batch(self.model, mb, True, use_cache=False, logits_to_keep=keep)
            s, k = kept_ce_sum(out.logits, mb.labels, keep)
            if mine[b * bs:(b + 1) * bs]:
                ce, tokens = ce + float(s), tokens + k
        total = float(all_reduce_sum(tokens, self.dist.device)) / self.dist.tp
        return {"loss": float(all_reduce_sum(ce, self.dist.device)) / self.dist.tp / max(total, 1.0),
                "label_tokens": int(total)}

    # ------------------------------------------------------------------ the loop
    def loader(self, pos: DataPosition):
        from torch.utils.data import DataLoader

        steps = list(self.sampler.batches(pos))
        tp = self.cfg.train.train_policy
        kwargs: dict[str, Any] = {}
        if tp.dataloader_num_workers > 0:
            kwargs = {"num_workers": tp.dataloader_num_workers, "persistent_workers": False,
                      "prefetch_factor": tp.dataloader_prefetch_factor or 2}
        dl = DataLoader(self.dataset, batch_sampler=[s[0] for s in steps], collate_fn=list, **kwargs)
        return zip(dl, [s[1] for s in steps])

    def fit(self) -> dict[str, Any]:
        cfg = self.cfg
        ck = cfg.train.ckpt
        self._log(f"training {self.trainable:,}/{self.total_params:,} parameters for {self.total_steps} steps "
                  f"on {self.dist.world_size} process(es), {len(self.dataset)} rows")
        last: dict[str, float] = {}
        while self.step < self.total_steps and self.pos.epoch < cfg.train.epoch:
            for samples, next_pos in self.loader(self.pos):
                values = self.train_step(samples)
                self.step += 1
                self.pos = next_pos
                if values.get("skipped"):
                    self._skip_nonfinite(values)  # no update was made: nothing new to log, check or save
                else:
                    last = values
                    self.metrics.log(self.step, {**last, "total_steps": self.total_steps})
                    if cfg.validation.enable and len(self.val_dataset) and self.step % cfg.validation.freq == 0:
                        self.metrics.log(self.step, self.validate(), kind="val")
                    if ck.enable_checkpoint and self.step % ck.save_freq == 0 and self.step < self.total_steps:
                        self.save()
                        if ck.export_safetensors:
                            self.export(f"step_{self.step}")
                self.stopped = self.exit_request.agreed()
                if self.stopped or self.step >= self.total_steps:
                    break
            if self.stopped or self.step >= self.total_steps:
                break
            self.pos = DataPosition(self.pos.epoch + 1, 0)
        if self.stopped:
            if cfg.train.save_ckpt_at_exit and ck.enable_checkpoint:
                self.save(blocking=True)
            self.ckpt.wait()
            self._log(f"stopped by signal {self.exit_request.signum} at step {self.step}")
            return {"step": self.step, "stopped": True}
        if ck.enable_checkpoint:
            self.save(blocking=True)
        self.ckpt.wait()
        final = self.export("final") if ck.export_safetensors else None
        if cfg.validation.enable and len(self.val_dataset) and self.step % cfg.validation.freq:
            self.metrics.log(self.step, self.validate(), kind="val")  # the final weights, if not just done
        self.metrics.close()
        return {"step": self.step, "stopped": False, "final": str(final) if final else None,
                "resumed_from": self.resumed_from, "resume_note": self.resume_note,
                "skipped_steps": self.skipped_steps, **last}

    def _skip_nonfinite(self, values: dict[str, Any]) -> None:
        """A step whose loss or gradient norm is not finite made no update; stop the run (naming the step)
        once more of them than train.skip_nonfinite_steps allows. Nothing is saved or exported here, so
        a diverged model never reaches a checkpoint or safetensors."""
        self.skipped_steps.append(self.step)
        allowed = self.cfg.train.skip_nonfinite_steps
        loss, norm = values["loss"], values["grad_norm"]
        self.metrics.log(self.step, {"loss": loss, "grad_norm": norm, "skipped": 1}, kind="skipped")
        if len(self.skipped_steps) <= allowed:
            self._log(f"step {self.step}: loss {loss} / grad norm {norm} not finite: update skipped "
                      f"({len(self.skipped_steps)} of train.skip_nonfinite_steps = {allowed})")
            return
        from cosmos_train.checkpoint_paths import find_latest

        last_good = find_latest(self.run_dir)
        raise TrainingDiverged(
            f"step {self.step}: the loss is {loss} and the gradient norm {norm}, not finite: training diverged "
            f"(steps skipped so far: {self.skipped_steps}). Lower train.optm_lr (now {self.cfg.train.optm_lr:g}), "
            f"keep train.optm_grad_norm_clip > 0, look at this step's rows, or let train.skip_nonfinite_steps "
            f"skip a few such steps. Nothing was exported from the diverged weights; the last good checkpoint "
            f"is {last_good or 'none (no checkpoint was saved yet)'}."
        )

    def _log(self, msg: str) -> None:
        if self.dist.is_main:
            print(f"[sft] {msg}", flush=True)


def _pad_token_id(model: nn.Module) -> int:
    """Padding only fills positions the attention mask hides and the labels ignore; any id works."""
    text = model.config.get_text_config()
    pad = getattr(text, "pad_token_id", None)
    return int(pad if pad is not None else 0)


def _peak_memory_gb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    # ru_maxrss is KiB on Linux: the process's peak resident memory
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="SFT trainer (run under torchrun).")
    ap.add_argument("--config", type=Path, required=True, help="The run folder's resolved config.toml.")
    ap.add_argument("--dataset-script", default=None, help="A user's dataset script (see examples/).")
    ap.add_argument("--resume-own-run", action="store_true",
                    help="Resume from this run folder's newest checkpoint if it has one (used by retries).")
    args = ap.parse_args(argv)
    run_dir = args.config.resolve().parent
    trainer: SFTTrainer | None = None
    dist: DistInfo | None = None
    try:
        cfg = load_config(args.config, env={})  # the resolved file is the whole truth: no env overrides
        dist = init_distributed(cfg.policy.parallelism)
        seed_everything(cfg.train.seed, dist.rank, cfg.train.deterministic)
        trainer = SFTTrainer(cfg, run_dir, dist, args.dataset_script)
        trainer.maybe_resume(args.resume_own_run)
        result = trainer.fit()
        if dist.is_main:
            (run_dir / "result.json").write_text(json.dumps(result, indent=2))
    except Exception as e:
        # A user error: its paragraph and exit 2 (RUN/error.json tells the launching task); a crash
        # re-raises with its traceback. No barrier: the other ranks may be anywhere.
        teardown(barrier=False)
        code = report_rank_failure(e, run_dir, step=trainer.step if trainer else None,
                                   rank=dist.rank if dist else 0)
        if code is None:
            raise
        return code
    teardown()
    return 143 if result.get("stopped") else 0


if __name__ == "__main__":
    sys.exit(main())
