"""The post-train pipeline's config and its record of finished stages (no Prefect: flows/post_train.py runs it).

    cosmos-train post-train --config configs/tiny-post-train.toml [--set sft.train.max_num_steps=40]

A pipeline file names one job config per stage, relative to itself:

    name = "tiny"                       # the pipeline folder: <output_dir>/<name>/
    output_dir = "./outputs/post-train"
    model = "outputs/tiny-model"        # the base model the first training stage starts from

    [sft]
    config = "tiny-sft.toml"
    overrides = ["train.max_num_steps=300"]

    [grpo]                              # starts from the SFT stage's export
    config = "tiny-grpo.toml"

    [evaluate]                          # scores the base model and each training stage's export
    config = "eval-tiny.toml"

    [filter]                            # GRPO's rows: those the SFT export answers right in some, not all,
    samples = 8                         # of 8 samples (pass rate strictly between min_pass and max_pass)
    min_pass = 0.0
    max_pass = 1.0

    [gate]                              # an export goes on only when it beats its parent's accuracy
    min_gain = 2.0                      # by this many points, and raises none of the evaluation's flags

    [upload]
    to = ["s3://my-bucket/cosmos/tiny"]

Stages run in the order prepare-data -> sft -> evaluate -> gate -> filter -> grpo -> evaluate -> gate ->
upload, each one only when its section is present. A stage the gate stops ends the pipeline there: no
later stage, no upload (cosmos_train/promotion.py decides and words the verdict).

A world-model pipeline is the same file with a [wfm_rl] stage instead (a world-model job TOML; `model`, when
set, is the diffusers folder it starts from) and [evaluate_wfm], which compares the base model with the stage's
diffusers/final export on the job's held-out prompts (flows/evaluate_wfm.py); [upload] sends the export:

    name = "tiny-wfm"
    [wfm_rl]
    config = "tiny-wfm-flow-grpo.toml"
    overrides = ["trainer.max_iter=40"]
    [evaluate_wfm]                      # prompts / seed default to the job's [evaluation] num_prompts / seed
    prompts = 8

Stages: wfm_rl -> evaluate_wfm -> upload. The VLM stages ([sft], [grpo], [evaluate], [filter], [gate]) do not mix
with it: a pipeline trains one kind of model.

`<output_dir>/<name>/pipeline.json` records each stage's key (a hash of its resolved config and inputs),
state, run folder and result, and this run's gate decisions: a rerun skips every stage whose key matches
a finished record and whose outputs still exist, and continues a stage that failed in its own run folder
(training resumes from the newest checkpoint there).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from cosmos_train.atomic import write_json_atomic
from cosmos_train.config import load_config
from cosmos_train.config.base import Section, read_toml
from cosmos_train.config.explain import explain_errors, unknown_keys
from cosmos_train.config.overrides import parse_override, set_path
from cosmos_train.errors import ConfigError
from cosmos_train.evaluation.config import load_eval_config
from cosmos_train.promotion import CARD_FILE, FLAG_KINDS, FlagKind
from cosmos_train.wfm.config import load_wfm_config

STATE_FILE = "pipeline.json"
WHAT = "pipeline config"


class TrainStage(Section):
    """[sft] / [grpo]: one training stage."""

    config: str = Field(..., description="The stage's job TOML (relative paths: from the pipeline file's folder).")
    overrides: list[str] = Field(default_factory=list, description="key.path=value overrides of that job config.")
    dataset_script: str | None = Field(None, description="Optional dataset script for this stage (see examples/).")
    train_retries: int = Field(1, ge=0, le=100, description="Relaunches of a crashed training job (each resumes).")
    timeout_s: float | None = Field(None, gt=0, description="Stop this stage's training after this many seconds.")


class GRPOStage(TrainStage):
    """[grpo]: the RL stage, started from the SFT stage's export when there is one."""

    export: Literal["best", "final"] = Field(
        "best",
        description="The export that goes on to evaluation and upload: best (by validation reward, "
        "when the run kept one) or final.",
    )


class EvaluateStage(Section):
    """[evaluate]: score the base model and each training stage's export on the config's benchmarks."""

    config: str = Field(..., description="Evaluation config (relative paths: from the pipeline file's folder).")
    overrides: list[str] = Field(default_factory=list, description="key.path=value overrides of that config.")
    base: bool = Field(True, description="Also score the base model, so the table shows what training added.")
    eval_retries: int = Field(1, ge=0, le=100, description="Reruns of a model's evaluation after a crash.")


class WfmEvaluateStage(Section):
    """[evaluate_wfm]: compare the world model the [wfm_rl] stage starts from with its export on held-out prompts."""

    prompts: int | None = Field(
        None, ge=1, le=4096, description="Held-out prompts sampled per model (unset: the job's evaluation.num_prompts)."
    )
    seed: int | None = Field(None, ge=0, description="Seed of the per-prompt noise (unset: the job's evaluation.seed).")
    base: bool = Field(True, description="Also evaluate the base model, so the table shows what training added.")
    eval_retries: int = Field(1, ge=0, le=100, description="Reruns of a model's evaluation after a crash.")


class UploadStage(Section):
    """[upload]: where the pipeline's models go once every other stage finished."""

    to: list[str] = Field(..., min_length=1, description="Targets: s3://bucket/prefix or hf://org/repo URLs.")
    models: Literal["final", "all"] = Field(
        "final",
        description="final: the last training stage's export; all: every training stage's export "
        "(each under <target>/<stage>).",
    )
    s3_endpoint_url: str | None = Field(None, description="Endpoint of an S3-compatible store (unset: AWS_* env).")
    s3_credentials_secret: str | None = Field(
        None, description="Prefect Secret block with the S3 credentials as JSON (unset: PROD_S3_CHECKPOINT_* / AWS_*)."
    )
    hf_token_secret: str | None = Field(None, description="Prefect Secret block with the Hub token (unset: HF_TOKEN).")
    hf_private: bool = Field(True, description="Create a Hub repo private when it does not exist.")


class FilterStage(Section):
    """[filter]: before GRPO, keep the rows whose pass rate (the share of `samples` answers of the model GRPO starts
    from that the rewards pass) lies strictly inside (min_pass, max_pass): a row answered all right or all wrong
    gives GRPO a group with no advantage, nothing to learn. GRPO trains on the rows kept (flows/filter_rl_data.py)."""

    samples: int = Field(8, ge=1, le=1024, description="Answers sampled per row to measure its pass rate.")
    min_pass: float = Field(0.0, ge=0.0, le=1.0, description="Keep a row when its pass rate is above this.")
    max_pass: float = Field(1.0, ge=0.0, le=1.0, description="Keep a row when its pass rate is below this.")

    @model_validator(mode="after")
    def _band(self) -> FilterStage:
        if self.min_pass >= self.max_pass:
            raise ValueError(
                f"min_pass = {self.min_pass:g} is not below max_pass = {self.max_pass:g}: no pass rate lies "
                "strictly between them, so no row would be kept"
            )
        return self


class GateSection(Section):
    """[gate]: which exports are promoted (go on to the next stage, a model card and the upload)."""

    min_gain: float = Field(
        0.0,
        ge=-100.0,
        le=100.0,
        description="Accuracy points (overall micro, 0-100) a stage's export must gain over its parent (SFT: the "
        "base model; GRPO: the SFT export, or the base without SFT): promoted when gain >= min_gain; 0: not "
        "worse; negative: a loss this large is tolerated.",
    )
    blocking_flags: list[FlagKind] = Field(
        default_factory=lambda: list(FLAG_KINDS),
        description="Evaluation flags that stop an export whatever its score: constant_answer (one option for "
        ">= 80% of the questions), unreadable (>= 20% unreadable), not_above_chance (95% interval reaches "
        "chance); [] lets the score alone decide.",
    )


class PipelineConfig(Section):
    """The whole pipeline file."""

    name: str = Field(
        ...,
        min_length=1,
        max_length=120,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="The pipeline folder's name under output_dir; a rerun with the same name continues it.",
    )
    output_dir: str = Field("./outputs/post-train", description="Where pipeline folders are made.")
    model: str | None = Field(
        None, description="Base model of the first training stage (unset: that stage's policy.model_name_or_path)."
    )
    sft: TrainStage | None = Field(None, description="The SFT stage (absent: no SFT).")
    grpo: GRPOStage | None = Field(None, description="The GRPO stage (absent: no GRPO).")
    evaluate: EvaluateStage | None = Field(None, description="Evaluation after each training stage (absent: none).")
    upload: UploadStage | None = Field(None, description="Upload of the resulting model(s) (absent: none).")
    filter: FilterStage | None = Field(
        None, description="Pass-rate filter of GRPO's rows before the GRPO stage (absent: GRPO trains on all)."
    )
    gate: GateSection | None = Field(
        None, description="Promotion gate after each training stage's evaluation (absent: every export goes on)."
    )
    wfm_rl: TrainStage | None = Field(
        None, description="A world-model RL stage (a world-model job TOML); its pipeline has no VLM stage."
    )
    evaluate_wfm: WfmEvaluateStage | None = Field(
        None, description="World-model evaluation of the base and the [wfm_rl] export (absent: none)."
    )

    @model_validator(mode="after")
    def _trains_something(self) -> PipelineConfig:
        if self.sft is None and self.grpo is None and self.wfm_rl is None:
            raise ValueError("a pipeline needs an [sft] or a [grpo] section (or both), or a world-model [wfm_rl]")
        return self

    @model_validator(mode="after")
    def _sections_that_need_others(self) -> PipelineConfig:
        vlm = [s for s in ("sft", "grpo", "evaluate", "filter", "gate") if getattr(self, s) is not None]
        if self.wfm_rl is not None and vlm:
            raise ValueError(
                f"[wfm_rl] trains a world model; [{'], ['.join(vlm)}] belong to a VLM pipeline: a pipeline trains "
                "one kind of model (world model: [wfm_rl], [evaluate_wfm], [upload]); use two pipeline files"
            )
        if self.evaluate_wfm is not None and self.wfm_rl is None:
            raise ValueError("[evaluate_wfm] evaluates the [wfm_rl] stage's export: it needs a [wfm_rl] section")
        if self.filter is not None and self.grpo is None:
            raise ValueError("[filter] selects the GRPO stage's rows: it needs a [grpo] section")
        if self.gate is not None and (self.evaluate is None or not self.evaluate.base):
            raise ValueError(
                "[gate] compares each export with its parent's evaluation (the first stage's parent is the base "
                "model): it needs an [evaluate] section with base = true"
            )
        return self

    @property
    def folder(self) -> Path:
        return Path(self.output_dir).expanduser().resolve() / self.name

    def training_stages(self) -> list[tuple[str, TrainStage]]:
        stages = (("sft", self.sft), ("grpo", self.grpo), ("wfm_rl", self.wfm_rl))
        return [(n, s) for n, s in stages if s is not None]


def is_pipeline_file(path: str | Path) -> bool:
    """A pipeline file rather than a job config: an [sft], [grpo] or [wfm_rl] table naming a `config` (a job
    config's sections are train, policy, rollout, ...)."""
    try:
        raw = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False  # the job config loader names the problem
    return any(isinstance(raw.get(s), dict) and "config" in raw[s] for s in ("sft", "grpo", "wfm_rl"))


def _stage_override(raw: dict[str, Any], text: str) -> bool:
    """`sft.train.max_num_steps=4` -> appended to [sft].overrides (a key of the stage's job config, not
    of the pipeline's stage section)."""
    head, _, rest = text.partition("=")
    parts = head.strip().split(".")
    models: dict[str, type[Section]] = {
        "sft": TrainStage,
        "grpo": GRPOStage,
        "evaluate": EvaluateStage,
        "wfm_rl": TrainStage,
    }
    if len(parts) < 2 or parts[0] not in models or parts[1] in models[parts[0]].model_fields:
        return False
    section = raw.setdefault(parts[0], {})
    if not isinstance(section, dict):
        return False
    section.setdefault("overrides", []).append(f"{'.'.join(parts[1:])}={rest}")
    return True


def load_pipeline_config(path: str | Path, overrides: Iterable[str] = ()) -> PipelineConfig:
    """Parse and validate a pipeline file; stage config paths come back absolute. Raises ConfigError
    naming every problem (unknown keys with the closest valid one, bounds in words, missing stage configs)."""
    p = Path(path)
    raw, source = read_toml(path, what=WHAT)
    raw.setdefault("name", p.stem)
    for text in overrides:
        if not _stage_override(raw, text):
            key_path, value = parse_override(text)
            set_path(raw, key_path, value)
    problems = unknown_keys(raw, PipelineConfig)
    if problems:
        raise ConfigError(problems, source, what=WHAT)
    try:
        cfg = PipelineConfig.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(explain_errors(e, PipelineConfig), source, what=WHAT) from None
    here = p.resolve().parent
    for name in ("sft", "grpo", "evaluate", "wfm_rl"):
        stage = getattr(cfg, name)
        if stage is None:
            continue
        resolved = (here / stage.config).resolve() if not Path(stage.config).is_absolute() else Path(stage.config)
        if not resolved.is_file():
            problems.append(f"{name}.config: {stage.config} does not exist (looked for {resolved})")
        stage.config = str(resolved)
        script = getattr(stage, "dataset_script", None)
        if script:
            stage.dataset_script = str((here / script).resolve())
    if cfg.filter is not None and cfg.grpo is not None and cfg.grpo.dataset_script:
        problems.append(
            "filter: the GRPO stage reads its rows through dataset_script, which the filter stage cannot replace "
            "with the rows it keeps; remove [filter], or drop grpo.dataset_script and name the rows in the GRPO "
            "config's train.train_policy.dataset.name"
        )
    if not problems:
        problems += _stage_config_problems(cfg)
    for url in cfg.upload.to if cfg.upload else []:
        if not url.startswith(("s3://", "hf://")) or len(url.split("://", 1)[1].strip("/")) == 0:
            problems.append(f"upload.to: {url!r} is not an s3://bucket/prefix or hf://org/repo URL")
    if problems:
        raise ConfigError(problems, source, what=WHAT)
    return cfg


def _stage_config_problems(cfg: PipelineConfig) -> list[str]:
    """Each stage's own config with its overrides, checked now: a typo in the GRPO stage's overrides must
    not wait for hours of SFT to surface. Model paths are not checked (earlier stages make them)."""
    out = []
    if cfg.wfm_rl is not None:
        return _wfm_stage_problems(cfg.wfm_rl)
    for name, stage in cfg.training_stages():
        try:
            job = load_config(stage.config, stage.overrides, check_paths=False)
        except ConfigError as e:
            out += [f"{name} (config {stage.config}): {p}" for p in e.problems]
            continue
        if job.policy_type != name:
            out.append(
                f"{name}.config: {stage.config} is a {job.policy_type} job config; the [{name}] stage "
                f'needs train.train_policy.type = "{name}"'
            )
        elif not job.train.ckpt.export_safetensors:
            out.append(
                f"{name}: train.ckpt.export_safetensors = false in {stage.config}; a pipeline stage must "
                "export (the next stage starts from the export)"
            )
    if cfg.evaluate is not None:
        try:
            load_eval_config(cfg.evaluate.config, cfg.evaluate.overrides)
        except ConfigError as e:
            out += [f"evaluate (config {cfg.evaluate.config}): {p}" for p in e.problems]
    return out


def _wfm_stage_problems(stage: TrainStage) -> list[str]:
    """The [wfm_rl] stage's world-model job config with its overrides, checked now (its paths when the stage
    starts: the pipeline's `model` may replace the config's)."""
    if stage.dataset_script:
        return ["wfm_rl.dataset_script: a world-model job reads its [dataloader_train]; remove dataset_script"]
    try:
        job = load_wfm_config(stage.config, stage.overrides, check_paths=False)
    except ConfigError as e:
        return [f"wfm_rl (config {stage.config}): {p}" for p in e.problems]
    if not job.checkpoint.export_diffusers:
        return [
            f"wfm_rl: checkpoint.export_diffusers = false in {stage.config}; a pipeline stage must export (the "
            "evaluation and the upload take RUN/diffusers/final)"
        ]
    return []


# ----------------------------------------------------------------------------- stage keys
def folder_fingerprint(path: str | Path, max_files: int = 100_000) -> list[Any]:
    """What a stage's input folder (a model, a dataset) looks like without reading it: each file's
    relative path, size and mtime. A hub id or a missing path is its name alone. A folder's top-level
    README.md (the model card the pipeline writes into a promoted export) is left out: writing the card must
    not make the stages that read that export (its evaluation, the next stage, the upload) run again."""
    p = Path(path).expanduser()
    if p.is_file():
        st = p.stat()
        return [[p.name, st.st_size, st.st_mtime_ns]]
    if not p.is_dir():
        return [str(path)]
    out: list[Any] = []
    for root, dirs, files in os.walk(p):
        dirs.sort()
        for f in sorted(files):
            if f == CARD_FILE and Path(root) == p:
                continue
            fp = Path(root) / f
            try:
                st = fp.stat()
            except OSError:
                continue
            out.append([str(fp.relative_to(p)), st.st_size, st.st_mtime_ns])
            if len(out) >= max_files:
                return out
    return out


def stage_key(stage: str, resolved: dict[str, Any], inputs: Iterable[str | Path]) -> str:
    """sha256 of the stage's name, its resolved config (as JSON) and the fingerprints of its inputs."""
    what = {"stage": stage, "config": resolved, "inputs": {str(i): folder_fingerprint(i) for i in inputs}}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


# ----------------------------------------------------------------------------- the record
StageStatus = Literal["running", "failed", "done"]


class PipelineState:
    """`<pipeline folder>/pipeline.json`: {"stages": {name: {key, status, run_dir, result, started, finished}},
    "gates": {stage: this run's gate decision (promotion.gate_decision)}}. Written whole and atomically after
    every change, so a killed pipeline leaves the last good record. A gate decision is not a stage: it is
    decided again on every run from the (skipped) evaluations, so a changed [gate] takes effect at once."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / STATE_FILE
        self.stages: dict[str, dict[str, Any]] = {}
        self.gates: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            try:
                saved = json.loads(self.path.read_text())
                self.stages, self.gates = saved.get("stages", {}), saved.get("gates", {})
            except (json.JSONDecodeError, AttributeError):
                self.stages = {}  # an unreadable record only costs a rerun of every stage

    def finished(self, name: str, key: str) -> dict[str, Any] | None:
        """The result of a finished stage with this key whose recorded paths still exist, else None."""
        rec = self.stages.get(name)
        if not rec or rec.get("status") != "done" or rec.get("key") != key:
            return None
        if not all(Path(p).exists() for p in rec.get("outputs", [])):
            return None
        return rec.get("result")

    def unfinished_run_dir(self, name: str, key: str) -> str | None:
        """The run folder of this stage's earlier attempt with the same key, to continue in."""
        rec = self.stages.get(name)
        if (
            rec
            and rec.get("status") != "done"
            and rec.get("key") == key
            and rec.get("run_dir")
            and Path(rec["run_dir"]).is_dir()
        ):
            return rec["run_dir"]
        return None

    def start(self, name: str, key: str, run_dir: str | None = None) -> None:
        self.stages[name] = {"key": key, "status": "running", "run_dir": run_dir, "started": time.time()}
        self.save()

    def set_run_dir(self, name: str, run_dir: str) -> None:
        self.stages[name]["run_dir"] = run_dir
        self.save()

    def finish(self, name: str, result: dict[str, Any], outputs: Iterable[str] = ()) -> None:
        rec = self.stages[name]
        rec.update(status="done", result=result, outputs=[str(o) for o in outputs], finished=time.time())
        rec["seconds"] = rec["finished"] - rec["started"]
        self.save()

    def fail(self, name: str, error: str) -> None:
        rec = self.stages[name]
        rec.update(status="failed", error=error[-2000:], finished=time.time())
        self.save()

    def health(self, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The run-health record (RUN/result.json's "health", train/run_health.py) of each of these stages that
        has one (an RL stage's), by name: the summary's "health", the CLI's last lines."""
        results = {name: self.stages.get(name, {}).get("result") or {} for name in names}
        return {name: r["health"] for name, r in results.items() if r.get("health")}

    def clear_gates(self) -> None:
        """At the start of a run: the decisions recorded are this run's (a stage an earlier run let through may
        not get its turn this time)."""
        if self.gates:
            self.gates = {}
            self.save()

    def record_gate(self, name: str, decision: dict[str, Any]) -> None:
        self.gates[name] = decision
        self.save()

    def save(self) -> None:
        record: dict[str, Any] = {"stages": self.stages}
        if self.gates:
            record["gates"] = self.gates
        write_json_atomic(self.path, record, sort_keys=True)
