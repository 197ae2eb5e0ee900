"""The post-train pipeline's world-model form: wfm_rl -> evaluate_wfm -> upload. flows/post_train.py runs it when
the pipeline file has a [wfm_rl] stage (cosmos_train/pipeline.py has the file's form); its stages run as the VLM
form's do, through flows/post_train_stages.py's `PipelineRun`, and it returns the same `PostTrainSummary`.

    cosmos-train post-train --config configs/tiny-wfm-post-train.toml [--set wfm_rl.trainer.max_iter=4]

The stages are the project's own flows as subflows: the wfm_rl flow in its run folder under the pipeline folder
(`<output_dir>/<name>/wfm_rl/<timestamp>`, its job config resolved once here and written as that folder's
config.toml), then the evaluate-wfm flow on the base model and the stage's diffusers/final export with that same
config (its held-out prompts, sampler and rewards; results in `<output_dir>/<name>/eval-wfm/`), then the upload
of the export. pipeline.json records each as the VLM stages are recorded: a rerun skips what finished with the
same config and inputs and continues a failed training in its run folder. `post-train-summary` compares the base
and the export (reward with its interval, the paired gain, the held-out diffusion loss, flags, the run-health
verdicts of the training, also the returned summary's "health").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cosmos_train.pipeline import stage_key
from cosmos_train.train.run_health import HealthReport
from cosmos_train.wfm.config import load_wfm_config
from cosmos_train.wfm.config_schema import WfmConfig
from cosmos_train.wfm.eval_report import format_stat, paired_difference
from flows.evaluate_wfm import EvaluateWfmParams, evaluate_wfm
from flows.post_train_stages import PipelineRun, PostTrainSummary, local_inputs, resolved_run_folder
from flows.wfm_rl import WfmRLParams, wfm_rl
from tasks.run_folder import CONFIG_FILE, new_run_dir

STAGE = "wfm_rl"
EVAL_STAGE = "evaluate_wfm"
SUMMARY_COLUMNS = (
    "model",
    "reward",
    "gain over base (paired)",
    "held-out diffusion loss",
    "flags",
    "run health",
    "train seconds",
    "uploaded to",
    "export",
    "run folder",
)


def run_wfm_pipeline(p: PipelineRun) -> PostTrainSummary:
    """The world-model pipeline's stages in order, each skipped when pipeline.json says it finished."""
    cfg = p.cfg
    stage = cfg.wfm_rl
    assert stage is not None
    placed = [f'model.model_name_or_path="{cfg.model}"'] if cfg.model else []
    job = load_wfm_config(stage.config, [*stage.overrides, *placed, f'job.output_dir="{p.folder / STAGE}"'])
    base = job.model.model_name_or_path
    key = stage_key(STAGE, job.model_dump(mode="json"), [*local_inputs(base), *local_inputs(job.video.dataset_dir)])

    def body(resume: str | None) -> tuple[dict[str, Any], list[str]]:
        # the same key: a resumed run folder's config.toml is this very config, written again
        run = resolved_run_folder(job, Path(resume) if resume else new_run_dir(job))
        p.state.set_run_dir(STAGE, str(run))
        result = wfm_rl(
            WfmRLParams(
                config=str(run / CONFIG_FILE),
                run_dir=str(run),
                train_retries=stage.train_retries,
                timeout_s=stage.timeout_s,
            )
        )
        if not result.get("final"):
            raise RuntimeError(
                f"{STAGE}: the run in {run} wrote no diffusers/final export (checkpoint.export_diffusers must stay "
                "true in a pipeline: the evaluation and the upload take it)"
            )
        return {**result, "export": result["final"]}, [result["final"]]

    trained = p.stage(STAGE, key, body)
    export = trained["export"]
    evaluation = _evaluate(p, job, base, export) if cfg.evaluate_wfm else None
    uploads = p.upload({STAGE: export}) if cfg.upload else []
    return _summary(p, base, export, evaluation, uploads)


def _evaluate(p: PipelineRun, job: WfmConfig, base: str, export: str) -> dict[str, Any]:
    """evaluate-wfm on the base (unless base = false) and the export, with the stage's resolved job config."""
    ev = p.cfg.evaluate_wfm
    assert ev is not None
    models, labels = ([base, export], ["base", STAGE]) if ev.base else ([export], [STAGE])
    config = Path(p.state.stages[STAGE]["run_dir"]) / CONFIG_FILE
    what = {"job": job.model_dump(mode="json"), "evaluate_wfm": ev.model_dump(mode="json"), "labels": labels}
    key = stage_key(EVAL_STAGE, what, [*local_inputs(base), export])

    def body(_: str | None) -> tuple[dict[str, Any], list[str]]:
        out = evaluate_wfm(
            EvaluateWfmParams(
                config=str(config),
                models=models,
                labels=labels,
                prompts=ev.prompts,
                seed=ev.seed,
                out=str(p.folder / "eval-wfm"),
                eval_retries=ev.eval_retries,
            )
        )
        return out, [str(Path(out["out"]) / "results.json")]

    return p.stage(EVAL_STAGE, key, body)


def _summary(
    p: PipelineRun, base: str, export: str, evaluation: dict[str, Any] | None, uploads: list[dict[str, Any]]
) -> PostTrainSummary:
    results = {r["label"]: r for r in (evaluation or {}).get("results", [])}
    rec = p.state.stages.get(STAGE, {})
    table = []
    for name, model in (("base", base), (STAGE, export)):
        r = results.get(name)
        row: dict[str, Any] = {"model": name, "export": model if name == STAGE else f"{model} (base model)"}
        if r is not None:
            row["reward"] = format_stat(r["reward_total"]) + f" (n={r['num_prompts']})"
            row["held-out diffusion loss"] = format_stat(r["heldout_diffusion_loss"])
            row["flags"] = "; ".join(r["flags"]) or "ok"
            if name == STAGE and "base" in results:
                gain = paired_difference(r["per_prompt"]["total"], results["base"]["per_prompt"]["total"])
                row["gain over base (paired)"] = format_stat(gain, signed=True)
        if name == STAGE:
            if health := p.state.health([STAGE]).get(STAGE):  # the CLI's last lines give the remedies
                row["run health"] = HealthReport.from_dict(health).names()
            row["train seconds"] = round(rec.get("seconds", 0.0), 1)
            row["run folder"] = rec.get("run_dir")
            row["uploaded to"] = ", ".join(u["url"] for u in uploads if u.get("ok"))
        if r is not None or name == STAGE:
            table.append({c: row.get(c, "") for c in SUMMARY_COLUMNS})
    p.publish(table, "base vs the world-model RL export")
    return PostTrainSummary(
        folder=str(p.folder),
        exports={STAGE: export},
        models=table,
        stages=p.rows,
        evaluations=results,
        evaluation=evaluation,
        uploads=uploads,
        runs={STAGE: rec},
        health=p.state.health([STAGE]),
    )
