"""[train.run_health] (the world model's job: [trainer.run_health]): the thresholds of the run-health verdicts
(cosmos_train/train/run_health.py) and those stop_when_stuck ends a run on."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cosmos_train.config.base import Section

# the run-health verdicts (cosmos_train/train/run_health.py), and those stop_when_stuck ends a run on by default.
# Not by default: entropy_collapse (a run can still improve while its entropy falls) and late_collapse (stopping
# does not bring the best weights back, which the best export keeps anyway, and a noisy validation's dip can
# recover; what helps is named in its remedy: a lower or decaying learning rate, a KL anchor, fewer steps).
VerdictName = Literal[
    "zero_variance_groups", "entropy_collapse", "reward_flat", "validation_flat", "clip_pinned", "late_collapse"
]
STOP_ON: tuple[VerdictName, ...] = ("zero_variance_groups", "reward_flat", "validation_flat", "clip_pinned")


class RunHealthConfig(Section):
    """[train.run_health] (the world model's job: [trainer.run_health]): when an RL run is in a state where it cannot
    learn, or lost what it learnt (cosmos_train/train/run_health.py): the verdicts of the `run-health` artifact,
    RUN/result.json's "health" and the CLI's last lines, and where stop_when_stuck ends the run."""

    zero_std_fraction: float = Field(
        0.8,
        ge=0,
        le=1,
        description="A step has (almost) no learning signal when at least this share of its sampled groups has "
        "all rewards equal (the zero_std_fraction metric: their advantages are 0).",
    )
    patience: int = Field(
        20,
        ge=1,
        description="Consecutive steps a state must hold (zero-variance groups, pinned clip fraction) before it is "
        "a verdict; also the steps averaged for the entropy at the start and now.",
    )
    entropy_drop: float = Field(
        5.0,
        gt=1,
        description="Entropy collapse: the mean token entropy of the last `patience` steps is this many times "
        "lower than that of the first `patience` steps.",
    )
    entropy_floor: float = Field(
        0.01,
        ge=0,
        description="Entropy collapse too: the mean token entropy of the last `patience` steps is below this "
        "(nats; 0: only the drop counts).",
    )
    flat_steps: int = Field(
        50,
        ge=2,
        description="Train steps over which the train reward and the validation score must move: flat when the "
        "reward's change between the window's halves is within noise (2 standard errors, at least "
        "flat_tolerance) and the validations in the window all lie within flat_tolerance; a plateau the run "
        "climbed to (the window above the run's first steps, or its first validation, by more than that) and a "
        "validation accuracy at 1 are not flat.",
    )
    flat_tolerance: float = Field(
        0.01, ge=0, le=1, description="The smallest change of reward or validation score that is not flat."
    )
    clip_near_zero: float = Field(
        0.001,
        ge=0,
        le=1,
        description="Clip fraction pinned low: below this on `patience` consecutive steps that had advantages, "
        "where the ratio can move (mu_iterations > 1 or old_logprobs = engine): the policy barely moves.",
    )
    clip_near_one: float = Field(
        0.9,
        ge=0,
        le=1,
        description="Clip fraction pinned high: at least this on `patience` consecutive steps: almost every "
        "token's gradient is clipped away.",
    )
    late_drop: float = Field(
        0.10,
        gt=0,
        le=100,
        description="Late collapse: the last validation score (accuracy, else reward_mean; the world model's "
        "evaluation reward) at least this much below the best one (absolute: 0.10 is 10 accuracy points; a reward "
        "in its own units), and beyond 2 standard errors where the validation logs its size.",
    )
    stop_on: list[VerdictName] = Field(
        default_factory=lambda: list(STOP_ON),
        description="The verdicts stop_when_stuck ends a run on (all are reported either way); left out by "
        "default: entropy_collapse (a run can still improve while its entropy falls) and late_collapse (stopping "
        "does not bring the best weights back; the best export keeps them).",
    )
