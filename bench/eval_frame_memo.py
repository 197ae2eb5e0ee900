"""What decoding each clip once saves when a benchmark asks several questions per clip.

    .venv/bin/python bench/eval_frame_memo.py --model outputs/demo/tiny-model [--clips 8 --questions 4]

Builds a benchmark of 10 s 480x640 30 fps clips with `--questions` questions each (the Cosmos
benchmark layout), then evaluates it twice with the transformers engine in one process: with the
in-memory FrameMemo (the default) and with it disabled (frame_memo_bytes=0, every question decodes
its clip). Letter mode, greedy, 10 tokens, at the Cosmos evaluation's fps 4 and its default pixel
budget, so decoding is a realistic share of the work. Reports questions/s and the ratio; the two
runs' answers must be identical.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from video_pipeline import write_clip  # noqa: E402  (the same synthetic clips)

from cosmos_train.evaluation.config import eval_config_from_dict  # noqa: E402
from cosmos_train.evaluation.runner import evaluate_model  # noqa: E402
from cosmos_train.generation.hf import HFEngine  # noqa: E402

OPTIONS = {"A": "left", "B": "right", "C": "up", "D": "down"}


def make_benchmark(root: Path, clips: int, questions: int) -> None:
    folder = root / "benchmark" / "bench"
    (folder / "clips").mkdir(parents=True)
    rows = []
    for i in range(clips):
        write_clip(folder / "clips" / f"c{i}.mp4", seconds=10, fps=30, height=480, width=640)
        qa = [
            {"question": f"Question {q} about clip {i}?", "index2ans": OPTIONS, "answer": "ABCD"[q % 4]}
            for q in range(questions)
        ]
        rows.append({"video": f"clips/c{i}.mp4", "qa_pairs": qa})
    (folder / "bench_benchmark_qa_pairs.json").write_text(json.dumps(rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--clips", type=int, default=8)
    parser.add_argument("--questions", type=int, default=4, help="questions per clip")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_benchmark(root / "data", args.clips, args.questions)
        rows, answers = [], {}
        for label, memo_bytes in (("memo", 2 << 30), ("no memo", 0)):
            cfg = eval_config_from_dict(
                {
                    "datasets": ["bench"],
                    "data_dir": str(root / "data"),
                    "results_dir": str(root / label),
                    "engine": "hf",
                    "device": "cpu",
                    "batch_size": args.batch_size,
                    "model": {"model_name": args.model, "name": "m", "dtype": "float32", "max_length": 32768},
                    "evaluation": {"answer_type": "letter", "fps": 4, "num_processes": 2},
                    "generation": {"max_retries": 0},
                }
            )
            times = []
            for _ in range(args.repeats):
                # a fresh engine per run: the memo lives for one evaluation, as in the evaluate flow
                gen = dataclasses.replace(cfg.generation_config(), decode_workers=2)
                engine = HFEngine(gen, frame_memo_bytes=memo_bytes)
                start = time.perf_counter()
                result = evaluate_model(cfg, engine=engine, log=lambda _: None)
                times.append(time.perf_counter() - start)
                decodes = engine.frames.misses  # with a zero budget every decode is still counted
            answers[label] = json.loads(result.results_json.read_text())["overall"]["micro"]
            rows.append((label, statistics.median(times), times, result.asked, decodes))
    base = rows[1][3] / rows[1][1]
    print(f"{args.clips} clips x {args.questions} questions, 10 s 480x640 30 fps, fps 4, HF engine, tiny model")
    print("| run | seconds (median) | runs | questions | clip decodes | questions/s | vs no memo |")
    print("|---|---|---|---|---|---|---|")
    for label, median, times, n, decodes in rows:
        runs = " / ".join(f"{t:.1f}" for t in times)
        print(f"| {label} | {median:.1f} | {runs} | {n} | {decodes} | {n / median:.2f} | {n / median / base:.2f}x |")
    print(f"\nsame scores: {answers['memo'] == answers['no memo']}")


if __name__ == "__main__":
    main()
