"""Worker for test_checkpoint_dist.py: FSDP2 save / reload / export at 2 ranks on CPU (gloo).

    python -m torch.distributed.run --standalone --nproc_per_node=2 \
        tests/integration/distributed/ckpt_dist_worker.py OUT

Writes under OUT (for the test to compare):
    run/checkpoints/step_2/   the checkpoint (async save, finalized after one more training step)
    reference.pt              full model + optimizer state at step 2 (rank 0)
    rng_expected_rank{R}.pt   draws each rank made right after the save
    loaded.pt                 full model + optimizer state after loading step_2 into a fresh FSDP2 model (rank 0)
    rng_loaded_rank{R}.pt     the same draws after that load
    export/                   export_safetensors of the step-3 model; export_reference.pt its full weights
    qwen_export/              (with a tiny Qwen2.5-VL folder as 2nd argument) export_safetensors of that model,
                              perturbed by `perturb`, FSDP2-sharded per decoder layer / vision block
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

VOCAB, DIM, OUT = 11, 7, 5  # odd sizes: FSDP2 shards them unevenly over 2 ranks


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(DIM, DIM)
        self.norm = nn.LayerNorm(DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.norm(torch.tanh(self.fc(x)))


class Toy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(DIM, OUT)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make(seed: int) -> tuple[nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    torch.manual_seed(seed)
    model = Toy()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return model, opt, sched


def train(model: nn.Module, opt: torch.optim.Optimizer, sched, steps: int) -> None:
    for _ in range(steps):
        ids = torch.randint(0, VOCAB, (4, 3))
        loss = model(ids).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()


def draws() -> dict:
    return {"torch": torch.rand(4), "numpy": torch.from_numpy(np.random.rand(4)), "python": random.random()}


def sharded(seed: int, mesh):
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing
    from torch.distributed.fsdp import fully_shard

    model, _, _ = make(seed)
    # As the trainer does: activation checkpointing, then FSDP2 per block and at the root.
    apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, Block))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return model, opt, sched


def full_state(model: nn.Module, opt: torch.optim.Optimizer) -> dict:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {"model": msd, "optimizer": osd}


def perturb(model: nn.Module, seed: int = 1) -> None:
    """Move every weight deterministically (so an export that copied the base folder could not pass)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.01)


def export_tiny_qwen(tiny: Path, out: Path, mesh) -> None:
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForImageTextToText

    from cosmos_train.models.hf_folder import export_safetensors

    model = AutoModelForImageTextToText.from_pretrained(tiny)
    perturb(model)
    for layer in model.model.language_model.layers:
        fully_shard(layer, mesh=mesh)
    for block in model.model.visual.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    export_safetensors(model, out / "qwen_export", tiny)


def main(out: Path, tiny: Path | None = None) -> None:
    t0 = time.perf_counter()
    from torch.distributed.device_mesh import init_device_mesh

    from cosmos_train.checkpoint import CheckpointManager
    from cosmos_train.config import CheckpointConfig
    from cosmos_train.models.hf_folder import export_safetensors

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model, opt, sched = sharded(seed=0, mesh=mesh)  # same init everywhere (FSDP2 shards it)
    # Then per-rank RNG streams, as data-parallel ranks have.
    torch.manual_seed(1000 + rank)
    np.random.seed(1000 + rank)
    random.seed(1000 + rank)
    train(model, opt, sched, 2)
    mgr = CheckpointManager(out / "run", CheckpointConfig(save_mode="async", max_keep=2), seed=0)
    t = time.perf_counter()
    ckpt = mgr.save(2, model, opt, sched, {"consumed_samples": 16, "epoch": 0})
    t_save = time.perf_counter() - t
    reference = full_state(model, opt)
    if rank == 0:
        torch.save(reference, out / "reference.pt")
    torch.save(draws(), out / f"rng_expected_rank{rank}.pt")
    train(model, opt, sched, 1)  # overlaps the async write
    t = time.perf_counter()
    mgr.wait()
    t_wait = time.perf_counter() - t

    t = time.perf_counter()
    export_safetensors(model, out / "export", out / "base")
    t_export = time.perf_counter() - t
    step3 = full_state(model, opt)
    if rank == 0:
        torch.save(step3["model"], out / "export_reference.pt")

    model2, opt2, sched2 = sharded(seed=123, mesh=mesh)
    t = time.perf_counter()
    extra = mgr.load(ckpt, model2, opt2, sched2)
    t_load = time.perf_counter() - t
    torch.save(draws(), out / f"rng_loaded_rank{rank}.pt")
    loaded = full_state(model2, opt2)
    if rank == 0:
        torch.save(loaded, out / "loaded.pt")
        (out / "extra.json").write_text(json.dumps({"extra": extra, "last_epoch": sched2.last_epoch}))
    if tiny is not None:
        export_tiny_qwen(tiny, out, mesh)
    dist.barrier()
    if rank == 0:
        print(
            f"worker: {time.perf_counter() - t0:.2f}s after imports; save {t_save:.2f}s, wait {t_wait:.2f}s, "
            f"export {t_export:.2f}s, load {t_load:.2f}s",
            flush=True,
        )
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else None)
