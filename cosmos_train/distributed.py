"""Process group and device mesh from [policy.parallelism]: gloo on CPU, nccl on GPU; and the collectives every
rank calls alike, in one place: the trainers' (`all_reduce_sum`, `all_reduce_max`, `any_rank`, `from_group_leader`),
and those the checkpoint manager, the safetensors export, the exit signals and the loop share: this rank and the
world size (0 and 1 without a process group), a gloo group over all ranks for CPU tensors (`cpu_group`), barriers,
agreement on a flag, a number or a string, and `raise_together`: one failure raised on every rank, classified alike,
so no rank walks on into a collective the others left.

Runs the same under `torchrun --nproc_per_node=N` and as a plain single process (a one-rank group
is still created so torch.distributed.checkpoint and FSDP2 code paths are identical).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule

from cosmos_train.config import ParallelismConfig
from cosmos_train.context_parallel import NO_CP, CpGroup
from cosmos_train.errors import error_from_record, user_error_of
from cosmos_train.net import free_port
from cosmos_train.process_tree import TORCHRUN_STOP_S, watch_parent

T = TypeVar("T")


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


def any_rank(flag: bool, device: torch.device) -> bool:
    """Whether `flag` holds on any rank (a collective: every rank calls it with its own)."""
    return bool(all_reduce_sum(float(flag), device) > 0)


def from_group_leader(obj: T, dist_info: DistInfo) -> T:
    """`obj` of this rank's TP x CP group's first rank, on every rank of that group (a collective).

    The ranks of one TP group hold slices of one model, those of one CP group slices of one sequence: what they
    compute on must be the same object, not merely equal in intent (GRPO's rollout: their engines sampled the same
    prompts with the same seed, but kernels need not agree to the bit). Broadcast from the TP leader within each TP
    group, then from the CP leader within each CP group."""
    box: list[Any] = [obj]
    if dist_info.tp_mesh is not None:
        dist.broadcast_object_list(box, group_src=0, group=dist_info.tp_mesh.get_group())
    cp = dist_info.cp_group
    if cp.active:
        dist.broadcast_object_list(box, group_src=0, group=cp.group)
    return box[0]


def teardown(barrier: bool = True) -> None:
    """Leave the process group; `barrier=False` on an error path, where the other ranks may be anywhere."""
    if dist.is_initialized():
        if barrier:
            dist.barrier()
        dist.destroy_process_group()


def dist_on() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if dist_on() else 0


def world_size() -> int:
    return dist.get_world_size() if dist_on() else 1


# (the default group it belongs to, the gloo group): re-created when the default group is re-initialised.
_CPU_GROUP: tuple[Any, Any] | None = None


def cpu_group() -> Any:
    """A gloo group over all ranks for small CPU collectives (barriers, flags, DCP planning).

    Created on first use; every rank must reach the first call at the same point (it is collective).
    A separate group also keeps an async checkpoint's background collectives apart from training's.
    """
    global _CPU_GROUP
    if not dist_on():
        return None
    world = dist.group.WORLD
    if _CPU_GROUP is None or _CPU_GROUP[0] is not world:
        _CPU_GROUP = (world, dist.new_group(backend="gloo"))
    return _CPU_GROUP[1]


def barrier(group: Any = None) -> None:
    if dist_on():
        dist.barrier(group=group)


def all_ok(ok: bool, group: Any = None) -> bool:
    """True when `ok` holds on every rank (so all ranks raise together instead of one hanging)."""
    if not dist_on():
        return ok
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group)
    return bool(flag.item())


def _reduce_int(value: int, op: Any, group: Any) -> int:
    if not dist_on():
        return value
    box = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(box, op=op, group=group)
    return int(box.item())


def agree_max(value: int, group: Any = None) -> int:
    """The largest `value` over all ranks."""
    return _reduce_int(value, dist.ReduceOp.MAX, group)


def agree_sum(value: int, group: Any = None) -> int:
    """The sum of `value` over all ranks."""
    return _reduce_int(value, dist.ReduceOp.SUM, group)


def broadcast_str(value: str, group: Any = None) -> str:
    """Rank 0's `value` on every rank."""
    if not dist_on():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0, group=group)
    return box[0]


def raise_together(error: BaseException | None, what: str, group: Any = None) -> None:
    """Collective: return when `what` went well on every rank (`error` None everywhere); otherwise raise on every
    rank, classified alike. When a failed rank's error is a user error (`errors.user_error_of`: a full disk above
    all), every rank raises that one (the lowest such rank's), so RUN/error.json holds it whichever rank writes
    first and the launch is not retried as a crash; otherwise a failed rank raises its own error and the others a
    RuntimeError naming it. `group` must take CPU tensors (`cpu_group()`): when every rank went well this costs one
    small all-reduce, so it can stand on a step's path; the errors are gathered only on the way out."""
    if all_ok(error is None, group):
        return
    mine = None if error is None else _failure_record(error)
    records: list[dict[str, Any] | None] = [mine]
    if dist_on():
        records = [None] * world_size()
        dist.all_gather_object(records, mine, group=group)
    failed = [(r, rec) for r, rec in enumerate(records) if rec is not None]
    if not failed:
        return
    shared = next(((r, rec) for r, rec in failed if rec["kind"] is not None), None)
    if shared is not None:
        own = user_error_of(error) if error is not None and shared[0] == rank() else None
        if own is not None and own is error:
            raise own
        raise (own or error_from_record(shared[1]) or RuntimeError(shared[1]["message"])) from error
    if error is not None:
        raise error
    raise RuntimeError(f"{what} failed on rank {failed[0][0]}: {failed[0][1]['message']}")


def _failure_record(error: BaseException) -> dict[str, Any]:
    user = user_error_of(error)
    return {"kind": user.kind if user else None, "message": str(user) if user else f"{type(error).__name__}: {error}"}
