"""Benchmark evaluation: load a benchmark, ask a model, parse, score, write the reference layout.

    cosmos-train eval --config configs/eval-tiny.toml --model PATH [--set k=v]

Entry point: `cosmos_train.evaluation.runner.evaluate_model(cfg, model_path=None, engine=None)`.
"""
