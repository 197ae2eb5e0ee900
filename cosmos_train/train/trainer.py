"""What every trainer process does around its steps: the policy on the mesh, its optimizer, resumable
checkpoints, safetensors exports, metrics, agreed stopping on a signal, and the non-finite step rule.

`SFTTrainer` (train/sft.py) and `GRPOTrainer` (train/grpo.py) subclass `Trainer`; each adds its data,
its step and what its checkpoints carry beyond the step (`checkpoint_extra` / `restore_extra`).
"""

from __future__ import annotations

import random
import resource
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from cosmos_train.config import Config, ConfigError, unsupported_settings
from cosmos_train.distributed import DistInfo
from cosmos_train.errors import TrainingDiverged
from cosmos_train.metrics import MetricsLogger
from cosmos_train.signals import install_exit_handlers
from cosmos_train.train.flops import FlopCounter, peak_flops
from cosmos_train.train.optim import apply_freeze_patterns, build_optimizer, build_scheduler
from cosmos_train.train.sampler import DataPosition


def seed_everything(seed: int, rank: int, deterministic: bool) -> None:
    random.seed(seed + rank)
    np.random.seed(seed + rank)
    torch.manual_seed(seed + rank)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)


def pad_token_id(model: nn.Module) -> int:
    """Padding only fills positions the attention mask hides and the labels ignore; any id works."""
    text = model.config.get_text_config()
    pad = getattr(text, "pad_token_id", None)
    return int(pad if pad is not None else 0)


def peak_memory_gb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    # ru_maxrss is KiB on Linux: the process's peak resident memory
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def load_policy(cfg: Config, dist: DistInfo, trainable: bool = True) -> tuple[nn.Module, int, int]:
    """(the model on the mesh, trainable parameter count, total count). trainable=False: a frozen copy
    (GRPO's reference model), sharded the same way, never given gradients."""
    from cosmos_train.models.load import load_model, resolve_attention
    from cosmos_train.models.parallelize import compute_dtype, parallelize

    # the weights the optimizer updates are held in train.master_dtype (compute dtype: FSDP's param_dtype)
    master = torch.bfloat16 if cfg.train.master_dtype == "bfloat16" else torch.float32
    attention = resolve_attention(cfg.policy.attn_implementation, dist.device, compute_dtype(cfg, dist.device),
                                  cfg.policy_type)
    model = load_model(cfg.policy.model_name_or_path, dtype=master, device="cpu", attn_implementation=attention)
    if trainable and cfg.policy.lora is not None:  # adapters go in before sharding: FSDP2 shards them per block
        from cosmos_train.models.lora import apply_lora

        n_trainable, total = apply_lora(model, cfg.policy.lora)
    elif trainable:
        n_trainable, total = apply_freeze_patterns(model, cfg.policy)
    else:
        model.requires_grad_(False)
        n_trainable, total = 0, sum(p.numel() for p in model.parameters())
    if cfg.train.sequence_packing:  # packed rows attend per sample from their bounds, without a dense mask
        from cosmos_train.train.packed_attention import use_packed_attention

        use_packed_attention(model)
    model.to(dist.device)
    model = parallelize(model, dist, cfg)
    if not trainable:
        model.eval()
    return model, n_trainable, total


class Trainer(ABC):
    """Subclasses set `name`, build their data, call `init_schedule(total_steps)`, and give the loop its
    `batches` and `train_step`."""

    name: ClassVar[str] = "train"

    def __init__(self, cfg: Config, run_dir: Path, dist: DistInfo):
        from cosmos_train.checkpoint import CheckpointManager
        from cosmos_train.models.load import load_processor

        self.cfg, self.run_dir, self.dist = cfg, run_dir, dist
        self.model_dir = Path(cfg.policy.model_name_or_path)
        self.processor = load_processor(cfg.policy.model_name_or_path)
        self.model, self.trainable, self.total_params = load_policy(cfg, dist)
        self.flop_counter = FlopCounter.of(self.model)
        self.peak_flops = peak_flops(dist.device)
        self.pad_id = pad_token_id(self.model)
        self.optimizer = build_optimizer(self.model, cfg.train, dist.device)
        self.ckpt = CheckpointManager(run_dir, cfg.train.ckpt, seed=cfg.train.seed)
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

    def init_schedule(self, total_steps: int, schedule_steps: int | None = None) -> None:
        """total_steps: the run's length in trainer steps; schedule_steps: the ticks of the learning-rate schedule
        over the run, cosmos-rl's steps (GRPO: a step here is several when a group is more than
        train_batch_per_replica completions), else total_steps. It never counts optimizer updates."""
        self.total_steps = total_steps
        self.scheduler = build_scheduler(self.optimizer, self.cfg.train, schedule_steps or total_steps)

    # ------------------------------------------------------------------ what a checkpoint carries
    def checkpoint_extra(self) -> dict[str, Any]:
        """Beyond model, optimizer, scheduler and RNG: the step and the data position (subclasses add)."""
        return {"step": self.step, "epoch": self.pos.epoch, "consumed": self.pos.consumed,
                "world_size": self.dist.world_size}

    def restore_extra(self, extra: dict[str, Any]) -> None:
        self.step = int(extra["step"])
        self.pos = DataPosition(int(extra["epoch"]), int(extra["consumed"]))

    # ------------------------------------------------------------------ resume / save / export
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
                self.log(self.resume_note)
        if ckpt is None:
            return
        extra = self.ckpt.load(ckpt, self.model, self.optimizer, self.scheduler)
        self.restore_extra(extra)
        self.resumed_from = str(ckpt)
        # A relaunch after a crash: the failed attempt's metrics past this step are replaced, not repeated.
        self.metrics.drop_after(self.step)
        self.log(f"resumed from {ckpt} at step {self.step} (epoch {self.pos.epoch}, sample {self.pos.consumed})")

    def save(self, blocking: bool = False) -> Path:
        path = self.ckpt.save(self.step, self.model, self.optimizer, self.scheduler, self.checkpoint_extra(),
                              blocking=blocking)
        self.log(f"checkpoint {'saved' if blocking or self.cfg.train.ckpt.save_mode == 'sync' else 'saving'} "
                 f"at {path}")
        return path

    def export(self, name: str) -> Path | None:
        """safetensors/<name> in the Hugging Face layout (a collective: every rank calls it)."""
        from cosmos_train.export import export_safetensors

        out = self.run_dir / "safetensors" / name
        path = export_safetensors(self.model, out, self.model_dir)
        if self.dist.is_main:
            self.log(f"Exported safetensors to {out}")
        return path

    def periodic_save(self) -> None:
        """train.ckpt.save_freq: a checkpoint (and an export) between the start and the last step."""
        ck = self.cfg.train.ckpt
        if ck.enable_checkpoint and self.step % ck.save_freq == 0 and self.step < self.total_steps:
            self.save()
            if ck.export_safetensors:
                self.export(f"step_{self.step}")

    def finish(self) -> Path | None:
        """After the last step: a blocking checkpoint, then safetensors/final (None when exports are off).
        On an agreed stop (signal): the exit checkpoint only."""
        ck = self.cfg.train.ckpt
        if self.stopped:
            if self.cfg.train.save_ckpt_at_exit and ck.enable_checkpoint:
                self.save(blocking=True)
            self.ckpt.wait()
            self.log(f"stopped by signal {self.exit_request.signum} at step {self.step}")
            return None
        if ck.enable_checkpoint:
            self.save(blocking=True)
        self.ckpt.wait()
        return self.export("final") if ck.export_safetensors else None

    # ------------------------------------------------------------------ what a subclass supplies to the loop
    def describe(self) -> str:
        """The line logged before the first step."""
        from cosmos_train.train.batching import attention_of

        head = f", LM head fused with the loss in chunks of {self.cfg.train.fused_linear_ce_chunk}" \
            if self.cfg.train.fused_linear_ce else ""
        return (f"training {self.trainable:,}/{self.total_params:,} parameters for {self.total_steps} steps "
                f"(attention: {attention_of(self.model)}{head})")

    @abstractmethod
    def batches(self, pos: DataPosition) -> Iterator[tuple[Any, DataPosition]]:
        """(this rank's batch, the data position after it) from `pos` to the epoch's end."""

    @abstractmethod
    def train_step(self, batch: Any) -> dict[str, Any]:
        """One step on `batch` (self.step is the number of steps done before it); "skipped": True when
        the update was not applied (a non-finite loss or gradient)."""

    @property
    def validating(self) -> bool:
        return False

    def validate_and_log(self) -> None:
        """Validation on its schedule (validation.freq) and after the last step."""
        return None  # an optional hook

    def before_loop(self) -> None:
        """After resume, before the first step."""
        return None  # an optional hook

    def after_loop(self) -> None:
        """After the last checkpoint and export."""
        return None  # an optional hook

    def result_extra(self) -> dict[str, Any]:
        """What RUN/result.json holds beyond the common keys."""
        return {}

    # ------------------------------------------------------------------ the loop
    def flop_rates(self, flops: float, step_time: float) -> dict[str, float]:
        """Model TFLOP/s per device of a step of `flops` (all ranks), and MFU where the peak is known."""
        per_device = flops / step_time / self.dist.world_size
        rates = {"tflops_per_device": per_device / 1e12}
        if self.peak_flops:
            rates["mfu"] = per_device / self.peak_flops
        return rates

    def fit(self) -> dict[str, Any]:
        cfg = self.cfg
        self.log(self.describe())
        self.before_loop()
        last: dict[str, Any] = {}
        while self.step < self.total_steps and self.pos.epoch < cfg.train.epoch:
            for batch, next_pos in self.batches(self.pos):
                values = self.train_step(batch)
                self.step += 1
                self.pos = next_pos
                if values.pop("skipped", False):
                    self.skip_nonfinite(values)  # no update was made: nothing new to log, check or save
                else:
                    last = values
                    self.metrics.log(self.step, {**values, "total_steps": self.total_steps})
                    if self.validating and self.step % cfg.validation.freq == 0:
                        self.validate_and_log()
                    self.periodic_save()
                self.stopped = self.exit_request.agreed()
                if self.stopped or self.step >= self.total_steps:
                    break
            if self.stopped or self.step >= self.total_steps:
                break
            self.pos = DataPosition(self.pos.epoch + 1, 0)
        if not self.stopped and self.validating and self.step % cfg.validation.freq:
            self.validate_and_log()  # the final weights, if not just done
        final = self.finish()
        self.after_loop()
        if self.stopped:
            return {"step": self.step, "stopped": True}
        self.metrics.close()
        return {"step": self.step, "stopped": False, "final": str(final) if final else None, **self.result_extra(),
                "resumed_from": self.resumed_from, "resume_note": self.resume_note,
                "skipped_steps": self.skipped_steps, **last}

    def skip_nonfinite(self, values: dict[str, Any]) -> None:
        """A step whose loss or gradient norm is not finite made no update; stop the run (naming the step)
        once more of them than train.skip_nonfinite_steps allows. Nothing is saved or exported here, so
        a diverged model never reaches a checkpoint or safetensors."""
        self.skipped_steps.append(self.step)
        allowed = self.cfg.train.skip_nonfinite_steps
        loss, norm = values["loss"], values["grad_norm"]
        self.metrics.log(self.step, {"loss": loss, "grad_norm": norm, "skipped": 1}, kind="skipped")
        if len(self.skipped_steps) <= allowed:
            self.log(f"step {self.step}: loss {loss} / grad norm {norm} not finite: update skipped "
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

    def log(self, msg: str) -> None:
        if self.dist.is_main:
            print(f"[{self.name}] {msg}", flush=True)


def run_main(trainer_cls: type[Trainer], argv: list[str] | None = None) -> int:
    """The process entry point both trainers share: parse --config / --dataset-script / --resume-own-run,
    start the process group, train, write RUN/result.json; a user error is its paragraph in
    RUN/error.json and exit 2, a crash its traceback; 143 when stopped by a signal."""
    import argparse
    import json

    from cosmos_train.config import load_config
    from cosmos_train.distributed import init_distributed, teardown
    from cosmos_train.errors import report_rank_failure

    ap = argparse.ArgumentParser(description=f"{trainer_cls.name.upper()} trainer (run under torchrun).")
    ap.add_argument("--config", type=Path, required=True, help="The run folder's resolved config.toml.")
    ap.add_argument("--dataset-script", default=None, help="A user's dataset script (see examples/).")
    ap.add_argument("--resume-own-run", action="store_true",
                    help="Resume from this run folder's newest checkpoint if it has one (used by retries).")
    args = ap.parse_args(argv)
    run_dir = args.config.resolve().parent
    trainer: Trainer | None = None
    dist: DistInfo | None = None
    try:
        cfg = load_config(args.config, env={})  # the resolved file is the whole truth: no env overrides
        if problems := unsupported_settings(cfg):  # before the process group: its mesh has no cp / pp axis
            raise ConfigError(problems, str(args.config))
        dist = init_distributed(cfg.policy.parallelism)
        seed_everything(cfg.train.seed, dist.rank, cfg.train.deterministic)
        trainer = trainer_cls(cfg, run_dir, dist, args.dataset_script)  # type: ignore[call-arg]
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
