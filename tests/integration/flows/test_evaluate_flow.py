"""The `evaluate` flow on the tiny model: two checkpoints compared side by side, artifacts published."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.integration.prefect_server import flow_run_artifacts


def _write_config(tmp_path: Path, synthetic_dir: Path) -> Path:
    path = tmp_path / "eval.toml"
    path.write_text(f"""
datasets = ["synthetic"]
data_dir = "{synthetic_dir}"
results_dir = "{tmp_path / "results"}"
engine = "hf"
device = "cpu"
batch_size = 6
limit = 6

[model]
model_name = "unused"
dtype = "float32"
max_length = 4096

[evaluation]
answer_type = "reasoning"
fps = 1
num_processes = 2
max_pixels = 3136

[generation]
max_retries = 0
max_tokens = 6
""")
    return path


@pytest.mark.slow
def test_evaluate_flow_compares_models(
    prefect_harness: None, tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path
) -> None:
    from flows.evaluate import EvaluateParams, evaluate

    # Two "checkpoints" whose folders share a basename, as SFT and RL runs' safetensors/final do.
    base = shutil.copytree(tiny_model_dir, tmp_path / "sft" / "final")
    rl = shutil.copytree(tiny_model_dir, tmp_path / "grpo" / "final")
    config = _write_config(tmp_path, synthetic_dir)
    state = evaluate(EvaluateParams(config=str(config), models=[str(base), str(rl)]), return_state=True)
    out = state.result()

    labels = [r["label"] for r in out["results"]]
    assert labels == ["sft-final", "grpo-final"]
    for r in out["results"]:
        run_dir = Path(r["run_dir"])
        assert run_dir == tmp_path / "results" / r["label"] / "reasoning"
        files = sorted((run_dir / "synthetic").glob("*.json"))
        assert len(files) == 6
        saved = json.loads(Path(r["results_json"]).read_text())
        assert saved["overall"]["micro"]["total"] == 6
        assert r["accuracy"]["micro"] == pytest.approx(saved["overall"]["micro"]["accuracy"])
        assert len(r["wrong"]) == 6 - saved["overall"]["micro"]["correct"]
    # the same weights, greedy-free sampling with one seed: the two columns agree
    assert out["results"][0]["accuracy"] == out["results"][1]["accuracy"]
    rows = out["table"]
    assert [row["dataset"] for row in rows] == [
        "synthetic",
        "overall (micro)",
        "overall (macro)",
        "chance level",
        "answers given",
        "flags",
        "checkpoint",
    ]
    assert set(rows[0]) == {"dataset", "sft-final", "grpo-final", "n"} and rows[0]["n"] == 6
    by_name = {row["dataset"]: row for row in rows}
    assert by_name["checkpoint"]["sft-final"] == str(base)
    assert by_name["chance level"]["sft-final"] == f"{100 * out['results'][0]['chance']:.1f}"
    # the untrained tiny model: its answers are unreadable or at chance, and the table says so
    assert by_name["flags"]["sft-final"].startswith("⚠ ") and "unreadable" in by_name["answers given"]["sft-final"]

    found = {key: a.data for key, a in flow_run_artifacts(state.state_details.flow_run_id).items()}
    assert {"eval-comparison", "eval-wrong-answers"} <= set(found)
    assert any(row["dataset"] == "flags" for row in json.loads(found["eval-comparison"]))


def test_params_validation() -> None:
    from pydantic import ValidationError

    from flows.evaluate import EvaluateParams

    with pytest.raises(ValidationError, match="labels: 1 given for 2 model"):
        EvaluateParams(config="c.toml", models=["a", "b"], labels=["x"])
    with pytest.raises(ValidationError, match="distinct"):
        EvaluateParams(config="c.toml", models=["a", "b"], labels=["x", "x"])


@pytest.mark.slow
def test_crash_is_retried_and_resumes_bad_input_is_not(
    prefect_harness: None, tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tasks.evaluate as task_module
    from cosmos_train.data.media import MediaError
    from cosmos_train.evaluation.runner import evaluate_model
    from flows.evaluate import EvaluateParams, evaluate

    config = _write_config(tmp_path, synthetic_dir)
    calls: list[int] = []

    def crash_once(cfg, model_path=None, engine=None, log=None):
        calls.append(1)
        if len(calls) == 1:
            evaluate_model(cfg.model_copy(update={"limit": 2}), model_path, log=log)  # a partial run...
            raise RuntimeError("CUDA error: an illegal memory access was encountered")  # ...then a crash
        return evaluate_model(cfg, model_path, log=log)

    monkeypatch.setattr(task_module, "evaluate_model", crash_once)
    out = evaluate(
        EvaluateParams(config=str(config), models=[str(tiny_model_dir)], overrides=["evaluation.skip_saved=true"])
    )
    assert len(calls) == 2
    (result,) = out["results"]
    assert result["skipped_videos"] == 2 and result["asked"] == 4  # the retry resumed
    assert result["scores"]["overall"]["micro"]["total"] == 6

    calls.clear()

    def bad_clip(cfg, model_path=None, engine=None, log=None):
        calls.append(1)
        raise MediaError("/data/clips/v7.mp4", "cannot decode")

    monkeypatch.setattr(task_module, "evaluate_model", bad_clip)
    with pytest.raises(MediaError, match="v7.mp4: cannot decode"):
        evaluate(EvaluateParams(config=str(config), models=[str(tiny_model_dir)], eval_retries=3))
    assert len(calls) == 1  # bad input fails at once, naming the file


def test_a_constant_answer_model_is_flagged(
    prefect_harness: None, tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path
) -> None:
    """The issue's case, for real: the tiny model after 30 SFT steps (configs/tiny-sft.toml) has learnt one
    letter, not the videos. Its evaluation table, read back from the artifact, names it: the option it
    gives, the share, not above chance; and the model is labelled by stage, run and step."""

    from flows.evaluate import EvaluateParams, evaluate
    from flows.sft import SFTParams, sft

    run = sft(
        SFTParams(
            config=str(Path(__file__).parents[3] / "configs" / "tiny-sft.toml"),
            overrides=[
                f'policy.model_name_or_path="{tiny_model_dir}"',
                f'train.train_policy.dataset.name="{synthetic_dir}"',
                f'train.output_dir="{tmp_path / "runs"}"',
                "train.max_num_steps=30",
                "train.ckpt.save_freq=1000",
            ],
        )
    )
    config = _write_config(tmp_path, synthetic_dir)
    state = evaluate(
        EvaluateParams(
            config=str(config), models=[run["final"]], overrides=["limit=12", 'evaluation.answer_type="letter"']
        ),
        return_state=True,
    )
    out = state.result()
    [result] = out["results"]
    label = f"sft@{Path(run['run_dir']).name}-step30"
    assert result["label"] == label
    top, count = max(result["answers"].items(), key=lambda kv: kv[1])
    assert top and count / sum(result["answers"].values()) >= 0.8, result["answers"]  # the degenerate model

    art = flow_run_artifacts(state.state_details.flow_run_id)["eval-comparison"]
    assert art.type == "table"
    rows = {row["dataset"]: row for row in json.loads(art.data)}
    assert rows["flags"][label].startswith(f"⚠ answers {top} to ") and "not above chance" in rows["flags"][label]
    assert rows["checkpoint"][label] == run["final"] and rows["chance level"][label] == "25.0"
