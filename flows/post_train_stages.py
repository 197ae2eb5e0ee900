"""What both forms of the post-train pipeline share: the VLM form (flows/post_train.py) and the world-model form
(flows/post_train_wfm.py) each run their stages through a `PipelineRun` and return a `PostTrainSummary`.

`PipelineRun` is one run of a pipeline: its folder `<output_dir>/<name>/` and that folder's pipeline.json
(cosmos_train/pipeline.py), the stage runner (a stage whose record finished with the same key is skipped, a failed
one continues in its own run folder and leaves a `post-train-failure` artifact), the upload stage, and the
`post-train-summary` / `post-train-stages` tables. `PostTrainSummary` is the flow's returned summary, typed once:
each form fills what it has and the type gives the rest (no gates, cards or stop in the world-model form).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from pydantic import BaseModel, ConfigDict, Field

from cosmos_train.config import Config
from cosmos_train.errors import RunStuck, path_errors
from cosmos_train.pipeline import PipelineConfig, PipelineState, stage_key
from cosmos_train.storage.targets import parse_target
from cosmos_train.wfm.config_schema import WfmConfig
from flows.upload import UploadParams, upload
from tasks.run_folder import CONFIG_FILE

LOG_TAIL_LINES = 40

# a stage's work: given the run folder of an unfinished earlier attempt (None: start afresh), its result for
# pipeline.json and the paths that must still exist for the record to count as finished
StageBody = Callable[[str | None], tuple[dict[str, Any], list[str]]]


class PostTrainSummary(BaseModel):
    """The post-train flow's summary (returned as a dict: `as_dict`). Both forms fill the keys every pipeline has;
    the gate's keys are the VLM form's and keep their defaults in the world-model form."""

    model_config = ConfigDict(extra="forbid")

    folder: str  # the pipeline folder
    exports: dict[str, str]  # trained stage -> its export
    models: list[dict[str, Any]]  # the post-train-summary table's rows
    stages: list[dict[str, Any]]  # the post-train-stages table's rows: which stages ran, which were skipped
    evaluations: dict[str, dict[str, Any]]  # label (base, a stage) -> its evaluation result
    # the world-model form's evaluate-wfm output, whole; the VLM form has no such key (`as_dict` leaves it out
    # when not given, so each form's dict keeps exactly its keys)
    evaluation: dict[str, Any] | None = None
    uploads: list[dict[str, Any]]  # one record per (export, target) uploaded
    runs: dict[str, dict[str, Any]]  # trained stage -> its pipeline.json record
    health: dict[str, dict[str, Any]]  # RL stage -> its run-health record (the CLI's last lines)
    gates: dict[str, dict[str, Any]] = Field(default_factory=dict)  # stage -> this run's gate decision
    promoted: list[str] = Field(default_factory=list)  # the stages whose export got a model card
    stopped: dict[str, Any] | None = None  # the gate decision that stopped the pipeline
    cards: dict[str, str] = Field(default_factory=dict)  # promoted stage -> its model card (README.md)

    def as_dict(self) -> dict[str, Any]:
        """The summary as the flow returns it."""
        return self.model_dump(exclude=None if "evaluation" in self.model_fields_set else {"evaluation"})


def local_inputs(path: str | None) -> list[str]:
    """The inputs of a stage worth fingerprinting: local paths only (a hub id is part of the config)."""
    return [p for p in [path] if p and Path(p).expanduser().exists()]


def resolved_run_folder(job: Config | WfmConfig, run: Path) -> Path:
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


def _failure_markdown(name: str, folder: Path, run_dir: str | None, e: BaseException) -> str:
    """The `post-train-failure` artifact of stage `name`: where it ran and what to do next."""
    where = f"- pipeline folder: `{folder}`\n- run folder: `{run_dir}`\n"
    if isinstance(e, RunStuck):  # no failure to debug from a log: the verdicts say what to change
        return (
            f"# Stage `{name}` ended: RL could not learn\n\n{where}\n{e}\n\nChange what the verdicts say in "
            f"the stage's config and run the pipeline again: finished stages are skipped.\n"
        )
    return (
        f"# Stage `{name}` failed\n\n{where}- error: {type(e).__name__}: {str(e)[:1500]}\n\nRun the "
        f"same pipeline again: finished stages are skipped and this one continues from its newest "
        f"checkpoint.\n\nLast lines of its log:\n\n```\n{_log_tail(run_dir)}\n```\n"
    )


class PipelineRun:
    """One run of the pipeline: its folder and pipeline.json record, each stage skipped when that record says it
    finished with the same key."""

    def __init__(self, cfg: PipelineConfig):
        self.cfg = cfg
        self.folder = cfg.folder
        with path_errors("output_dir / name (the pipeline folder)"):
            self.folder.mkdir(parents=True, exist_ok=True)
        self.state = PipelineState(self.folder)
        self.logger = get_run_logger()
        self.rows: list[dict[str, Any]] = []
        # promoted stage -> its model card (README.md of its export); the world-model form writes none
        self.cards: dict[str, str] = {}

    def stage(self, name: str, key: str, body: StageBody) -> dict[str, Any]:
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
            how = "ended by stop_when_stuck" if isinstance(e, RunStuck) else "failed"
            create_markdown_artifact(
                _failure_markdown(name, self.folder, run_dir, e),
                key="post-train-failure",
                description=f"post-train {self.cfg.name}: {name} {how}",
            )
            raise
        self.state.finish(name, result, outputs)
        self.rows.append({"stage": name, "ran": "ran", "seconds": round(self.state.stages[name]["seconds"], 1)})
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
                # the card's text in the key: README.md is left out of the export's fingerprint, and a changed
                # card (a changed gate, say) must still go up
                card = hashlib.sha256(self.cards.get(name, "").encode()).hexdigest()
                key = stage_key(f"upload-{name}", {"url": target.url, "card": card}, [export])

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

    def publish(self, table: list[dict[str, Any]], compared: str) -> None:
        """The summary table (`compared`: what its description says it compares) and the stages table as
        artifacts, and the summary's rows in the log."""
        create_table_artifact(table, key="post-train-summary", description=f"post-train {self.cfg.name}: {compared}")
        create_table_artifact(
            self.rows,
            key="post-train-stages",
            description=f"post-train {self.cfg.name}: which stages ran and which were skipped",
        )
        for row in table:
            self.logger.info("%s", "  ".join(f"{k}: {v}" for k, v in row.items()))
