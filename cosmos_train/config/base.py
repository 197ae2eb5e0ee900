"""What every config file stands on: one `Section` base for its tables, one TOML reader, and `JobSettings`, the
base of a whole job file (the VLM job, the world-model job)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from cosmos_train.atomic import write_atomic
from cosmos_train.config.compat import NoEffect
from cosmos_train.errors import ConfigError


class Section(BaseModel):
    """Base of every config table (job, world-model, evaluation, reward-service, pipeline): unknown keys are errors,
    assignment is validated, floats are finite."""

    # nan and inf parse from TOML (`optm_lr = nan`) and YAML (`.nan`) and pass every range check; no key means them.
    # protected_namespaces=(): keys such as model_name_or_path are the reference tools' names, not pydantic's.
    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, populate_by_name=True, protected_namespaces=(), allow_inf_nan=False
    )


# -1 is the reference framework's "all" / "off" for these counts; 0 has no meaning.
MinusOneOrPositive = Literal[-1] | Annotated[int, Field(ge=1)]


def read_toml(path: str | Path | None, what: str = "config") -> tuple[dict[str, Any], str | None]:
    """(the file's tables, its name for messages); ({}, None) for no file; ConfigError (`what` names the kind of
    file) for a missing file or bad TOML. Every config file is read here."""
    if path is None:
        return {}, None
    p, source = Path(path), str(path)
    if not p.is_file():
        raise ConfigError([f"{what} file {p} does not exist"], source, what=what)
    try:
        return tomllib.loads(p.read_text()), source
    except tomllib.TOMLDecodeError as e:
        raise ConfigError([f"TOML syntax: {e}"], source, what=what) from e
    except UnicodeDecodeError as e:  # a binary file (weights, a video) passed as the config
        raise ConfigError(
            [f"{p} is not a text file ({e.reason} at byte {e.start}): pass the TOML file"], source, what=what
        ) from e


NO_EFFECT_HEADER = "# accepted with no effect here (cosmos-rl keys / settings), with why:"


class JobSettings(Section):
    """The settings of a whole job file (the VLM job, the world-model job): the keys it set that had no effect here
    (said, never dropped), and its resolved form written into the run folder."""

    _no_effect: list[NoEffect] = PrivateAttr(default_factory=list)

    @property
    def no_effect(self) -> list[NoEffect]:
        """The keys the config set that were accepted with no effect here, with why."""
        return self._no_effect

    def to_toml(self) -> str:
        """The resolved config as TOML (None values, which TOML cannot hold, are left out)."""
        return tomli_w.dumps(drop_none(self.model_dump(mode="json")))

    def write(self, path: str | Path) -> Path:
        """The run folder's config.toml: the resolved config, then the keys accepted with no effect (comments,
        so the record of what the user asked for is whole and the file still loads)."""
        notes = "".join(f"# {n.line()}\n" for n in self._no_effect)
        return write_atomic(path, self.to_toml() + (f"\n{NO_EFFECT_HEADER}\n{notes}" if notes else ""))


def drop_none(v: Any) -> Any:
    """`v` without None values at any depth (TOML has no null)."""
    if isinstance(v, dict):
        return {k: drop_none(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [drop_none(x) for x in v if x is not None]
    return v
