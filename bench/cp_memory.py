"""Activation memory per rank of the DiT at context-parallel sizes 1, 2, 4 (model_parallel.context_parallel_size).

    OMP_NUM_THREADS=1 .venv/bin/python bench/cp_memory.py [--sizes 1,2,4] [--latent 4,64,64] [--heads 8]
                                                          [--head-dim 32] [--layers 4] [--batch 1]

One forward + backward of a Cosmos-Predict2.5-layout DiT (diffusers' CosmosTransformer3DModel; `--heads` x
`--head-dim` wide, `--layers` blocks, patch 1x2x2) on one video whose latent is `--latent` T',H',W' (4,64,64:
a 13-frame 512x512 video, 4096 DiT tokens), run as `cp` processes that form one context-parallel group (gloo on
the CPU, nccl with a GPU per rank), each holding 1/cp of the tokens (cosmos_train/wfm/context_parallel.py).
Measured on every rank as bench/cp_measure.py counts it (saved activations: the activation memory that grows with
the sequence and that context parallel divides; peak RSS growth, which includes the weights' gradients, the same at
every cp here: no FSDP; CUDA max allocated), the largest reported.
The velocity of every cp is checked against cp = 1's (max abs difference printed).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.cp_measure import MIB, RankMeter, cp_group, join_group, spawn_ranks, write_rank  # noqa: E402
from cosmos_train.wfm.context_parallel import enable_context_parallel  # noqa: E402


def _dit(heads: int, head_dim: int, layers: int, max_size: tuple[int, int, int]) -> torch.nn.Module:
    from diffusers import CosmosTransformer3DModel

    torch.manual_seed(0)
    return CosmosTransformer3DModel(
        in_channels=17,
        out_channels=16,
        num_attention_heads=heads,
        attention_head_dim=head_dim,
        num_layers=layers,
        mlp_ratio=4.0,
        text_embed_dim=heads * head_dim,
        adaln_lora_dim=64,
        max_size=max_size,
        patch_size=(1, 2, 2),
        rope_scale=(1.0, 1.0, 1.0),
        concat_padding_mask=False,
        extra_pos_embed_type=None,
    )


def _rank(rank: int, cp: int, port: int, args: dict, out_dir: str) -> None:
    """One rank: forward + backward of its 1/cp of the tokens; writes its measurements to out_dir."""
    device = join_group(rank, cp, port, args["threads"])
    t, h, w = args["latent"]
    model = _dit(args["heads"], args["head_dim"], args["layers"], (t, h, w)).to(device)
    model = enable_context_parallel(model, cp_group(rank, cp))
    gen = torch.Generator().manual_seed(1)
    b = args["batch"]
    x = torch.randn(b, 16, t, h, w, generator=gen).to(device)
    text = torch.randn(b, 32, args["heads"] * args["head_dim"], generator=gen).to(device)
    sigma = torch.rand(b, generator=gen).to(device)
    mask = torch.zeros(b, 1, t, h, w, device=device)
    meter = RankMeter(model, device)
    with meter.saving():
        v = model(hidden_states=x, timestep=sigma, encoder_hidden_states=text, condition_mask=mask, return_dict=False)[
            0
        ]
    v.float().square().mean().backward()
    result = meter.result()
    if rank == 0:
        torch.save(v.detach().cpu(), Path(out_dir) / "velocity.pt")
    write_rank(out_dir, rank, result)
    dist.destroy_process_group()


def measure(cp: int, args: dict) -> dict:
    """cp processes for one size; the largest of each measure over the ranks, and rank 0's velocity."""
    return spawn_ranks(_rank, cp, args, read=lambda out: torch.load(out / "velocity.pt"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,2,4", help="context-parallel sizes, comma-separated")
    ap.add_argument("--latent", default="4,64,64", help="latent frames, height, width (T',H',W')")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    a = ap.parse_args()
    latent = tuple(int(s) for s in a.latent.split(","))
    args = {
        "latent": latent,
        "heads": a.heads,
        "head_dim": a.head_dim,
        "layers": a.layers,
        "batch": a.batch,
        "threads": a.threads,
    }
    tokens = latent[0] * (latent[1] // 2) * (latent[2] // 2)
    rows = [measure(int(cp), args) for cp in a.sizes.split(",")]
    mib = MIB
    print(
        f"# DiT {a.layers} blocks x {a.heads} heads x {a.head_dim}, latent {latent} = {tokens} tokens x batch "
        f"{a.batch}; {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
        f"{rows[0]['device'].split(':')[0]}"
    )
    print(
        "| cp | tokens per rank | saved activations per rank (MiB) | vs cp=1 | peak RSS growth (MiB) | "
        "CUDA max allocated (MiB) | fwd+bwd s | max abs diff vs cp=1 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    ref = rows[0]
    for r in rows:
        cuda = f"{r['cuda'] / mib:.1f}" if r["cuda"] is not None else "-"
        diff = float((r["extra"] - ref["extra"]).abs().max())
        print(
            f"| {r['cp']} | {tokens // r['cp']} | {r['saved'] / mib:.1f} | {r['saved'] / ref['saved']:.2f} | "
            f"{r['rss'] / mib:.1f} | {cuda} | {r['seconds']:.2f} | {diff:.1e} |"
        )


if __name__ == "__main__":
    main()
