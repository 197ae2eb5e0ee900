"""Activation memory per rank of the VLM's language model at context-parallel sizes 1, 2, 4 (cp_size).

    OMP_NUM_THREADS=1 .venv/bin/python bench/cp_memory_vlm.py [--sizes 1,2,4] [--tokens 8192] [--size small]

One forward + backward of the SFT loss (cross entropy over every token) of the tiny Qwen2.5-VL (`--size`: "small"
is 6 layers x 8 heads x 256 wide, `cosmos_train.models.tiny`) on one text row of `--tokens` tokens, run as `cp`
processes that form one context-parallel group (gloo on the CPU, nccl with a GPU per rank), each holding 1/cp of
the sequence (cosmos_train/train/cp_language.py, the trainers' `step.forward_logits`). A text row: the vision tower
is not split by context parallel (every rank encodes the whole micro-batch's media), so media would add the same
bytes at every cp. Measured on every rank, the largest reported:
- saved activations: the bytes autograd keeps for the backward during the forward (every tensor given to
  `torch.autograd.graph.saved_tensors_hooks`, counted once per storage, the weights left out): the activation
  memory that grows with the sequence and that context parallel divides;
- peak RSS growth (CPU): the process's peak resident memory over its resident memory after the model and inputs
  were made (transient buffers, the all-to-alls, the weights' gradients included);
- CUDA max allocated (GPU ranks) over what the model and inputs hold.
The loss (summed over the ranks) of every cp is checked against cp = 1's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cosmos_train.context_parallel import CpGroup  # noqa: E402 - after the repository is on the path
from cosmos_train.models.load import load_model  # noqa: E402
from cosmos_train.models.tiny import make_tiny_model  # noqa: E402
from cosmos_train.net import free_port  # noqa: E402
from cosmos_train.train.batching import MicroBatch  # noqa: E402
from cosmos_train.train.losses import kept_ce_sum  # noqa: E402
from cosmos_train.train.step import forward_logits  # noqa: E402


def _rank(rank: int, cp: int, port: int, args: dict, out_dir: str) -> None:
    """One rank: forward + backward of its 1/cp of the row; writes its measurements to out_dir."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(args["threads"])
    cuda = torch.cuda.device_count() >= cp
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=cp)
    model = load_model(args["model"], dtype=torch.float32)
    model.to(device)  # type: ignore[arg-type]  # transformers wraps PreTrainedModel.to (typeshed: unbound)
    model.train()
    n = args["tokens"]
    ids = torch.randint(10, 900, (1, n), generator=torch.Generator().manual_seed(1))  # plain text tokens
    mb = MicroBatch(ids, ids.clone(), torch.ones_like(ids), torch.zeros_like(ids)).to(device)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: set[int] = set()
    saved = 0

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        ptr = tensor.untyped_storage().data_ptr()
        if ptr not in weights and ptr not in seen:
            seen.add(ptr)
            saved += tensor.untyped_storage().nbytes()
        return tensor

    dist.barrier()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    start = time.perf_counter()
    group = CpGroup(dist.group.WORLD, cp, rank) if cp > 1 else CpGroup(None, 1, 0)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t_: t_):
        logits, keep, _ = forward_logits(model, mb, run_vision=False, cp=group)
        loss = kept_ce_sum(logits, mb.labels, keep)[0] / (n - 1)
    loss.backward()
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    total = loss.detach().clone()
    dist.all_reduce(total)  # the ranks' slices' shares of the row's loss
    result = {
        "rank": rank,
        "saved_bytes": saved,
        "rss_growth_bytes": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024,
        "cuda_peak_bytes": torch.cuda.max_memory_allocated() - base if cuda else None,
        "seconds": seconds,
        "device": str(device),
        "loss": float(total),
    }
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def measure(cp: int, args: dict) -> dict:
    """cp processes for one size; the largest of each measure over the ranks."""
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(_rank, args=(cp, free_port(), args, out), nprocs=cp, join=True)
        ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(cp)]
    return {
        "cp": cp,
        "saved": max(r["saved_bytes"] for r in ranks),
        "rss": max(r["rss_growth_bytes"] for r in ranks),
        "cuda": max(r["cuda_peak_bytes"] for r in ranks) if ranks[0]["cuda_peak_bytes"] is not None else None,
        "seconds": max(r["seconds"] for r in ranks),
        "device": ranks[0]["device"],
        "loss": ranks[0]["loss"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,2,4", help="context-parallel sizes, comma-separated")
    ap.add_argument("--tokens", type=int, default=8192, help="tokens in the row")
    ap.add_argument("--size", default="small", help="tiny model preset (tiny, small)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        model = make_tiny_model(Path(folder) / "model", size=a.size)
        args = {"model": str(model), "tokens": a.tokens, "threads": a.threads}
        rows = [measure(int(cp), args) for cp in a.sizes.split(",")]
    mib = 1 << 20
    print(
        f"# tiny Qwen2.5-VL '{a.size}', one text row of {a.tokens} tokens; "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
        f"{rows[0]['device'].split(':')[0]}"
    )
    print(
        "| cp | tokens per rank | saved activations per rank (MiB) | vs cp=1 | peak RSS growth (MiB) | "
        "CUDA max allocated (MiB) | fwd+bwd s | loss - cp=1's |"
    )
    print("|---|---|---|---|---|---|---|---|")
    ref = rows[0]
    for r in rows:
        cuda = f"{r['cuda'] / mib:.1f}" if r["cuda"] is not None else "-"
        print(
            f"| {r['cp']} | {-(-a.tokens // r['cp'])} | {r['saved'] / mib:.1f} | {r['saved'] / ref['saved']:.2f} | "
            f"{r['rss'] / mib:.1f} | {cuda} | {r['seconds']:.2f} | {r['loss'] - ref['loss']:.1e} |"
        )


if __name__ == "__main__":
    main()
