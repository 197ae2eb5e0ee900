"""The runner: retries, unanswered questions, files and numbers, resume (skip_saved).

A scripted engine checks the bookkeeping exactly; the tiny random model checks the real path
(video decoding, batched generate, parsing, files) end to end, with an interrupted run resumed.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from cosmos_train.errors import BenchmarkError, MediaError
from cosmos_train.evaluation.config import eval_config_from_dict
from cosmos_train.evaluation.predictions import read_dataset_predictions
from cosmos_train.evaluation.runner import evaluate_model
from cosmos_train.evaluation.scoring import score_run_dir
from cosmos_train.generation import Completion, SamplingParams

OPTS = {"A": "It moves left", "B": "It moves right", "C": "It stays", "D": "It falls"}


class ScriptedEngine:
    """Answers from a script keyed by video id; records every call."""

    name = "scripted"

    def __init__(self, script: dict[str, list[str]]):
        self.script = script
        self.calls: list[tuple[list[str], SamplingParams]] = []

    def generate(self, chats: Sequence[list[dict]], sampling: SamplingParams) -> list[list[Completion]]:
        ids = [Path(c[1]["content"][0]["video"]).stem for c in chats]
        self.calls.append((ids, sampling))
        texts = [self.script[i].pop(0) if len(self.script[i]) > 1 else self.script[i][0] for i in ids]
        return [[Completion(text=t, token_ids=[], logprobs=[], finish_reason="stop")] for t in texts]

    def close(self) -> None:
        pass


def _bench(root: Path, name: str, answers: list[str]) -> None:
    folder = root / "benchmark" / name
    (folder / "clips").mkdir(parents=True)
    rows = []
    for i, ans in enumerate(answers):
        (folder / "clips" / f"v{i}.mp4").write_bytes(b"x")
        rows.append({"video": f"clips/v{i}.mp4", "qa_pairs": {"question": f"Q{i}?", "index2ans": OPTS, "answer": ans}})
    (folder / f"{name}_benchmark_qa_pairs.json").write_text(json.dumps(rows))


def _cfg(tmp_path: Path, **over):
    raw = {
        "datasets": ["ds1", "ds2"],
        "data_dir": str(tmp_path / "data"),
        "results_dir": str(tmp_path / "results"),
        "batch_size": 2,
        "model": {"model_name": "/ckpts/my-model/"},
        "evaluation": {"answer_type": "reasoning"},
        "generation": {"max_retries": 2, "max_tokens": 32, "temperature": 0.6},
    }
    for k, v in over.items():
        raw[k] = {**raw[k], **v} if isinstance(v, dict) else v
    return eval_config_from_dict(raw)


def test_retries_unanswered_and_files(tmp_path: Path) -> None:
    _bench(tmp_path / "data", "ds1", ["A", "B", "C"])
    _bench(tmp_path / "data", "ds2", ["D"])
    # ds1/v1 answers only on its second retry; ds1/v2 never does; ds2 shares ids with ds1 (v0).
    engine = ScriptedEngine(
        {
            "v0": ["<think>left</think>\n\n<answer>A</answer>"],
            "v1": ["", "The answer is", "<think>r</think><answer>B</answer>"],
            "v2": ["I cannot tell."],
        }
    )
    res = evaluate_model(_cfg(tmp_path), engine=engine)
    assert res.label == "my-model" and res.run_dir == tmp_path / "results" / "my-model" / "reasoning"
    # calls: batch [v0, v1], retry [v1], retry [v1]; batch [v2, ds2/v0], retry [v2], retry [v2]
    assert [ids for ids, _ in engine.calls] == [["v0", "v1"], ["v1"], ["v1"], ["v2", "v0"], ["v2"], ["v2"]]
    first, retry1, retry2 = (s for _, s in engine.calls[:3])
    assert (first.max_new_tokens, retry1.max_new_tokens, retry2.max_new_tokens) == (32, 32 + 256, 32 + 512)
    assert first.temperature == 0.6 and retry1.temperature == pytest.approx(0.65)
    assert res.unanswered == [
        {"dataset": "ds1", "video_id": "v2", "question_index": 0, "full_response": "I cannot tell."}
    ]
    ds1 = {r["video_id"]: r for r in read_dataset_predictions(res.run_dir / "ds1")}
    assert ds1["v1"]["answer"] == "B" and ds1["v1"]["is_correct"] and ds1["v1"]["reasoning"] == "r"
    assert ds1["v0"]["reasoning"] == "left"
    assert ds1["v2"]["answer"] == "" and not ds1["v2"]["is_correct"]
    assert ds1["v2"]["prompt"][1]["content"][0]["fps"] == 4
    (ds2,) = read_dataset_predictions(res.run_dir / "ds2")
    assert ds2["answer"] == "A" and not ds2["is_correct"]  # ds2's v0 is D
    assert res.accuracy == pytest.approx({"ds1": 2 / 3, "ds2": 0.0, "micro": 0.5, "macro": 1 / 3})
    assert res.scores.datasets["ds1"].unanswered == 1
    assert score_run_dir(res.run_dir).accuracy_dict() == pytest.approx(res.accuracy)  # files agree
    saved = json.loads(res.results_json.read_text())
    assert saved["overall"]["micro"]["correct"] == 2 and saved["engine"] == "scripted"
    assert {(w["dataset"], w["video_id"]) for w in res.wrong} == {("ds1", "v2"), ("ds2", "v0")}
    assert res.to_dict()["results_csv"].endswith("results.csv")
    # what the score hides: the options given (v0 A, v1 B, v2 unreadable, ds2/v0 A) and the chance level
    assert res.answers == {"": 1, "A": 2, "B": 1} and res.to_dict()["answers"] == res.answers
    assert res.chance == pytest.approx(1 / len(OPTS))


def test_skip_saved_resumes_without_asking_again(tmp_path: Path) -> None:
    _bench(tmp_path / "data", "ds1", ["A", "B", "C", "D"])
    answers = {f"v{i}": [f"<answer>{x}</answer>"] for i, x in enumerate("ABCA")}
    cfg = _cfg(tmp_path, datasets=["ds1"], evaluation={"skip_saved": True})
    first = ScriptedEngine({k: list(v) for k, v in answers.items()})
    res = evaluate_model(cfg.model_copy(update={"limit": 2}), engine=first)  # "interrupted" after 2 videos
    assert res.asked == 2 and res.scores.micro.total == 2
    second = ScriptedEngine({k: list(v) for k, v in answers.items()})
    res = evaluate_model(cfg, engine=second)
    assert [ids for ids, _ in second.calls] == [["v2", "v3"]]  # saved videos never reach the engine
    assert res.skipped_videos == 2 and res.asked == 2
    assert res.scores.micro.total == 4 and res.scores.micro.correct == 3
    third = ScriptedEngine({k: list(v) for k, v in answers.items()})
    res = evaluate_model(cfg, engine=third)
    assert third.calls == [] and res.skipped_videos == 4 and res.scores.micro.correct == 3
    # without skip_saved everything is asked again
    fourth = ScriptedEngine({k: list(v) for k, v in answers.items()})
    evaluate_model(
        cfg.model_copy(update={"evaluation": cfg.evaluation.model_copy(update={"skip_saved": False})}), engine=fourth
    )
    assert sum(len(ids) for ids, _ in fourth.calls) == 4


def test_empty_benchmark_fails_before_the_model_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cosmos_train.evaluation.runner as runner

    _bench(tmp_path / "data", "ds1", ["A"])
    _bench(tmp_path / "data", "ds2", [])

    def no_model(cfg):
        raise AssertionError("the model was loaded for an empty benchmark")

    monkeypatch.setattr(runner, "create_engine", no_model)
    with pytest.raises(BenchmarkError, match=r"benchmark 'ds2': .*ds2_benchmark_qa_pairs\.json holds no questions"):
        evaluate_model(_cfg(tmp_path))
    # limit = 0 never gets this far: the evaluation config refuses it (limit is -1 or >= 1)


class BadClipEngine(ScriptedEngine):
    """A scripted engine whose clips named in `bad` fail to decode, as the HF engine reports it."""

    def __init__(self, script: dict[str, list[str]], bad: set[str]):
        super().__init__(script)
        self.bad = bad

    def generate(self, chats: Sequence[list[dict]], sampling: SamplingParams) -> list[list[Completion]]:
        for c in chats:
            path = c[1]["content"][0]["video"]
            if path in self.bad:
                raise MediaError(path, "cannot decode the container")
        return super().generate(chats, sampling)


def test_dataset_with_every_clip_left_out_is_an_error(tmp_path: Path) -> None:
    _bench(tmp_path / "data", "ds1", ["A", "B"])
    _bench(tmp_path / "data", "ds2", ["C", "D"])
    ds2 = tmp_path / "data" / "benchmark" / "ds2" / "clips"
    engine = BadClipEngine({"v0": ["A"], "v1": ["B"]}, {str(ds2 / "v0.mp4"), str(ds2 / "v1.mp4")})
    cfg = _cfg(tmp_path, evaluation={"on_bad_media": "skip"})
    with pytest.raises(
        BenchmarkError,
        match=r"benchmark 'ds2': all 2 question\(s\) were left out .*nothing was "
        r"measured; e\.g\. .*ds2/clips/v0\.mp4: cannot decode the container",
    ):
        evaluate_model(cfg, engine=engine)
    run_dir = cfg.run_dir()
    assert len(read_dataset_predictions(run_dir / "ds1")) == 2  # what was measured is kept
    assert not (run_dir / "results.json").exists()  # no accuracy 0.0 for ds2
    # One bad clip of two is still measured on the other.
    engine = BadClipEngine({"v0": ["A"], "v1": ["B"]}, {str(ds2 / "v0.mp4")})
    res = evaluate_model(cfg, engine=engine)
    assert res.scores.datasets["ds2"].total == 1 and [b["video_id"] for b in res.bad_media] == ["v0"]


class CountingEngine:
    """Wraps a real engine and records which videos it was asked about."""

    def __init__(self, inner):
        self.inner = inner
        self.name = inner.name
        self.asked: list[str] = []

    def generate(self, chats, sampling):
        self.asked += [Path(c[1]["content"][0]["video"]).stem for c in chats]
        return self.inner.generate(chats, sampling)

    def close(self) -> None:
        self.inner.close()


def test_tiny_model_end_to_end_and_resume(tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path) -> None:
    from cosmos_train.generation import create_engine

    cfg = eval_config_from_dict(
        {
            "datasets": ["synthetic"],
            "data_dir": str(synthetic_dir),
            "results_dir": str(tmp_path / "results"),
            "engine": "hf",
            "device": "cpu",
            "batch_size": 4,
            "model": {"model_name": str(tiny_model_dir), "dtype": "float32", "max_length": 4096},
            "evaluation": {
                "answer_type": "letter",
                "fps": 1,
                "skip_saved": True,
                "max_pixels": 3136,
                "num_processes": 2,
            },
            "generation": {"max_retries": 0, "letter_max_tokens": 4},
        }
    )
    engine = CountingEngine(create_engine(cfg.generation_config()))
    part = evaluate_model(cfg.model_copy(update={"limit": 5}), engine=engine)
    assert len(engine.asked) == 5 and len(set(engine.asked)) == 5 and part.scores.micro.total == 5
    done = set(engine.asked)
    engine.asked.clear()
    full = evaluate_model(cfg, engine=engine)
    n = full.scores.micro.total
    assert n == 12 and full.skipped_videos == 5
    assert len(engine.asked) == 7 and not done & set(engine.asked)
    records = read_dataset_predictions(full.run_dir / "synthetic")
    assert len(records) == 12 and {r["video_id"] for r in records} >= done
    assert full.scores.micro.correct == sum(r["is_correct"] for r in records)
    assert full.scores.micro.unanswered == sum(not r["answer"] for r in records)
    for r in records:
        assert r["is_correct"] == (r["answer"] == r["correct_answer"])
    # random weights: about chance; only the bookkeeping is checked, loosely bounded
    assert 0 <= full.scores.micro.accuracy <= 1
    assert full.scores.micro.ci95_low <= full.scores.micro.accuracy <= full.scores.micro.ci95_high
    assert json.loads(full.results_json.read_text())["overall"]["micro"]["total"] == 12


def test_letter_answers_are_what_transformers_generate_gives(
    tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path
) -> None:
    """Evaluation on the generation layer writes, for every question, the response transformers'
    greedy `generate` gives for the same prompt (what the evaluation engine ran before the move)."""
    import torch

    from cosmos_train.data.chat import encode_chat
    from cosmos_train.models.load import load_model, load_processor
    from cosmos_train.vision.processor import get_tokenizer
    from cosmos_train.vision.settings import VisionSettings

    cfg = eval_config_from_dict(
        {
            "datasets": ["synthetic"],
            "data_dir": str(synthetic_dir),
            "results_dir": str(tmp_path / "results"),
            "engine": "hf",
            "device": "cpu",
            "batch_size": 5,
            "model": {"model_name": str(tiny_model_dir), "dtype": "float32", "max_length": 4096},
            "evaluation": {
                "answer_type": "letter",
                "fps": 1,
                "min_pixels": 3136,
                "max_pixels": 3136,
                "num_processes": 2,
            },
            "generation": {"max_retries": 0, "letter_max_tokens": 10},
        }
    )
    result = evaluate_model(cfg)
    model = load_model(str(tiny_model_dir), dtype=torch.float32, device=torch.device("cpu")).eval()
    processor = load_processor(str(tiny_model_dir))
    tok = get_tokenizer(processor)
    eos = [tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id]
    records = read_dataset_predictions(result.run_dir / "synthetic")
    assert len(records) == 12
    for r in records:
        enc = encode_chat(processor, r["prompt"], add_generation_prompt=True, vision_defaults=VisionSettings())
        with torch.inference_mode():
            out = model.generate(
                **enc.model_inputs(), max_new_tokens=10, do_sample=False, eos_token_id=eos, pad_token_id=eos[0]
            )
        assert r["full_response"] == tok.decode(out[0, len(enc) :], skip_special_tokens=True), r["video_id"]


def test_freeform_mode(tmp_path: Path) -> None:
    folder = tmp_path / "data" / "benchmark" / "ff"
    (folder / "clips").mkdir(parents=True)
    rows = []
    for i, ans in enumerate(["pick up the cup", "open the drawer"]):
        (folder / "clips" / f"v{i}.mp4").write_bytes(b"x")
        rows.append({"video": f"clips/v{i}.mp4", "qa_pairs": {"question": "What next?", "answer": ans}})
    (folder / "ff_benchmark_qa_pairs.json").write_text(json.dumps(rows))
    engine = ScriptedEngine({"v0": ["<think>cup</think><answer>Pick up the cup.</answer>"], "v1": ["close the drawer"]})
    res = evaluate_model(_cfg(tmp_path, datasets=["ff"], evaluation={"answer_type": "freeform"}), engine=engine)
    assert engine.calls[0][0] == ["v0", "v1"]
    assert res.accuracy["ff"] == 0.5 and res.run_dir.name == "freeform"
    (rec,) = json.loads((res.run_dir / "ff" / "v0.json").read_text())
    assert rec["prompt"][1]["content"][1]["text"] == "What next?"  # no letter instruction
    assert rec["answer"] == "Pick up the cup." and rec["is_correct"] and rec["reasoning"] == "cup"
    assert res.chance is None  # no options: no chance level, no answer profile


def test_undecodable_clip_fails_or_is_left_out(tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path) -> None:
    import shutil

    from cosmos_train.data.media import MediaError
    from cosmos_train.evaluation.report import wrong_answers_markdown

    data = tmp_path / "data"
    shutil.copytree(synthetic_dir / "benchmark", data / "benchmark")
    clips = sorted((data / "benchmark" / "synthetic" / "clips").glob("*.mp4"))
    bad = clips[5]
    bad.write_bytes(bad.read_bytes()[:300])  # truncated: the container cannot be read
    raw = {
        "datasets": ["synthetic"],
        "data_dir": str(data),
        "results_dir": str(tmp_path / "results"),
        "engine": "hf",
        "device": "cpu",
        "batch_size": 4,
        "model": {"model_name": str(tiny_model_dir), "dtype": "float32", "max_length": 4096},
        "evaluation": {"answer_type": "letter", "fps": 1, "max_pixels": 3136, "num_processes": 2},
        "generation": {"max_retries": 0, "letter_max_tokens": 2},
    }
    cfg = eval_config_from_dict(raw)
    from cosmos_train.generation import create_engine

    engine = create_engine(cfg.generation_config())
    with pytest.raises(MediaError, match=rf"{bad.name}: .*cannot decode.*on_bad_media = \"skip\""):
        evaluate_model(cfg, engine=engine)
    assert len(list((cfg.run_dir() / "synthetic").glob("*.json"))) == 4  # the first batch is kept

    skip = eval_config_from_dict(raw, ['evaluation.on_bad_media="skip"'])
    res = evaluate_model(skip, engine=engine)
    assert res.scores.micro.total == 11  # 12 questions, one left out, none counted wrong for it
    assert [(b["video_id"], b["question_index"]) for b in res.bad_media] == [(bad.stem, 0)]
    assert "cannot decode" in res.bad_media[0]["error"]
    assert not (res.run_dir / "synthetic" / f"{bad.stem}.json").exists()  # asked again on a resume
    assert json.loads(res.results_json.read_text())["bad_media"][0]["video"] == str(bad)
    assert str(bad) in wrong_answers_markdown([res.to_dict()])
