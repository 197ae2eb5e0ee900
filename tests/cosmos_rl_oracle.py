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
import importlib
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORACLE_VERSION = "0.4.7"
ORACLE_DIR = Path(os.environ.get("COSMOS_RL_ORACLE", ROOT / ".cosmos-rl-oracle"))


def oracle_root() -> Path:
    """The installed cosmos-rl's folder; fails (never skips) when it is missing, saying how to install it."""
    pkg = ORACLE_DIR / "cosmos_rl"
    if not (pkg / "__init__.py").is_file():
        pytest.fail(
            f"cosmos-rl {ORACLE_VERSION} (the parity tests' oracle) is not installed at {ORACLE_DIR}: run `make oracle` "
            f"(or `make test`, which installs it), or point COSMOS_RL_ORACLE at a --no-deps install of it",
            pytrace=False,
        )
    version = (pkg / "_version.py").read_text()
    assert ORACLE_VERSION in version, f"{pkg} is not cosmos-rl {ORACLE_VERSION}: {version.strip()}"
    return ORACLE_DIR


def _bare_package(name: str) -> None:
    """Registers package `name` with its folder as __path__ but without running its __init__.py."""
    if name in sys.modules:
        return
    module = types.ModuleType(name)
    module.__path__ = [str(oracle_root() / name.replace(".", "/"))]
    sys.modules[name] = module


def oracle_module(name: str) -> types.ModuleType:
    """cosmos-rl's module `name` (e.g. "cosmos_rl.policy.config"), its parent packages left bare."""
    root = str(oracle_root())
    if root not in sys.path:
        sys.path.append(root)
    parts = name.split(".")
    for i in range(1, len(parts)):
        _bare_package(".".join(parts[:i]))
    return importlib.import_module(name)


def oracle_source(module: str) -> Path:
    return oracle_root() / (module.replace(".", "/") + ".py")


def oracle_function(module: str, name: str, **globals_: Any) -> Any:
    """Top-level function `name` of cosmos-rl's `module`, compiled from the installed source.

    The module's `import` statements are run one by one and those that fail are left out: the
    function must only need what resolves, plus `globals_` (a NameError in a test says which).
    """
    path = oracle_source(module)
    tree = ast.parse(path.read_text(), filename=str(path))
    namespace: dict[str, Any] = {"__name__": f"oracle:{module}"}
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            code = compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec")
            try:
                exec(code, namespace)  # noqa: S102 - the oracle's own import line
            except Exception:  # a dependency this environment lacks: the function must not need it
                continue
    namespace.update(globals_)
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert found, f"{path} has no top-level function {name}"
    helpers = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("_")]
    code = compile(ast.Module(body=[*helpers, found[0]], type_ignores=[]), str(path), "exec")
    exec(code, namespace)  # noqa: S102 - the oracle's function, read from the installed package
    return namespace[name]


def oracle_config(overrides: dict[str, Any] | None = None) -> Any:
    """cosmos-rl's own `Config()` (pydantic), optionally from a nested dict as its TOML loader builds it."""
    config_cls = oracle_module("cosmos_rl.policy.config").Config
    return config_cls.from_dict(overrides) if overrides else config_cls()
