"""The config reference, generated from the schema: every key with its type, default, bounds and description.

    cosmos-train config docs > docs/CONFIG.md

One table per TOML table, for each config kind the caller passes (the job config, the evaluation config, the
world-model config: `cosmos-train config docs` passes all three, so this layer imports none above it), and the table
of cosmos-rl's keys (docs/COSMOS_RL_KEYS.md). tests/unit/test_config_docs.py fails when docs/CONFIG.md no longer
matches the schema, so the file never drifts from what `config check` enforces.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from cosmos_train.config.aliases import ALIASES, CONVERTED
from cosmos_train.config.compat import key_state
from cosmos_train.config.compat_notes import PARITY_CHECKED, default_note
from cosmos_train.config.explain import field_bounds, section_models
from cosmos_train.config.key_tests import GUESSES, NO_TEST_YET, PROVED_BY
from cosmos_train.config.schema import Config


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
        # the schema's factories take no argument (pydantic also allows one taking the validated data)
        value = cast(Callable[[], Any], field.default_factory)()
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


def _common_base(members: list[type[BaseModel]]) -> type[BaseModel]:
    """The nearest class every member of a union of tables derives from (the fields they share)."""
    return next(c for c in members[0].__mro__ if all(issubclass(m, c) for m in members))


def _tag(model: type[BaseModel]) -> str:
    """' (type = "grpo")' for a member of a union of tables picked by its `type`."""
    field = model.model_fields.get("type")
    return f" (type = {_format(field.default)})" if field is not None else ""


def _sections(
    model: type[BaseModel], path: str, names: Sequence[str] | None = None, heading: str = ""
) -> Iterator[tuple[str, type[BaseModel], list[str]]]:
    """(heading, table model, its keys shown) for a table and every table below it. A union of tables (SFT's and
    GRPO's train_policy) is its shared keys under the table's name, then each member's own keys under its type."""
    shown = list(model.model_fields) if names is None else list(names)
    yield heading or (f"[{path}]" if path else "top level"), model, shown
    for name in shown:
        members = section_models(model.model_fields[name].annotation)
        sub = f"{path}.{name}" if path else name
        if len(members) == 1:
            yield from _sections(members[0], sub)
        elif members:
            base = _common_base(members)
            yield from _sections(base, sub)
            for member in members:
                own = [n for n in member.model_fields if n not in base.model_fields]
                yield from _sections(member, sub, own, heading=f"[{sub}]{_tag(member)}")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def section_tables(root: type[BaseModel], title: str) -> str:
    out = [f"## {title}", ""]
    for heading, model, names in _sections(root, ""):
        rows = [
            (name, model.model_fields[name])
            for name in names
            if not section_models(model.model_fields[name].annotation)
            or typing.get_origin(model.model_fields[name].annotation) is list
        ]
        if not rows:
            continue
        doc = (model.__doc__ or "").strip().split("\n\n")[0]
        out += [f"### {heading}", ""]
        if doc:
            out += [_cell(doc), ""]
        out += ["| key | type | default | bounds | description |", "|---|---|---|---|---|"]
        for name, field in rows:
            out.append(
                f"| `{name}` | {_cell(_type_name(field.annotation))} | {_cell(_default(field))} | "
                f"{_cell(_bounds(field))} | {_cell(field.description or '')} |"
            )
        out.append("")
    return "\n".join(out)


def config_reference(evaluation: type[BaseModel], world_model: type[BaseModel]) -> str:
    """docs/CONFIG.md: the job config's tables, then the evaluation config's and the world-model config's (passed
    in: they sit in layers above this one)."""
    head = [
        "# Config reference",
        "",
        "Generated from the schema by `cosmos-train config docs` (do not edit by hand). Every key's "
        "bounds are enforced by `cosmos-train config check` and by every command before it starts.",
        "",
        "",
    ]
    kinds: list[tuple[type[BaseModel], str]] = [
        (Config, "Job config (TOML)"),
        (evaluation, "Evaluation config (TOML or YAML)"),
        (world_model, "World-model RL config (TOML: configs/wfm/, configs/tiny-wfm-*.toml)"),
    ]
    return "\n".join(head) + "\n".join(section_tables(model, title) for model, title in kinds)


# ------------------------------------------------------------------------- cosmos-rl's keys, one state each
def schema_keys() -> dict[str, str]:
    """Every dotted key of the job config with its default as the tables show it (a table's keys, not the
    table; list-of-table keys such as remote_reward.reward_fns.name included). A key of both SFT's and GRPO's
    train_policy table shows SFT's default (the table naming no type)."""
    out: dict[str, str] = {}

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            members = section_models(field.annotation)
            if members and name != "custom":
                for member in members:
                    walk(member, f"{prefix}{name}.")
            else:
                out.setdefault(prefix + name, _default(field))

    walk(Config, "")
    return out


def alias_map() -> dict[str, str]:
    """cosmos-rl key -> ours, for the keys that load under another name (aliases.ALIASES, CONVERTED)."""
    pairs = [*ALIASES, *((alias, canonical) for alias, canonical, _ in CONVERTED)]
    return {".".join(a): ".".join(c) for a, c in pairs}


def recorded_default(field: dict[str, Any]) -> str:
    """A recorded cosmos-rl key's default as the tables show ours."""
    if "default" not in field:
        return ", ".join(f"{cls}: {_format(v)}" for cls, v in field["default_by_section"].items())
    return "(required)" if field["default"] == "<required>" else _format(field["default"])


def proved_by(key: str, state: str) -> str:
    """The key table's last cell: the tests that prove an implemented key (config.key_tests), else nothing."""
    if state != "implemented":
        return ""
    if key in NO_TEST_YET:
        return "no test yet"
    return ", ".join(f"`{t}`" for t in PROVED_BY.get(key, ()))


def cosmos_rl_key_table(recorded: dict[str, Any]) -> str:
    """docs/COSMOS_RL_KEYS.md: every key of cosmos-rl's schema (the recorded field list,
    tests/data/cosmos_rl_fields.json) with its state here, where they differ both defaults, and for an implemented
    key the test that proves it."""
    ours, aliases = schema_keys(), alias_map()
    rows = []
    counts: dict[str, int] = {}
    proved = untested = guesses = 0
    for field in recorded["fields"]:
        key = field["key"]
        state, note = key_state(key, set(ours), aliases)
        counts[state] = counts.get(state, 0) + 1
        if key in GUESSES:
            guesses += 1
            note = "; ".join(filter(None, [f"**guess**: {GUESSES[key]}", note]))
        if state == "implemented":
            untested += key in NO_TEST_YET
            proved += key in PROVED_BY
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
        rows.append(f"| `{key}` | {state} | {_cell(default)} | {_cell(note)} | {checked} | {proved_by(key, state)} |")
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return "\n".join(
        [
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
            f"{len(rows)} keys: {summary}. Of the {counts.get('implemented', 0)} implemented, {proved} have a "
            f"test that proves them and {untested} have no test yet; {guesses} rows are marked **guess**.",
            "",
            "- **checked against cosmos-rl's code**: the parity tests (tests/unit/test_cosmos_rl_*.py) run ours "
            "beside the installed cosmos-rl 0.4.7 (`make oracle`) on the same inputs: `default` against its "
            "`Config()`, and the named function for the key's meaning (the GRPO loss, advantages, entropy, "
            "schedules and the controller's step count; a whole GRPO update over mini-batches; the SFT loss; the "
            "optimizer; every rule reward, the overlong reward and the filter values; the shared-prefix pass and "
            "the validation sampling; the held-out split).",
            "- **proved by**: for an implemented key, the tests (pytest node ids) whose assertions show it meaning "
            "what this table says, a test running cosmos-rl's own function beside ours where there is one; "
            "`no test yet` where no test does (`cosmos_train/config/key_tests.py` says what one would need). "
            "tests/unit/test_cosmos_rl_keys.py checks that each named test exists and mentions the key. A key with "
            "no effect or refused says why in its state and what to know.",
            "- **guess** (in what to know): cosmos-rl 0.4.7's code does not decide what the key means here: its "
            "trainers never read the flag (outside its config schema), or the value is inferred where cosmos-rl "
            "requires or fixes one. The note says what this trainer does with it.",
            "",
            "| key | state | default here (cosmos-rl's) | what to know | checked against cosmos-rl's code "
            "| proved by |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
