"""The `learning-benchmark` flow: does a GRPO recipe learn tasks it was never shown, over seeds? Success rates, not
one curve.

    .venv/bin/python bench/learning.py --quick            # 2 tasks x 2 seeds, the default recipe
    .venv/bin/python bench/learning.py --tasks direction speed gravity two_objects size --seeds 0 1 2 \
        --recipe default --recipe 'entropy=train.train_policy.entropy_coeff=0.001'

For each task (a family of the synthetic videos, `cosmos-train make-synthetic-data --families`) it makes the task's
data (train rows, 64 val clips for GRPO's validation, `n_test` held-out benchmark clips) and, once, a format-only
SFT on ANOTHER task (`format_source`: the next family; it learns to answer with a letter, not this task), scored
once on the task's held-out clips (where every cell of the task starts). Then for each recipe and seed one
post-train pipeline (flows/post_train.py): GRPO from that SFT export with configs/tiny-grpo.toml plus the recipe's
overrides and train.seed = seed, its final export scored on the held-out clips. A cell is one such pipeline;
cosmos_train/sweep/learning.py reads it (gain, steps to 0.9 validation accuracy, best - final validation accuracy,
final entropy, run-health verdicts). With `ceiling_sft_steps`, an SFT on each task's own answers is scored too:
what the model can learn of the task at all (a task it cannot learn so is no test of an RL recipe). With
`own_sft_steps`, every recipe also runs from a short SFT on the task's own answers (recipe `<name>-own<N>`): a start
that already reads a little of the task, the remedy for a run that never finds the cue.

Published: `learning-benchmark` (a table: per task and recipe, learned seeds, median gain, ...),
`learning-benchmark-cells` (one row per run), `learning-benchmark-curves` (each task's runs overlaid) and, with
several recipes, `learning-benchmark-remedies` (per verdict of the baseline recipe's failed runs: which recipes made
the same task and seed learn, the evidence that a verdict's remedy works); written
to <output_dir>/learning.json and <output_dir>/table.md. Every cell is a pipeline folder under
<output_dir>/cells: a rerun skips the cells (and SFTs) that finished with the same settings, so the benchmark runs
in parts (`--tasks` / `--seeds` subsets into the same folder, then one run over all of them to tabulate).
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from pydantic import BaseModel, Field

from cosmos_train.config import load_config
from cosmos_train.curves import curves_markdown
from cosmos_train.data.synthetic_families import FAMILIES
from cosmos_train.sweep.learning import Cell, cell_metrics, markdown_table, remedy_rows, remedy_table, summary_rows
from cosmos_train.sweep.report import plot_overlay
from flows.demo import make_data, make_model
from flows.evaluate import EvaluateParams, evaluate
from flows.post_train import PostTrainParams, post_train

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
# every family but speed: with full supervision the tiny model reads speed at 0.52 after 400 SFT steps, so a
# GRPO recipe cannot be judged on it (the SFT ceilings: bench/RESULTS.md, "Learning benchmark")
TASKS = ["direction", "gravity", "two_objects", "size", "count"]
QUICK_TASKS = ["gravity", "size"]  # the quick check: two tasks the demo (direction) never trains GRPO on
QUICK_SEEDS = [0, 1]
DATA_SEED = 0  # every cell of a task sees the same clips: the seeds vary training, not the data
N_VAL = 64  # validation clips per task: GRPO's validation accuracy (best step, steps to 0.9, late collapse)


class LearningBenchmarkParams(BaseModel):
    """The benchmark's grid and budgets."""

    output_dir: str = Field("outputs/learning-benchmark", description="Where the data, SFTs, cells and tables go.")
    tasks: list[str] = Field(
        default_factory=lambda: list(TASKS), min_length=1, description="Synthetic families, one task each."
    )
    seeds: list[int] = Field(default_factory=lambda: [0, 1, 2], min_length=1, description="GRPO seeds per task.")
    recipes: dict[str, list[str]] = Field(
        default_factory=lambda: {"default": list[str]()},
        min_length=1,
        description="Recipe name -> overrides of configs/tiny-grpo.toml (key.path=value); 'default': none.",
    )
    baseline: str = Field(
        "default",
        min_length=1,
        max_length=64,
        description="The recipe the others are compared with in the remedies table: per verdict of its failed "
        "runs, which recipes made the same task and seed learn.",
    )
    format_sft_steps: int = Field(
        200, ge=1, le=100_000, description="Steps of the format-only SFT (configs/tiny-sft.toml, on another task)."
    )
    ceiling_sft_steps: int = Field(
        400,
        ge=0,
        le=100_000,
        description="Steps of an SFT on each task's own answers, scored on its held-out clips: what the model can "
        "learn of the task at all (0: not measured).",
    )
    own_sft_steps: int = Field(
        0,
        ge=0,
        le=100_000,
        description="Also run every recipe from an SFT of this many steps on the task's own answers (recipe "
        "'<name>-own<N>' in the tables): whether a start that already reads a little of the task lets GRPO learn "
        "what it cannot find from a format-only start (0: not run).",
    )
    grpo_steps: int = Field(300, ge=1, le=100_000, description="GRPO steps per cell.")
    n_train: int = Field(
        384,
        ge=8,
        le=1_000_000,
        description="Train clips per task (SFT and GRPO rows; gravity at 56 px has ~400 distinct ones).",
    )
    n_test: int = Field(
        200, ge=1, le=1_000_000, description="Held-out benchmark clips per task (>= 200 for 5-point steps)."
    )


def _made_data(folder: Path, task: str, counts: tuple[int, int, int]) -> bool:
    """Whether `folder` already holds this task's dataset with these counts and DATA_SEED: made again, its files'
    new times would make every finished cell on it run again (a pipeline stage's key holds its inputs' mtimes)."""
    try:
        info = json.loads((folder / "dataset_info.json").read_text())
        made = tuple(info["splits"][split]["count"] for split in ("train", "val", "test"))
        return info["families"] == [task] and info["seed"] == DATA_SEED and made == counts
    except (OSError, ValueError, KeyError, TypeError):
        return False


def format_source(task: str) -> str:
    """The task whose format-only SFT a task's GRPO starts from: the next family, never the task itself."""
    order = list(FAMILIES)
    return order[(order.index(task) + 1) % len(order)]


def _toml(value: Any) -> str:
    return json.dumps(value)  # a JSON string / list of strings is a TOML one


def _pipeline_file(path: Path, name: str, out: Path, model: str, stages: dict[str, dict[str, Any]]) -> Path:
    lines = [f"name = {_toml(name)}", f"output_dir = {_toml(str(out))}", f"model = {_toml(model)}"]
    for stage, keys in stages.items():
        lines += ["", f"[{stage}]", *[f"{k} = {_toml(v)}" for k, v in keys.items()]]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _evaluate_stage(data: str) -> dict[str, Any]:
    return {
        "config": str(CONFIGS / "eval-tiny.toml"),
        # no retries: an unreadable answer counts as wrong (a retry asks for 266 tokens: minutes on a CPU)
        "overrides": ["generation.max_retries=0", f"data_dir={_toml(data)}", "evaluation.skip_saved=false"],
    }


def _sft(out: Path, name: str, model: str, data: str, steps: int, score: bool) -> dict[str, Any]:
    """An SFT on `data`'s train rows (letter answers), its export scored on `data`'s held-out clips if `score`."""
    stages: dict[str, dict[str, Any]] = {
        "sft": {
            "config": str(CONFIGS / "tiny-sft.toml"),
            "overrides": [f"train.train_policy.dataset.name={_toml(data)}", f"train.max_num_steps={steps}"],
        }
    }
    if score:
        stages["evaluate"] = {**_evaluate_stage(data), "base": False}
    pipeline = _pipeline_file(out / "pipelines" / f"{name}.toml", name, out / "sft", model, stages)
    return post_train(PostTrainParams(config=str(pipeline)))


def _accuracy(evaluation: dict[str, Any]) -> float:
    return float(evaluation["scores"]["overall"]["micro"]["accuracy"])


def _start_accuracy(out: Path, sft_export: str, task: str, data: str) -> float:
    """The held-out accuracy GRPO starts from on `task` (the format-only SFT export), scored once per export and
    task: every seed and recipe of the task starts there. Kept under the export's run folder name, so a new SFT
    run is scored anew."""
    folder = out / "start" / f"{Path(sft_export).parents[1].name}-{task}"
    found = sorted(folder.glob("**/results.json"))
    if not found:
        stage = _evaluate_stage(data)
        evaluate(
            EvaluateParams(
                config=stage["config"],
                models=[sft_export],
                labels=["start"],
                overrides=[*stage["overrides"], f"results_dir={_toml(str(folder))}"],
            )
        )
        found = sorted(folder.glob("**/results.json"))
    return float(json.loads(found[0].read_text())["overall"]["micro"]["accuracy"])


def _cell(
    out: Path,
    sft_export: str,
    task: str,
    data: str,
    recipe: str,
    overrides: list[str],
    seed: int,
    steps: int,
    start_accuracy: float,
) -> Cell:
    name = f"{recipe}-{task}-s{seed}"
    pipeline = _pipeline_file(
        out / "pipelines" / f"{name}.toml",
        name,
        out / "cells",
        sft_export,
        {
            "grpo": {
                "config": str(CONFIGS / "tiny-grpo.toml"),
                "overrides": [
                    f"train.train_policy.dataset.name={_toml(data)}",
                    f"train.max_num_steps={steps}",
                    f"train.seed={seed}",
                    *overrides,
                ],
                "export": "final",  # a recipe is judged by the weights a run ends with, not its best step's
            },
            "evaluate": {**_evaluate_stage(data), "base": False},  # the start is scored once (_start_accuracy)
        },
    )
    result = post_train(PostTrainParams(config=str(pipeline)))
    return cell_metrics(
        result["runs"]["grpo"]["run_dir"],
        task=task,
        recipe=recipe,
        seed=seed,
        start_accuracy=start_accuracy,
        final_accuracy=_accuracy(result["evaluations"]["grpo"]),
    )


@flow(name="learning-benchmark", log_prints=True)
def learning_benchmark(params: LearningBenchmarkParams) -> dict[str, Any]:
    logger = get_run_logger()
    unknown = [t for t in params.tasks if t not in FAMILIES]
    if unknown:
        raise ValueError(f"tasks: {unknown} are not synthetic families (choose from {list(FAMILIES)})")
    for name, overrides in params.recipes.items():
        if not name.replace("_", "").replace("-", "").isalnum():
            raise ValueError(f"recipes: the name {name!r} must be letters, digits, - and _ (it names folders)")
        load_config(CONFIGS / "tiny-grpo.toml", overrides, check_paths=False)  # a bad key now, not after hours
    out = Path(params.output_dir).resolve()
    # made once: the tiny model and the data are deterministic, and a rerun must find its finished cells' inputs
    model_dir = out / "tiny-model"
    model = str(model_dir) if (model_dir / "model.safetensors").is_file() else make_model(str(model_dir))
    data: dict[str, str] = {}
    for t in dict.fromkeys([*params.tasks, *(format_source(t) for t in params.tasks)]):
        folder = out / "data" / t
        made = _made_data(folder, t, (params.n_train, N_VAL, params.n_test))
        data[t] = str(folder) if made else make_data(str(folder), params.n_train, N_VAL, params.n_test, DATA_SEED, [t])
    ceilings: dict[str, float] = {}
    if params.ceiling_sft_steps:
        for task in params.tasks:
            done = _sft(out, f"ceiling-{task}", model, data[task], params.ceiling_sft_steps, score=True)
            ceilings[task] = _accuracy(done["evaluations"]["sft"])
    sft_exports: dict[str, str] = {}
    cells: list[Cell] = []
    for task in params.tasks:
        source = format_source(task)
        if source not in sft_exports:
            done = _sft(out, f"format-{source}", model, data[source], params.format_sft_steps, score=False)
            sft_exports[source] = str(done["runs"]["sft"]["result"]["export"])
        starts = [("", sft_exports[source])]
        if params.own_sft_steps:
            own = _sft(out, f"own-{task}", model, data[task], params.own_sft_steps, score=False)
            starts.append((f"-own{params.own_sft_steps}", str(own["runs"]["sft"]["result"]["export"])))
        for suffix, export in starts:
            start = _start_accuracy(out, export, task, data[task])
            for (recipe, overrides), seed in itertools.product(params.recipes.items(), params.seeds):
                cell = _cell(out, export, task, data[task], recipe + suffix, overrides, seed, params.grpo_steps, start)
                logger.info(
                    "%s / %s / seed %d: held-out %.3f -> %.3f (gain %+.3f), validation best %s at step %s, final %s",
                    task, cell.recipe, seed, cell.start_accuracy, cell.final_accuracy, cell.gain,
                    cell.val_best, cell.val_best_step, cell.val_final,
                )  # fmt: skip
                cells.append(cell)
    rows = summary_rows(cells, ceilings)
    table = markdown_table(rows)
    records = [c.record() for c in cells]
    remedies = remedy_rows(cells, params.baseline) if params.baseline in params.recipes else []
    if remedies:
        table += "\n" + remedy_table(remedies, params.baseline)
    (out / "learning.json").write_text(
        json.dumps(
            {"params": params.model_dump(), "ceilings": ceilings, "rows": rows, "remedies": remedies, "cells": records},
            indent=2,
        )
    )
    (out / "table.md").write_text(table)
    create_table_artifact(rows, key="learning-benchmark", description="GRPO on unseen tasks: per task and recipe")
    if remedies:
        create_table_artifact(
            remedies, key="learning-benchmark-remedies", description=f"per verdict of {params.baseline}: fixed by"
        )
    create_table_artifact(records, key="learning-benchmark-cells", description="one row per (task, recipe, seed)")
    panels = []
    for task in params.tasks:
        runs = [(f"{c.recipe} s{c.seed}", Path(c.run_dir)) for c in cells if c.task == task]
        png = plot_overlay(runs, "grpo", "val_accuracy", out / "plots" / f"{task}.png")
        panels.append(curves_markdown(png, f"{task}: every recipe and seed"))
    create_markdown_artifact("\n\n".join(panels), key="learning-benchmark-curves", description="curves per task")
    print(table)
    return {"rows": rows, "remedies": remedies, "cells": records, "table": str(out / "table.md")}
