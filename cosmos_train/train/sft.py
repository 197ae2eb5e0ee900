"""The SFT trainer: one process per rank, FSDP2 over the device mesh, read top to bottom.

    python -m torch.distributed.run --nproc_per_node=2 -m cosmos_train.train.sft --config RUN/config.toml

RUN/config.toml is the resolved config the flow wrote into the run folder; everything this process
writes (metrics.jsonl, checkpoints/, safetensors/) goes next to it. Rows come from RUN/manifest.jsonl
when the data-prep step wrote one (validated rows), else from the dataset sources directly.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

from cosmos_train.config import Config
from cosmos_train.distributed import DistInfo, all_reduce_sum
from cosmos_train.errors import DataError
from cosmos_train.train.batching import collate_packed, collate_padded, split_micro_batches
from cosmos_train.train.cp_language import local_kept
from cosmos_train.train.data import SFTDataset, load_train_samples
from cosmos_train.train.linear_ce import head_weight, linear_ce_sum
from cosmos_train.train.loop import run_main
from cosmos_train.train.sampler import DataPosition
from cosmos_train.train.sft_loss import kept_ce_sum, label_positions, sft_loss_scales
from cosmos_train.train.step import apply_update, backward_micro_batches, forward_logits
from cosmos_train.train.trainer import Trainer, peak_memory_gb
from cosmos_train.train.vision_forward import forward_micro_batch


class SFTTrainer(Trainer):
    name = "sft"

    def __init__(self, cfg: Config, run_dir: Path, dist: DistInfo, dataset_script: str | None = None):
        super().__init__(cfg, run_dir, dist, dataset_script)
        t, policy_cfg = cfg.train, cfg.train.train_policy
        rows = load_train_samples(cfg, run_dir, "train", dataset_script)
        self.dataset = SFTDataset(
            rows,
            self.processor,
            cfg.policy.model_max_length,
            policy_cfg.overlength,
            clip_cache=policy_cfg.dataset.cache_dir,
        )
        val_rows = load_train_samples(cfg, run_dir, "val", dataset_script) if cfg.validation.enable else []
        val_cache = (cfg.validation.dataset or policy_cfg.dataset).cache_dir
        self.val_dataset = SFTDataset(
            val_rows, self.processor, cfg.policy.model_max_length, policy_cfg.overlength, clip_cache=val_cache
        )
        # A replica is one model copy: its dp_shard ranks split the replica's batch. The global batch is
        # thus independent of dp_shard, so a run resumed on another number of GPUs sees the same batches.
        global_batch = t.train_batch_per_replica * dist.dp_replicate
        self.init_steps(
            len(self.dataset),
            global_batch,
            drop_last=policy_cfg.dataloader_drop_last,
            indivisible=f"train.train_batch_per_replica ({t.train_batch_per_replica}) must be divisible by "
            f"policy.parallelism.dp_shard_size ({dist.dp_shard}): each shard rank takes an equal part",
            # training nothing would export the untrained model as `final`
            no_step=f"{len(self.dataset)} training row(s) make no full global batch of {global_batch} "
            f"(train.train_batch_per_replica x dp_replicate) with train.train_policy.dataloader_drop_last = "
            "true: add rows, lower train.train_batch_per_replica, or set dataloader_drop_last = false",
        )

    # ------------------------------------------------------------------ one optimizer step
    def _collate(self, samples: list[Any]):
        if self.cfg.train.sequence_packing:
            return collate_packed(samples)
        return collate_padded(samples, self.pad_id)

    def train_step(self, samples: list[Any]) -> dict[str, float]:
        t0 = time.perf_counter()
        self.model.train()
        policy_cfg = self.cfg.train.train_policy
        micro = [self._collate(m) for m in split_micro_batches(samples, policy_cfg.micro_batch)]
        scales, global_tokens = sft_loss_scales(
            [mb.n_label_tokens for mb in micro],
            self.dist,
            policy_cfg.loss_denominator,
            policy_cfg.balance_dp_token is not False,  # unset: true, cosmos-rl's SFT default
        )
        if global_tokens == 0:
            raise DataError(
                f"step {self.step}: the global batch has no assistant tokens to learn from (check that "
                "the rows have assistant turns, and train.train_policy.overlength)"
            )
        shares: list[float] = []

        def share(i: int, ce_sum: torch.Tensor) -> torch.Tensor:
            # micro-batch i's part of the step's loss (sft_loss.sft_loss_scales); with context parallel each rank's
            # sum is over its slice's tokens, and FSDP sums the CP ranks' shares
            part = ce_sum * scales[i]
            shares.append(float(part.detach()))
            return part

        if self.cfg.train.fused_linear_ce:
            backward_micro_batches(
                self.model,
                micro,
                self.dist,
                head_loss_fn=lambda i, mb, hidden, lm_head, keep: share(
                    i, self._head_ce_sum(mb, hidden, lm_head, keep)[0]
                ),
            )
        else:
            backward_micro_batches(
                self.model,
                micro,
                self.dist,
                loss_fn=lambda i, mb, logits, keep: share(i, kept_ce_sum(logits, mb.labels, keep)[0]),
            )
        grad_norm = self.clip_gradients()
        # the loss whose gradient FSDP's average makes: CP ranks' slices add up, TP ranks hold the same sums
        loss = float(all_reduce_sum(sum(shares), self.dist.device)) / self.dist.tp / self.dist.dp_size
        if not apply_update(self.optimizer, self.scheduler, math.isfinite(loss) and math.isfinite(grad_norm)):
            return {"loss": loss, "grad_norm": grad_norm, "skipped": True}
        step_time = time.perf_counter() - t0
        local = [sum(mb.n_tokens for mb in micro), self.flop_counter.step_flops(micro)]
        tokens, flops = (all_reduce_sum(torch.tensor(local), self.dist.device) / self.ranks_sharing_rows).tolist()
        return {
            "loss": loss,
            "lr": self.scheduler.get_last_lr()[0],
            "grad_norm": grad_norm,
            "tokens_per_s": tokens / step_time,
            "samples_per_s": self.sampler.global_batch / step_time,
            "step_time": step_time,
            "peak_mem_gb": peak_memory_gb(self.dist.device),
            "label_tokens": int(global_tokens),
            "epoch": self.pos.epoch,
            **self.flop_rates(flops, step_time),
        }

    def _head_ce_sum(
        self, mb: Any, hidden: torch.Tensor, lm_head: nn.Module, keep: torch.Tensor
    ) -> tuple[torch.Tensor, int]:
        """kept_ce_sum with the LM head fused into the loss: `hidden` [B, K, H] at positions `keep`."""
        targets = mb.labels[:, keep + 1]
        return linear_ce_sum(
            hidden.reshape(-1, hidden.shape[-1]),
            head_weight(lm_head),
            targets.reshape(-1),
            self.cfg.train.fused_linear_ce_chunk,
        )

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
            idx = mine[b * bs : (b + 1) * bs] or [0]
            mb = self._collate([self.val_dataset[i] for i in idx]).to(self.dist.device)
            cp = self.dist.cp_group
            # no gradients here: a blank vision call on a text-only batch costs less than agreeing on one
            if self.cfg.train.fused_linear_ce:  # the loss the training steps compute, the same way
                # with context parallel: the label positions of this rank's slice (its sums add up over the group)
                kept, at = local_kept(label_positions(mb.labels), mb.input_ids.shape[1], cp)

                def head(
                    hidden: torch.Tensor,
                    lm_head: nn.Module,
                    mb: Any = mb,
                    kept: torch.Tensor = kept,
                    at: torch.Tensor = at,
                ) -> tuple[torch.Tensor, int]:
                    return self._head_ce_sum(mb, hidden[:, at], lm_head, kept)

                (s, k), _ = forward_micro_batch(self.model, mb, True, use_cache=False, head=head, cp=cp)
            else:
                logits, kept, _ = forward_logits(self.model, mb, True, cp)
                s, k = kept_ce_sum(logits, mb.labels, kept)
            if mine[b * bs : (b + 1) * bs]:
                ce, tokens = ce + float(s), tokens + k
        total = float(all_reduce_sum(tokens, self.dist.device)) / self.dist.tp
        return {
            "loss": float(all_reduce_sum(ce, self.dist.device)) / self.dist.tp / max(total, 1.0),
            "label_tokens": int(total),
        }

    # ------------------------------------------------------------------ the loop
    def batches(self, pos: DataPosition) -> Iterator[tuple[list[Any], DataPosition]]:
        steps = list(self.sampler.batches(pos))
        policy_cfg = self.cfg.train.train_policy
        kwargs: dict[str, Any] = {}
        if policy_cfg.dataloader_num_workers > 0:
            kwargs = {
                "num_workers": policy_cfg.dataloader_num_workers,
                "persistent_workers": False,
                "prefetch_factor": policy_cfg.dataloader_prefetch_factor or 2,
            }
        dl = DataLoader(self.dataset, batch_sampler=[s[0] for s in steps], collate_fn=list, **kwargs)
        return zip(dl, [s[1] for s in steps])

    def describe(self) -> str:
        return f"{super().describe()} on {self.dist.world_size} process(es), {len(self.dataset)} rows"

    @property
    def validating(self) -> bool:
        return self.cfg.validation.enable and len(self.val_dataset) > 0

    def validate_and_log(self) -> None:
        self.metrics.log(self.step, self.validate(), kind="val")

    def before_loop(self) -> None:
        if self.cfg.validation.val_before_train and self.validating and self.step == 0:
            self.validate_and_log()  # the starting weights' loss, logged at step 0


def main(argv: list[str] | None = None) -> int:
    return run_main(SFTTrainer, argv)


if __name__ == "__main__":
    sys.exit(main())
