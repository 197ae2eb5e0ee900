"""The `filter-rl-data` flow: keep the GRPO prompts the current model sometimes gets right.

    cosmos-train filter-rl-data --config configs/tiny-grpo.toml --model RUN/safetensors/final --samples 8
    prefect deployment run 'filter-rl-data/filter-rl-data' --param params='{"config": "configs/tiny-grpo.toml"}'

Steps: the job TOML checked and resolved into a new run folder (RUN/config.toml, as `grpo` does) -> the model
samples every training prompt `samples` times and the run's rewards score them (cosmos_train.train.rl_filter)
-> RUN/filtered.json (or `out`): the rows whose pass rate p has min_pass < p < max_pass, in the input's format,
with filtered_report.json (per prompt: id, pass rate, kept, why) and filtered_pass_rates.png beside it.
Artifacts: `rl-filter-pass-rates` (markdown, the histogram embedded) and `rl-filter-counts` (table: prompts
kept, and dropped because all fail / all pass). Returns {"dataset", "kept", "dropped", "report", "run_dir",
"overrides"}; the overrides (--set keys) make the same GRPO config train on the written file.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from pydantic import BaseModel, Field, model_validator

from cosmos_train.config import Config
from cosmos_train.preflight import check_job, check_model_family
from cosmos_train.train import rl_filter
from cosmos_train.train.rl_filter import FilterResult, FilterSettings, check_model_path, pass_rates_markdown
from tasks.errors import user_errors_reported
from tasks.run_folder import prepare_run_folder


class FilterRLDataParams(BaseModel):
    """Parameters, validated locally and by the server (a bad deployment run is refused up front)."""

    config: str = Field(..., description="Path of the GRPO job TOML (its dataset, rewards and [rollout] sampling).")
    overrides: list[str] = Field(default_factory=list, description="key.path=value overrides, applied last.")
    model: str | None = Field(
        None, description="The model to sample (default: the config's policy.model_name_or_path)."
    )
    samples: int = Field(8, ge=1, description="Completions sampled per prompt.")
    min_pass: float = Field(0.0, ge=0.0, le=1.0, description="Keep prompts whose pass rate is > this (exclusive).")
    max_pass: float = Field(1.0, ge=0.0, le=1.0, description="Keep prompts whose pass rate is < this (exclusive).")
    out: str | None = Field(None, description="The filtered dataset (.json / .jsonl); default RUN/filtered.json.")
    threshold: float = Field(
        1.0, description="Without an accuracy reward in the config: a completion passes when its reward >= this."
    )
    seed: int | None = Field(None, description="Sampling seed (default: the config's train.seed).")
    dataset_script: str | None = Field(None, description="Optional dataset script (rows and REWARD_FUNCTIONS).")

    @model_validator(mode="after")
    def _band(self) -> FilterRLDataParams:
        if self.min_pass >= self.max_pass:
            raise ValueError(f"min_pass {self.min_pass} >= max_pass {self.max_pass}: the band is empty")
        return self

    def settings(self) -> FilterSettings:
        return FilterSettings(
            samples=self.samples,
            min_pass=self.min_pass,
            max_pass=self.max_pass,
            threshold=self.threshold,
            seed=self.seed,
            model=self.model,
            dataset_script=self.dataset_script,
        )


@task(name="sample-and-filter", cache_policy=NO_CACHE)
def sample_and_filter(cfg: Config, settings: FilterSettings, out: Path) -> FilterResult:
    return rl_filter.filter_rl_data(cfg, settings, out)


@flow(name="filter-rl-data", log_prints=True)
def filter_rl_data(params: FilterRLDataParams) -> dict:
    with user_errors_reported("RL data filtering"):
        return _filter_rl_data(params)


def check_inputs(params: FilterRLDataParams) -> Config:
    """Every input error before a model loads (the CLI calls it before Prefect starts): the config (a GRPO
    job), the options, the model folder."""
    cfg = check_job(params.config, params.overrides, params.dataset_script, read_rows=False, policy_type="grpo")
    params.settings().check(Path(params.out) if params.out else None)
    if params.model:
        check_model_path(params.model)
        check_model_family(params.model, vllm=cfg.rollout.backend == "vllm", key="--model")
    return cfg


def _filter_rl_data(params: FilterRLDataParams) -> dict:
    logger = get_run_logger()
    cfg = check_inputs(params)
    job = prepare_run_folder(cfg, params.config, params.overrides, None, params.dataset_script)
    logger.info("run folder: %s", job.run)
    out = Path(params.out).expanduser().absolute() if params.out else job.run / "filtered.json"
    result = sample_and_filter(job.cfg, params.settings(), out)
    create_markdown_artifact(
        pass_rates_markdown(result),
        key="rl-filter-pass-rates",
        description=f"RL data filtering {job.run.name}: pass rates of {len(result.prompts)} prompts",
    )
    create_table_artifact(
        result.counts_table(),
        key="rl-filter-counts",
        description=f"RL data filtering {job.run.name}: prompts kept and dropped (and why)",
    )
    logger.info("kept %d, dropped %d: %s (report %s)", result.kept, result.dropped, result.dataset, result.report)
    return {
        "dataset": str(result.dataset),
        "kept": result.kept,
        "dropped": result.dropped,
        "report": str(result.report),
        "run_dir": str(job.run),
        "overrides": result.overrides,
    }
