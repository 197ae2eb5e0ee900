"""Process group and device mesh from [policy.parallelism]: gloo on CPU, nccl on GPU.

Runs the same under `torchrun --nproc_per_node=N` and as a plain single process (a one-rank group
is still created so torch.distributed.checkpoint and FSDP2 code paths are identical).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from cosmos_train.config import ParallelismConfig
from cosmos_train.net import free_port
from cosmos_train.process_tree import watch_parent


@dataclass
class DistInfo:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    mesh: DeviceMesh
    dp_replicate: int
    dp_shard: int
    tp: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def dp_size(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def dp_rank(self) -> int:
        """This rank's index among data-parallel ranks (ranks of one TP group share data)."""
        return self.rank // self.tp

    @property
    def dp_mesh(self) -> DeviceMesh:
        if self.dp_replicate > 1:
            return self.mesh["dp_replicate", "dp_shard"]
        return self.mesh["dp_shard"]

    @property
    def tp_mesh(self) -> DeviceMesh | None:
        return self.mesh["tp"] if self.tp > 1 else None


def init_distributed(par: ParallelismConfig) -> DistInfo:
    """Join (or create) the process group and build the (dp_replicate, dp_shard, tp) mesh."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        # Under torchrun each rank runs in a session of its own: if the launcher dies (SIGKILL), stop
        # instead of hanging on as an orphan.
        watch_parent(grace_s=10.0)
    if "RANK" not in os.environ:  # plain `python -m ...`: a one-process group
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = torch.cuda.is_available()
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group("nccl" if use_cuda else "gloo", rank=rank, world_size=world)
    par.check_world_size(world)
    shard = par.resolved_shard(world)
    mesh = init_device_mesh(
        device.type, (par.dp_replicate_size, shard, par.tp_size), mesh_dim_names=("dp_replicate", "dp_shard", "tp")
    )
    return DistInfo(rank, world, local_rank, device, mesh, par.dp_replicate_size, shard, par.tp_size)


def all_reduce_sum(value: float | int | torch.Tensor, device: torch.device) -> torch.Tensor:
    t = torch.as_tensor(value, dtype=torch.float64, device=device).clone()
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t)
    return t


def all_reduce_max(value: float | int | torch.Tensor, device: torch.device) -> torch.Tensor:
    """The element-wise largest `value` over all ranks (float64, on the CPU)."""
    t = torch.as_tensor(value, dtype=torch.float64, device=device).clone()
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.cpu()


def teardown(barrier: bool = True) -> None:
    """Leave the process group; `barrier=False` on an error path, where the other ranks may be anywhere."""
    if dist.is_initialized():
        if barrier:
            dist.barrier()
        dist.destroy_process_group()
