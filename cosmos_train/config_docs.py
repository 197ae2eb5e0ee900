"""The config reference, generated from the schema: every key with its type, default, bounds and description.

    cosmos-train config docs > docs/CONFIG.md

One table per TOML table, for the job config (`cosmos_train.config.Config`) and the evaluation config
(`cosmos_train.evaluation.config.EvalConfig`). tests/unit/test_config_docs.py fails when docs/CONFIG.md
no longer matches the schema, so the file never drifts from what `config check` enforces.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from cosmos_train.config import field_bounds


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is typing.Literal:
        return " | ".join(repr(a).replace("'", '"') for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin in (list, tuple, dict):
        inner = ", ".join(_type_name(a) for a in args if a is not Ellipsis)
        return f"{origin.__name__}[{inner}]"
    if annotation is type(None):
        return "none"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
        if isinstance(value, BaseModel):
            return "(table)"
    elif field.default is PydanticUndefined:
        return "(required)"
    else:
        value = field.default
    return _format(value)


def _format(value: Any) -> str:
    """A default as the reference tables show it: unset, true, "text", [1, 2]."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    return str(list(value) if isinstance(value, tuple) else value).replace("'", '"')


def _bounds(field: FieldInfo) -> str:
    words = [field_bounds(field)] if field_bounds(field) else []
    if any(isinstance(m, annotated_types.MinLen) and m.min_length > 0 for m in field.metadata):
        words.append("non-empty")
    return " and ".join(words)


def _sub_section(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _sub_section(arg)
        if found is not None:
            return found
    return None


def _sections(model: type[BaseModel], path: str) -> Iterator[tuple[str, type[BaseModel]]]:
    yield path, model
    for name, field in model.model_fields.items():
        sub = _sub_section(field.annotation)
        if sub is not None:
            yield from _sections(sub, f"{path}.{name}" if path else name)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def section_tables(root: type[BaseModel], title: str) -> str:
    out = [f"## {title}", ""]
    for path, model in _sections(root, ""):
        rows = [(name, f) for name, f in model.model_fields.items() if _sub_section(f.annotation) is None
                or typing.get_origin(f.annotation) is list]
        if not rows:
            continue
        doc = (model.__doc__ or "").strip().split("\n\n")[0]
        out += [f"### [{path}]" if path else "### top level", ""]
        if doc:
            out += [_cell(doc), ""]
        out += ["| key | type | default | bounds | description |", "|---|---|---|---|---|"]
        for name, field in rows:
            out.append(f"| `{name}` | {_cell(_type_name(field.annotation))} | {_cell(_default(field))} | "
                       f"{_cell(_bounds(field))} | {_cell(field.description or '')} |")
        out.append("")
    return "\n".join(out)


def config_reference() -> str:
    from cosmos_train.config import Config
    from cosmos_train.evaluation.config import EvalConfig
    from cosmos_train.wfm.config import WfmConfig

    head = ["# Config reference", "",
            "Generated from the schema by `cosmos-train config docs` (do not edit by hand). Every key's "
            "bounds are enforced by `cosmos-train config check` and by every command before it starts.", "", ""]
    return "\n".join(head) + section_tables(Config, "Job config (TOML)") + "\n" + section_tables(
        EvalConfig, "Evaluation config (TOML or YAML)") + "\n" + section_tables(
        WfmConfig, "World-model RL config (TOML: configs/wfm/, configs/tiny-wfm-*.toml)")


# ------------------------------------------------------------------------- cosmos-rl's keys, one state each
def schema_keys() -> dict[str, str]:
    """Every dotted key of the job config with its default as the tables show it (a table's keys, not the
    table; list-of-table keys such as remote_reward.reward_fns.name included)."""
    from cosmos_train.config import Config

    out: dict[str, str] = {}

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            sub = _sub_section(field.annotation)
            if sub is not None and name != "custom":
                walk(sub, f"{prefix}{name}.")
            else:
                out[prefix + name] = _default(field)

    walk(Config, "")
    return out


def alias_map() -> dict[str, str]:
    """cosmos-rl key -> ours, for the keys that load under another name (config.ALIASES, CONVERTED)."""
    from cosmos_train.config import ALIASES, CONVERTED

    return {".".join(a): ".".join(c) for a, c, *_ in [*ALIASES, *CONVERTED]}


def recorded_default(field: dict[str, Any]) -> str:
    """A recorded cosmos-rl key's default as the tables show ours."""
    if "default" not in field:
        return ", ".join(f"{cls}: {_format(v)}" for cls, v in field["default_by_section"].items())
    return "(required)" if field["default"] == "<required>" else _format(field["default"])


def cosmos_rl_key_table(recorded: dict[str, Any]) -> str:
    """docs/COSMOS_RL_KEYS.md: every key of cosmos-rl's schema (the recorded field list,
    tests/data/cosmos_rl_fields.json) with its state here and, where they differ, both defaults."""
    from cosmos_train.config_compat import PARITY_CHECKED, default_note, key_state

    ours, aliases = schema_keys(), alias_map()
    rows = []
    counts: dict[str, int] = {}
    for field in recorded["fields"]:
        key = field["key"]
        state, note = key_state(key, set(ours), aliases)
        counts[state] = counts.get(state, 0) + 1
        theirs = recorded_default(field)
        default = theirs
        if key in ours and (why := default_note(key, ours[key], theirs)) is not None:
            default = f"{ours[key]} (cosmos-rl: {theirs})"
            note = "; ".join(filter(None, [note, f"default: {why or 'NOT EXPLAINED'}"]))
        elif key in ours:
            default = ours[key]
        checked = f"`{PARITY_CHECKED[key]}`" if key in PARITY_CHECKED else ""
        if key in ours:
            checked = ", ".join(filter(None, ["default", checked]))
        rows.append(f"| `{key}` | {state} | {_cell(default)} | {_cell(note)} | {checked} |")
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return "\n".join([
        "# cosmos-rl's config keys here",
        "",
        "Generated from cosmos-rl's schema (`cosmos_rl/policy/config/__init__.py` at "
        f"{recorded['commit'][:12]}, recorded by `scripts/record_cosmos_rl_fields.py`) and ours; "
        "tests/unit/test_cosmos_rl_keys.py fails when it drifts. See docs/MIGRATING_FROM_COSMOS_RL.md.",
        "",
        "- **implemented**: the same meaning (under our name where one is given); where the defaults differ "
        "both are shown.",
        "- **no effect**: accepted; `cosmos-train config check` lists it with the reason, and the run folder's "
        "config.toml and the run summary keep that list.",
        "- **no effect / refused**: accepted at the values that run as asked; any other value is refused with "
        "what to do instead.",
        "",
        f"{len(rows)} keys: {summary}.",
        "",
        "- **checked against cosmos-rl's code**: tests/unit/test_cosmos_rl_parity.py runs ours beside the installed "
        "cosmos-rl 0.4.7 (`make oracle`) on the same inputs: `default` against its `Config()`, and the named "
        "function (`compute_loss`, `compute_logprobs`, `GRPO.compute_advantage`, `build_lr_schedulers`, "
        "`recompute_total_steps`: the controller's step count) for the key's meaning.",
        "",
        "| key | state | default here (cosmos-rl's) | what to know | checked against cosmos-rl's code |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ])
