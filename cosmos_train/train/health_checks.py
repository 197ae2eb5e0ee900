"""The run-health checks: the rules that read a run's per-step metrics rows into verdicts, each with what it saw,
why, and what to change (the remedies: train/health_remedies.py). Their thresholds are [train.run_health] (the
world model's job: [trainer.run_health]); train/run_health.py runs them into a `HealthReport`.
- `zero_variance_groups`: the share of groups with all rewards equal (zero_std_fraction; rows of a world-model
  run from before it logged one: a reward_std of 0) at least `zero_std_fraction` on `patience` consecutive steps;
- `entropy_collapse`: the token entropy of the last `patience` steps `entropy_drop` times below that of the
  first ones, or below `entropy_floor`;
- `reward_flat` / `validation_flat`: over the last `flat_steps` steps the train reward's halves differ by no
  more than noise, the validation scores (accuracy, else reward_mean) by no more than `flat_tolerance`, and the
  run never climbed there (a plateau above its first steps, or its first validation, is what it learnt; an
  accuracy at 1 has nothing left to learn);
- `clip_pinned`: the clip fraction (GRPO's clip_fraction, the world model's clip_frac) at least
  `clip_near_one` on `patience` consecutive steps, or below `clip_near_zero` on steps that had advantages
  where the ratio can move (`ratio_moves`: with one pass on the trainer's own log-probs it is 1 by design);
- `late_collapse`: the last validation score `late_drop` or more below the best one (and beyond 2 standard
  errors where the validation logs its size): the final weights lost what the run had reached.
A verdict is `ongoing` when its state holds at the last step: what stop_when_stuck ends a run on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cosmos_train.config import RunHealthConfig
from cosmos_train.curves import series
from cosmos_train.metrics import reaches
from cosmos_train.train.health_remedies import Remedies, either

ZERO = 1e-12  # a reward std at or below this is no variance
RATIO_STILL = 1e-6  # a ratio within this of 1 on every step has not moved
NOISE_SIGMAS = 2.0  # a change must exceed this many standard errors to count as movement (or as a drop)


@dataclass(frozen=True)
class Verdict:
    """One state in which the run cannot learn, or lost what it learnt: what was seen (numbers, steps), why, what
    to change. Its fields are RUN/result.json's health.verdicts[i] (`asdict`): an interface, keep their names."""

    name: str  # a stable identifier: one of config.schema_run_health.VerdictName
    title: str
    evidence: str
    cause: str
    change: str
    first_step: int
    last_step: int
    ongoing: bool  # the state holds at the last logged step

    def markdown(self) -> str:
        return (
            f"### `{self.name}`: {self.title}\n\n- evidence: {self.evidence}\n- likely cause: {self.cause}\n"
            f"- what to change: {self.change}\n"
        )

    def sentence(self) -> str:
        return f"{self.name} ({self.title}): {self.evidence}. Likely cause: {self.cause}. Change: {self.change}."


def _value(row: Mapping[str, Any], *keys: str) -> float | None:
    for key in keys:
        v = row.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


def _zero_share(row: Mapping[str, Any]) -> float | None:
    """The share of the step's groups with all rewards equal; the world model logs no groups, but a reward std
    of 0 over all its samples means every group was."""
    share = _value(row, "zero_std_fraction")
    if share is not None:
        return share
    std = _value(row, "reward_std")
    return None if std is None else float(std <= ZERO)


def _runs(flags: list[bool]) -> list[tuple[int, int]]:
    """(start, end) index pairs of the runs of True, end exclusive."""
    out, start = [], None
    for i, f in enumerate([*flags, False]):
        if f and start is None:
            start = i
        elif not f and start is not None:
            out.append((start, i))
            start = None
    return out


def _pick(flags: list[bool], patience: int) -> tuple[int, int] | None:
    """The run of True to judge: the one that holds at the end when it is long enough (what stop_when_stuck
    acts on), else the longest (the latest of equal ones)."""
    runs = _runs(flags)
    if not runs:
        return None
    if runs[-1][1] == len(flags) and runs[-1][1] - runs[-1][0] >= patience:
        return runs[-1]
    return max(runs, key=lambda r: (r[1] - r[0], r[1]))


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _var(xs: list[float]) -> float:
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs) / max(len(xs) - 1, 1)


def _zero_variance(
    train: list[dict[str, Any]], cfg: RunHealthConfig, fix: Remedies, verdicts: list[Verdict], checked: list[str]
) -> None:
    rows = [(int(r["step"]), s, r) for r in train if (s := _zero_share(r)) is not None]
    if not rows:
        checked.append("zero-variance groups: no zero_std_fraction / reward_std logged")
        return
    flags = [s >= cfg.zero_std_fraction for _, s, _ in rows]
    run = _pick(flags, cfg.patience)
    length = run[1] - run[0] if run else 0
    top = max(s for _, s, _ in rows)
    checked.append(
        f"zero-variance groups: longest run of steps with a share >= {cfg.zero_std_fraction:.0%}: {length} (a "
        f"verdict at {cfg.patience}); largest share {top:.0%}, mean {_mean([s for _, s, _ in rows]):.0%} over "
        f"{len(rows)} step(s)"
    )
    if run is None or length < cfg.patience:
        return
    held = rows[run[0] : run[1]]
    shares = [s for _, s, _ in held]
    zero_grad = sum(1 for _, _, r in held if (g := _value(r, "grad_norm")) is not None and g <= ZERO)
    rewards = [v for _, _, r in held if (v := _value(r, "reward_mean")) is not None]
    grouped = any("zero_std_fraction" in r for _, _, r in held)  # else older world-model rows: reward_std 0
    what = f"zero_std_fraction >= {cfg.zero_std_fraction:.0%}" if grouped else "reward_std 0 (no group varies)"
    evidence = (
        f"{what} on {length} consecutive steps ({held[0][0]}-{held[-1][0]}), mean {_mean(shares):.0%}, "
        f"min {min(shares):.0%}; gradient norm 0 on {zero_grad} of them"
    )
    if rewards:
        evidence += f"; train reward {min(rewards):.3f}..{max(rewards):.3f}"
    solved = bool(rewards) and min(rewards) >= 0.99 * max(rewards) and max(rewards) > 0
    cause = f"every sample of a prompt gets the same reward: {fix.zero_cause}"
    if fix.answers:
        cause += ", or the prompts are solved" if solved else ", or the prompts are too easy / too hard for it"
    verdicts.append(
        Verdict(
            "zero_variance_groups",
            "most groups have no reward variance, so their advantages and the gradient are 0",
            evidence,
            cause,
            either(fix.sharpen, fix.anchor),
            held[0][0],
            held[-1][0],
            ongoing=run[1] == len(rows),
        )
    )


def _entropy(
    train: list[dict[str, Any]], cfg: RunHealthConfig, fix: Remedies, verdicts: list[Verdict], checked: list[str]
) -> None:
    steps, ent = series(train, "entropy")
    k = cfg.patience
    if not ent:
        checked.append("entropy: not logged (no step made an update, or the trainer does not log it)")
        return
    if len(ent) < k:
        checked.append(f"entropy: {len(ent)} step(s) logged it, the check needs {k}")
        return
    last = _mean(ent[-k:])
    below_floor = last < cfg.entropy_floor
    if len(ent) >= 2 * k:
        first = _mean(ent[:k])
        factor = first / last if last > 0 else math.inf
        dropped = factor >= cfg.entropy_drop
        seen = f"{first:.3g} (mean of steps {steps[0]}-{steps[k - 1]}) -> {last:.3g} (steps {steps[-k]}-{steps[-1]})"
        seen += f", fell x{factor:.3g}" if math.isfinite(factor) else ", fell to 0"
    else:
        dropped, seen = False, f"{last:.3g} (mean of steps {steps[-k]}-{steps[-1]}; the drop needs {2 * k} steps)"
    checked.append(f"entropy: {seen} (a verdict at x{cfg.entropy_drop:g} or below {cfg.entropy_floor:g})")
    if not (dropped or below_floor):
        return
    verdicts.append(
        Verdict(
            "entropy_collapse",
            "the policy's token entropy collapsed: its samples hardly differ any more",
            f"entropy {seen}" + (f", below the floor {cfg.entropy_floor:g}" if below_floor else ""),
            "the policy became (near-)deterministic, from training toward its own confident answers or from a "
            "confident start; with nothing different sampled there is nothing to compare",
            either(fix.anchor, fix.sharpen),
            steps[0],
            steps[-1],
            ongoing=True,
        )
    )


def _reward_flat(
    train: list[dict[str, Any]], cfg: RunHealthConfig, fix: Remedies, verdicts: list[Verdict], checked: list[str]
) -> None:
    steps, reward = series(train, "reward_mean")
    n = cfg.flat_steps
    if len(reward) < n:
        checked.append(f"train reward: {len(reward)} step(s) logged, the flatness check needs {n}")
        return
    steps, window = steps[-n:], reward[-n:]
    a, b = window[: n // 2], window[n // 2 :]
    change = _mean(b) - _mean(a)
    noise = NOISE_SIGMAS * math.sqrt(_var(a) / len(a) + _var(b) / len(b))
    limit = max(cfg.flat_tolerance, noise)
    seen = (
        f"mean {_mean(a):.3f} (steps {steps[0]}-{steps[len(a) - 1]}) -> {_mean(b):.3f} (steps {steps[len(a)]}-"
        f"{steps[-1]}), change {change:+.3f} against noise {noise:.3f} (tolerance {cfg.flat_tolerance:g})"
    )
    checked.append(f"train reward over the last {n} steps: {seen}")
    if abs(change) > limit:
        return
    if len(reward) >= n + len(a):  # a first window apart from the last n steps: did the reward ever move?
        first = reward[: len(a)]
        rise = _mean(window) - _mean(first)
        rise_noise = NOISE_SIGMAS * math.sqrt(_var(first) / len(first) + _var(window) / len(window))
        if rise > max(cfg.flat_tolerance, rise_noise):
            # a plateau the run climbed to (a decaying learning rate ends on one): it learnt, it is not stuck
            checked.append(
                f"train reward: a plateau, {rise:+.3f} above its first {len(first)} steps' mean {_mean(first):.3f} "
                f"(noise {rise_noise:.3f}): not flat"
            )
            return
    verdicts.append(
        Verdict(
            "reward_flat",
            f"the train reward did not move over the last {n} steps",
            f"train reward {seen}, range {min(window):.3f}..{max(window):.3f}",
            "the updates do not change what is sampled: a start that reads nothing of the task (its samples differ, "
            "but not with the input), groups without reward variance, or a collapsed entropy",
            either(fix.read_first, fix.more_prompts, fix.sharpen),
            steps[0],
            steps[-1],
            ongoing=True,
        )
    )


def _validation_flat(
    train: list[dict[str, Any]],
    val: list[dict[str, Any]],
    cfg: RunHealthConfig,
    fix: Remedies,
    verdicts: list[Verdict],
    checked: list[str],
) -> None:
    metric = "accuracy" if series(val, "accuracy")[1] else "reward_mean"
    steps, scores = series(val, metric)
    last_train = int(train[-1]["step"]) if train else 0
    if not scores:
        checked.append("validation: none logged")
        return
    if last_train < cfg.flat_steps:
        checked.append(
            f"validation {metric}: {scores[0]:.3f} (step {steps[0]}) -> {scores[-1]:.3f} (step {steps[-1]}); the "
            f"flatness check needs {cfg.flat_steps} train steps, the run has {last_train}"
        )
        return
    start = last_train - cfg.flat_steps
    inside = [(s, v) for s, v in zip(steps, scores) if s >= start]
    if len(inside) < 2:
        checked.append(
            f"validation {metric}: {len(inside)} validation(s) in the last {cfg.flat_steps} steps, the check needs 2"
        )
        return
    values = [v for _, v in inside]
    spread = max(values) - min(values)
    seen = (
        f"{len(inside)} validations at steps {inside[0][0]}-{inside[-1][0]} all within {min(values):.3f}.."
        f"{max(values):.3f} (spread {spread:.3f}, tolerance {cfg.flat_tolerance:g})"
    )
    checked.append(f"validation {metric} over the last {cfg.flat_steps} steps: {seen}")
    if spread > cfg.flat_tolerance:
        return
    if metric == "accuracy" and min(values) >= 1.0 - cfg.flat_tolerance:
        checked.append(f"validation accuracy: at its ceiling ({min(values):.3f}), nothing left to learn")
        return
    if steps[0] < inside[0][0] and min(values) - scores[0] > cfg.flat_tolerance:
        # a plateau above where the run started: what it learnt holds
        checked.append(
            f"validation {metric}: a plateau {min(values) - scores[0]:+.3f} above its first validation "
            f"{scores[0]:.3f} (step {steps[0]}): not flat"
        )
        return
    verdicts.append(
        Verdict(
            "validation_flat",
            f"validation {metric} did not move over the last {cfg.flat_steps} steps",
            f"validation {metric}: {seen}",
            "the policy's answers to the validation prompts have not changed: training has no signal, or what it "
            "learns does not reach these prompts"
            + ("; the best export is then the starting weights" if fix.best_export else ""),
            either(fix.read_first, fix.more_prompts, fix.sharpen),
            inside[0][0],
            inside[-1][0],
            ongoing=True,
        )
    )


def _clip_pinned(
    train: list[dict[str, Any]],
    cfg: RunHealthConfig,
    ratio_moves: bool | None,
    fix: Remedies,
    verdicts: list[Verdict],
    checked: list[str],
) -> None:
    rows = [(int(r["step"]), c, r) for r in train if (c := _value(r, "clip_fraction", "clip_frac")) is not None]
    if not rows:
        checked.append("clip fraction: not logged (no step made an update)")
        return
    if ratio_moves is None:  # not told: it moved if the logs show it did
        ratio_moves = any(c > 0 for _, c, _ in rows) or any(
            abs(x - 1.0) > RATIO_STILL for _, _, r in rows if (x := _value(r, "ratio_mean", "ratio")) is not None
        )
    high = _pick([c >= cfg.clip_near_one for _, c, _ in rows], cfg.patience)
    # low only counts on steps with advantages (some group with reward variance): else nothing could be clipped
    low_flags = [c < cfg.clip_near_zero and (_zero_share(r) or 0.0) < 1.0 for _, c, r in rows]
    low = _pick(low_flags, cfg.patience) if ratio_moves else None
    clips = [c for _, c, _ in rows]
    checked.append(
        f"clip fraction: mean {_mean(clips):.3g}, max {max(clips):.3g} over {len(rows)} step(s) (pinned: >= "
        f"{cfg.clip_near_one:g}"
        + (
            f" or < {cfg.clip_near_zero:g} on {cfg.patience} consecutive steps)"
            if ratio_moves
            else f" on {cfg.patience} consecutive steps; near 0 is by design here: one pass, ratio 1)"
        )
    )
    for run, pinned in ((high, "high"), (low, "low")):
        if run is None or run[1] - run[0] < cfg.patience:
            continue
        held = rows[run[0] : run[1]]
        values = [c for _, c, _ in held]
        evidence = (
            f"clip fraction {min(values):.3g}..{max(values):.3g} on {len(held)} consecutive steps "
            f"({held[0][0]}-{held[-1][0]})"
        )
        if pinned == "high":
            title = "almost every token is clipped, so almost no gradient flows"
            cause = "the policy moves far from the sampling policy between passes (learning rate too high, too many "
            cause += "mu_iterations) or the engine's log-probs do not match the trainer's"
            change = fix.clip_high
        else:
            title = "no token is ever clipped although the ratio can move: the policy barely changes"
            cause = "updates too small to move the policy (learning rate, a gradient clipped to nothing)"
            change = either(fix.clip_low, fix.sharpen)
        verdicts.append(
            Verdict(
                "clip_pinned",
                title,
                evidence,
                cause,
                change,
                held[0][0],
                held[-1][0],
                ongoing=run[1] == len(rows),
            )
        )


def _late_collapse(
    val: list[dict[str, Any]], cfg: RunHealthConfig, fix: Remedies, verdicts: list[Verdict], checked: list[str]
) -> None:
    """The last validation well below the best one: the final weights lost what the run had reached (the issue's
    demo: accuracy 0.97 at step 210, 0.39 at step 300). Accuracy is a share, so the drop is in points; where the
    validation logs its size (n) the drop must also exceed NOISE_SIGMAS standard errors of the two scores, or a
    small validation set would give this verdict to noise. A reward (no accuracy) is in its own units."""
    metric = "accuracy" if series(val, "accuracy")[1] else "reward_mean"
    rows = [(int(v["step"]), x, v) for v in val if (x := _value(v, metric)) is not None]
    if len(rows) < 2:
        checked.append(f"late collapse: {len(rows)} validation(s) of {metric}, the check needs 2")
        return
    best = max(rows, key=lambda t: t[1])  # the first of equal bests
    (first_step, first, _), (final_step, final, final_row) = rows[0], rows[-1]
    drop = best[1] - final
    noise = 0.0
    if metric == "accuracy" and (n_best := _value(best[2], "n")) and (n_final := _value(final_row, "n")):
        noise = NOISE_SIGMAS * math.sqrt(best[1] * (1 - best[1]) / n_best + final * (1 - final) / n_final)
    seen = (
        f"validation {metric}: best {best[1]:.3f} at step {best[0]}, final {final:.3f} at step {final_step}, a drop "
        f"of {drop:.3f} (a verdict at {cfg.late_drop:g}"
        + (f" and beyond the noise {noise:.3f}, {NOISE_SIGMAS:g} standard errors)" if noise else ")")
    )
    checked.append(f"late collapse: {seen}")
    if not reaches(drop, cfg.late_drop) or drop <= noise:
        return
    at_start = best[0] == first_step
    evidence = seen + ("" if at_start else f"; the first validation's {first:.3f} (step {first_step})")
    if at_start:
        cause = (
            "the updates made the model worse than where the run started: the train reward rewards something the "
            "validation does not measure, or the learning rate is too high"
        )
    else:
        cause = (
            "the updates kept moving the policy after its best: a learning rate that stays high to the end, no "
            "anchor to the reference, more steps than the task needs (the train reward over-optimised, or the "
            "entropy collapsed onto a wrong answer)"
        )
    if fix.best_export:
        cause += "; the final export is these weights, the best export kept the best ones"
    verdicts.append(
        Verdict(
            "late_collapse",
            f"validation {metric} ended {drop:.3f} below its best: the final weights lost what the run had reached",
            evidence,
            cause,
            fix.late,
            best[0],
            final_step,
            ongoing=True,
        )
    )


def run_checks(
    train: list[dict[str, Any]],
    val: list[dict[str, Any]],
    cfg: RunHealthConfig,
    ratio_moves: bool | None,
    fix: Remedies,
) -> tuple[list[Verdict], list[str]]:
    """Every check, in the report's order, on a run's train and val rows (one per step): the verdicts, and for every
    check the numbers it looked at. ratio_moves: as `run_health.assess` takes it; fix: the trainer's remedies."""
    verdicts: list[Verdict] = []
    checked: list[str] = []
    _zero_variance(train, cfg, fix, verdicts, checked)
    _entropy(train, cfg, fix, verdicts, checked)
    _reward_flat(train, cfg, fix, verdicts, checked)
    _validation_flat(train, val, cfg, fix, verdicts, checked)
    _clip_pinned(train, cfg, ratio_moves, fix, verdicts, checked)
    _late_collapse(val, cfg, fix, verdicts, checked)
    return verdicts, checked
