"""Process group and device mesh from [policy.parallelism]: gloo on CPU, nccl on GPU.

Runs the same under `torchrun --nproc_per_node=N` and as a plain single process (a one-rank group
is still created so torch.distributed.checkpoint and FSDP2 code paths are identical).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule

from cosmos_train.config import ParallelismConfig
from cosmos_train.context_parallel import NO_CP, CpGroup
from cosmos_train.net import free_port
from cosmos_train.process_tree import TORCHRUN_STOP_S, watch_parent


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
    cp: int = 1  # context-parallel ranks: the ranks of one CP group hold slices of the same sequences

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def dp_size(self) -> int:
        """Data-parallel ranks: the ranks of one CP or TP group share data, so count once."""
        return self.dp_replicate * self.dp_shard

    @property
    def dp_rank(self) -> int:
        """This rank's index among data-parallel ranks (ranks of one CP x TP group share data)."""
        return self.rank // (self.tp * self.cp)

    @property
    def dp_mesh(self) -> DeviceMesh:
        """The FSDP mesh: (dp_replicate,) dp_shard, with the CP ranks folded into the shard dim (dp_shard_cp,
        torchtitan's): parameters are sharded over the CP ranks too, and their gradients reduced over them."""
        shard = "dp_shard_cp" if self.cp > 1 else "dp_shard"
        if self.dp_replicate > 1:
            return self.mesh["dp_replicate", shard]
        return self.mesh[shard]

    @functools.cached_property
    def cp_group(self) -> CpGroup:
        """This rank's context-parallel group (NO_CP at cp = 1)."""
        if self.cp == 1:
            return NO_CP
        cp_mesh = self.mesh["cp"]
        return CpGroup(cp_mesh.get_group(), self.cp, cp_mesh.get_local_rank())

    @property
    def tp_mesh(self) -> DeviceMesh | None:
        return self.mesh["tp"] if self.tp > 1 else None


def init_distributed(par: ParallelismConfig, timeout_s: float | None = None) -> DistInfo:
    """Join (or create) the process group and build the (dp_replicate, dp_shard, cp, tp) mesh (row-major: the
    ranks of a TP group, then of a CP group, are adjacent). timeout_s: how long a collective waits for its peers
    before it raises (`launch.collective_timeout_s`; None: torch's default, 10 min for NCCL and 30 for gloo): a peer
    whose host vanished without closing its connections is noticed only this way."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        # Under torchrun each rank runs in a session of its own: if the launcher dies (SIGKILL), stop
        # instead of hanging on as an orphan, with the time torchrun itself gives a stop checkpoint.
        watch_parent(grace_s=TORCHRUN_STOP_S)
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
        if timeout_s is not None:
            # torch's default for every group not told otherwise: the default group and every one made after it, the
            # mesh's sub-groups (init_device_mesh takes no timeout) and the gloo group of checkpoints and the stop
            # agreement (checkpoint.cpu_group), which would otherwise get 30 min (gloo): a peer lost during a save
            # would hang the survivors that long
            c10d.default_pg_timeout = c10d.default_pg_nccl_timeout = timedelta(seconds=timeout_s)
        dist.init_process_group("nccl" if use_cuda else "gloo", rank=rank, world_size=world)
    par.check_world_size(world)
    shard = par.resolved_shard(world)
    mesh = init_device_mesh(
        device.type,
        (par.dp_replicate_size, shard, par.cp_size, par.tp_size),
        mesh_dim_names=("dp_replicate", "dp_shard", "cp", "tp"),
    )
    if par.cp_size > 1:
        mesh["dp_shard", "cp"]._flatten("dp_shard_cp")  # collective: every rank, once; dp_mesh slices it
    return DistInfo(rank, world, local_rank, device, mesh, par.dp_replicate_size, shard, par.tp_size, par.cp_size)


def set_data_parallel_average(module: torch.nn.Module, dist_info: DistInfo) -> None:
    """Make FSDP2 average gradients over the data-parallel ranks only (dp_size), not over every rank of its mesh.

    With context parallel the FSDP mesh also spans the CP ranks, and each CP rank's gradient is its tokens'
    share of its sequences' gradient: the shares must be summed, not averaged. Call once after `fully_shard`, on
    the root (every FSDP module under it is set); a no-op at cp = 1 (FSDP's own average is then already over the
    data-parallel ranks). The division is done after a SUM reduction (gloo has no PREMUL_SUM).
    """
    if dist_info.cp == 1:
        return
    for m in module.modules():
        if not isinstance(m, FSDPModule):
            continue
        if hasattr(m, "set_force_sum_reduction_for_comms"):  # newer torch (2.13 here)
            m.set_gradient_divide_factor(float(dist_info.dp_size))
            m.set_force_sum_reduction_for_comms(True)
        else:  # older torch (pyproject allows >= 2.6): the divide factor's older name
            m.set_reduce_scatter_divide_factor(float(dist_info.dp_size))


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
