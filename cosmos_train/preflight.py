"""Checks of a job's inputs that take a second, run before any server, process or model starts.

    from cosmos_train.preflight import check_job
    cfg = check_job("configs/tiny-sft.toml", ["train.epoch=2"])   # raises a UserError, or returns the Config
    check_eval("configs/eval-tiny.toml", [], ["outputs/tiny-model"])

The CLI calls it before it starts Prefect (a temporary API server alone takes ~15 s), and the flows
call it again on their first line, since a deployment run never passes through the CLI. It reads
the rows of local datasets (not their media) and loads no model: decoding, tokenizing and the trainer's
own checks stay with data preparation and training, which name the row or file themselves. It imports the
layers it checks against (models, data, generation, evaluation) like any module; the CLI imports it only in
the commands that run a job.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

import torch

from cosmos_train.checkpoint_files import RESUME, check_dcp_files
from cosmos_train.checkpoint_paths import resolve_resume
from cosmos_train.config import Config, ConfigError, DatasetConfig, load_config
from cosmos_train.config.paths import is_s3
from cosmos_train.data.sources import SplitRole, detect_source, load_samples
from cosmos_train.errors import DataError, ModelError, not_a_folder
from cosmos_train.evaluation.benchmark import load_benchmark
from cosmos_train.evaluation.config import EvalConfig, EvalConfigError, load_eval_config
from cosmos_train.generation.vllm_requests import check_vllm_family
from cosmos_train.models.families import FAMILIES, UNSUPPORTED_TYPES
from cosmos_train.models.load import resolve_attention
from cosmos_train.models.parallelize import compute_dtype


def check_job(
    config: str | Path,
    overrides: list[str] | None = None,
    dataset_script: str | None = None,
    run_dir: str | Path | None = None,
    read_rows: bool = True,
    policy_type: Literal["sft", "grpo"] | None = None,
) -> Config:
    """The validated job config; raises ConfigError / DataError / CheckpointError naming what is wrong.

    read_rows: also read local datasets' rows (`check_rows`), and for a training command (`policy_type` given) check
    that they make at least one step (`check_one_step`). The flows pass False: their next step, data preparation,
    reads every row anyway and names the bad ones the same way, and the trainer's sampler refuses too few rows.
    policy_type: the trainer that will run it (the `sft` or `grpo` command / flow); a config of the
    other kind is refused (each trainer would otherwise fail later on the other's rows)."""
    cfg = load_config(config, overrides or [])  # every config check, unsupported settings included
    if policy_type is not None and cfg.policy_type != policy_type:
        raise ConfigError(
            f"train.train_policy.type = {cfg.policy_type!r}: this is the {policy_type} command / "
            f"flow; run the {cfg.policy_type} one (`cosmos-train {cfg.policy_type}`)",
            str(config),
        )
    check_attention(cfg)
    check_model_family(cfg.policy.model_name_or_path, vllm=cfg.policy_type == "grpo" and cfg.rollout.backend == "vllm")
    if dataset_script is not None and not Path(dataset_script).expanduser().is_file():
        raise DataError(
            f"dataset script {dataset_script}: no such file (pass the path of a .py file, see examples/my_dataset.py)"
        )
    datasets = [("train.train_policy.dataset", cfg.train.train_policy.dataset)]
    if cfg.validation.enable and cfg.validation.dataset is not None:
        datasets.append(("validation.dataset", cfg.validation.dataset))
    for key, ds in datasets:
        check_dataset_paths(key, ds, has_script=dataset_script is not None)
    roles: list[SplitRole] = (["train", "val"] if cfg.validation.enable else ["train"]) if read_rows else []
    for role in roles:
        usable = check_rows(cfg, role, dataset_script)
        if role == "train" and usable is not None and policy_type is not None:
            check_one_step(cfg, usable)
    # A retried or continued run resumes from its own folder first; only a fresh run resolves train.resume.
    # A checkpoint on S3 is found (and downloaded) by the trainer's rank 0: run_sync.fetch_checkpoint.
    on_s3 = is_s3(str(cfg.train.resume)) or (cfg.train.resume is True and is_s3(cfg.train.output_dir))
    fresh = run_dir is None or not (Path(run_dir) / "checkpoints").is_dir()
    if cfg.train.resume is not False and not on_s3 and fresh:
        found = resolve_resume(cfg.train.resume, cfg.train.output_dir)
        if found is not None:  # its files there and whole (a stat each), not only its COMPLETE marker
            check_dcp_files(found, RESUME)
    return cfg


def check_attention(cfg: Config) -> None:
    """policy.attn_implementation can run on this machine's device (the trainer's: CUDA where present), as the
    trainer's ranks will find before loading the weights; said here before anything starts."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    resolve_attention(cfg.policy.attn_implementation, device, compute_dtype(cfg, device), cfg.policy_type)


def local_model_config(model: str) -> Path | None:
    """The config.json of `model` found without the network: in the local folder it names, or, for a hub id, in
    the Hugging Face cache (HF_HOME / HF_HUB_CACHE); None where neither has it."""
    from huggingface_hub import try_to_load_from_cache  # why: optional Hub client, only for a hub id's cache

    folder = Path(model).expanduser()
    if folder.is_dir():
        config = folder / "config.json"
        return config if config.is_file() else None
    if model.count("/") != 1 or model.startswith((".", "/", "~")):
        return None
    try:
        cached = try_to_load_from_cache(model, "config.json")
    except ValueError:  # not a valid repo id
        return None
    return Path(cached) if isinstance(cached, str) else None


def check_model_family(model: str, vllm: bool = False, key: str = "policy.model_name_or_path") -> str | None:
    """The model's architecture has a family spec (ModelError naming `key`, the model, its model_type and the
    supported families), and, when the vLLM engine will serve it (`vllm`), one that vLLM loads from such a folder
    (ConfigError). Returns the model_type, or None where its config.json is neither a local file nor in the
    Hugging Face cache (the family is then checked when the model loads)."""
    config = local_model_config(model)
    if config is None:
        return None
    try:
        model_type = json.loads(config.read_text()).get("model_type")
    except (OSError, ValueError) as e:
        raise ModelError(f"{key}: {config} is not readable JSON ({e})") from None
    family = next((f for f in FAMILIES if model_type in f.model_types), None)
    if family is None:
        why = f" ({UNSUPPORTED_TYPES[model_type]})" if model_type in UNSUPPORTED_TYPES else ""
        supported = ", ".join(t for f in FAMILIES for t in f.model_types)
        raise ModelError(
            f"{key} = {model!r} is a {model_type!r} model{why}, which no family here loads: the "
            f"supported model types are {supported} (vision-language: Cosmos-Reason1 / Qwen2.5-VL, "
            "Cosmos-Reason2 / Qwen3-VL, Cosmos3-Edge; text-only: Qwen2.5, Qwen3 dense, Llama, Mistral). "
            f"Point {key} at a model of one of these families"
        )
    if vllm:
        check_vllm_family(family.name, model)
    return str(model_type)


def check_dataset_paths(key: str, ds: DatasetConfig, has_script: bool = False) -> None:
    """Files the dataset config names exist, and the source can be told from them."""
    if ds.annotation_path and not Path(ds.annotation_path).expanduser().is_file():
        raise DataError(f"{key}.annotation_path: {ds.annotation_path} does not exist (the LLaVA json file)")
    if ds.media_path and not Path(ds.media_path).expanduser().is_dir():
        raise DataError(
            f"{key}.media_path: {ds.media_path} is not a folder (the root that relative media "
            "paths in the rows are read from)"
        )
    if has_script and ds.source in ("auto", "script") and not ds.name:
        return  # the dataset script provides the rows
    detect_source(ds)


def check_eval(config: str | Path, overrides: list[str] | None = None, models: list[str] | None = None) -> EvalConfig:
    """An evaluation's config, every benchmark's questions (read, not answered) and local model folders;
    returns the validated config."""
    cfg = load_eval_config(config, overrides or [])
    if blocked := not_a_folder("results_dir", cfg.results_dir):  # each model's results folder is made under it
        raise EvalConfigError(blocked, str(config))
    for ds in cfg.datasets:
        load_benchmark(
            cfg.data_dir,
            ds,
            cfg.limit,
            require_options=cfg.evaluation.answer_type != "freeform",
            allow_media_outside_root=cfg.evaluation.allow_media_outside_root,
        )
    for model in models or [cfg.model.model_name]:
        path = Path(model).expanduser()
        looks_local = model.startswith((".", "/", "~")) or model.count("/") != 1
        if looks_local and not path.is_dir():
            raise ModelError(
                f"--model {model}: {'not a folder but a file' if path.exists() else 'no such folder'} (a "
                "checkpoint folder such as RUN/safetensors/final, or a hub id org/name)"
            )
        check_model_family(model, vllm=cfg.engine == "vllm", key="--model" if models else "model.model_name")
    return cfg


def check_rows(cfg: Config, role: SplitRole, dataset_script: str | None = None, shown: int = 5) -> int | None:
    """Read a local dataset's rows (file parsing, split, row layout, media paths; no decoding) and, under
    on_bad_row = "fail", raise naming the first bad rows. Returns how many rows are usable (the good ones), or
    None where the rows were not read: hub datasets, Cosmos-Reason copies (their clips are extracted on first
    read) and dataset scripts (the user's own code) are left to data preparation: reading them here could take
    as long as preparing them."""
    ds = (
        cfg.validation.dataset
        if role == "val" and cfg.validation.dataset is not None
        else cfg.train.train_policy.dataset
    )
    if dataset_script is not None or detect_source(ds) in ("cosmos", "script"):
        return None
    if not (ds.annotation_path or Path(ds.name).expanduser().exists()):
        return None  # a hub id
    samples = load_samples(cfg, role, keep_errors=True)
    bad = [s for s in samples if "error" in s]
    if bad and ds.on_bad_row == "fail":
        lines = [f"  - {s['error']['message']}" for s in bad[:shown]]
        more = f"\n  ... and {len(bad) - shown} more" if len(bad) > shown else ""
        raise DataError(
            f"{len(bad)} bad row(s) of {len(samples)} ({role}); fix them or set "
            'dataset.on_bad_row = "skip" to drop and count them:\n' + "\n".join(lines) + more
        )
    return len(samples) - len(bad)


def check_one_step(cfg: Config, rows: int) -> None:
    """`rows` usable training rows make at least one step, as the trainer's sampler (train/sampler.py) will
    require after Prefect, the run folder and the model have started: a DataError naming the dataset, the row
    count and the batch key. Data preparation only ever drops rows, so fewer here can never become enough."""
    t, par = cfg.train, cfg.policy.parallelism
    ds = t.train_policy.dataset
    source = ds.annotation_path or f"{ds.name}, split {ds.split!r}"  # a LLaVA file has no splits
    dataset = f"train.train_policy.dataset ({source})"
    if rows == 0:
        raise DataError(
            f'{dataset}: no usable training row: dataset.on_bad_row = "skip" dropped every row; set it to '
            '"fail" to see why they are bad, and fix them'
        )
    if cfg.policy_type == "grpo":
        need, n = cfg.prompts_per_step, cfg.rollout.n_generation
        if rows >= need:
            return
        raise DataError(
            f"{dataset}: {rows} usable training row(s), fewer than the {need} prompts one GRPO step samples "
            f"(train.train_batch_per_replica = {t.train_batch_per_replica} completions / rollout.n_generation = "
            f"{n} per prompt, x policy.parallelism.dp_replicate_size = {par.dp_replicate_size}), so no step could "
            f"be trained; add rows, or lower train.train_batch_per_replica to at most {rows * n}"
        )
    need = t.train_batch_per_replica * par.dp_replicate_size
    if rows >= need or not t.train_policy.dataloader_drop_last:
        return
    fits = rows // par.dp_replicate_size
    lower = f"lower train.train_batch_per_replica to at most {fits}, " if fits else ""
    batch = f"train.train_batch_per_replica = {t.train_batch_per_replica}"
    raise DataError(
        f"{dataset}: {rows} usable training row(s), fewer than one global batch of {need} ({batch} x "
        f"policy.parallelism.dp_replicate_size = {par.dp_replicate_size}) with "
        "train.train_policy.dataloader_drop_last = true, so no step could be trained; add rows, "
        f"{lower}or set dataloader_drop_last = false"
    )
