"""`cosmos-train config check | docs`: a job's resolved config (or every error in it), and the key reference.

    cosmos-train config check configs/tiny-sft.toml --set train.epoch=2
    cosmos-train config docs > docs/CONFIG.md

`config check` reads a job config, a world-model recipe or a post-train pipeline file, each by its own schema,
and says the keys that have no effect (stderr).
"""

from __future__ import annotations

import argparse
import sys

from cosmos_train.cli.args import Subparsers, add_config_args
from cosmos_train.config import NO_EFFECT_HEADER, is_world_model_recipe, load_config


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
    from cosmos_train.wfm.config_schema import WfmConfig  # why: HEAVY

    print(config_reference(EvalConfig, WfmConfig), end="")
    return 0


def register(sub: Subparsers) -> None:
    cfg = sub.add_parser("config", help="Config utilities.")
    cfg_sub = cfg.add_subparsers(dest="config_command", required=True)
    check = cfg_sub.add_parser("check", help="Print the resolved config (exit 0) or every error (exit 2).")
    add_config_args(check, positional=True)
    check.set_defaults(func=_config_check)
    docs = cfg_sub.add_parser("docs", help="Print the config reference (every key, bounds, description).")
    docs.set_defaults(func=_config_docs)
