"""`cosmos-train ...`: a thin dispatcher to the flows and the library.

    cosmos-train config check configs/tiny-sft.toml --set train.epoch=2
    cosmos-train config docs > docs/CONFIG.md
    cosmos-train make-tiny-model outputs/tiny-model [--family qwen3_vl|qwen2|qwen3|llama|...]
    cosmos-train make-synthetic-data outputs/synthetic --n-train 400
    cosmos-train prepare-data --config configs/tiny-sft.toml [my_dataset.py]
    cosmos-train sft --config configs/tiny-sft.toml [--set k=v ...] [my_dataset.py]
    cosmos-train --config configs/tiny-grpo.toml [my_rewards.py]    # cosmos-rl's form: sft or grpo by the config
    cosmos-train grpo --config configs/tiny-grpo.toml [--set k=v ...] [--dataset-script my_dataset.py] [--run-dir RUN]
    cosmos-train make-tiny-wfm outputs/tiny-wfm
    cosmos-train make-synthetic-wfm-data outputs/wfm-data [--text-embeddings-from outputs/tiny-wfm]
    cosmos-train wfm-rl --config configs/tiny-wfm-flow-grpo.toml [--set k=v ...]    # or cosmos-train --config FILE
    cosmos-train eval --config configs/eval-tiny.toml --model outputs/tiny-model --model RUN/safetensors/final
    cosmos-train eval-wfm --config configs/tiny-wfm-flow-grpo.toml --model outputs/tiny-wfm --model RUN/diffusers/final
    cosmos-train export RUN/checkpoints/step_N OUT
    cosmos-train upload RUN_OR_FOLDER --to s3://bucket/prefix | hf://org/repo
    cosmos-train post-train --config configs/tiny-post-train.toml [--set sft.train.max_num_steps=40]
    cosmos-train filter-rl-data --config configs/tiny-grpo.toml [--model RUN/safetensors/final] [--samples 8] [--out F]
    cosmos-train sweep --config configs/tiny-sft.toml --grid train.optm_lr=1e-5,3e-5 [--random 'k=loguniform(a,b)']
    cosmos-train demo
    REWARD_SERVICE_TOKEN=... cosmos-train reward-service [--config rewards.toml] [--host 127.0.0.1] [--port 8080]

Heavy imports (torch, transformers, prefect) happen inside each command so `--help` and
`config check` answer at once, and a command's inputs are checked (`cosmos_train.preflight`) before
Prefect starts its temporary API server.

A mistake in the input (a `cosmos_train.errors.UserError`, or an OSError on a path the user must fix: a
file where a folder is needed, no permission, a read-only or full disk; `errors.user_error_of`) prints
one paragraph and exits 2, with no traceback (`--debug` shows it; the flow run's log on the Prefect
server keeps it); anything else is a bug and keeps its traceback. A stop that is no mistake is shown the
same way with its own exit code (`UserError.exit_code`): 3 when stop_when_stuck ended an RL run that could not
learn (`errors.RunStuck`), 4 when a post-train pipeline's [gate] did not promote a stage's export
(`promotion.EXIT_NOT_PROMOTED`); a run that stopped saved (`errors.RunHalted`, with the command that continues it:
flows/terminal.py) 130 on Ctrl-C, 75 when a service it needs (a reward service, the Prefect API) stayed down. A
training command that ends prints its folder, then its RL runs' run-health verdicts (flows/terminal.py `finished`).
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

from cosmos_train.config import (
    NO_EFFECT_HEADER,
    is_world_model_recipe,
    load_config,
)
from cosmos_train.data.synthetic import build_arg_parser, run_from_args
from cosmos_train.errors import EXIT_INTERRUPTED, user_error_of
from cosmos_train.process_tree import start_reaper, watch_parent
from cosmos_train.reward_service.config import load_service_config
from cosmos_train.storage import check_s3_target, parse_target, s3_settings

# why HEAVY: a command's own module (torch, transformers, diffusers under it) is imported inside the command, so
# `--help` and `config check` answer in a fraction of a second instead of ~5 s; nothing imports cli, so these
# lazy imports cannot hide an import cycle (tests/unit/test_import_direction.py allows them here only).

# Prefect's temporary API server gives up after 20 s by default, which a loaded machine exceeds.
EPHEMERAL_STARTUP_TIMEOUT_S = "180"
# Prefect retries a call to a server it reached 5 times, backing off 2 ... 32 s: a minute per call to a dead server.
# 2 retries (~6 s) ride out a server's restart and tell a lost API within a minute (the user's setting wins).
PREFECT_CLIENT_RETRIES = "2"
# the commands that run a flow (Prefect's temporary server, torchrun): a reaper sidecar stops what they started
FLOW_COMMANDS = set("sft grpo wfm-rl prepare-data eval eval-wfm post-train sweep upload demo filter-rl-data".split())


def _add_config_args(p: argparse.ArgumentParser, positional: bool = False) -> None:
    if positional:
        p.add_argument("config", type=Path, help="Job TOML file.")
    else:
        p.add_argument("--config", type=Path, required=True, help="Job TOML file.")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override a key, e.g. --set train.epoch=2 (repeatable; applied after COSMOS_TRAIN__* env vars).",
    )


def _config_check(args: argparse.Namespace) -> int:
    from cosmos_train.pipeline import is_pipeline_file, load_pipeline_config  # why: HEAVY

    if is_pipeline_file(args.config):  # a post-train pipeline: its own schema and each stage's config
        pipeline = load_pipeline_config(args.config, args.overrides)
        print(pipeline.model_dump_json(indent=2, exclude_none=True))
        from cosmos_train.wfm.config import load_wfm_config  # why: HEAVY

        for name, stage in pipeline.training_stages():  # each stage's keys that have no effect, said here too
            load = load_wfm_config if name == "wfm_rl" else load_config
            notes = load(stage.config, stage.overrides, check_paths=False).no_effect
            if notes:
                print(
                    f"# [{name}] {NO_EFFECT_HEADER.removeprefix('# ')}",
                    *(f"#   {n.line()}" for n in notes),
                    sep="\n",
                    file=sys.stderr,
                )
        print(f"# ok: {args.config} (post-train pipeline: {pipeline.folder})", file=sys.stderr)
        return 0
    if is_world_model_recipe(args.config):  # the world-model RL layout: its own schema
        from cosmos_train.wfm.config import load_wfm_config  # why: HEAVY

        wfm = load_wfm_config(args.config, args.overrides)
        print(wfm.to_toml(), end="")
        if wfm.cosmos_rl_defaults:  # cosmos-rl's form: what the recipe left out is cosmos-rl's default
            print(
                f"# cosmos-rl's form (no model.model_name_or_path): cosmos-rl's defaults taken for "
                f"{', '.join(wfm.cosmos_rl_defaults)}",
                file=sys.stderr,
            )
        if wfm.no_effect:
            print(NO_EFFECT_HEADER, *(f"#   {n.line()}" for n in wfm.no_effect), sep="\n", file=sys.stderr)
        print(f"# ok: {args.config} (wfm_rl: {wfm.model.rl.algorithm})", file=sys.stderr)
        return 0
    from cosmos_train.preflight import check_model_family  # why: HEAVY

    cfg = load_config(args.config, args.overrides)
    print(cfg.to_toml(), end="")
    model = cfg.policy.model_name_or_path
    # a model type no family loads is refused now where its config.json is at hand (a folder, the HF cache)
    model_type = check_model_family(model, vllm=cfg.policy_type == "grpo" and cfg.rollout.backend == "vllm")
    if cfg.no_effect:
        print(NO_EFFECT_HEADER, *(f"#   {n.line()}" for n in cfg.no_effect), sep="\n", file=sys.stderr)
    if model_type is None:
        print(
            f"# policy.model_name_or_path = {model!r}: not a local folder and not in the Hugging Face cache, so its "
            "model type (family) is checked when the model loads",
            file=sys.stderr,
        )
    print(
        f"# ok: {args.config} ({cfg.policy_type}{'' if model_type is None else f', model type {model_type}'})",
        file=sys.stderr,
    )
    return 0


def _config_docs(args: argparse.Namespace) -> int:
    from cosmos_train.config.docs import config_reference
    from cosmos_train.evaluation.config import EvalConfig  # why: HEAVY
    from cosmos_train.wfm.config import WfmConfig  # why: HEAVY

    print(config_reference(EvalConfig, WfmConfig), end="")
    return 0


def _make_tiny_model(args: argparse.Namespace) -> int:
    from cosmos_train.models.tiny import make_tiny_model  # why: HEAVY

    out = make_tiny_model(args.out, size=args.size, seed=args.seed, family=args.family)
    print(out)
    return 0


def _synthetic_args(p: argparse.ArgumentParser) -> None:
    build_arg_parser(p)


def _make_synthetic(args: argparse.Namespace) -> int:
    print(run_from_args(args))
    return 0


def _train(args: argparse.Namespace) -> int:
    """`sft` and `grpo`: the same inputs and checks, a different flow."""
    from cosmos_train.preflight import check_job  # why: HEAVY

    script = args.dataset_script or args.script
    check_job(args.config, args.overrides, script, args.run_dir, policy_type=args.command)
    if args.command == "grpo":
        from flows.grpo import GRPOParams, grpo

        _prepare_prefect()
        result = grpo(
            GRPOParams(config=str(args.config), overrides=args.overrides, dataset_script=script, run_dir=args.run_dir)
        )
    else:
        from flows.sft import SFTParams, sft

        _prepare_prefect()
        result = sft(
            SFTParams(config=str(args.config), overrides=args.overrides, dataset_script=script, run_dir=args.run_dir)
        )
    from flows.terminal import finished

    return finished(result["run_dir"], {"": result.get("health")})  # GRPO's run-health verdicts last


def _wfm_rl(args: argparse.Namespace) -> int:
    """World-model RL: the config checked (and the model folder found) before Prefect starts."""
    from cosmos_train.wfm.config import load_wfm_config  # why: HEAVY

    load_wfm_config(args.config, args.overrides)
    if args.wfm_mode:
        print(
            f"note: --wfm-mode {args.wfm_mode}: cosmos-rl's entry script is not needed here (ignored)", file=sys.stderr
        )
    from flows.terminal import finished
    from flows.wfm_rl import WfmRLParams, wfm_rl

    _prepare_prefect()
    result = wfm_rl(WfmRLParams(config=str(args.config), overrides=args.overrides, run_dir=args.run_dir))
    return finished(result["run_dir"], {"": result.get("health")})


def _make_tiny_wfm(args: argparse.Namespace) -> int:
    from cosmos_train.wfm.model import make_tiny_wfm  # why: HEAVY

    print(make_tiny_wfm(args.out, seed=args.seed))
    return 0


def _make_synthetic_wfm(args: argparse.Namespace) -> int:
    from cosmos_train.wfm.synthetic_data import make_synthetic_wfm_data, write_text_embeddings  # why: HEAVY

    out = make_synthetic_wfm_data(
        args.out, n=args.n, num_frames=args.num_frames, height=args.size, width=args.size, seed=args.seed
    )
    if args.text_embeddings_from:  # precomputed embeddings, as the seed's offline_text_embedding datasets have
        from cosmos_train.wfm.model import encode_prompts, load_wfm  # why: HEAVY

        parts = load_wfm(args.text_embeddings_from)
        write_text_embeddings(out, lambda prompts: encode_prompts(parts, prompts, args.max_prompt_length))
    print(out)
    return 0


def _prepare_data(args: argparse.Namespace) -> int:
    from cosmos_train.preflight import check_job  # why: HEAVY

    check_job(args.config, args.overrides, args.script, args.run_dir)
    from flows.prepare_data import PrepareDataParams, prepare_data

    _prepare_prefect()

    print(
        prepare_data(
            PrepareDataParams(
                config=str(args.config), overrides=args.overrides, dataset_script=args.script, run_dir=args.run_dir
            )
        )
    )
    return 0


def _eval(args: argparse.Namespace) -> int:
    from cosmos_train.preflight import check_eval  # why: HEAVY

    check_eval(args.config, args.overrides, args.models)
    from flows.evaluate import EvaluateParams, evaluate

    _prepare_prefect()

    out = evaluate(EvaluateParams(config=str(args.config), models=args.models, overrides=args.overrides))
    for r in out["results"]:
        print(r["label"], r["accuracy"], r["results_json"])
    return 0


def _eval_wfm(args: argparse.Namespace) -> int:
    """World models compared on held-out prompts (flows/evaluate_wfm.py); every input checked before Prefect starts."""
    from flows.evaluate_wfm import checked_params, evaluate_wfm, table_text

    params = checked_params(args.config, args.overrides, args.models, args.prompts, args.seed, args.out)
    _prepare_prefect()

    print(table_text(evaluate_wfm(params)))
    return 0


def _export(args: argparse.Namespace) -> int:
    from cosmos_train.export import export_checkpoint  # why: HEAVY

    print(export_checkpoint(args.checkpoint, args.out))
    return 0


def _upload(args: argparse.Namespace) -> int:
    from flows.upload import UploadParams, upload, upload_source

    folder, what = upload_source(args.source)  # input errors before Prefect starts
    target = parse_target(args.to)
    if target.scheme == "s3":  # an unreachable endpoint, refused credentials, no bucket: said in seconds, not minutes
        check_s3_target(target, s3_settings(os.environ, endpoint_url=args.s3_endpoint_url))
    _prepare_prefect()

    report = upload(UploadParams(source=str(args.source), to=args.to, s3_endpoint_url=args.s3_endpoint_url))
    print(f"{folder} -> {target.url}: {report['files_sent']} files sent, {report['files_unchanged']} unchanged")
    return 0


def _post_train(args: argparse.Namespace) -> int:
    from cosmos_train.pipeline import load_pipeline_config  # why: HEAVY

    load_pipeline_config(args.config, args.overrides)  # every input error before Prefect starts
    from flows.post_train import PostTrainParams, post_train
    from flows.terminal import finished

    _prepare_prefect()
    summary = post_train(PostTrainParams(config=str(args.config), overrides=args.overrides))
    return finished(summary["folder"], summary.get("health") or {})  # each RL stage's verdicts


def _filter_rl_data(args: argparse.Namespace) -> int:
    """Sample the model on the GRPO prompts and keep those it sometimes gets right (flows/filter_rl_data.py)."""
    from cosmos_train.preflight import check_job, check_model_family  # why: HEAVY
    from cosmos_train.train.rl_filter import FilterSettings, check_model_path  # why: HEAVY

    # every input error, named by its option, before Prefect starts (the flow checks the same for a deployment)
    cfg = check_job(args.config, args.overrides, args.dataset_script, read_rows=False, policy_type="grpo")
    settings = FilterSettings(samples=args.samples, min_pass=args.min_pass, max_pass=args.max_pass)
    settings.check(Path(args.out) if args.out else None)
    if args.model:
        check_model_path(args.model)
        check_model_family(args.model, vllm=cfg.rollout.backend == "vllm", key="--model")
    from flows.filter_rl_data import FilterRLDataParams, filter_rl_data

    _prepare_prefect()

    result = filter_rl_data(
        FilterRLDataParams(
            config=str(args.config),
            overrides=args.overrides,
            model=args.model,
            samples=args.samples,
            min_pass=args.min_pass,
            max_pass=args.max_pass,
            out=args.out,
            threshold=args.threshold,
            seed=args.seed,
            dataset_script=args.dataset_script,
        )
    )
    print(result["dataset"])
    print(f"kept {result['kept']} prompts, dropped {result['dropped']}; report {result['report']}", file=sys.stderr)
    return 0


def _sweep(args: argparse.Namespace) -> int:
    from cosmos_train.errors import ConfigError
    from cosmos_train.sweep import plan_sweep  # why: HEAVY

    settings = {k: getattr(args, k) for k in ("grid", "random", "trials", "seed", "kind", "name", "output_dir")}
    settings.update(metric=args.metric, mode=args.mode, dataset_script=args.dataset_script)
    plan = plan_sweep(args.config, args.overrides, **settings)  # every bad spec before Prefect starts
    if not 1 <= args.parallel <= 64 or not 0 <= args.stop_after <= 1 or (args.stop_margin or 0) < 0:
        raise ConfigError(
            [
                f"--parallel {args.parallel} / --stop-after {args.stop_after} / --stop-margin {args.stop_margin}: "
                "parallel from 1 to 64, stop-after from 0 to 1, stop-margin >= 0"
            ],
            what="sweep spec",
        )
    from flows.sweep import SweepParams, sweep

    _prepare_prefect()

    summary = sweep(
        SweepParams(
            config=str(args.config),
            overrides=args.overrides,
            parallel=args.parallel,
            deployment=args.deployment,
            stop_margin=args.stop_margin,
            stop_after=args.stop_after,
            **settings,
        )
    )
    best = summary["best"]
    print(
        f"{plan.folder}: best {best['name']} ({best['metric']} {best['value']}), {best['export']}"
        if best
        else plan.folder
    )
    return 0


def _demo(args: argparse.Namespace) -> int:
    from flows.demo import demo
    from flows.terminal import finished

    _prepare_prefect()
    summary = demo(output_dir=str(args.output_dir))
    return finished(str(args.output_dir), summary.get("health") or {})  # the table, then GRPO's verdicts


def _reward_service(args: argparse.Namespace) -> int:
    from cosmos_train.reward_service.server import resolve_token, serve  # why: HEAVY

    resolve_token(args.host, args.insecure_no_token)  # refuse before loading anything
    if args.exit_with_parent:
        watch_parent(grace_s=10)
    serve(load_service_config(args.config), host=args.host, port=args.port, insecure_no_token=args.insecure_no_token)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="cosmos-train",
        description=__doc__.split("\n")[0],
        epilog="cosmos-rl's form also works: cosmos-train --config FILE [SCRIPT.py] runs `sft` or `grpo` as the "
        "config's trainer type says (wfm-rl for a world-model recipe).",
    )
    ap.add_argument("--debug", action="store_true", help="Show the traceback of an input error too.")
    sub = ap.add_subparsers(dest="command", required=True)

    cfg = sub.add_parser("config", help="Config utilities.")
    cfg_sub = cfg.add_subparsers(dest="config_command", required=True)
    check = cfg_sub.add_parser("check", help="Print the resolved config (exit 0) or every error (exit 2).")
    _add_config_args(check, positional=True)
    check.set_defaults(func=_config_check)
    docs = cfg_sub.add_parser("docs", help="Print the config reference (every key, bounds, description).")
    docs.set_defaults(func=_config_docs)

    tiny = sub.add_parser("make-tiny-model", help="Build an offline tiny model folder (Qwen2.5-VL by default).")
    tiny.add_argument("out", type=Path)
    tiny.add_argument(
        "--family",
        default="qwen2_5_vl",
        choices=["qwen2_5_vl", "qwen3_vl", "cosmos3_edge", "qwen2", "qwen3", "llama", "mistral"],
        help="Architecture: Qwen2.5-VL (Cosmos-Reason1), Qwen3-VL (Cosmos-Reason2), Cosmos3-Edge, or a "
        "text-only language model: qwen2 (Qwen2.5), qwen3 (dense), llama, mistral.",
    )
    tiny.add_argument("--size", default="tiny", choices=["tiny", "small"])
    tiny.add_argument("--seed", type=int, default=0)
    tiny.set_defaults(func=_make_tiny_model)

    syn = sub.add_parser("make-synthetic-data", help="Generate synthetic physical-reasoning videos + rows.")
    _synthetic_args(syn)
    syn.set_defaults(func=_make_synthetic)

    for name, what in (("sft", "SFT"), ("grpo", "GRPO")):
        train = sub.add_parser(name, help=f"Run {what} through the Prefect flow (local ephemeral API by default).")
        _add_config_args(train)
        script = train.add_mutually_exclusive_group()
        script.add_argument("script", nargs="?", default=None, help="Optional dataset script (see examples/).")
        script.add_argument("--dataset-script", default=None, help="The same, as an option.")
        train.add_argument("--run-dir", default=None, help="Continue in this run folder (default: a new one).")
        train.set_defaults(func=_train)

    wfm = sub.add_parser(
        "wfm-rl", help="World-model RL (Flow-GRPO / DDRL) of a Cosmos-Predict DiT through the wfm_rl flow."
    )
    _add_config_args(wfm)
    wfm.add_argument("--run-dir", default=None, help="Continue in this run folder (default: a new one).")
    wfm.add_argument("--wfm-mode", default=None, help="cosmos-rl's entry script argument (accepted, not needed).")
    wfm.set_defaults(func=_wfm_rl)

    twfm = sub.add_parser(
        "make-tiny-wfm",
        help="Build an offline tiny Cosmos-Predict2.5-layout diffusers folder (DiT, Wan VAE, text encoder).",
    )
    twfm.add_argument("out", type=Path)
    twfm.add_argument("--seed", type=int, default=0)
    twfm.set_defaults(func=_make_tiny_wfm)

    swfm = sub.add_parser("make-synthetic-wfm-data", help="Write a small world-model dataset (videos/, metas/).")
    swfm.add_argument("out", type=Path)
    swfm.add_argument("--n", type=int, default=32, help="Videos.")
    swfm.add_argument("--num-frames", type=int, default=9, help="Frames per video.")
    swfm.add_argument("--size", type=int, default=32, help="Width and height in pixels.")
    swfm.add_argument("--seed", type=int, default=0)
    swfm.add_argument(
        "--text-embeddings-from",
        default=None,
        metavar="WFM_DIR",
        help="Also write text_embedding/*.pickle with this model folder's text encoder.",
    )
    swfm.add_argument("--max-prompt-length", type=int, default=128)
    swfm.set_defaults(func=_make_synthetic_wfm)

    prep = sub.add_parser("prepare-data", help="Validate every row; write RUN/manifest.jsonl and a report.")
    _add_config_args(prep)
    prep.add_argument("script", nargs="?", default=None, help="Optional dataset script.")
    prep.add_argument("--run-dir", default=None, help="Write into this run folder (default: a new one).")
    prep.set_defaults(func=_prepare_data)

    ev = sub.add_parser("eval", help="Evaluate checkpoints on video benchmarks and compare them.")
    _add_config_args(ev)
    ev.add_argument(
        "--model",
        dest="models",
        action="append",
        default=[],
        help="Checkpoint folder or hub id (repeatable: base, SFT, RL ...).",
    )
    ev.set_defaults(func=_eval)

    evw = sub.add_parser("eval-wfm", help="Compare world models on held-out prompts, the same noise for each.")
    _add_config_args(evw)
    evw.add_argument("--model", dest="models", action="append", default=[], help="Folder or s3:// export (repeatable).")
    evw.add_argument("--prompts", type=int, default=None, help="Held-out prompts (default: evaluation.num_prompts).")
    evw.add_argument("--seed", type=int, default=None, help="Seed of the per-prompt noise (default: evaluation.seed).")
    evw.add_argument("--out", type=Path, default=None, help="Results folder (default: <job.output_dir>/eval-wfm/...).")
    evw.set_defaults(func=_eval_wfm)

    exp = sub.add_parser("export", help="Convert a saved checkpoint to Hugging Face safetensors.")
    exp.add_argument("checkpoint", type=Path, help="RUN/checkpoints/step_N")
    exp.add_argument("out", type=Path)
    exp.set_defaults(func=_export)

    up = sub.add_parser("upload", help="Upload a run's final export (or any folder) to S3 or the Hugging Face Hub.")
    up.add_argument("source", help="A run folder (its safetensors/final) or a folder.")
    up.add_argument("--to", required=True, help="s3://bucket/prefix or hf://org/repo")
    up.add_argument("--s3-endpoint-url", default=None, help="An S3-compatible store's endpoint (default: AWS_* env).")
    up.set_defaults(func=_upload)

    pt = sub.add_parser(
        "post-train",
        help="The pipeline: prepare-data, SFT, evaluate, GRPO, evaluate, upload "
        "(a rerun skips the stages that finished).",
    )
    _add_config_args(pt)
    pt.set_defaults(func=_post_train)

    flt = sub.add_parser(
        "filter-rl-data",
        help="Sample the model k times per GRPO prompt; keep the prompts whose pass rate lies in a band.",
    )
    _add_config_args(flt)
    flt.add_argument("--model", default=None, help="The model to sample (default: policy.model_name_or_path).")
    flt.add_argument("--samples", type=int, default=8, help="Completions per prompt (default 8).")
    flt.add_argument("--min-pass", type=float, default=0.0, help="Keep pass rate > this (default 0).")
    flt.add_argument("--max-pass", type=float, default=1.0, help="Keep pass rate < this (default 1).")
    flt.add_argument(
        "--threshold",
        type=float,
        default=1.0,
        help="Without an accuracy reward: a completion passes when its reward >= this (default 1).",
    )
    flt.add_argument("--seed", type=int, default=None, help="Sampling seed (default: train.seed).")
    flt.add_argument("--out", default=None, help="Filtered dataset, .json or .jsonl (default: RUN/filtered.json).")
    flt.add_argument("--dataset-script", default=None, help="Optional dataset script (rows, REWARD_FUNCTIONS).")
    flt.set_defaults(func=_filter_rl_data)

    sw = sub.add_parser(
        "sweep",
        help="A grid or random search over config keys: each trial an sft / grpo / wfm-rl run, then a comparison "
        "(a rerun skips the finished trials).",
    )
    _add_config_args(sw)
    sw.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2", help="A grid axis (repeatable).")
    sw.add_argument(
        "--random",
        action="append",
        default=[],
        metavar="KEY=DIST",
        help="A random axis: KEY=loguniform(a,b) | uniform(a,b) | choice(a,b,c) (repeatable).",
    )
    sw.add_argument("--trials", type=int, default=8, help="Random draws (crossed with the grid; default 8).")
    sw.add_argument("--seed", type=int, default=0, help="Seed of the random draws (default 0).")
    sw.add_argument(
        "--kind", choices=["sft", "grpo", "wfm-rl"], default=None, help="The trials' flow (default: the config's)."
    )
    sw.add_argument("--parallel", type=int, default=2, help="Trials at once (default 2).")
    sw.add_argument(
        "--metric", default=None, help="What picks the best: val_loss, val_accuracy, loss ... (default: by kind)."
    )
    sw.add_argument(
        "--mode", choices=["max", "min"], default=None, help="Best is the max or the min (default: min for a loss)."
    )
    sw.add_argument("--name", default=None, help="The sweep folder's name (default: the config file's stem).")
    sw.add_argument("--output-dir", default=None, help="Where the sweep folder goes (default: <output_dir>/sweeps).")
    sw.add_argument("--dataset-script", default=None, help="Dataset script of sft / grpo trials (see examples/).")
    sw.add_argument("--deployment", default=None, help="Run each trial as a run of this deployment, e.g. sft/sft.")
    sw.add_argument(
        "--stop-margin", type=float, default=None, help="Early stop: stop a trial trailing the best by more than this."
    )
    sw.add_argument(
        "--stop-after", type=float, default=0.3, help="Early stop only after this fraction of a trial's steps."
    )
    sw.set_defaults(func=_sweep)

    demo = sub.add_parser("demo", help="Tiny model + synthetic videos: base score, SFT, GRPO, each scored.")
    demo.add_argument("--output-dir", type=Path, default=Path("outputs/demo"))
    demo.set_defaults(func=_demo)

    rs = sub.add_parser(
        "reward-service",
        help="Serve rewards over HTTP (the reference service's protocol, token from REWARD_SERVICE_TOKEN).",
    )
    rs.add_argument("--config", type=Path, default=None, help="rewards.toml (queue, limits, TTL, handlers).")
    rs.add_argument("--host", default="127.0.0.1", help="Address to listen on (default: loopback only).")
    rs.add_argument("--port", type=int, default=8080)
    rs.add_argument(
        "--insecure-no-token",
        action="store_true",
        help="Run without a token (allowed on a loopback host only, for local testing).",
    )
    rs.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="Stop when the process that started this one dies (a service a flow manages).",
    )
    rs.set_defaults(func=_reward_service)
    return ap


def _prepare_prefect() -> None:
    """Called once the flows are imported: how a flow behaves in a terminal (flows/terminal.py)."""
    from flows.terminal import prepare_prefect

    prepare_prefect(debug=os.environ.get("COSMOS_TRAIN_DEBUG") == "1")


def _temporary_prefect_servers() -> list[Any]:
    """The temporary API servers Prefect has started in this process (none before prefect's server is imported)."""
    module = sys.modules.get("prefect.server.api.server")
    return [] if module is None else list(getattr(module.SubprocessASGIServer, "_instances", {}).values())


def cosmos_rl_form(argv: list[str]) -> list[str]:
    """cosmos-rl's command form, `cosmos-train --config FILE [SCRIPT.py] [--set k=v]`, as the subcommand the
    config's trainer type names (`sft` / `grpo`); any other argv unchanged. A file that does not load goes
    to `sft`, whose checks print its problems (exit 2) as they would have."""
    i = next((k for k, a in enumerate(argv) if a != "--debug"), len(argv))
    if i == len(argv) or not (argv[i] == "--config" or argv[i].startswith("--config=")):
        return argv
    path = argv[i].partition("=")[2] or (argv[i + 1] if i + 1 < len(argv) else "")
    command = "sft"
    try:
        command = "wfm-rl" if is_world_model_recipe(path) else load_config(path, check_paths=False).policy_type
    except Exception:  # noqa: BLE001 (the subcommand reports it)
        pass
    return [*argv[:i], command, *argv[i:]]


def main(argv: list[str] | None = None) -> int:
    argv_used = cosmos_rl_form(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv_used)
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", EPHEMERAL_STARTUP_TIMEOUT_S)
    os.environ.setdefault("PREFECT_CLIENT_MAX_RETRIES", PREFECT_CLIENT_RETRIES)
    if args.debug:
        os.environ["COSMOS_TRAIN_DEBUG"] = "1"
    servers_before = _temporary_prefect_servers()
    ctrl_c: list[float] = []
    if args.command in FLOW_COMMANDS:
        start_reaper()  # a killed CLI leaves no torchrun, rank or temporary Prefect server behind
        signal.signal(signal.SIGINT, functools.partial(_ctrl_c_noted, ctrl_c))
    try:
        return int(args.func(args) or 0)
    except (KeyboardInterrupt, Exception) as e:
        # Ctrl-C in a training job stops it saved (RunInterrupted); elsewhere `ctrl_c` tells, whatever it became
        ending = _ending_of(e, args.command, argv_used, bool(ctrl_c) or isinstance(e, KeyboardInterrupt))
        if ending is None:  # a bug or a crash: its traceback
            raise
        paragraph, code, api_lost = ending
        if args.debug:
            traceback.print_exc()
        _stop_temporary_servers(keep=servers_before)  # its "Stopping temporary server" line would follow ours
        print(f"error: {paragraph}", file=sys.stderr)
        if api_lost:
            from flows.terminal import leave_now

            leave_now(code)  # Prefect's workers would retry the dead API for minutes at exit
        return code  # 2; 3 for a run train.stop_when_stuck ended; 130 Ctrl-C; 75 a service stayed down


def _ctrl_c_noted(seen: list[float], signum: int, frame: Any) -> None:
    """Python's Ctrl-C (KeyboardInterrupt), noted first: a library may turn it into an error of its own."""
    seen.append(signum)
    raise KeyboardInterrupt


def _ending_of(exc: BaseException, command: str, argv: list[str], ctrl_c: bool) -> tuple[str, int, bool] | None:
    """(the paragraph, the exit code, whether the Prefect API was lost) for a failure the user can act on; None
    for a crash. A command that ran a flow may have stopped saved, or lost its API: flows/terminal.py knows."""
    ending = None
    if "prefect" in sys.modules:
        from flows.terminal import ending_of

        ending = ending_of(exc, command, argv)
    elif (error := user_error_of(exc)) is not None:
        ending = (error.paragraph, error.exit_code, False)
    if ctrl_c and (ending is None or ending[1] != EXIT_INTERRUPTED):  # no training job was stopped saved
        said = "stopped by Ctrl-C while no training job was running, so it had nothing to save; run it again"
        return f"{said}: {shlex.join(['cosmos-train', *argv])}", EXIT_INTERRUPTED, False
    return ending


def _stop_temporary_servers(keep: list[Any]) -> None:
    if _temporary_prefect_servers():  # Prefect started one in this process
        from flows.terminal import stop_temporary_servers

        stop_temporary_servers(keep)


if __name__ == "__main__":
    sys.exit(main())
