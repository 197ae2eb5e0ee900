"""Activation memory per rank of the VLM's language model at context-parallel sizes 1, 2, 4 (cp_size).

    OMP_NUM_THREADS=1 .venv/bin/python bench/cp_memory_vlm.py [--sizes 1,2,4] [--tokens 8192] [--size small]

One forward + backward of the SFT loss (cross entropy over every token) of the tiny Qwen2.5-VL (`--size`: "small"
is 6 layers x 8 heads x 256 wide, `cosmos_train.models.tiny`) on one text row of `--tokens` tokens, run as `cp`
processes that form one context-parallel group (gloo on the CPU, nccl with a GPU per rank), each holding 1/cp of
the sequence (cosmos_train/train/cp_language.py, the trainers' `step.forward_logits`). A text row: the vision tower
is not split by context parallel (every rank encodes the whole micro-batch's media), so media would add the same
bytes at every cp. Measured on every rank as bench/cp_measure.py counts it (saved activations, peak RSS growth,
CUDA max allocated), the largest reported.
The loss (summed over the ranks) of every cp is checked against cp = 1's.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cp_measure import MIB, RankMeter, cp_group, join_group, spawn_ranks, write_rank  # noqa: E402
from cosmos_train.models.load import load_model  # noqa: E402
from cosmos_train.models.tiny import make_tiny_model  # noqa: E402
from cosmos_train.train.batching import MicroBatch  # noqa: E402
from cosmos_train.train.sft_loss import kept_ce_sum  # noqa: E402
from cosmos_train.train.step import forward_logits  # noqa: E402


def _rank(rank: int, cp: int, port: int, args: dict, out_dir: str) -> None:
    """One rank: forward + backward of its 1/cp of the row; writes its measurements to out_dir."""
    device = join_group(rank, cp, port, args["threads"])
    model = load_model(args["model"], dtype=torch.float32)
    model.to(device)  # type: ignore[arg-type]  # transformers wraps PreTrainedModel.to (typeshed: unbound)
    model.train()
    n = args["tokens"]
    ids = torch.randint(10, 900, (1, n), generator=torch.Generator().manual_seed(1))  # plain text tokens
    mb = MicroBatch(ids, ids.clone(), torch.ones_like(ids), torch.zeros_like(ids)).to(device)
    meter = RankMeter(model, device)
    with meter.saving():
        logits, keep, _ = forward_logits(model, mb, run_vision=False, cp=cp_group(rank, cp))
        loss = kept_ce_sum(logits, mb.labels, keep)[0] / (n - 1)
    loss.backward()
    result = meter.result()
    total = loss.detach().clone()
    dist.all_reduce(total)  # the ranks' slices' shares of the row's loss
    write_rank(out_dir, rank, {**result, "loss": float(total)})
    dist.destroy_process_group()


def measure(cp: int, args: dict) -> dict:
    """cp processes for one size; the largest of each measure over the ranks (and the row's loss)."""
    return spawn_ranks(_rank, cp, args)


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
    mib = MIB
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
