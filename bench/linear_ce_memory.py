"""Peak memory and time of the LM head + cross entropy, unfused against fused (train.fused_linear_ce).

    .venv/bin/python bench/linear_ce_memory.py [--tokens 2048] [--hidden 2048] [--vocab 151936]
                                               [--chunks 512,2048] [--reps 3] [--threads 1] [--device cpu|cuda]

One forward + backward of the loss over `--tokens` label tokens with a head of Qwen2.5-VL-3B's size (hidden
2048, vocabulary 151,936), fp32 on a CPU, bf16 on a GPU:
- unfused: `F.linear` then `F.cross_entropy` on the fp32 logits, summed: what our trainer does without the
  option (`kept_ce_sum`) and what transformers' loss (and so TRL's SFTTrainer without Liger-Kernel) does;
- fused, chunk C: `cosmos_train.train.linear_ce.linear_ce_sum` with chunk_rows = C.
Each (mode, repetition) runs in a fresh process so peaks do not mix. Memory: on a GPU the peak of
`torch.cuda.max_memory_allocated` above what the inputs hold; on a CPU the growth of the process's peak RSS
(`ru_maxrss`) over its RSS after the inputs were made (the allocator returns large blocks to the OS, so this
is the step's own peak). Time: the median wall time of the forward + backward. The loss and gradients are
checked equal to the unfused ones (max abs difference printed). Liger-Kernel's fused loss is Triton, GPU only:
not run here.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one(mode: str, chunk: int, tokens: int, hidden: int, vocab: int, device: str, threads: int) -> dict:
    """Run in a child process: one forward + backward, its peak memory and time."""
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, str(ROOT))
    from cosmos_train.train.linear_ce import linear_ce_sum

    torch.set_num_threads(threads)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    g = torch.Generator().manual_seed(0)
    h = (torch.randn(tokens, hidden, generator=g) * 0.5).to(device, dtype).requires_grad_()
    w = (torch.randn(vocab, hidden, generator=g) * 0.02).to(device, dtype).requires_grad_()
    t = torch.randint(0, vocab, (tokens,), generator=g).to(device)
    t[::7] = -100  # some prompt positions in the batch
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = _rss_bytes()
    t0 = time.perf_counter()
    if mode == "unfused":
        loss = F.cross_entropy(F.linear(h, w).float(), t, ignore_index=-100, reduction="sum")
    else:
        loss, _ = linear_ce_sum(h, w, t, chunk_rows=chunk)
    loss.backward()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    return {
        "mode": mode,
        "chunk": chunk,
        "seconds": seconds,
        "peak_gib": peak / 2**30,
        "loss": float(loss),
        "grad_h": h.grad.float()[:8, :64].tolist(),
        "grad_w": w.grad.float()[:4, :64].tolist(),
    }


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--chunks", default="512,2048")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        mode, chunk = a.child.split(":")
        print(json.dumps(one(mode, int(chunk), a.tokens, a.hidden, a.vocab, a.device, a.threads)))
        return 0
    import torch

    cells = [("unfused", 0)] + [("fused", int(c)) for c in a.chunks.split(",")]
    runs: dict[tuple[str, int], list[dict]] = {c: [] for c in cells}
    load_before = os.getloadavg()
    for rep in range(a.reps):
        for cell in cells if rep % 2 == 0 else cells[::-1]:  # alternate the order against drift in load
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    f"{cell[0]}:{cell[1]}",
                    "--tokens",
                    str(a.tokens),
                    "--hidden",
                    str(a.hidden),
                    "--vocab",
                    str(a.vocab),
                    "--threads",
                    str(a.threads),
                    "--device",
                    a.device,
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            runs[cell].append(json.loads(out.stdout.strip().splitlines()[-1]))
    ref = runs[("unfused", 0)][0]
    print(
        f"# {platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch "
        f"{torch.__version__}, device {a.device}, {a.threads} thread(s); load {load_before} -> {os.getloadavg()}"
    )
    print(f"# {a.tokens} label tokens, hidden {a.hidden}, vocabulary {a.vocab}; median of {a.reps} fresh processes")
    print(
        "| mode | peak memory GiB (median) | x unfused | forward + backward s (median) | x unfused | "
        "loss relative diff | gradient max abs diff |"
    )
    print("|---|---|---|---|---|---|---|")
    base_mem = statistics.median(r["peak_gib"] for r in runs[("unfused", 0)])
    base_s = statistics.median(r["seconds"] for r in runs[("unfused", 0)])
    for cell in cells:
        mem = statistics.median(r["peak_gib"] for r in runs[cell])
        sec = statistics.median(r["seconds"] for r in runs[cell])
        r0 = runs[cell][0]
        loss_rel = abs(r0["loss"] - ref["loss"]) / abs(ref["loss"])
        grad_diff = max(
            abs(x - y) for key in ("grad_h", "grad_w") for xs, ys in zip(r0[key], ref[key]) for x, y in zip(xs, ys)
        )
        name = "unfused (lm_head, then CE on fp32 logits)" if cell[0] == "unfused" else f"fused, chunk {cell[1]}"
        print(
            f"| {name} | {mem:.2f} | {mem / base_mem:.2f}x | {sec:.2f} | {sec / base_s:.2f}x "
            f"| {loss_rel:.1e} | {grad_diff:.1e} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
