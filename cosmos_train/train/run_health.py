"""Run-health verdicts for RL: the states of a run in which it cannot learn, or lost what it learnt, read from its
metrics rows.

    from cosmos_train.train.run_health import assess_run, ratio_moves_of
    health = assess_run("RUN", cfg.train.run_health, ratio_moves=ratio_moves_of(cfg.train.train_policy))
    print(health.markdown("RUN"))        # the verdicts, or "healthy: none of ..." with the numbers checked

A GRPO run started from a confident model can sample the same answer for every completion of a prompt: each
group's rewards are equal, its advantages 0, the gradient 0, and the run spends its steps and exports its
starting weights as "best". The checks ([train.run_health] holds their thresholds; the world model's job
[trainer.run_health]) are train/health_checks.py's: zero_variance_groups, entropy_collapse, reward_flat,
validation_flat, clip_pinned, late_collapse. Each verdict's remedy names the keys of the trainer's own config
(`world_model`: the world model's; train/health_remedies.py).
A verdict is `ongoing` when its state holds at the last step: what stop_when_stuck ends a run on (`HealthWatch`,
which the trainers' shared loop follows: train/loop.py; the names in `stop_on`). The trainers write
`HealthReport.to_dict()` into RUN/result.json ("health"); the flows publish `HealthReport.markdown` as the
`run-health` artifact, `HealthReport.line` in their summaries, and the CLI ends with `closing_lines`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cosmos_train.config import GRPOPolicyConfig, RunHealthConfig, TrainPolicyConfig
from cosmos_train.curves import per_step
from cosmos_train.metrics import read_metrics
from cosmos_train.train.health_checks import Verdict, run_checks
from cosmos_train.train.health_remedies import remedies_of


@dataclass
class HealthReport:
    """The verdicts of a run, and for every check the numbers it looked at (`checked`)."""

    steps: int  # train steps looked at
    verdicts: list[Verdict] = field(default_factory=list)
    checked: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.verdicts

    @property
    def ongoing(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.ongoing]

    def to_dict(self) -> dict[str, Any]:
        """RUN/result.json's "health": {"healthy", "steps", "verdicts": [{name, title, evidence, cause, change,
        first_step, last_step, ongoing}]}. Read by other programs (the learning benchmark, the CLI's closing
        lines, the post-train summary): keep these keys."""
        return {"healthy": self.healthy, "steps": self.steps, "verdicts": [asdict(v) for v in self.verdicts]}

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> HealthReport:
        """`to_dict`'s record back (its `checked` numbers are not in it)."""
        return cls(steps=int(record["steps"]), verdicts=[Verdict(**v) for v in record["verdicts"]])

    def names(self) -> str:
        """ "healthy", or the verdicts' names: the post-train summary's `run health` cell."""
        return "healthy" if self.healthy else ", ".join(v.name for v in self.verdicts)

    def line(self) -> str:
        """The summary artifacts' line."""
        if self.healthy:
            return (
                f"- run health: healthy over {self.steps} step(s) (none of the run-health verdicts; see `run-health`)"
            )
        names = ", ".join(f"`{v.name}`" for v in self.verdicts)
        return (
            f"- run health: {names}: RL could not learn, or lost what it learnt, in part of this run (see the "
            "`run-health` artifact)"
        )

    def closing_lines(self, label: str = "") -> list[str]:
        """The command's last lines (flows/terminal.py `finished`): one for a healthy run, else a head line and each
        verdict with its evidence, cause and what to change. label: whose run (a pipeline's stage)."""
        head = f"{label}: run health" if label else "run health"
        if self.healthy:
            return [f"{head}: healthy over {self.steps} step(s), none of the run-health verdicts"]
        return [
            f"{head}: {len(self.verdicts)} verdict(s) over {self.steps} step(s), states in which RL could not learn "
            "or lost what it learnt (the `run-health` artifact has the numbers checked):",
            *[f"  - {v.sentence()}" for v in self.verdicts],
        ]

    def markdown(self, run_name: str) -> str:
        """The `run-health` artifact."""
        lines = [f"# Run health: `{run_name}`", ""]
        if self.healthy:
            lines.append(
                f"healthy: none of zero-variance groups, entropy collapse, flat reward, flat validation, pinned "
                f"clip fraction, late collapse over {self.steps} train step(s). Checked:"
            )
        else:
            lines += [
                f"{len(self.verdicts)} verdict(s) over {self.steps} train step(s): states in which RL cannot learn, "
                "or lost what it learnt.",
                "",
                *[v.markdown() for v in self.verdicts],
                "Checked:",
            ]
        lines += ["", *[f"- {c}" for c in self.checked]]
        return "\n".join(lines) + "\n"


def ratio_moves_of(policy_cfg: TrainPolicyConfig) -> bool | None:
    """Whether GRPO's PPO ratio can differ from 1: a pass after the first (mu_iterations > 1), or old log-probs
    from the engine. With one pass on the trainer's own log-probs it is exactly 1, and so is the clip fraction 0.
    None for a policy that is not GRPO's (`assess` then reads it from the rows)."""
    if not isinstance(policy_cfg, GRPOPolicyConfig):
        return None
    return policy_cfg.mu_iterations > 1 or policy_cfg.old_logprobs == "engine"


def assess(
    rows: Iterable[Mapping[str, Any]],
    cfg: RunHealthConfig,
    ratio_moves: bool | None = None,
    world_model: bool = False,
) -> HealthReport:
    """The verdicts on a run's metrics rows (RUN/metrics.jsonl: "kind" train / val, "step"). ratio_moves: whether
    the PPO ratio can differ from 1 (`ratio_moves_of`; None: read from the rows); world_model: the remedies name
    the world model's config keys (`health_remedies.WORLD_MODEL_REMEDIES`), else GRPO's."""
    metrics = [dict(r) for r in rows]
    train, val = per_step(metrics, "train"), per_step(metrics, "val")
    report = HealthReport(steps=len(train))
    if not train:
        report.checked.append("no train steps logged")
        return report
    report.verdicts, report.checked = run_checks(train, val, cfg, ratio_moves, remedies_of(world_model))
    return report


def assess_run(
    run_dir: str | Path, cfg: RunHealthConfig, ratio_moves: bool | None = None, world_model: bool = False
) -> HealthReport:
    """`assess` on RUN/metrics.jsonl."""
    return assess(read_metrics(Path(run_dir)), cfg, ratio_moves, world_model)


class HealthWatch:
    """How a run is judged (its thresholds, whether its ratio can move, which trainer's keys the remedies name),
    and with stop_when_stuck the verdicts as it goes: the trainer adds each logged row and asks whether a verdict
    holds at the latest step (train/loop.py `BaseTrainer.end_early`)."""

    def __init__(
        self,
        cfg: RunHealthConfig,
        ratio_moves: bool | None = None,
        rows: Iterable[Mapping[str, Any]] = (),
        world_model: bool = False,
    ):
        self.cfg, self.ratio_moves, self.world_model = cfg, ratio_moves, world_model
        self.rows: list[dict[str, Any]] = [dict(r) for r in rows]

    @property
    def section(self) -> str:
        """The config table of stop_when_stuck and run_health: train (GRPO's job), trainer (the world model's)."""
        return remedies_of(self.world_model).section

    def add(self, kind: str, step: int, values: Mapping[str, Any]) -> None:
        self.rows.append({**values, "kind": kind, "step": step})

    def assess(self, rows: Iterable[Mapping[str, Any]]) -> HealthReport:
        return assess(rows, self.cfg, self.ratio_moves, self.world_model)

    def stuck(self) -> list[Verdict]:
        """The verdicts of `cfg.stop_on` whose state holds at the latest step."""
        return [v for v in self.assess(self.rows).ongoing if v.name in self.cfg.stop_on]


def stuck_message(verdicts: list[Verdict], step: int, total_steps: int, section: str = "train") -> str:
    """The paragraph a run that stop_when_stuck ended says (RunStuck's); section: the table of its config that
    holds stop_when_stuck (`HealthWatch.section`)."""
    lines = [
        f"{section}.stop_when_stuck: the run ended after step {step} of {total_steps}: RL cannot learn in its state "
        f"(its checkpoint and exports were saved as at a normal end; the `run-health` artifact has the numbers):",
        *([f"  - {v.sentence()}" for v in verdicts] or ["  - (found on another rank, whose log names the verdicts)"]),
        f"Set {section}.stop_when_stuck = false to train on anyway, or change the thresholds under "
        f"[{section}.run_health].",
    ]
    return "\n".join(lines)


__all__ = [
    "HealthReport",
    "HealthWatch",
    "assess",
    "assess_run",
    "ratio_moves_of",
    "stuck_message",
]
