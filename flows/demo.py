"""The demo: the whole post-training job end to end on the embedded CPU defaults, in minutes.

    make demo        # or: cosmos-train demo [--output-dir outputs/demo]

Makes the offline tiny model and the synthetic physics videos, then runs the post-train pipeline
(flows/post_train.py, configs/tiny-post-train.toml) on them in `<output_dir>/pipeline/`: scores the
base model on the held-out benchmark, runs a short SFT through the `sft` flow (2 processes, FSDP2),
scores its `safetensors/final`, runs GRPO from that export through the `grpo` flow (2 processes, an
HF rollout engine per rank, reward = the right letter), scores GRPO's best export (by validation
accuracy on the val split, never the benchmark's clips), prints a table and writes
`<output_dir>/summary.json`: {"stages": [{"name", "accuracy", "n", "checkpoint"}, ...]} with stages
base, sft, grpo.
"""

from __future__ import annotations

import json
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from flows.post_train import PostTrainParams, post_train

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@task(name="make-tiny-model", cache_policy=NO_CACHE)
def make_model(out: str) -> str:
    # why here: the model code loads torch and transformers; importing the flow (prefect deploy) must not wait
    from cosmos_train.models.tiny import make_tiny_model

    return str(make_tiny_model(out))


@task(name="make-synthetic-data", cache_policy=NO_CACHE)
def make_data(out: str, n_train: int, n_val: int, n_test: int, seed: int, families: list[str]) -> str:
    # why here: the video writer loads PyAV; importing the flow (prefect deploy) must not wait
    from cosmos_train.data.synthetic import make_synthetic_dataset

    return str(make_synthetic_dataset(out, n_train=n_train, n_val=n_val, n_test=n_test, seed=seed, families=families))


def _stage(name: str, result: dict) -> dict:
    micro = result["scores"]["overall"]["micro"]
    # unanswered: replies with no readable letter, counted wrong (the random base model's usual reply)
    return {
        "name": name,
        "accuracy": micro["accuracy"],
        "n": micro["total"],
        "checkpoint": result["model"],
        "ci95": [micro["ci95_low"], micro["ci95_high"]],
        "unanswered": micro["unanswered"],
    }


@flow(name="demo", log_prints=True)
def demo(
    output_dir: str = "outputs/demo",
    n_train: int = 768,
    n_test: int = 200,
    seed: int = 0,
    families: list[str] | None = None,
    sft_steps: int = 300,
    grpo_steps: int = 300,
    sft_overrides: list[str] | None = None,
    grpo_overrides: list[str] | None = None,
) -> dict:
    """families: default ["direction"], which the ~1M-parameter model learns within the demo's few
    minutes on a CPU. Measured (docs/FACTS.md, "GRPO on the demo"): SFT sits at chance for ~250 steps, then reads
    the motion from the pixels (0.3 at step 300, ~1.0 at 400); SFT stops at `sft_steps` = 300 so GRPO has
    room to show what it adds (+10 points within 10-50 GRPO steps from there, ~0.7 by step 120).
    From the base model GRPO has no signal (every group all wrong), hence SFT first."""
    logger = get_run_logger()
    out = Path(output_dir).resolve()
    model = make_model(str(out / "tiny-model"))
    data = make_data(str(out / "data"), n_train, 64, n_test, seed, families or ["direction"])
    # The post-train pipeline of configs/tiny-post-train.toml on these assets. No evaluation retries: the
    # untrained model answers random bytes, and each letter-mode retry asks for 266 tokens, minutes on a
    # CPU; an unreadable answer simply counts as wrong.
    result = post_train(
        PostTrainParams(
            config=str(CONFIGS / "tiny-post-train.toml"),
            overrides=[
                f'output_dir="{out}"',
                'name="pipeline"',
                f'model="{model}"',
                f'sft.train.train_policy.dataset.name="{data}"',
                f"sft.train.max_num_steps={sft_steps}",
                *[f"sft.{o}" for o in sft_overrides or []],
                f'grpo.train.train_policy.dataset.name="{data}"',
                f"grpo.train.max_num_steps={grpo_steps}",
                *[f"grpo.{o}" for o in grpo_overrides or []],
                f'evaluate.data_dir="{data}"',
                "evaluate.evaluation.skip_saved=false",
            ],
        )
    )
    evaluations = result["evaluations"]
    stages = [_stage(name, evaluations[name]) for name in ("base", "sft", "grpo")]
    grpo_run = result["runs"]["grpo"]
    summary = {
        "stages": stages,
        "sft_run_dir": result["runs"]["sft"]["run_dir"],
        "grpo_run_dir": grpo_run["run_dir"],
        "grpo_best": grpo_run["result"].get("best"),
        "data": data,
        "model": model,
        "pipeline": result["folder"],
        "health": result.get("health") or {},  # stage -> its result.json "health" (the GRPO stage's verdicts)
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    create_table_artifact(
        key="demo-summary", table=stages, description="held-out accuracy of the base model, after SFT and after GRPO"
    )
    lines = [f"{'stage':<6} {'accuracy':>9} {'n':>5} {'unanswered':>11}  checkpoint"]
    lines += [
        f"{s['name']:<6} {s['accuracy']:>9.3f} {s['n']:>5} {s['unanswered']:>11}  {s['checkpoint']}" for s in stages
    ]
    print("\n".join(lines))
    logger.info("summary written to %s", out / "summary.json")
    return summary
