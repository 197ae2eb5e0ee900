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

Each command is a module of this package (config.py, make.py, train.py for sft / grpo, wfm_rl.py, ...): its
`register(sub)` adds its subparser, arguments and handler beside the handler; `COMMANDS` below lists them in the
order `--help` shows. Shared arguments are in args.py, Prefect's set-up around a flow in prefect_server.py; this
module keeps the parser, cosmos-rl's command form and `main` with its ending.

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
from typing import Any

from cosmos_train.cli import (
    config,
    demo,
    eval_wfm,
    evaluate,
    export,
    filter_rl_data,
    make,
    make_wfm,
    post_train,
    prefect_server,
    prepare_data,
    reward_service,
    sweep,
    train,
    upload,
    wfm_rl,
)
from cosmos_train.config import is_world_model_recipe, load_config
from cosmos_train.errors import EXIT_INTERRUPTED, user_error_of
from cosmos_train.process_tree import start_reaper

# why HEAVY: a command's own module (torch, transformers, diffusers under it) is imported inside the command, so
# `--help` and `config check` answer in a fraction of a second instead of ~5 s; nothing outside this package imports
# cli, so these lazy imports cannot hide an import cycle (tests/unit/test_import_direction.py allows them here only).

# the command modules, in the order of `cosmos-train --help`: each one's register(sub) adds its subparser(s)
COMMANDS = (
    config,
    make,
    train,
    wfm_rl,
    make_wfm,
    prepare_data,
    evaluate,
    eval_wfm,
    export,
    upload,
    post_train,
    filter_rl_data,
    sweep,
    demo,
    reward_service,
)
# the commands that run a flow (Prefect's temporary server, torchrun): a reaper sidecar stops what they started
FLOW_COMMANDS = set("sft grpo wfm-rl prepare-data eval eval-wfm post-train sweep upload demo filter-rl-data".split())


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="cosmos-train",
        description=__doc__.split("\n")[0],
        epilog="cosmos-rl's form also works: cosmos-train --config FILE [SCRIPT.py] runs `sft` or `grpo` as the "
        "config's trainer type says (wfm-rl for a world-model recipe).",
    )
    ap.add_argument("--debug", action="store_true", help="Show the traceback of an input error too.")
    sub = ap.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return ap


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
    prefect_server.set_env_defaults()
    if args.debug:
        os.environ["COSMOS_TRAIN_DEBUG"] = "1"
    servers_before = prefect_server.temporary_servers()
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
        # before the paragraph: its "Stopping temporary server" line would follow ours
        prefect_server.stop_temporary_servers(keep=servers_before)
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
