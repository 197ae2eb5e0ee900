"""The `post-train` flow: prepare-data -> SFT -> evaluate -> gate -> filter -> GRPO -> evaluate -> gate -> upload.

    cosmos-train post-train --config configs/tiny-post-train.toml [--set sft.train.max_num_steps=40]
    prefect deployment run 'post-train/post-train' --param params='{"config": "configs/tiny-post-train.toml"}'

Each stage is the project's own flow run as a subflow (prepare-data, sft, evaluate, grpo, upload) with
its own run folder under the pipeline folder `<output_dir>/<name>/`; a training stage's job config is resolved
here once (its file, the stage's overrides, the model it starts from, its output folder), written as that run
folder's config.toml and handed to the subflow as that file with no overrides; the GRPO stage starts from the SFT
stage's export, evaluation scores each export (and the base model), the upload sends the result.
`pipeline.json` there records every stage (cosmos_train/pipeline.py): a rerun of a failed pipeline
skips the stages that finished with the same resolved config and inputs, and continues the stage
that failed in its own run folder, from its newest checkpoint. One `post-train-summary` table
compares the stages (accuracy with its interval against chance, flags for degenerate answers, reward, the RL
stage's run-health verdicts, time, where each export went; the returned summary's "health" has each RL stage's
verdicts, which the CLI's last lines give with their remedies); each trained stage's evaluation is also a
`verdict-<stage>` artifact; a failed stage leaves `post-train-failure` with its run folder and last log lines.

With a [gate], each trained stage's export is promoted only when its evaluation beats its parent's (the base
model for SFT, the SFT export for GRPO) by gate.min_gain accuracy points and raises none of the blocking flags
(cosmos_train/promotion.py): the decision is a `gate-<stage>` artifact and `gates` in pipeline.json. An export
not promoted stops the pipeline there (no later stage, nothing uploaded) and fails the flow run with
promotion.NotPromoted (the CLI exits 4); decided from the recorded evaluations, a rerun gives the same verdict
without training again. Each promoted export gets a model card (lineage, data, scores, where it is uploaded):
README.md in the export folder, so it travels with the upload, and a `model-card-<stage>` artifact, published
again with the upload's outcome. [filter] runs the filter-rl-data flow on the model GRPO starts from with the
GRPO stage's job config, and GRPO trains on the rows it keeps. A pipeline file with a [wfm_rl] stage is the
world-model form, wfm_rl -> evaluate_wfm -> upload (flows/post_train_wfm.py); both forms run their stages through
flows/post_train_stages.py (the stage runner, the upload stage, the summary they return).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from pydantic import BaseModel, Field

from cosmos_train.atomic import write_atomic
from cosmos_train.config import Config, load_config
from cosmos_train.errors import DataError, path_errors
from cosmos_train.evaluation.report import answer_profile, run_label, verdict_markdown
from cosmos_train.pipeline import PipelineConfig, load_pipeline_config, stage_key
from cosmos_train.preflight import check_eval
from cosmos_train.promotion import CARD_FILE, NotPromoted, gate_decision, gate_markdown, model_card, stop_paragraph
from cosmos_train.storage.targets import parse_target
from cosmos_train.train.run_health import HealthReport
from flows.evaluate import EvaluateParams, evaluate
from flows.filter_rl_data import FilterRLDataParams, filter_rl_data
from flows.grpo import GRPOParams, grpo
from flows.post_train_stages import PipelineRun, PostTrainSummary, local_inputs, resolved_run_folder
from flows.post_train_wfm import run_wfm_pipeline
from flows.prepare_data import PrepareDataParams, prepare_data
from flows.sft import SFTParams, sft
from tasks.errors import user_errors_reported
from tasks.run_folder import CONFIG_FILE, new_run_dir

SUMMARY_COLUMNS = (
    "model",
    "run / step",
    "accuracy",
    "chance",
    "flags",
    "gate",
    "reward",
    "run health",
    "train seconds",
    "uploaded to",
    "export",
    "run folder",
)


class PostTrainParams(BaseModel):
    """What a user passes from the UI, a schedule or `prefect deployment run`."""

    config: str = Field(..., description="The pipeline TOML (see configs/tiny-post-train.toml).")
    overrides: list[str] = Field(
        default_factory=list,
        description="key.path=value overrides of the pipeline file; `sft.train.max_num_steps=40` goes to the "
        "sft stage's job config.",
    )


@flow(name="post-train", log_prints=True)
def post_train(params: PostTrainParams) -> dict[str, Any]:
    """Run the pipeline's stages in order, skipping those that finished before; returns the summary. Raises
    NotPromoted when the gate stopped an export (after the summary artifacts: the stages that ran are shown)."""
    with user_errors_reported("post-train pipeline"):
        cfg = load_pipeline_config(params.config, params.overrides)
        # a pipeline file with a [wfm_rl] stage is the world-model form: wfm_rl -> evaluate_wfm -> upload
        summary = run_wfm_pipeline(PipelineRun(cfg)) if cfg.wfm_rl is not None else VlmPipeline(cfg).run()
    if summary.stopped:  # outside user_errors_reported: a verdict, not an input to fix (its own artifact)
        raise NotPromoted(stop_paragraph(summary.stopped, summary.folder))
    return summary.as_dict()


def _sent(record: dict[str, Any] | None) -> str:
    if record is None or not record.get("ok"):
        return "not uploaded"
    return f"uploaded: {record.get('files_sent', 0)} files sent, {record.get('files_unchanged', 0)} unchanged"


class VlmPipeline(PipelineRun):
    """One run of the VLM pipeline: the stages in order, each skipped when pipeline.json says it finished."""

    def __init__(self, cfg: PipelineConfig):
        super().__init__(cfg)
        self.jobs: dict[str, Config] = {}  # each training stage's resolved job config (this run's)
        self.lineage: list[dict[str, Any]] = []  # base -> each promoted stage: model, run folder, config

    # ---------------------------------------------------------------- the stages
    def run(self) -> PostTrainSummary:
        cfg = self.cfg
        self.state.clear_gates()  # pipeline.json's decisions are this run's
        base = self.prepare()
        self.lineage = [{"stage": "base", "model": base, "run_dir": None, "config": None}]
        evaluations: dict[str, dict[str, Any]] = {}
        if cfg.evaluate and cfg.evaluate.base:
            evaluations["base"] = self.evaluate("base", base)
        model, parent = base, "base"
        exports: dict[str, str] = {}
        stopped: dict[str, Any] | None = None
        for name, _ in cfg.training_stages():
            rows = self.filter_rows(model)["overrides"] if name == "grpo" and cfg.filter else []
            result = self.train(name, model, rows)
            model = exports[name] = result["export"]
            if cfg.evaluate:
                evaluations[name] = self.evaluate(name, model)
            if cfg.gate:
                decision = self.gate(name, parent, evaluations)
                if not decision["promoted"]:
                    stopped = decision
                    break
            run_dir = self.state.stages[name].get("run_dir")
            config = str(Path(run_dir) / CONFIG_FILE) if run_dir else None
            self.lineage.append({"stage": name, "model": model, "run_dir": run_dir, "config": config})
            self.card(name, evaluations, exports, uploads=None)  # before the upload: README.md travels with it
            parent = name
        uploads = self.upload(exports) if cfg.upload and stopped is None else []
        for name in dict.fromkeys(u["stage"] for u in uploads):  # the cards again, with where the upload put them
            self.card(name, evaluations, exports, uploads)
        return self.summary(exports, evaluations, uploads, stopped)

    def _resolve(self, name: str, model: str | None, out: Path, rows: Sequence[str] = ()) -> Config:
        """A stage's job config with its overrides, the model it starts from, its rows (for GRPO after [filter]:
        the filter's overrides, its file as the dataset) and its output folder: the one read of its TOML for this
        step. model None: the stage's own (the base, for the first stage)."""
        stage = getattr(self.cfg, name)
        placed = [] if model is None else [f'policy.model_name_or_path="{model}"']
        return load_config(stage.config, [*stage.overrides, *placed, *rows, f'train.output_dir="{out}"'])

    def prepare(self) -> str:
        """Validate every training stage's rows before any training (the GRPO stage's model is not trained
        yet: the base model's processor reads its rows, the same tokenizer). Returns the base model."""
        base = self.cfg.model
        for name, stage in self.cfg.training_stages():
            job = self._resolve(name, base, self.folder / "prepare" / name)
            base = base or job.policy.model_name_or_path  # the first stage's own model, when the file names none
            key = stage_key(
                f"prepare-{name}",
                job.model_dump(mode="json"),
                [*local_inputs(job.train.train_policy.dataset.name), *local_inputs(stage.dataset_script)],
            )

            def body(_: str | None, stage: Any = stage, job: Config = job) -> tuple[dict, list]:
                run = resolved_run_folder(job, new_run_dir(job))
                manifest = prepare_data(
                    PrepareDataParams(
                        config=str(run / CONFIG_FILE), run_dir=str(run), dataset_script=stage.dataset_script
                    )
                )
                return {"manifest": manifest}, [manifest]

            self.stage(f"prepare-{name}", key, body)
        assert base is not None  # a training stage's config always names a model (its default, at least)
        return base

    def train(self, name: str, model: str, rows: Sequence[str] = ()) -> dict[str, Any]:
        stage = getattr(self.cfg, name)
        job = self.jobs[name] = self._resolve(name, model, self.folder / name, rows)
        key = stage_key(
            name,
            job.model_dump(mode="json"),
            [
                *local_inputs(model),
                *local_inputs(job.train.train_policy.dataset.name),
                *local_inputs(stage.dataset_script),
            ],
        )

        def body(resume: str | None) -> tuple[dict, list]:
            # the same key: a resumed run folder's config.toml is this very config, written again
            run = resolved_run_folder(job, Path(resume) if resume else new_run_dir(job))
            self.state.set_run_dir(name, str(run))
            config, script = str(run / CONFIG_FILE), stage.dataset_script
            if name == "sft":
                result = sft(
                    SFTParams(
                        config=config,
                        run_dir=str(run),
                        dataset_script=script,
                        train_retries=stage.train_retries,
                        timeout_s=stage.timeout_s,
                    )
                )
            else:
                result = grpo(
                    GRPOParams(
                        config=config,
                        run_dir=str(run),
                        dataset_script=script,
                        train_retries=stage.train_retries,
                        timeout_s=stage.timeout_s,
                    )
                )
            if job.no_effect:  # the stage file's keys with no effect (its run folder's config.toml has them too)
                result["no_effect"] = [n.line() for n in job.no_effect]
            best = (result.get("best") or {}).get("path")
            export = best if name == "grpo" and stage.export == "best" and best else result.get("final")
            if not export:
                raise RuntimeError(
                    f"{name}: the run in {run} wrote no export (train.ckpt.export_safetensors "
                    f"must stay true in a pipeline: the next stage starts from it)"
                )
            return {**result, "export": export}, [export]

        return self.stage(name, key, body)

    def evaluate(self, label: str, model: str) -> dict[str, Any]:
        ev = self.cfg.evaluate
        assert ev is not None
        overrides = [*ev.overrides, f'results_dir="{self.folder / "eval"}"']
        eval_cfg = check_eval(ev.config, overrides, [model])
        key = stage_key(f"evaluate-{label}", eval_cfg.model_dump(mode="json"), [*local_inputs(model)])

        def body(_: str | None) -> tuple[dict, list]:
            out = evaluate(
                EvaluateParams(
                    config=ev.config, models=[model], labels=[label], overrides=overrides, eval_retries=ev.eval_retries
                )
            )
            result = out["results"][0]
            return result, [result["results_json"]]

        result = self.stage(f"evaluate-{label}", key, body)
        if label in self.state.stages:  # a trained stage: its verdict beside it (accuracy vs chance, flags)
            run = self.state.stages[label].get("run_dir")
            create_markdown_artifact(
                verdict_markdown(run_label(model) or label, result, run),
                key=f"verdict-{label}",
                description=f"post-train {self.cfg.name}: {label} evaluated",
            )
        return result

    def filter_rows(self, model: str) -> dict[str, Any]:
        """[filter]: the GRPO stage's rows kept where `model` (the one GRPO starts from) passes a share of its
        samples inside the band; the filter-rl-data flow reads the GRPO stage's job config, resolved here, and
        returns the overrides that make that config train on the rows it wrote."""
        f = self.cfg.filter
        assert f is not None
        job = self._resolve("grpo", model, self.folder / "filter")
        source = job.train.train_policy.dataset.name
        key = stage_key(
            "filter",
            {"job": job.model_dump(mode="json"), "filter": f.model_dump(mode="json")},
            [*local_inputs(model), *local_inputs(source)],
        )

        def body(_: str | None) -> tuple[dict, list]:
            config = self.folder / "filter" / "grpo-job.toml"  # the GRPO stage's job as resolved for the filter
            with path_errors("output_dir / name (the pipeline folder)"):
                config.parent.mkdir(parents=True, exist_ok=True)
            job.write(config)
            out = filter_rl_data(
                FilterRLDataParams(
                    config=str(config), model=model, samples=f.samples, min_pass=f.min_pass, max_pass=f.max_pass
                )
            )
            if not out["kept"]:  # GRPO on no rows would fail later, further from the cause
                raise DataError(
                    f"filter: none of the {out['dropped']} prompts of {source} has a pass rate strictly between "
                    f"min_pass = {f.min_pass:g} and max_pass = {f.max_pass:g} over {f.samples} samples of {model} "
                    f"(report: {out['report']}); widen [filter]'s band, take more samples, or train the model GRPO "
                    "starts from further"
                )
            return {**out, "source": source, "model": model}, [out["dataset"]]

        return self.stage("filter", key, body)

    def gate(self, name: str, parent: str, evaluations: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """[gate] on stage `name`'s export against `parent`'s evaluation: recorded in pipeline.json and published
        (`gate-<name>`); decided again on every run, from the evaluations (skipped when they finished)."""
        gate = self.cfg.gate
        assert gate is not None
        decision = gate_decision(
            name, parent, evaluations[name], evaluations[parent], gate.min_gain, gate.blocking_flags
        )
        self.state.record_gate(name, decision)
        verdict = "promoted" if decision["promoted"] else "stopped (not promoted)"
        self.rows.append({"stage": f"gate-{name}", "ran": verdict, "seconds": 0.0})
        create_markdown_artifact(
            gate_markdown(decision), key=f"gate-{name}", description=f"post-train {self.cfg.name}: {name} {verdict}"
        )
        self.logger.info("gate %s: %s; gain %+.1f points vs %s", name, verdict, decision["gain"], parent)
        return decision

    def targets(self, name: str, exports: dict[str, str]) -> list[str]:
        """The URLs stage `name`'s export is uploaded to (none when [upload] sends another stage's)."""
        up = self.cfg.upload
        if up is None or (up.models == "final" and name != [n for n, _ in self.cfg.training_stages()][-1]):
            return []
        return [parse_target(url).child(name).url if up.models == "all" else parse_target(url).url for url in up.to]

    def card(
        self,
        name: str,
        evaluations: dict[str, dict[str, Any]],
        exports: dict[str, str],
        uploads: list[dict[str, Any]] | None,
    ) -> None:
        """Stage `name`'s model card. Before the upload (uploads None): written as README.md into its export
        (left out of the export's stage keys) and published; after it: published again with the outcome."""
        sent = {u["url"]: u for u in uploads or [] if u.get("stage") == name}
        where = [
            {"url": url, "status": "upload target" if uploads is None else _sent(sent.get(url))}
            for url in self.targets(name, exports)
        ]
        upto = [step["stage"] for step in self.lineage].index(name) + 1
        text = model_card(
            pipeline=self.cfg.name,
            folder=self.folder,
            stage=name,
            lineage=self.lineage[:upto],
            data=[self._data_row(step["stage"]) for step in self.lineage[1:upto]],
            evaluations=evaluations,
            decisions=self.state.gates,
            eval_config=self.cfg.evaluate.config if self.cfg.evaluate else None,
            uploads=where,
        )
        if uploads is None:
            self.cards[name] = text
            with path_errors(f"the {name} stage's export (its model card)"):
                write_atomic(Path(exports[name]) / CARD_FILE, text)
        create_markdown_artifact(text, key=f"model-card-{name}", description=f"post-train {self.cfg.name}: {name}")

    def _data_row(self, name: str) -> dict[str, Any]:
        """A training stage's rows for its card: the dataset it read and how many rows (its prepare report, or
        the filter's counts for GRPO on filtered rows)."""
        dataset = self.jobs[name].train.train_policy.dataset.name
        filtered = self.state.stages.get("filter", {}).get("result") or {}
        f = self.cfg.filter
        if name == "grpo" and f is not None and filtered:
            rows = (
                f"{filtered['kept']} kept of {filtered['kept'] + filtered['dropped']} prompts of "
                f"`{filtered['source']}` (pass rate strictly between {f.min_pass:g} and {f.max_pass:g} over "
                f"{f.samples} samples of `{filtered['model']}`)"
            )
            return {"stage": name, "dataset": dataset, "rows": rows}
        prepared = (self.state.stages.get(f"prepare-{name}", {}).get("result") or {}).get("manifest")
        report = Path(prepared).parent / "prep_report.json" if prepared else None
        try:
            counts = json.loads(report.read_text()) if report else {}
            return {"stage": name, "dataset": dataset, "rows": f"{counts['rows_kept']} used of {counts['rows_read']}"}
        except (OSError, ValueError, KeyError):  # not counted: the card says so
            return {"stage": name, "dataset": dataset, "rows": None}

    # ---------------------------------------------------------------- the report
    def summary(
        self,
        exports: dict[str, str],
        by_label: dict[str, dict[str, Any]],
        uploads: list[dict[str, Any]],
        stopped: dict[str, Any] | None,
    ) -> PostTrainSummary:
        """The stages compared: the `post-train-summary` table (published, logged) and the returned summary."""
        table = []
        for name in ["base", *exports]:
            ev = by_label.get(name)
            row: dict[str, Any] = {"model": name, "export": exports.get(name, "(base model)")}
            if name in exports:
                row["run / step"] = run_label(exports[name]) or exports[name]
            if ev:
                micro = ev["scores"]["overall"]["micro"]
                row["accuracy"] = (
                    f"{100 * micro['accuracy']:.1f} % [{100 * micro['ci95_low']:.1f}, "
                    f"{100 * micro['ci95_high']:.1f}] (n={micro['total']})"
                )
                profile = answer_profile(ev)
                if profile:
                    row["chance"] = f"{100 * profile['chance']:.1f} %"
                    row["flags"] = "; ".join(profile["flags"]) or "ok"
            if name in self.state.gates:
                decision = self.state.gates[name]
                row["gate"] = "promoted" if decision["promoted"] else "stopped: " + "; ".join(decision["reasons"])
            rec = self.state.stages.get(name, {})
            result = rec.get("result") or {}
            if name == "grpo" and result.get("best"):
                best = result["best"]
                row["reward"] = f"{best.get('metric')} {best.get('value'):.3f} (step {best.get('step')})"
            if result.get("health"):  # an RL stage's run-health verdicts (the CLI's last lines give their remedies)
                row["run health"] = HealthReport.from_dict(result["health"]).names()
            if rec:
                row["train seconds"] = round(rec.get("seconds", 0.0), 1)
                row["run folder"] = rec.get("run_dir")
            sent = [u["url"] for u in uploads if u.get("stage") == name and u.get("ok")]
            failed = [u["url"] for u in uploads if u.get("stage") == name and not u.get("ok")]
            if sent or failed:
                row["uploaded to"] = ", ".join(sent) + (f" (NOT uploaded: {', '.join(failed)})" if failed else "")
            if name in by_label or name in exports:
                table.append({c: row.get(c, "") for c in SUMMARY_COLUMNS})  # every row every column, paths last
        self.publish(table, f"the stages compared ({self.folder})")
        return PostTrainSummary(
            folder=str(self.folder),
            exports=exports,
            models=table,
            stages=self.rows,
            evaluations=by_label,
            uploads=uploads,
            runs={name: self.state.stages[name] for name in exports},
            health=self.state.health(exports),
            gates=self.state.gates,
            promoted=list(self.cards),
            stopped=stopped,
            cards={name: str(Path(exports[name]) / CARD_FILE) for name in self.cards},
        )
