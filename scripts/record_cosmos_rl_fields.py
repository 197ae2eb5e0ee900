"""Record the field list of cosmos-rl's job-config schema, the fixture tests/data/cosmos_rl_fields.json.

    git -C COSMOS_RL show HEAD:cosmos_rl/policy/config/__init__.py > /tmp/cosmos_rl_config.py
    python scripts/record_cosmos_rl_fields.py /tmp/cosmos_rl_config.py --commit $(git -C COSMOS_RL rev-parse HEAD)

The file is read with `ast`, never imported (it needs cosmos_rl installed): every annotated field of every
pydantic class reachable from `Config`, as a dotted key path with its declared default where that is a
literal. A union of sections (train.train_policy: SFT | GRPO) contributes the fields of each. The fixture is
what tests/unit/test_cosmos_rl_keys.py holds our schema to: each recorded key is implemented, accepted
with no effect here (with a reason) or refused under stated values. It then writes docs/COSMOS_RL_KEYS.md,
each key's state here (`cosmos_train.config.docs.cosmos_rl_key_table`).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any

_NO_DEFAULT = "<required>"
_NOT_LITERAL = "<computed>"


def _default(value: ast.expr | None) -> Any:
    """The declared default: `Field(default=x)`, `Field(x)`, `= x`; a default_factory of a class is `{}`."""
    if value is None:
        return _NO_DEFAULT
    if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "Field":
        kw = {k.arg: k.value for k in value.keywords}
        if "default" in kw:
            return _literal(kw["default"])
        if value.args:
            return _literal(value.args[0])
        if "default_factory" in kw:
            factory = kw["default_factory"]
            if isinstance(factory, ast.Lambda):
                return _literal(factory.body)
            if isinstance(factory, ast.Name) and factory.id in ("list", "dict"):
                return [] if factory.id == "list" else {}
            return {}
        return _NO_DEFAULT
    return _literal(value)


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return _NOT_LITERAL


def _class_fields(tree: ast.Module) -> tuple[dict[str, list[tuple[str, ast.expr, Any]]], dict[str, list[str]]]:
    fields: dict[str, list[tuple[str, ast.expr, Any]]] = {}
    bases: dict[str, list[str]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
        fields[node.name] = [
            (stmt.target.id, stmt.annotation, _default(stmt.value))
            for stmt in node.body
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
        ]
    return fields, bases


def _all_fields(name: str, fields: dict, bases: dict) -> list[tuple[str, ast.expr, Any]]:
    out: dict[str, tuple[str, ast.expr, Any]] = {}
    for base in bases.get(name, []):
        if base in fields:
            out.update({f[0]: f for f in _all_fields(base, fields, bases)})
    out.update({f[0]: f for f in fields.get(name, [])})
    return list(out.values())


def _section_names(annotation: ast.expr, known: set[str]) -> list[str]:
    return sorted({n.id for n in ast.walk(annotation) if isinstance(n, ast.Name) and n.id in known})


def record(source: str) -> list[dict[str, Any]]:
    """Every key path reachable from `Config`, depth first, with its annotation and default."""
    tree = ast.parse(source)
    fields, bases = _class_fields(tree)
    sections = {n for n in fields if n != "Config"}
    rows: dict[str, dict[str, Any]] = {}

    def walk(cls: str, prefix: str) -> None:
        for name, annotation, default in _all_fields(cls, fields, bases):
            path = f"{prefix}{name}"
            subs = _section_names(annotation, sections)
            if subs:
                for sub in subs:
                    walk(sub, f"{path}.")
                continue
            row = rows.setdefault(path, {"key": path, "type": ast.unparse(annotation), "defaults": {}})
            row["defaults"][cls] = default

    walk("Config", "")
    out = []
    for row in rows.values():
        defaults = list(row.pop("defaults").items())
        # One default when every class that declares the key agrees (train.train_policy.* of SFT and GRPO).
        if len({json.dumps(d, default=str) for _, d in defaults}) == 1:
            row["default"] = defaults[0][1]
        else:
            row["default_by_section"] = dict(defaults)
        out.append(row)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="cosmos_rl/policy/config/__init__.py of a cosmos-rl checkout")
    parser.add_argument("--commit", required=True, help="the cosmos-rl commit the file is from")
    parser.add_argument("--out", type=Path, default=Path(__file__).parents[1] / "tests/data/cosmos_rl_fields.json")
    args = parser.parse_args(argv)
    rows = record(args.source.read_text())
    doc = {
        "source": "nvidia-cosmos/cosmos-rl cosmos_rl/policy/config/__init__.py",
        "commit": args.commit,
        "fields": rows,
    }
    args.out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    print(f"{len(rows)} keys -> {args.out}", file=sys.stderr)
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from cosmos_train.config.docs import cosmos_rl_key_table

    (root / "docs" / "COSMOS_RL_KEYS.md").write_text(cosmos_rl_key_table(doc))
    print(f"their states here -> {root / 'docs' / 'COSMOS_RL_KEYS.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
