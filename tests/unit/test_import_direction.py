"""One direction: flows -> tasks -> cosmos_train. The library never imports Prefect, flows or tasks;
the only exception is the CLI dispatcher, which imports flows lazily inside its commands."""

from __future__ import annotations

import ast
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[2] / "cosmos_train"
UPWARD = ("prefect", "flows", "tasks")


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
            if path.name == "cli.py" and path.parent == LIBRARY and lazy and name.split(".")[0] != "tasks":
                continue  # the dispatcher's lazy `from flows... import` inside a command
            bad.append(f"{path.relative_to(LIBRARY.parent)}:{line} imports {name}")
    assert not bad, "cosmos_train/ must not import Prefect, flows or tasks:\n" + "\n".join(bad)


def test_the_check_sees_a_violation(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("import os\nfrom prefect import flow\ndef f():\n    import tasks.torchrun\n")
    assert [(n, lazy) for _, n, lazy in _upward_imports(sample)] == [("prefect", False), ("tasks.torchrun", True)]
