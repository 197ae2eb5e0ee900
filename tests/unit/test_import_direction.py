"""Import direction.

Outside the library: flows -> tasks -> cosmos_train. The library never imports Prefect, flows or tasks;
the only exception is the CLI (the cosmos_train/cli/ package), which imports flows lazily inside its commands.

Inside the library: every module has a layer (LAYERS below) and imports only its own layer or lower ones,
never in a cycle. models/ and data/ share a layer without knowing each other (what both need sits lower:
cosmos_train.vision), and so do generation/ and rewards/. A library import inside a function is a hidden edge
(it is how cycles hid before), so it counts like any other and is refused; a function-local import is kept
only for an optional heavy third-party package (vllm, diffusers, wandb, boto3, ...), which this test does not
look at. Every module must be in the map: a new file gets its layer here, with the reason.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[2] / "cosmos_train"
UPWARD = ("prefect", "flows", "tasks")

# Module prefix -> layer. A module's layer is its longest prefix's (whole dotted parts: "cosmos_train.config"
# covers cosmos_train/config.py and a cosmos_train/config/ package, not cosmos_train.config_docs).
LAYERS: dict[str, int] = {
    # 0 - leaf utilities and shared value types: import nothing of the library but each other.
    "cosmos_train": 0,  # the package's __init__ (this entry covers no other module)
    "cosmos_train.errors": 0,  # the error types every layer raises
    "cosmos_train.atomic": 0,  # atomic file writes
    "cosmos_train.logs": 0,  # the training processes' rank-aware logging setup (stdlib only)
    "cosmos_train.net": 0,  # loopback ports for local servers
    "cosmos_train.process_tree": 0,  # child processes that die with their parent
    "cosmos_train.checkpoint_paths": 0,  # step_N folder names and the COMPLETE marker (errors only)
    "cosmos_train.launch": 0,  # the torchrun wrapper: process_tree and torch, run as `python -m`
    "cosmos_train.multinode": 0,  # the launcher's network side: addresses, interfaces, rendezvous paragraphs (torch)
    "cosmos_train.storage": 0,  # uploads to S3 / the Hub, downloads from S3 (the storage/ package): errors only
    "cosmos_train.vision": 0,  # vision settings and layouts: what config, data and models all read
    "cosmos_train.context_parallel": 0,  # Ulysses attention, sequence split / gather (torch.distributed only)
    # 1 - the job config: schema, loader, checks, cosmos-rl compatibility, the key reference.
    "cosmos_train.config": 1,
    "cosmos_train.config.schema_train": 1,  # [train] and [train.ckpt] (schema_policy, schema_run_health)
    "cosmos_train.config.schema_run_health": 1,  # [train.run_health]: the run-health verdicts' thresholds
    "cosmos_train.config.schema_model": 1,  # [policy]: the model, LoRA, parallelism
    "cosmos_train.config.schema_rollout": 1,  # [rollout] and [validation] sampling
    "cosmos_train.config.schema_launch": 1,  # [logging] and [launch]
    "cosmos_train.config.compat_rules": 1,  # cosmos-rl's keys not in our schema, one Rule each (imports nothing)
    "cosmos_train.config.compat_notes": 1,  # what the key table says of the keys we implement (imports nothing)
    # 2 - models and data (independent of each other), and the runtime infrastructure that reads a config.
    "cosmos_train.models": 2,  # model families, loading, LoRA, Hugging Face folders, the tiny models
    "cosmos_train.data": 2,  # chats, media, datasets and their sources, synthetic data
    "cosmos_train.data.shards": 2,  # webdataset tar shards streamed from S3 (storage's client and settings)
    "cosmos_train.distributed": 2,  # process group, mesh, every collective the ranks call alike (models.parallelize)
    "cosmos_train.checkpoint": 2,  # DCP checkpoints: the manager that saves, settles and loads them
    "cosmos_train.checkpoint_state": 2,  # a checkpoint's trainer_state.json (checkpoint_files, distributed)
    "cosmos_train.checkpoint_failures": 2,  # a failed checkpoint write agreed by every rank (distributed)
    "cosmos_train.rng_state": 2,  # the RNG state a checkpoint keeps per rank, a fresh rank's seeding (was checkpoint's)
    "cosmos_train.checkpoint_files": 2,  # reading a checkpoint's files (DCP, torch, JSON): damage as CheckpointError
    "cosmos_train.signals": 2,  # exit signals agreed over checkpoint's CPU group
    "cosmos_train.metrics": 2,  # metrics.jsonl and wandb for a run (config's logging keys)
    "cosmos_train.run_sync": 2,  # an s3:// output_dir: the run folder mirrored to the bucket, resume from it
    "cosmos_train.curves": 2,  # plots of metrics.jsonl (reads metrics)
    # 3 - what generates and scores completions.
    "cosmos_train.generation": 3,  # HF / vLLM engines over models and data
    "cosmos_train.rewards": 3,  # reward functions, answer parsing and the remote reward client
    # 4 - the jobs.
    "cosmos_train.train": 4,  # SFT and GRPO trainers
    "cosmos_train.train.grpo_update": 4,  # one GRPO update's micro-batches, loss scales, micro_batch_loss (rl_losses)
    "cosmos_train.train.grpo_prompts": 4,  # GRPO's prompts encoded for the trainer, scored groups as RL samples
    "cosmos_train.train.grpo_validation": 4,  # GRPO's validation rewards, answers over the ranks, the best weights
    "cosmos_train.train.rollout": 4,  # GRPO's rollout: groups, sources (colocated, worker), stats (was 5 flat files)
    "cosmos_train.wfm": 4,  # world-model RL (reads train's RL losses and the reward service's handlers)
    "cosmos_train.wfm.web_data": 4,  # the world-model rows of S3 shards (data.shards, wfm.data's checks)
    "cosmos_train.wfm.evaluate": 4,  # world-model evaluation (wfm's sampler and rewards, evaluation.report's labels)
    "cosmos_train.wfm.eval_report": 4,  # its intervals, table and grid (evaluation.scoring's z)
    "cosmos_train.wfm.config_schema": 4,  # WfmConfig over config_sections (config's shared sections)
    "cosmos_train.wfm.config_states": 4,  # each imaginaire entry's state (config_schema, cosmos_rl_form)
    "cosmos_train.wfm.config_checks": 4,  # what cannot run (config_states, the reward service's handlers)
    "cosmos_train.wfm.tiny_model": 4,  # the tiny world-model folder (wfm.model's names, models.tiny)
    "cosmos_train.wfm.model_export": 4,  # a trained DiT into its base diffusers folder (wfm.model's checks)
    "cosmos_train.wfm.rl_step": 4,  # one iteration's math (distributed's sums, train's zero_std_groups)
    "cosmos_train.wfm.train_rows": 4,  # the trainer's rows, embeddings and clip latents (wfm.data, web_data, model)
    "cosmos_train.evaluation": 4,  # benchmark evaluation
    "cosmos_train.reward_service": 4,  # the reward HTTP service and its handlers
    "cosmos_train.reward_service.latents": 4,  # Wan VAE latents -> pixels for the service (diffusers, lazily)
    # 5 - what runs across jobs: offline conversion, checks before a run, the post-training pipeline.
    "cosmos_train.export": 5,  # DCP checkpoint -> Hugging Face / diffusers folder, for either kind of job
    "cosmos_train.preflight": 5,  # checks of a config before anything starts (every job's config)
    "cosmos_train.pipeline": 5,  # SFT -> GRPO -> evaluation stages from one recipe
    "cosmos_train.sweep": 5,  # hyperparameter sweeps: specs, trials (configs, pipeline keys), record, report
    "cosmos_train.promotion": 5,  # the pipeline's gate decision and model card (reads evaluation's report)
    # 6 - the command line: the dispatcher (cli/__init__.py) and one module per command (cli/train.py, ...).
    "cosmos_train.cli": 6,
}

# Modules whose function-local library imports are allowed (still checked for direction), with the reason. An entry
# covers its submodules (whole dotted parts, as LAYERS: "cosmos_train.cli" is the cli/ package and cli/train.py,
# ...); only its own modules may import it.
LAZY_ALLOWED: dict[str, str] = {
    "cosmos_train.cli": "each command imports its torch-heavy module when it runs, so --help answers at once; "
    "nothing outside the CLI imports it, so its lazy imports cannot hide a cycle",
}

# Same layer, and must stay strangers: neither side may import the other.
INDEPENDENT: tuple[tuple[str, str], ...] = (
    ("cosmos_train.models", "cosmos_train.data"),
    ("cosmos_train.generation", "cosmos_train.rewards"),
)


@dataclass(frozen=True)
class Edge:
    """One import of a library module by another."""

    source: str
    target: str
    path: Path
    line: int
    in_function: bool

    def where(self, root: Path) -> str:
        return f"{self.path.relative_to(root.parent)}:{self.line}"


def modules_of(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py under the package `root`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module `name` imports: the name itself or its longest prefix that is a module."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def library_edges(root: Path) -> list[Edge]:
    """Every import of a module of the package `root` by another (module level, in a function, or under
    TYPE_CHECKING alike); `from package import name` counts as importing the package and, when `name` is a
    submodule, that submodule."""
    modules = modules_of(root)
    package = root.name
    edges = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        here = module if path.name == "__init__.py" else module.rpartition(".")[0]

        def visit(node: ast.AST, in_function: bool, module: str = module, path: Path = path, here: str = here) -> None:
            for child in ast.iter_child_nodes(node):
                names: list[str] = []
                if isinstance(child, ast.Import):
                    names = [a.name for a in child.names]
                elif isinstance(child, ast.ImportFrom):
                    base = child.module or ""
                    if child.level:
                        parts = here.split(".")
                        base = ".".join(parts[: len(parts) - (child.level - 1)] + ([base] if base else []))
                    names = [base, *(f"{base}.{a.name}" for a in child.names)]
                targets = {_resolve(n, modules) for n in names if n.split(".")[0] == package}
                for target in sorted(t for t in targets if t is not None and t != module):
                    edges.append(Edge(module, target, path, child.lineno, in_function))
                visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

        visit(tree, False)
    return edges


def layer_of(module: str, layers: dict[str, int]) -> int | None:
    """The layer of `module`'s longest prefix in `layers` (whole dotted parts); None when unmapped. The package
    root's own entry is its __init__'s only, so a new module is unmapped until it is given a layer."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in layers and (n > 1 or n == len(parts)):
            return layers[prefix]
    return None


def _within(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.source, set()).add(e.target)
        graph.setdefault(e.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def violations(
    root: Path,
    layers: dict[str, int],
    independent: tuple[tuple[str, str], ...] = INDEPENDENT,
    lazy_allowed: dict[str, str] | None = None,
) -> list[str]:
    """What breaks the layering of the package `root`: unmapped modules, imports up a layer or between
    independent packages, library imports inside functions, and cycles."""
    edges = library_edges(root)
    lazy = LAZY_ALLOWED if lazy_allowed is None else lazy_allowed
    bad = [
        f"{m}: not in LAYERS (give it a layer, with the reason)"
        for m in modules_of(root)
        if layer_of(m, layers) is None
    ]
    for e in edges:
        source, target = layer_of(e.source, layers), layer_of(e.target, layers)
        if source is not None and target is not None and target > source:
            bad.append(f"{e.where(root)}: {e.source} (layer {source}) imports {e.target} (layer {target}): up a layer")
        for a, b in independent:
            if (_within(e.source, a) and _within(e.target, b)) or (_within(e.source, b) and _within(e.target, a)):
                bad.append(f"{e.where(root)}: {e.source} imports {e.target}: {a} and {b} must not import each other")
        if e.in_function and not any(_within(e.source, p) for p in lazy):
            bad.append(f"{e.where(root)}: {e.source} imports {e.target} inside a function (import it at the top)")
    bad += [f"import cycle: {' <-> '.join(c)}" for c in cycles(edges)]
    bad += [
        f"{e.where(root)}: {e.source} imports {e.target}, which nothing may import (lazy imports allowed there)"
        for e in edges
        for p in lazy
        if _within(e.target, p) and not _within(e.source, p)
    ]
    return bad


def _upward_imports(path: Path) -> list[tuple[int, str, bool]]:
    """(line, module, inside a function) for each import of prefect / flows / tasks in `path`."""
    tree = ast.parse(path.read_text(), str(path))
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [child.module]
            for name in names:
                if name.split(".")[0] in UPWARD:
                    found.append((child.lineno, name, in_function))
            visit(child, nested)

    visit(tree, False)
    return found


def test_library_never_imports_prefect_flows_or_tasks() -> None:
    bad = []
    for path in sorted(LIBRARY.rglob("*.py")):
        for line, name, lazy in _upward_imports(path):
            if path.parent == LIBRARY / "cli" and lazy and name.split(".")[0] != "tasks":
                continue  # a CLI command's lazy `from flows... import`
            bad.append(f"{path.relative_to(LIBRARY.parent)}:{line} imports {name}")
    assert not bad, "cosmos_train/ must not import Prefect, flows or tasks:\n" + "\n".join(bad)


def test_the_check_sees_a_violation(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("import os\nfrom prefect import flow\ndef f():\n    import tasks.torchrun\n")
    assert [(n, lazy) for _, n, lazy in _upward_imports(sample)] == [("prefect", False), ("tasks.torchrun", True)]


def test_library_imports_go_down_the_layers_without_cycles() -> None:
    bad = violations(LIBRARY, LAYERS)
    assert not bad, f"{len(bad)} layering violations in cosmos_train/ (see LAYERS):\n" + "\n".join(bad)


def test_every_layer_entry_names_a_module() -> None:
    modules = modules_of(LIBRARY)
    stale = [p for p in LAYERS if not any(_within(m, p) for m in modules)]
    assert not stale, f"LAYERS names modules that no longer exist (remove them): {stale}"


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_the_layer_check_catches_an_upward_import_a_cycle_and_a_hidden_import(tmp_path: Path) -> None:
    layers = {"pkg": 0, "pkg.low": 0, "pkg.high": 1, "pkg.a": 1, "pkg.b": 1, "pkg.sub": 1}
    clean = _package(
        tmp_path / "clean",
        {
            "__init__.py": "",
            "low.py": "import os\n",
            "high.py": "from pkg.low import x\nfrom . import low\n",
            "a.py": "import pkg.low\n",
            "b.py": "from pkg import a\ndef f():\n    import json\n",
            "sub/__init__.py": "from .leaf import y\n",
            "sub/leaf.py": "from pkg.low import x\n",
        },
    )
    assert violations(clean, layers, ()) == []

    planted = _package(
        tmp_path / "planted",
        {
            "__init__.py": "",
            "low.py": "from pkg.high import x\n",
            "high.py": "",  # upward
            "a.py": "from pkg import b\n",
            "b.py": "def f():\n    from pkg.a import y\n",  # a cycle, hidden in a function
            "sub/__init__.py": "def engine():\n    from .leaf import y\n",  # registry pattern: package <-> submodule
            "sub/leaf.py": "from pkg.sub import register\n",
            "extra.py": "",  # extra: not in the map
        },
    )
    bad = violations(planted, layers, (("pkg.a", "pkg.high"),))
    assert any("pkg.low (layer 0) imports pkg.high (layer 1): up a layer" in b for b in bad), bad
    assert "import cycle: pkg.a <-> pkg.b" in bad, bad
    assert "import cycle: pkg.sub <-> pkg.sub.leaf" in bad, bad
    assert any("pkg.b imports pkg.a inside a function" in b for b in bad), bad
    assert "pkg.extra: not in LAYERS (give it a layer, with the reason)" in bad, bad
    # an allowed lazy importer: its lazy import is no violation, but the cycle it closes still is, and so is
    # importing it
    allowed = violations(planted, layers, (), {"pkg.b": "the top"})
    assert not any("pkg.b imports pkg.a inside a function" in b for b in allowed), allowed
    assert "import cycle: pkg.a <-> pkg.b" in allowed, allowed
    assert any("pkg.a imports pkg.b, which nothing may import" in b for b in allowed), allowed
    # an allowed package (the CLI's layout): its submodules' lazy imports are allowed and they may import each
    # other; a module outside it may not import any of them
    cli = _package(
        tmp_path / "cli",
        {
            "__init__.py": "",
            "low.py": "",
            "a.py": "from pkg.cli.cmd import run\n",
            "cli/__init__.py": "from pkg.cli import cmd\n",
            "cli/cmd.py": "def run():\n    from pkg.low import x\n",
        },
    )
    assert violations(cli, {"pkg": 0, "pkg.low": 0, "pkg.a": 1, "pkg.cli": 1}, (), {"pkg.cli": "commands"}) == [
        f"{Path('pkg/a.py')}:1: pkg.a imports pkg.cli.cmd, which nothing may import (lazy imports allowed there)"
    ]

    sideways = _package(tmp_path / "sideways", {"__init__.py": "", "a.py": "from pkg.high import z\n", "high.py": ""})
    assert any(
        "pkg.a and pkg.high must not import each other" in b
        for b in violations(sideways, {"pkg": 0, "pkg.a": 1, "pkg.high": 1}, (("pkg.a", "pkg.high"),))
    )
