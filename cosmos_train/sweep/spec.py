"""A sweep's search space: `--grid` / `--random` specs parsed, expanded into trials, named and checked.

    axes = [parse_grid("train.optm_lr=1e-5,3e-5"), parse_random("train.train_policy.kl_beta=uniform(0,0.05)")]
    trials = expand(axes, trials=4, seed=0)   # [{"train.optm_lr": 1e-05, "train.train_policy.kl_beta": 0.0237}, ...]
    trial_name(trials[0])                     # "lr=1e-05,kl_beta=0.0237"

A grid axis lists its values (each read as TOML, as `--set` reads it); a random axis draws from
loguniform(a,b), uniform(a,b) or choice(a,b,c). Grid points are crossed with `trials` random draws (the
draws alone when there is no grid, the grid alone when there is no random axis); the draws come from
random.Random(seed), floats kept to 3 significant digits, so the same seed gives the same trials and names.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from cosmos_train.config.overrides import parse_override
from cosmos_train.errors import ConfigError

WHAT = "sweep spec"
DISTRIBUTIONS = ("loguniform", "uniform", "choice")
MAX_TRIALS = 1000
SIGNIFICANT = 3  # digits a drawn float keeps: short trial names, the same draws everywhere


@dataclass(frozen=True)
class Axis:
    """One swept key: its grid values, or the distribution its random values come from."""

    spec: str  # as the user wrote it, for messages: "--grid train.optm_lr=1e-5,3e-5"
    key: str  # dotted config key
    values: tuple[Any, ...] = ()  # grid values, or choice()'s options
    dist: Literal["grid", "loguniform", "uniform", "choice"] = "grid"
    low: float = 0.0
    high: float = 0.0

    def draw(self, rng: random.Random) -> Any:
        if self.dist == "choice":
            return self.values[rng.randrange(len(self.values))]
        if self.dist == "loguniform":
            value = math.exp(rng.uniform(math.log(self.low), math.log(self.high)))
        else:
            value = rng.uniform(self.low, self.high)
        return float(f"{value:.{SIGNIFICANT}g}")

    def examples(self) -> list[Any]:
        """Values that stand for the axis when its key is checked against the config: every grid value or
        option, a range's two ends."""
        return list(self.values) if self.dist in ("grid", "choice") else [self.low, self.high]


def split_values(text: str) -> list[str]:
    """Comma-separated values, commas inside [..], {..} or quotes kept: `1,[2,3],"a,b"` -> 3 values."""
    out, depth, quote, cur = [], 0, "", ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        cur += ch
    out.append(cur.strip())
    return out


def _key_and_rest(spec: str, flag: str) -> tuple[str, str]:
    key, sep, rest = spec.partition("=")
    key = key.strip()
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", key) or not rest.strip():
        raise ConfigError([f"{flag} {spec!r}: expected key.path=VALUES, e.g. {flag} " + _EXAMPLES[flag]], what=WHAT)
    return key, rest.strip()


_EXAMPLES = {
    "--grid": "train.optm_lr=1e-5,3e-5",
    "--random": "'train.optm_lr=loguniform(1e-6,1e-4)' (or uniform(a,b), choice(a,b,c))",
}


def _value(text: str) -> Any:
    return parse_override(f"v={text}")[1]


def parse_grid(spec: str) -> Axis:
    """`key=v1,v2,...` -> a grid axis; each value read as TOML (1e-5 a float, true a bool, "x" a string)."""
    key, rest = _key_and_rest(spec, "--grid")
    parts = split_values(rest)
    if any(p == "" for p in parts):
        raise ConfigError([f"--grid {spec!r}: an empty value (two commas, or one at an end)"], what=WHAT)
    values = tuple(_value(p) for p in parts)
    if len({json.dumps(v, sort_keys=True) for v in values}) != len(values):
        raise ConfigError([f"--grid {spec!r}: a value is listed twice"], what=WHAT)
    return Axis(spec=f"--grid {spec}", key=key, values=values)


def parse_random(spec: str) -> Axis:
    """`key=loguniform(a,b)` | `key=uniform(a,b)` | `key=choice(a,b,...)` -> a random axis."""
    key, rest = _key_and_rest(spec, "--random")
    m = re.fullmatch(r"([a-z_]+)\s*\((.*)\)", rest, flags=re.S)
    where = f"--random {spec!r}"
    if not m or m.group(1) not in DISTRIBUTIONS:
        raise ConfigError(
            [f"{where}: {rest!r} is not a distribution; use loguniform(a,b), uniform(a,b) or choice(a,b,c)"],
            what=WHAT,
        )
    dist, args = m.group(1), [a for a in split_values(m.group(2)) if a != ""]
    if dist == "choice":
        if len(args) < 2:
            raise ConfigError([f"{where}: choice() needs at least two options"], what=WHAT)
        return Axis(spec=f"--random {spec}", key=key, values=tuple(_value(a) for a in args), dist="choice")
    nums = [_value(a) for a in args]
    if len(nums) != 2 or not all(isinstance(n, int | float) and not isinstance(n, bool) for n in nums):
        raise ConfigError([f"{where}: {dist}() needs two numbers, low and high: {dist}(1e-6,1e-4)"], what=WHAT)
    low, high = float(nums[0]), float(nums[1])
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise ConfigError([f"{where}: {dist}({args[0]},{args[1]}) needs finite low < high"], what=WHAT)
    if dist == "loguniform" and low <= 0:
        raise ConfigError([f"{where}: loguniform() needs low > 0 (it draws log(value) uniformly)"], what=WHAT)
    return Axis(spec=f"--random {spec}", key=key, dist=dist, low=low, high=high)  # type: ignore[arg-type]


def parse_axes(grid: Iterable[str], random_specs: Iterable[str]) -> list[Axis]:
    """Every spec parsed; each key swept once. Raises ConfigError naming every bad spec."""
    axes: list[Axis] = []
    problems: list[str] = []
    for parse, specs in ((parse_grid, grid), (parse_random, random_specs)):
        for spec in specs:
            try:
                axes.append(parse(spec))
            except ConfigError as e:
                problems += e.problems
    seen: dict[str, str] = {}
    for a in axes:
        if a.key in seen:
            problems.append(f"{a.spec!r}: {a.key} is swept already by {seen[a.key]!r}; sweep a key once")
        seen[a.key] = a.spec
    if not axes and not problems:
        problems.append("nothing to sweep: give --grid key=v1,v2 and/or --random 'key=loguniform(a,b)'")
    if problems:
        raise ConfigError(problems, what=WHAT)
    return axes


def expand(axes: list[Axis], trials: int = 1, seed: int = 0) -> list[dict[str, Any]]:
    """The trials' settings, in order: grid points (first axis slowest) crossed with `trials` seeded draws.
    Duplicates (a choice drawn twice) are kept once."""
    grid = [a for a in axes if a.dist == "grid"]
    drawn = [a for a in axes if a.dist != "grid"]
    rng = random.Random(seed)
    draws = [{a.key: a.draw(rng) for a in drawn} for _ in range(trials)] if drawn else [{}]
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for point in itertools.product(*(a.values for a in grid)):
        for draw in draws:
            settings = {**dict(zip((a.key for a in grid), point)), **draw}
            settings = {a.key: settings[a.key] for a in axes}  # the axes' order, whatever kind
            ident = json.dumps(settings, sort_keys=True)
            if ident not in seen:
                seen.add(ident)
                out.append(settings)
    if len(out) > MAX_TRIALS:
        raise ConfigError(
            [f"{' '.join(a.spec for a in axes)}: {len(out)} trials; at most {MAX_TRIALS} (fewer values or --trials)"],
            what=WHAT,
        )
    return out


# ----------------------------------------------------------------------------- names and overrides
def toml_value(value: Any) -> str:
    """A value as TOML, the right side of a `--set` override."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value)  # strings, lists and tables of them: JSON's forms are TOML's


def overrides_of(settings: dict[str, Any]) -> list[str]:
    return [f"{k}={toml_value(v)}" for k, v in settings.items()]


def short_label(key: str) -> str:
    """The name a key goes by in a trial's name: its last part, `optm_` dropped (train.optm_lr -> lr)."""
    return key.rsplit(".", 1)[-1].removeprefix("optm_")


def labels(keys: Iterable[str]) -> dict[str, str]:
    """key -> its short label, the whole key where two keys would share one."""
    keys = list(keys)
    short = [short_label(k) for k in keys]
    return {k: s if short.count(s) == 1 else k for k, s in zip(keys, short)}


def shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def trial_name(settings: dict[str, Any]) -> str:
    """`lr=1e-05,kl_beta=0`: the trial's flow run name and, made safe, its folder's name."""
    names = labels(settings)
    return ",".join(f"{names[k]}={shown(v)}" for k, v in settings.items())


def folder_name(name: str, limit: int = 120) -> str:
    """A trial name as a folder name: characters other than letters, digits and .,=+- become _."""
    safe = re.sub(r"[^A-Za-z0-9.,=+_-]", "_", name)
    return safe if len(safe) <= limit else safe[: limit - 9] + "-" + hashlib.sha256(name.encode()).hexdigest()[:8]
