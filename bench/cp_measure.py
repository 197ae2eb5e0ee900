"""The per-rank measurement both context-parallel memory benches share (bench/cp_memory.py: the DiT;
bench/cp_memory_vlm.py: the VLM's language model): one process per rank of a CP group, each timing one forward +
backward and counting the memory it takes.

- saved activations: the bytes autograd keeps for the backward during the forward (every tensor given to
  `torch.autograd.graph.saved_tensors_hooks`, counted once per storage, the weights left out): the activation
  memory that grows with the sequence and that context parallel divides; the CPU allocator has no peak counter,
  so it is counted where it is made;
- peak RSS growth (CPU): the process's peak resident memory (`ru_maxrss`) over its resident memory when the
  measurement starts (transient buffers, the all-to-alls, the weights' gradients included);
- CUDA max allocated (GPU ranks): `torch.cuda.max_memory_allocated` over what was allocated at the start.
Each bench reports the largest value over its ranks (`spawn_ranks`).
"""

from __future__ import annotations

import json
import os
import resource
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

from cosmos_train.context_parallel import NO_CP, CpGroup
from cosmos_train.net import free_port

MIB = 1 << 20


def join_group(rank: int, cp: int, port: int, threads: int) -> torch.device:
    """This process as rank `rank` of a `cp`-process group (nccl with a GPU per rank, else gloo); its device."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(threads)
    cuda = torch.cuda.device_count() >= cp
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=cp)
    return device


def cp_group(rank: int, cp: int) -> CpGroup:
    """The whole world as one CP group (none at cp = 1)."""
    return CpGroup(dist.group.WORLD, cp, rank) if cp > 1 else NO_CP


class RankMeter:
    """One rank's measurement: `with meter.saving(): forward`, then the backward, then `meter.result()`."""

    def __init__(self, model: nn.Module, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.seen: set[int] = set()
        self.saved = 0
        dist.barrier()  # every rank starts together, its model and inputs made
        self.rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.cuda0 = 0
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.cuda0 = torch.cuda.memory_allocated()
        self.start = time.perf_counter()

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        ptr = tensor.untyped_storage().data_ptr()
        if ptr not in self.weights and ptr not in self.seen:
            self.seen.add(ptr)
            self.saved += tensor.untyped_storage().nbytes()
        return tensor

    @contextmanager
    def saving(self) -> Iterator[None]:
        """Count what autograd saves for the backward inside this block (the forward)."""
        with torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t):
            yield

    def result(self) -> dict[str, Any]:
        """Seconds since the start (forward + backward), saved bytes, peak RSS and CUDA growth."""
        if self.cuda:
            torch.cuda.synchronize()
        return {
            "saved_bytes": self.saved,
            "rss_growth_bytes": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - self.rss0) * 1024,
            "cuda_peak_bytes": torch.cuda.max_memory_allocated() - self.cuda0 if self.cuda else None,
            "seconds": time.perf_counter() - self.start,
            "device": str(self.device),
        }


def spawn_ranks(
    rank_fn: Callable[..., None], cp: int, args: dict[str, Any], read: Callable[[Path], Any] | None = None
) -> dict[str, Any]:
    """`rank_fn(rank, cp, port, args, out_dir)` on cp processes; each writes out_dir/rank<r>.json (a RankMeter
    result plus its own keys). Returns the largest of each measure over the ranks, rank 0's other keys, and
    `read(out_dir)` as "extra" (what a rank left there besides)."""
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(rank_fn, args=(cp, free_port(), args, out), nprocs=cp, join=True)
        ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(cp)]
        extra = read(Path(out)) if read else None
    cuda = [r["cuda_peak_bytes"] for r in ranks if r["cuda_peak_bytes"] is not None]
    return {
        **ranks[0],
        "cp": cp,
        "saved": max(r["saved_bytes"] for r in ranks),
        "rss": max(r["rss_growth_bytes"] for r in ranks),
        "cuda": max(cuda) if cuda else None,
        "seconds": max(r["seconds"] for r in ranks),
        "extra": extra,
    }


def write_rank(out_dir: str, rank: int, result: dict[str, Any]) -> None:
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps({"rank": rank, **result}))
