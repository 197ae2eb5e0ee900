"""Config problems in words: keys not in the schema (with the closest valid one), and pydantic's validation errors
as one line per key path with its bounds in words. Every config kind (job, world-model, evaluation, reward-service,
pipeline) reports through here, so they all read alike."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any, get_args

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from cosmos_train.config.compat import rule_names_under


def unknown_keys(raw: Any, model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every key not in the schema, with the closest valid key suggested."""
    if not isinstance(raw, dict):
        return []
    problems = []
    fields = model.model_fields
    for key, value in raw.items():
        where = f"{prefix}{key}"
        if key not in fields:
            # cosmos-rl's keys accepted here count as known names too: `profilr` suggests `profiler`
            names = [*fields, *rule_names_under(prefix[:-1])]
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
            section = prefix[:-1] or "top level"
            hint = f"did you mean {prefix}{close[0]}?" if close else f"valid keys: {', '.join(sorted(fields))}"
            problems.append(f"{where}: unknown key in [{section}] ({hint})")
            continue
        annotation = fields[key].annotation
        for item in value if isinstance(value, list) else [value]:
            sub = section_model(annotation, item)
            if sub is not None:
                problems += unknown_keys(item, sub, where + ".")
    return problems


def section_models(annotation: Any) -> list[type[BaseModel]]:
    """The model classes inside an annotation like `DatasetConfig | None`, `list[RemoteRewardFn]` or a
    discriminated union of tables (`SFTPolicyConfig | GRPOPolicyConfig`)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in get_args(annotation):
        found += [m for m in section_models(arg) if m not in found]
    return found


def section_model(annotation: Any, raw: Any = None) -> type[BaseModel] | None:
    """The model class a table of this annotation is read as: for a union of tables, the member whose `type`
    is the table's `type` (the discriminator), else the first."""
    models = section_models(annotation)
    if len(models) > 1 and isinstance(raw, dict):
        for model in models:
            if raw.get("type") in _tags(model):
                return model
    return models[0] if models else None


def _tags(model: type[BaseModel]) -> tuple[Any, ...]:
    """The values of a union member's `type` discriminator (a Literal), () for a table without one."""
    field = model.model_fields.get("type")
    return get_args(field.annotation) if field is not None else ()


_BOUND_OPS = (
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Ge, "ge", ">="),
    (annotated_types.Lt, "lt", "<"),
    (annotated_types.Le, "le", "<="),
)
_COMPARISON_ERRORS = ("greater_than", "greater_than_equal", "less_than", "less_than_equal")
# How pydantic names the members of a union in an error's location ('int', "literal['auto']",
# 'function-after[...]'): never a key, so left out of the key path.
_TYPE_TAG = re.compile(r"[a-z-]+\[.*\]|constrained-\w+|int|float|str|bool|bytes|none", re.S)


def field_bounds(field: FieldInfo) -> str:
    """A field's numeric bounds in words, '> 0 and <= 1'; '' when it has none. Bounds of union members
    and tuple items (`tuple[Beta, Beta]`, `Literal[-1] | Annotated[int, Field(ge=1)]`) count too."""
    words: list[str] = []

    def collect(metadata: Iterable[Any]) -> None:
        for m in metadata:
            if isinstance(m, FieldInfo):
                collect(m.metadata)
            for cls, attr, op in _BOUND_OPS:
                if isinstance(m, cls) and f"{op} {getattr(m, attr)}" not in words:
                    words.append(f"{op} {getattr(m, attr)}")

    def walk(annotation: Any) -> None:
        args = get_args(annotation)
        if getattr(annotation, "__metadata__", None) is not None:  # Annotated[T, ...]
            collect(annotation.__metadata__)
            walk(args[0])
            return
        for arg in args:
            walk(arg)

    collect(field.metadata)
    walk(field.annotation)
    return " and ".join(words)


def check_name(what: str, name: str, known: Iterable[str]) -> str:
    """`name` when it is one of `known` (a plug-in registry), else a validation error that
    `explain_errors` shows with the valid names and the closest one."""
    names = sorted(known)
    if name not in names:
        valid = ", ".join(repr(n) for n in names)
        raise PydanticCustomError(
            "unknown_name", "must be a registered {what}: {valid}", {"what": what, "valid": valid}
        )
    return name


def explain_errors(e: ValidationError, root: type[BaseModel]) -> list[str]:
    """One line per key: 'key.path: what is wrong (got value); did you mean ...?', constraints in words.

    pydantic reports each member of a union separately (`max_keep = 0` fails both `-1` and `>= 1`);
    their messages are joined into one line.
    """
    lines: dict[str, list[str]] = {}
    hints: dict[str, str] = {}
    inputs: dict[str, Any] = {}
    for err in e.errors():
        key, section, field = _locate(err["loc"], root)
        msg, hint = _message(err, section, field)
        if msg not in lines.setdefault(key, []):
            lines[key].append(msg)
        if err["type"] != "extra_forbidden":  # the value of a key that should not be there says nothing
            inputs.setdefault(key, err.get("input"))
        if hint:
            hints.setdefault(key, hint)
    out = []
    for key, msgs in lines.items():
        # A value that matched one union member deeper down (`reward_function = {a = nan}`) makes
        # the other members' type mismatches noise: the deeper key says what is wrong.
        if any(k.startswith((f"{key}.", f"{key}[")) for k in lines if key):
            continue
        text = msgs[0] + "".join(
            f" or {m.removeprefix('must be ')}" if m.startswith("must be ") else f"; {m}" for m in msgs[1:]
        )
        # A section-level rule reports the whole table as its input.
        if key in inputs and not isinstance(inputs[key], dict):
            text += f" (got {inputs[key]!r})"
        if key in hints:
            text += f"; {hints[key]}"
        out.append(f"{key or 'config'}: {text}")
    return out


def _locate(loc: tuple[Any, ...], root: type[BaseModel]) -> tuple[str, type[BaseModel] | None, FieldInfo | None]:
    """The key path of an error location ('train.optm_betas[1]'), the section it ends in and its field."""
    path = ""
    section: type[BaseModel] | None = root
    field: FieldInfo | None = None
    members: list[type[BaseModel]] = []
    for part in loc:
        tagged = [m for m in members if part in _tags(m)]
        members = []
        if isinstance(part, int):
            path += f"[{part}]"
        elif tagged:  # a discriminated union names the member it validated against: not a key
            section = tagged[0]
        elif section is not None and part in section.model_fields:
            field = section.model_fields[part]
            path += f".{part}" if path else part
            members = section_models(field.annotation)
            section = members[0] if members else None
        elif not _TYPE_TAG.fullmatch(str(part)):  # an unknown key, or a key of a free-form table
            path += f".{part}" if path else str(part)
            field = None
    return path, section, field


def _message(err: Any, section: type[BaseModel] | None, field: FieldInfo | None) -> tuple[str, str]:
    """(what is wrong, a hint such as 'did you mean ...?' or '')."""
    kind, ctx, given = err["type"], err.get("ctx") or {}, err.get("input")
    bounds = field_bounds(field) if field is not None else ""
    if kind in _COMPARISON_ERRORS:
        if bounds:
            return f"must be {bounds}", ""
        return next(f"must be {op} {ctx[attr]}" for _, attr, op in _BOUND_OPS if attr in ctx), ""
    if kind == "finite_number":
        return f"must be a finite number {bounds}".rstrip(), ""
    if kind in ("literal_error", "unknown_name"):
        expected = ctx.get("expected") or ctx.get("valid", "")
        names = re.findall(r"'([^']*)'", expected)
        close = difflib.get_close_matches(given, names, n=1, cutoff=0.6) if isinstance(given, str) else []
        hint = f"did you mean {close[0]!r}?" if close else ""
        if kind == "unknown_name":
            return err["msg"], hint
        return f"must be {'one of ' if len(names) > 1 else ''}{expected}", hint
    if kind == "union_tag_invalid":  # a table picked by its `type` (train_policy) naming no known one
        return f"type = {ctx.get('tag')!r} is not one of {ctx.get('expected_tags')}", ""
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        return "must not be empty", ""
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s)", ""
    if kind == "extra_forbidden":
        fields = list(section.model_fields) if section is not None else []
        close = difflib.get_close_matches(str(err["loc"][-1]), fields, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(fields)}"
        return f"unknown key ({hint})", ""
    msg = err["msg"].removeprefix("Value error, ").replace("Input should be ", "must be ", 1)
    if kind.endswith(("_parsing", "_type")) or kind == "int_from_float":
        msg = msg.split(", ")[0]  # "must be a valid integer, unable to parse string ...": the value is shown
    return msg, ""
