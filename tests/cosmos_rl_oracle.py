"""cosmos-rl 0.4.7, installed without its dependencies, as the oracle of the parity tests.

`make test` installs it with `pip install --no-deps --target .cosmos-rl-oracle cosmos-rl==0.4.7`
(its transformers<5 pin and CUDA packages do not fit our environment; see the Makefile). Nothing of
cosmos-rl is copied into this repository: the tests read the installed package.

- `oracle_module(name)` imports one cosmos-rl module without running the package `__init__` files
  above it (they import the whole framework: vLLM, msgpack, pipelining internals of another torch).
- `oracle_function(module, name, **globals_)` reads one top-level function from the installed
  source when its module does not import here (grpo_trainer.py needs msgpack and CUDA-only parts):
  the function's own text, compiled with the module's imports that resolve and the names given.
"""

from __future__ import annotations

import ast
import functools
import importlib
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
ORACLE_VERSION = "0.4.7"
ORACLE_DIR = Path(os.environ.get("COSMOS_RL_ORACLE", ROOT / ".cosmos-rl-oracle"))


def oracle_root() -> Path:
    """The installed cosmos-rl's folder; fails (never skips) when it is missing, saying how to install it."""
    pkg = ORACLE_DIR / "cosmos_rl"
    if not (pkg / "__init__.py").is_file():
        pytest.fail(
            f"cosmos-rl {ORACLE_VERSION} (the parity tests' oracle) is not installed at {ORACLE_DIR}: "
            "run `make oracle` "
            f"(or `make test`, which installs it), or point COSMOS_RL_ORACLE at a --no-deps install of it",
            pytrace=False,
        )
    version = (pkg / "_version.py").read_text()
    assert ORACLE_VERSION in version, f"{pkg} is not cosmos-rl {ORACLE_VERSION}: {version.strip()}"
    return ORACLE_DIR


_BARE: set[str] = set()  # packages registered without their __init__.py
# packages whose __init__ imports here and is what their own modules import from: never left bare
REAL_PARENTS = ("cosmos_rl.policy.config",)


def _bare_package(name: str) -> None:
    """Registers package `name` with its folder as __path__ but without running its __init__.py."""
    if name in sys.modules:
        return
    module = types.ModuleType(name)
    module.__path__ = [str(oracle_root() / name.replace(".", "/"))]
    sys.modules[name] = module
    _BARE.add(name)


def oracle_module(name: str) -> types.ModuleType:
    """cosmos-rl's module `name` (e.g. "cosmos_rl.policy.config"), its parent packages left bare."""
    root = str(oracle_root())
    if root not in sys.path:
        sys.path.append(root)
    parts = name.split(".")
    for i in range(1, len(parts)):
        parent = ".".join(parts[:i])
        if parent in REAL_PARENTS and (parent not in sys.modules or parent in _BARE):
            oracle_module(parent)  # its modules import names from its __init__ (`from ...config import Config`)
        else:
            _bare_package(parent)
    if name in _BARE:  # left bare as the parent of a module asked for before: now its own contents are asked for
        del sys.modules[name]
        _BARE.discard(name)
    return importlib.import_module(name)


def oracle_source(module: str) -> Path:
    return oracle_root() / (module.replace(".", "/") + ".py")


def oracle_function(module: str, name: str, **globals_: Any) -> Any:
    """Top-level function `name` (or "Class.method", as a plain function of self, decorators dropped) of
    cosmos-rl's `module`, compiled from the installed source.

    The module's `import` statements and top-level assignments are run one by one and those that fail are
    left out: the function must only need what resolves, the module's functions it calls (compiled with it,
    transitively) and `globals_` (a NameError in a test says what is missing). Without `globals_` the function
    is compiled once per process and handed out again (a loop over hundreds of settings would otherwise read,
    parse and import its module at each).
    """
    if not globals_:
        return _oracle_function_alone(module, name)
    return _compile_oracle_function(module, name, globals_)


@functools.cache
def _oracle_function_alone(module: str, name: str) -> Any:
    return _compile_oracle_function(module, name, {})


def _compile_oracle_function(module: str, name: str, globals_: dict[str, Any]) -> Any:
    path = oracle_source(module)
    tree = ast.parse(path.read_text(), filename=str(path))
    namespace: dict[str, Any] = {"__name__": f"oracle:{module}"}
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom | ast.Assign | ast.AnnAssign):
            code = compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec")
            try:
                exec(code, namespace)  # noqa: S102 - the oracle's own import or constant
            except Exception:  # a dependency this environment lacks: the function must not need it
                continue
    namespace.update(globals_)
    # top-level functions and small classes (a trie node) a function may need, compiled with it
    defs: dict[str, ast.FunctionDef | ast.ClassDef] = {
        n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name not in namespace
    }
    cls_name, _, method = name.rpartition(".")
    if cls_name:
        cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name), None)
        assert cls is not None, f"{path} has no class {cls_name}"
        found = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == method), None)
        assert found is not None, f"{path}: {cls_name} has no method {method}"
        found.decorator_list = []
        defs[name] = found
        found.name = name = f"{cls_name}_{method}"
        defs[name] = found
    assert name in defs, f"{path} has no top-level function {name}"
    # the function and every top-level function or class it names, transitively (helpers such as the chunked entropy)
    needed: list[str] = []
    todo = [name]
    while todo:
        fn = todo.pop()
        if fn in needed:
            continue
        needed.append(fn)
        todo += [n.id for n in ast.walk(defs[fn]) if isinstance(n, ast.Name) and n.id in defs]
    code = compile(ast.Module(body=[defs[n] for n in reversed(needed)], type_ignores=[]), str(path), "exec")
    exec(code, namespace)  # noqa: S102 - the oracle's function, read from the installed package
    return namespace[name]


def oracle_config(overrides: dict[str, Any] | None = None) -> Any:
    """cosmos-rl's own `Config()` (pydantic), optionally from a nested dict as its TOML loader builds it."""
    config_cls = oracle_module("cosmos_rl.policy.config").Config
    return config_cls.from_dict(overrides) if overrides else config_cls()


def oracle_learning_rates(steps: int, lr: float = 1.0, **train: Any) -> list[float]:
    """The learning rate at step 0, 1, ..., `steps` (the last: after the run's final tick) under cosmos-rl's own
    build_lr_schedulers for a run of `steps` steps, with its [train] keys set to `train`."""
    cfg = oracle_config()
    for key, value in train.items():
        setattr(cfg.train, key, value)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    # the shape of its OptimizersContainer that LRSchedulersContainer reads: model parts and optimizers
    container = type("Optimizers", (SimpleNamespace,), {"__len__": lambda self: 1})(
        model_parts=[None], optimizers=[[opt]]
    )
    sched = oracle_module("cosmos_rl.policy.trainer.optm").build_lr_schedulers(container, cfg, steps)
    out = [opt.param_groups[0]["lr"]]
    for _ in range(steps):
        opt.step()
        sched.step()
        out.append(opt.param_groups[0]["lr"])
    return out


def oracle_assignment(module: str, target: str, **names: Any) -> Any:
    """The value cosmos-rl's `module` assigns to `target` (e.g. "self.val_sampling_params", the first such
    assignment in the source), evaluated from the installed source with `names` as its variables: for a setting
    cosmos-rl computes inline, in a method that cannot run here (an engine's constructor)."""
    path = oracle_source(module)
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Assign) and any(ast.unparse(t) == target for t in node.targets):
            code = compile(ast.Expression(body=node.value), str(path), "eval")
            return eval(code, dict(names))  # noqa: S307 - the oracle's own expression, read from the installed package
    raise AssertionError(f"{path} assigns nothing to {target}")
