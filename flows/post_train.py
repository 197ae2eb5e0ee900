"""The `post-train` flow: prepare-data -> SFT -> evaluate -> GRPO -> evaluate -> upload, as one pipeline.

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
compares the stages (accuracy with its interval against chance, flags for degenerate answers, reward,
time, where each export went); each trained stage's evaluation is also a `verdict-<stage>` artifact; a
failed stage leaves `post-train-failure` with its run folder and last log lines.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from pydantic import BaseModel, Field

from cosmos_train.config import Config, load_config
from cosmos_train.errors import path_errors
from cosmos_train.evaluation.report import answer_profile, run_label, verdict_markdown
from cosmos_train.pipeline import PipelineConfig, PipelineState, load_pipeline_config, stage_key
from cosmos_train.preflight import check_eval
from cosmos_train.storage import parse_target
from flows.evaluate import EvaluateParams, evaluate
from flows.grpo import GRPOParams, grpo
from flows.prepare_data import PrepareDataParams, prepare_data
from flows.sft import SFTParams, sft
from flows.upload import UploadParams, upload
from tasks.errors import user_errors_reported
from tasks.run_folder import CONFIG_FILE, new_run_dir

LOG_TAIL_LINES = 40
SUMMARY_COLUMNS = (
    "model",
    "run / step",
    "accuracy",
    "chance",
    "flags",
    "reward",
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
    """Run the pipeline's stages in order, skipping those that finished before; returns the summary."""
    with user_errors_reported("post-train pipeline"):
        return Pipeline(load_pipeline_config(params.config, params.overrides)).run()


def _local(path: str | None) -> list[str]:
    """The inputs of a stage worth fingerprinting: local paths only (a hub id is part of the config)."""
    return [p for p in [path] if p and Path(p).expanduser().exists()]


def resolved_run_folder(job: Config, run: Path) -> Path:
    """`run` with the stage's resolved config written as its config.toml: the stage's flow is handed that file
    and no overrides, so it reads the resolved config and nothing applies the overrides again."""
    job.write(run / CONFIG_FILE)
    return run


def _log_tail(run_dir: str | None) -> str:
    log = Path(run_dir or "") / "logs" / "train.log"
    if not run_dir or not log.is_file():
        return "(no training log: the stage stopped before training started)"
    lines = log.read_text(errors="replace").splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:])


class Pipeline:
    """One run of the pipeline: the stages in order, each skipped when pipeline.json says it finished."""

    def __init__(self, cfg: PipelineConfig):
        self.cfg = cfg
        self.folder = cfg.folder
        with path_errors("output_dir / name (the pipeline folder)"):
            self.folder.mkdir(parents=True, exist_ok=True)
        self.state = PipelineState(self.folder)
        self.logger = get_run_logger()
        self.rows: list[dict[str, Any]] = []

    # ---------------------------------------------------------------- one stage
    def stage(
        self, name: str, key: str, body: Callable[[str | None], tuple[dict[str, Any], list[str]]]
    ) -> dict[str, Any]:
        """Run `body(run_dir_to_continue)` unless a finished record with this key exists; record it."""
        done = self.state.finished(name, key)
        if done is not None:
            self.logger.info("%s: finished in an earlier run with the same config and inputs; skipped", name)
            self.rows.append(
                {
                    "stage": name,
                    "ran": "skipped (done earlier)",
                    "seconds": round(self.state.stages[name].get("seconds", 0.0), 1),
                }
            )
            return done
        resume = self.state.unfinished_run_dir(name, key)
        if resume:
            self.logger.info("%s: continuing the earlier attempt in %s", name, resume)
        self.state.start(name, key, resume)
        try:
            result, outputs = body(resume)
        except BaseException as e:
            run_dir = self.state.stages[name].get("run_dir")
            self.state.fail(name, f"{type(e).__name__}: {e}")
            create_markdown_artifact(
                f"# Stage `{name}` failed\n\n- pipeline folder: `{self.folder}`\n- run folder: `{run_dir}`\n"
                f"- error: {type(e).__name__}: {str(e)[:1500]}\n\nRun the same pipeline again: finished stages "
                f"are skipped and this one continues from its newest checkpoint.\n\n"
                f"Last lines of its log:\n\n```\n{_log_tail(run_dir)}\n```\n",
                key="post-train-failure",
                description=f"post-train {self.cfg.name}: {name} failed",
            )
            raise
        self.state.finish(name, result, outputs)
        self.rows.append({"stage": name, "ran": "ran", "seconds": round(self.state.stages[name]["seconds"], 1)})
        return result

    # ---------------------------------------------------------------- the stages
    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        base = self.prepare()
        evaluations = []
        if cfg.evaluate and cfg.evaluate.base:
            evaluations.append(self.evaluate("base", base))
        model = base
        exports: dict[str, str] = {}
        for name, _ in cfg.training_stages():
            result = self.train(name, model)
            model = exports[name] = result["export"]
            if cfg.evaluate:
                evaluations.append(self.evaluate(name, model))
        uploads = self.upload(exports) if cfg.upload else []
        return self.summary(exports, evaluations, uploads)

    def _resolve(self, name: str, model: str | None, out: Path) -> Config:
        """A stage's job config with its overrides, the model it starts from and its output folder: the one read
        of its TOML for this step. model None: the stage's own (the base, for the first stage)."""
        stage = getattr(self.cfg, name)
        placed = [] if model is None else [f'policy.model_name_or_path="{model}"']
        return load_config(stage.config, [*stage.overrides, *placed, f'train.output_dir="{out}"'])

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
                [*_local(job.train.train_policy.dataset.name), *_local(stage.dataset_script)],
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

    def train(self, name: str, model: str) -> dict[str, Any]:
        stage = getattr(self.cfg, name)
        job = self._resolve(name, model, self.folder / name)
        key = stage_key(
            name,
            job.model_dump(mode="json"),
            [*_local(model), *_local(job.train.train_policy.dataset.name), *_local(stage.dataset_script)],
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
        key = stage_key(f"evaluate-{label}", eval_cfg.model_dump(mode="json"), [*_local(model)])

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

    def upload(self, exports: dict[str, str]) -> list[dict[str, Any]]:
        """Each chosen export to each target (`<target>/<stage>` when several stages go up). A failed upload
        fails the stage (and the pipeline): the rerun retries it alone, the trained stages being done."""
        up = self.cfg.upload
        assert up is not None
        stages = list(exports) if up.models == "all" else [list(exports)[-1]]
        records: list[dict[str, Any]] = []
        for url in up.to:
            for name in stages:
                target = parse_target(url)
                if up.models == "all":
                    target = target.child(name)
                export = exports[name]
                key = stage_key(f"upload-{name}", {"url": target.url}, [export])

                def body(
                    _: str | None, export: str = export, target: Any = target, name: str = name
                ) -> tuple[dict, list]:
                    report = upload(
                        UploadParams(
                            source=export,
                            to=target.url,
                            s3_endpoint_url=up.s3_endpoint_url,
                            s3_credentials_secret=up.s3_credentials_secret,
                            hf_token_secret=up.hf_token_secret,
                            hf_private=up.hf_private,
                        )
                    )
                    return {**report, "stage": name, "url": target.url, "ok": True}, []

                records.append(self.stage(f"upload {name} -> {target.url}", key, body))
        return records

    # ---------------------------------------------------------------- the report
    def summary(
        self, exports: dict[str, str], evaluations: list[dict[str, Any]], uploads: list[dict[str, Any]]
    ) -> dict[str, Any]:
        by_label = {e["label"]: e for e in evaluations}
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
            rec = self.state.stages.get(name, {})
            result = rec.get("result") or {}
            if name == "grpo" and result.get("best"):
                best = result["best"]
                row["reward"] = f"{best.get('metric')} {best.get('value'):.3f} (step {best.get('step')})"
            if rec:
                row["train seconds"] = round(rec.get("seconds", 0.0), 1)
                row["run folder"] = rec.get("run_dir")
            sent = [u["url"] for u in uploads if u.get("stage") == name and u.get("ok")]
            failed = [u["url"] for u in uploads if u.get("stage") == name and not u.get("ok")]
            if sent or failed:
                row["uploaded to"] = ", ".join(sent) + (f" (NOT uploaded: {', '.join(failed)})" if failed else "")
            if name in by_label or name in exports:
                table.append({c: row.get(c, "") for c in SUMMARY_COLUMNS})  # every row every column, paths last
        create_table_artifact(
            table,
            key="post-train-summary",
            description=f"post-train {self.cfg.name}: the stages compared ({self.folder})",
        )
        create_table_artifact(
            self.rows,
            key="post-train-stages",
            description=f"post-train {self.cfg.name}: which stages ran and which were skipped",
        )
        summary = {
            "folder": str(self.folder),
            "exports": exports,
            "models": table,
            "stages": self.rows,
            "evaluations": by_label,
            "uploads": uploads,
            "runs": {name: self.state.stages[name] for name in exports},
        }
        for row in table:
            self.logger.info("%s", "  ".join(f"{k}: {v}" for k, v in row.items()))
        return summary
