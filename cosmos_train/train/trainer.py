"""The vision-language trainers' common part: the policy on the mesh, its optimizer and schedule over the
`[train]` settings, the sampler of the steps' rows and the run's length (`init_steps`), the data position
checkpoints carry, safetensors exports, and the non-finite step rule.

`SFTTrainer` (train/sft.py) and `GRPOTrainer` (train/grpo.py) subclass `Trainer`; each adds its data, its step and
what its checkpoints carry beyond the step and data position (`checkpoint_extra` / `restore_extra`). The run around
the steps (resume, saves, agreed stopping, the loop, `run_main`) is train/loop.py's `BaseTrainer`, which the
world-model trainer shares.
"""

from __future__ import annotations

import argparse
import resource
from abc import abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import torch
from torch import nn
from transformers import PreTrainedConfig

from cosmos_train.checkpoint_paths import find_latest
from cosmos_train.config import Config, load_config
from cosmos_train.distributed import DistInfo
from cosmos_train.errors import ConfigError, DataError, TrainingDiverged
from cosmos_train.models.hf_folder import export_safetensors
from cosmos_train.models.load import load_model, load_processor, resolve_attention
from cosmos_train.models.lora import apply_lora
from cosmos_train.models.parallelize import compute_dtype, parallelize
from cosmos_train.train.batching import attention_of
from cosmos_train.train.flops import FlopCounter, peak_flops
from cosmos_train.train.loop import BaseTrainer, LoopSettings
from cosmos_train.train.optim import apply_freeze_patterns, build_optimizer, build_scheduler
from cosmos_train.train.packed_attention import use_packed_attention
from cosmos_train.train.sampler import DataPosition, GlobalBatchSampler


def pad_token_id(model: nn.Module) -> int:
    """Padding only fills positions the attention mask hides and the labels ignore; any id works."""
    # an HF model's config (nn.Module's attribute access is typed Tensor | Module)
    text = cast(PreTrainedConfig, model.config).get_text_config()
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
    # the weights the optimizer updates are held in train.master_dtype (compute dtype: FSDP's param_dtype)
    master = torch.bfloat16 if cfg.train.master_dtype == "bfloat16" else torch.float32
    attention = resolve_attention(
        cfg.policy.attn_implementation, dist.device, compute_dtype(cfg, dist.device), cfg.policy_type
    )
    model = load_model(cfg.policy.model_name_or_path, dtype=master, device="cpu", attn_implementation=attention)
    if trainable and cfg.policy.lora is not None:  # adapters go in before sharding: FSDP2 shards them per block
        n_trainable, total = apply_lora(model, cfg.policy.lora)
    elif trainable:
        n_trainable, total = apply_freeze_patterns(model, cfg.policy)
    else:
        model.requires_grad_(False)
        n_trainable, total = 0, sum(p.numel() for p in model.parameters())
    if cfg.train.sequence_packing:  # packed rows attend per sample from their bounds, without a dense mask
        use_packed_attention(model)
    # transformers wraps PreTrainedModel.to in functools.wraps, which typeshed types as an unbound function
    model.to(dist.device)  # type: ignore[arg-type]
    model = parallelize(model, dist, cfg)
    if not trainable:
        model.eval()
    return model, n_trainable, total


class Trainer(BaseTrainer[Config]):
    """Subclasses set `name`, build their data, call `init_steps(rows, global_batch, ...)`, and give the loop their
    `batches` and `train_step`."""

    def __init__(self, cfg: Config, run_dir: Path, dist: DistInfo, dataset_script: str | None = None):
        self.dataset_script = dataset_script  # a user's dataset script (rows, rewards), if any
        self.model_dir = Path(cfg.policy.model_name_or_path)
        self.processor = load_processor(cfg.policy.model_name_or_path)
        model, self.trainable_params, self.total_params = load_policy(cfg, dist)
        super().__init__(cfg, run_dir, dist, model, build_optimizer(model, cfg.train, dist.device))
        self.flop_counter = FlopCounter.of(self.model)
        self.peak_flops = peak_flops(dist.device)
        self.pad_id = pad_token_id(self.model)
        self.pos = DataPosition()

    @property
    def ranks_sharing_rows(self) -> int:
        """How many ranks hold the same rows (one TP x CP group: tp x cp): all-reduced sums and counts of rows
        divide by it."""
        return self.dist.tp * self.dist.cp

    # ------------------------------------------------------------------ the config, for the shared loop
    @classmethod
    def loop_settings(cls, cfg: Config) -> LoopSettings:
        t = cfg.train
        return LoopSettings(
            seed=t.seed,
            parallelism=cfg.policy.parallelism,
            ckpt=t.ckpt,
            resume=t.resume,
            resume_key="train.resume",
            output_dir=t.output_dir,
            export_final=t.ckpt.export_safetensors,
            export_each_save=t.ckpt.export_safetensors,
            save_at_exit=t.save_ckpt_at_exit,
            validation_freq=cfg.validation.freq,
            grad_clip=t.optm_grad_norm_clip,
            deterministic=t.deterministic,
            collective_timeout_s=cfg.launch.collective_timeout_s,
        )

    @classmethod
    def load_job_config(cls, path: Path) -> Config:
        # the resolved file is the whole truth: no env overrides; load_config's validate() refuses what the
        # trainers do not implement before the process group starts (its mesh has no cp / pp axis)
        return load_config(path, env={})

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--dataset-script", default=None, help="A user's dataset script (see examples/).")

    @classmethod
    def from_args(cls, cfg: Config, run_dir: Path, dist: DistInfo, args: argparse.Namespace) -> Trainer:
        return cls(cfg, run_dir, dist, args.dataset_script)

    def init_steps(
        self,
        rows: int,
        global_batch: int,
        *,
        drop_last: bool,
        indivisible: str,
        no_step: str,
        ticks_per_step: int = 1,
    ) -> None:
        """The sampler of `global_batch` of the `rows` a step, shared out over the data-parallel ranks (the
        train_policy's dataloader_shuffle / dataloader_seed), the run's length (epochs of it, at most
        train.max_num_steps) and its learning-rate schedule. `indivisible`: the ConfigError's words when the ranks
        cannot take equal shares of the batch; `no_step`: the DataError's when the rows make no step.
        ticks_per_step: the schedule's ticks a step, cosmos-rl's steps in one of ours (GRPO: several when a group
        is more than train_batch_per_replica completions); it never counts optimizer updates."""
        dist, t = self.dist, self.cfg.train
        if global_batch % dist.dp_size:
            raise ConfigError([indivisible])
        self.sampler = GlobalBatchSampler(
            rows,
            global_batch,
            dist.dp_size,
            dist.dp_rank,
            shuffle=t.train_policy.dataloader_shuffle,
            seed=t.train_policy.dataloader_seed,
            drop_last=drop_last,
        )
        per_epoch = self.sampler.steps_per_epoch()
        if per_epoch == 0:
            raise DataError(no_step)
        total_steps = per_epoch * t.epoch
        if t.max_num_steps is not None:
            total_steps = min(total_steps, t.max_num_steps)
        self.total_steps = total_steps
        self.scheduler = build_scheduler(self.optimizer, t, total_steps * ticks_per_step)

    # ------------------------------------------------------------------ the data position checkpoints carry
    def checkpoint_extra(self) -> dict[str, Any]:
        """Beyond the step: the data position (subclasses add)."""
        return {**super().checkpoint_extra(), "epoch": self.pos.epoch, "consumed": self.pos.consumed}

    def restore_extra(self, extra: dict[str, Any]) -> None:
        super().restore_extra(extra)
        self.pos = DataPosition(int(extra["epoch"]), int(extra["consumed"]))

    def position(self) -> str:
        return f"{super().position()} (epoch {self.pos.epoch}, sample {self.pos.consumed})"

    def export(self, name: str) -> Path | None:
        """safetensors/<name> in the Hugging Face layout (a collective: every rank calls it)."""
        out = self.run_dir / "safetensors" / name
        path = export_safetensors(self.model, out, self.model_dir)
        if self.dist.is_main:
            self.log(f"Exported safetensors to {out}")
        return path

    # ------------------------------------------------------------------ the steps
    def describe(self) -> str:
        head = (
            f", LM head fused with the loss in chunks of {self.cfg.train.fused_linear_ce_chunk}"
            if self.cfg.train.fused_linear_ce
            else ""
        )
        return (
            f"training {self.trainable_params:,}/{self.total_params:,} parameters for {self.total_steps} steps "
            f"(attention: {attention_of(self.model)}{head})"
        )

    @abstractmethod
    def batches(self, pos: DataPosition) -> Iterator[tuple[Any, DataPosition]]:
        """(this rank's batch, the data position after it) from `pos` to the epoch's end."""

    def step_inputs(self) -> Iterator[tuple[Any, DataPosition]]:
        """Epoch after epoch (train.epoch of them), each from the resumed position."""
        while self.pos.epoch < self.cfg.train.epoch:
            yield from self.batches(self.pos)
            self.pos = DataPosition(self.pos.epoch + 1, 0)

    def advance(self, after: DataPosition) -> None:
        self.pos = after

    def flop_rates(self, flops: float, step_time: float) -> dict[str, float]:
        """Model TFLOP/s per device of a step of `flops` (all ranks), and MFU where the peak is known."""
        per_device = flops / step_time / self.dist.world_size
        rates = {"tflops_per_device": per_device / 1e12}
        if self.peak_flops:
            rates["mfu"] = per_device / self.peak_flops
        return rates

    def skip_nonfinite(self, values: dict[str, Any]) -> None:
        """A step whose loss or gradient norm is not finite made no update; stop the run (naming the step)
        once more of them than train.skip_nonfinite_steps allows. Nothing is saved or exported here, so
        a diverged model never reaches a checkpoint or safetensors."""
        self.skipped_steps.append(self.step)
        allowed = self.cfg.train.skip_nonfinite_steps
        loss, norm = values["loss"], values["grad_norm"]
        self.metrics.log(self.step, {"loss": loss, "grad_norm": norm, "skipped": 1}, kind="skipped")
        if len(self.skipped_steps) <= allowed:
            self.log(
                f"step {self.step}: loss {loss} / grad norm {norm} not finite: update skipped "
                f"({len(self.skipped_steps)} of train.skip_nonfinite_steps = {allowed})"
            )
            return
        last_good = find_latest(self.run_dir)
        raise TrainingDiverged(
            f"step {self.step}: the loss is {loss} and the gradient norm {norm}, not finite: training diverged "
            f"(steps skipped so far: {self.skipped_steps}). Lower train.optm_lr (now {self.cfg.train.optm_lr:g}), "
            f"keep train.optm_grad_norm_clip > 0, look at this step's rows, or let train.skip_nonfinite_steps "
            f"skip a few such steps. Nothing was exported from the diverged weights; the last good checkpoint "
            f"is {last_good or 'none (no checkpoint was saved yet)'}."
        )
