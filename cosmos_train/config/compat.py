"""cosmos-rl's job-config keys that this trainer does not implement: accepted with no effect, or refused.

    cosmos-train config check cosmos-reason1/examples/post_training/configs/sft.toml

A cosmos-rl config loads here unchanged. Each key of cosmos-rl's schema (recorded in
tests/data/cosmos_rl_fields.json by scripts/record_cosmos_rl_fields.py) is in one of three states:

1. implemented: the key is in `cosmos_train.config.Config` (same path, or an alias in `config.aliases.ALIASES`);
2. accepted, no effect here: a `Rule` (config.compat_rules) whose value runs as asked without it; `config check` lists
   it with the rule's reason, the run folder's config.toml and the run summary keep that list;
3. refused: a `Rule` whose value would change the result the user asked for if it were dropped; the
   config error says what to do instead.

`take_foreign_keys` removes these keys from the raw TOML before validation, so everything else is
still checked strictly (a typo of a known key is an error with a suggestion). `key_state` gives each key's state
for the key table (docs/COSMOS_RL_KEYS.md), with what config.compat_notes says of the keys we implement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cosmos_train.config.compat_notes import INERT, PARTLY, REFUSED_OTHERWISE
from cosmos_train.config.compat_rules import RULES, SUBSTITUTES, Rule


@dataclass(frozen=True)
class NoEffect:
    """A key the config set that was accepted with no effect here."""

    key: str
    value: Any
    reason: str

    def line(self) -> str:
        return f"{self.key} = {_short(self.value)}: {self.reason}"


_BY_KEY = {r.key: r for r in RULES}


def rule_for(key: str) -> Rule | None:
    """The rule of a dotted key or of the section holding it."""
    parts = key.split(".")
    for n in range(len(parts), 0, -1):
        if (rule := _BY_KEY.get(".".join(parts[:n]))) is not None:
            return rule
    return None


def rule_names_under(section: str) -> list[str]:
    """The names of the rules' keys directly in a table ('' for the top level)."""
    prefix = f"{section}." if section else ""
    return [r.key[len(prefix) :] for r in RULES if r.key.startswith(prefix) and "." not in r.key[len(prefix) :]]


def take_foreign_keys(raw: dict[str, Any], no_effect: list[NoEffect]) -> list[str]:
    """Remove every key a `Rule` covers from `raw` (in place); each honoured one is appended to `no_effect`,
    each other one becomes a problem line naming the key, its value and what to do."""
    problems: list[str] = []
    for key, theirs, ours, reason in SUBSTITUTES:
        *parents, last = key.split(".")
        node = _table(raw, parents)
        if node is not None and node.get(last) == theirs:
            node[last] = ours
            no_effect.append(NoEffect(key, theirs, f"runs as {ours!r}: {reason}"))
    for rule in RULES:
        *parents, last = rule.key.split(".")
        node = _table(raw, parents)
        if node is None or last not in node:
            continue
        value = node.pop(last)
        if rule.honoured(value):
            no_effect.append(NoEffect(rule.key, value, rule.reason))
        else:
            problems.append(f"{rule.key} = {_short(value)}: {rule.instead}")
    return problems


def _table(raw: dict[str, Any], path: list[str]) -> dict[str, Any] | None:
    node: Any = raw
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def key_state(key: str, known: set[str], aliases: dict[str, str]) -> tuple[str, str]:
    """(state, what to know) of one cosmos-rl key: implemented | no effect | no effect / refused otherwise |
    not covered (a gap tests/unit/test_cosmos_rl_keys.py reports). known: our schema's dotted keys;
    aliases: cosmos-rl key -> ours (config.ALIASES and CONVERTED)."""
    rule = rule_for(key)
    if key in INERT:
        return "no effect", INERT[key]
    if key in REFUSED_OTHERWISE:
        return "no effect / refused", REFUSED_OTHERWISE[key]
    if key in known:
        return "implemented", PARTLY.get(key, "")
    if key in aliases:
        return "implemented", f"as `{aliases[key]}`"
    if rule is not None:
        if rule.always_honoured:
            return "no effect", rule.reason
        return "no effect / refused", f"{rule.reason}; otherwise refused: {rule.instead}"
    return "not covered", ""
