"""Run-health verdicts for RL: the states of a run in which it cannot learn, or lost what it learnt, read from its
metrics rows.

    from cosmos_train.train.run_health import assess_run, ratio_moves_of
    health = assess_run("RUN", cfg.train.run_health, ratio_moves=ratio_moves_of(cfg.train.train_policy))
    print(health.markdown("RUN"))        # the verdicts, or "healthy: none of ..." with the numbers checked

A GRPO run started from a confident model can sample the same answer for every completion of a prompt: each
group's rewards are equal, its advantages 0, the gradient 0, and the run spends its steps and exports its
starting weights as "best". The checks ([train.run_health] holds their thresholds; the world model's job
[trainer.run_health]):
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
Each verdict's remedy names the keys of the trainer's own config (`world_model`: the world model's).
A verdict is `ongoing` when its state holds at the last step: what stop_when_stuck ends a run on (`HealthWatch`,
which the trainers' shared loop follows: train/loop.py; the names in `stop_on`). The trainers write
`HealthReport.to_dict()` into RUN/result.json ("health"); the flows publish `HealthReport.markdown` as the
`run-health` artifact, `HealthReport.line` in their summaries, and the CLI ends with `closing_lines`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cosmos_train.config import GRPOPolicyConfig, RunHealthConfig, TrainPolicyConfig
from cosmos_train.curves import per_step, series
from cosmos_train.metrics import reaches, read_metrics

ZERO = 1e-12  # a reward std at or below this is no variance
RATIO_STILL = 1e-6  # a ratio within this of 1 on every step has not moved
NOISE_SIGMAS = 2.0  # a change must exceed this many standard errors to count as movement (or as a drop)

# Each change a verdict names is one shown to turn a stuck run into a learning one (tests/integration/
# test_run_health_flow.py, the learning benchmark's remedies table: bench/RESULTS.md); a remedy that did not (the
# entropy bonus and DAPO's dynamic sampling on collapsed runs, a higher learning rate on flat ones, a KL anchor
# against late drops) is left out, however standard.
_SHARPEN = (
    "raise the sampling temperature (rollout.sampling_config.temperature, with train.train_policy.temperature) "
    "so the samples of a prompt differ"
)
_ANCHOR = (
    "hold the policy near its SFT start with train.train_policy.kl_beta > 0 (configs/tiny-grpo.toml: 0.05), which "
    "keeps its samples from collapsing onto one answer"
)
_READ_FIRST = (
    "start GRPO from an SFT on some of this task's own answers: GRPO sharpens what its start already reads of a "
    "task, and from a start that reads nothing of it the reward stays at chance"
)
_MORE_PROMPTS = (
    "give each step more prompts (raise train.train_batch_per_replica, the completions a step, at the same "
    "rollout.n_generation, the samples a prompt): a group's reward says little about the input, and a start that "
    "reads nothing of the task needs many groups a step to find what does (the learning benchmark: 8 prompts a step "
    "stayed at chance where 32 learnt)"
)


@dataclass(frozen=True)
class Remedies:
    """The verdicts' causes and changes in the keys of one trainer's config: GRPO's job TOML, or the world
    model's (whose sampler explores through its SDE noise, with no SFT before it and no best export)."""

    section: str  # the table of stop_when_stuck and [<section>.run_health]
    zero_cause: str  # why every sample of a prompt scores the same
    sharpen: str  # make a prompt's samples differ
    anchor: str  # keep the policy from collapsing onto one answer ("" where none is shown to work)
    read_first: str  # a start that reads a little of the task ("" where there is no start to change)
    more_prompts: str  # more prompts an update, from the same start ("" where none is shown to work)
    clip_high: str
    clip_low: str
    late: str  # keep or reach the best weights instead of the final ones
    best_export: bool  # the run exports its best validation's weights (GRPO's safetensors/best)
    answers: bool  # its samples answer prompts that have a right answer (which may be too easy, too hard, solved)


GRPO_REMEDIES = Remedies(
    section="train",
    zero_cause="the policy is too sure of its answers (a confident start, sampling too cold, or a policy that "
    "collapsed onto one answer while training)",
    sharpen=_SHARPEN,
    anchor=_ANCHOR,
    read_first=_READ_FIRST,
    more_prompts=_MORE_PROMPTS,
    clip_high="lower train.optm_lr or mu_iterations; check old_logprobs and the temperatures agree",
    clip_low="raise train.optm_lr or check train.optm_grad_norm_clip",
    late="keep the best weights: RUN/safetensors/best holds them (a post-train [grpo] stage takes them with export = "
    '"best", its default); let the learning rate decay (train.optm_decay_type = "cosine"); or train fewer steps '
    "(train.max_num_steps near the best step)",
    best_export=True,
    answers=True,
)
WORLD_MODEL_REMEDIES = Remedies(
    section="trainer",
    zero_cause="the samples of a prompt are (nearly) the same video, or the reward cannot tell them apart",
    sharpen="raise model.rl.noise_level (the SDE sampler's noise, which makes the samples of a prompt differ) or "
    "give each sample its own initial noise (model.rl.use_same_seed = false); use a reward that tells the samples "
    "of a prompt apart ([reward] fns: a constant or saturated reward scores them all the same)",
    anchor="",
    read_first="",
    more_prompts="",
    clip_high="lower optimizer.lr or model.rl.mu_iterations, or widen model.rl.clip_range",
    clip_low="raise optimizer.lr or check trainer.grad_clip_norm",
    late="lower optimizer.lr or let it decay ([scheduler] f_min below f_max); hold the model near its reference "
    "with model.rl.kl_beta > 0; or train fewer iterations (trainer.max_iter near the best one, or keep a checkpoint "
    "there: checkpoint.save_iter)",
    best_export=False,
    answers=False,
)


def remedies_of(world_model: bool) -> Remedies:
    return WORLD_MODEL_REMEDIES if world_model else GRPO_REMEDIES


def _either(*changes: str) -> str:
    """The changes that apply, in order ("; "-joined)."""
    return "; ".join(c for c in changes if c)


@dataclass(frozen=True)
class Verdict:
    """One state in which the run cannot learn, or lost what it learnt: what was seen (numbers, steps), why, what
    to change. Its fields are RUN/result.json's health.verdicts[i] (`asdict`): an interface, keep their names."""

    name: str  # a stable identifier: one of config.schema.VerdictName
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


def _zero_variance(train: list[dict[str, Any]], cfg: RunHealthConfig, fix: Remedies, report: HealthReport) -> None:
    rows = [(int(r["step"]), s, r) for r in train if (s := _zero_share(r)) is not None]
    if not rows:
        report.checked.append("zero-variance groups: no zero_std_fraction / reward_std logged")
        return
    flags = [s >= cfg.zero_std_fraction for _, s, _ in rows]
    run = _pick(flags, cfg.patience)
    length = run[1] - run[0] if run else 0
    top = max(s for _, s, _ in rows)
    report.checked.append(
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
    report.verdicts.append(
        Verdict(
            "zero_variance_groups",
            "most groups have no reward variance, so their advantages and the gradient are 0",
            evidence,
            cause,
            _either(fix.sharpen, fix.anchor),
            held[0][0],
            held[-1][0],
            ongoing=run[1] == len(rows),
        )
    )


def _entropy(train: list[dict[str, Any]], cfg: RunHealthConfig, fix: Remedies, report: HealthReport) -> None:
    steps, ent = series(train, "entropy")
    k = cfg.patience
    if not ent:
        report.checked.append("entropy: not logged (no step made an update, or the trainer does not log it)")
        return
    if len(ent) < k:
        report.checked.append(f"entropy: {len(ent)} step(s) logged it, the check needs {k}")
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
    report.checked.append(f"entropy: {seen} (a verdict at x{cfg.entropy_drop:g} or below {cfg.entropy_floor:g})")
    if not (dropped or below_floor):
        return
    report.verdicts.append(
        Verdict(
            "entropy_collapse",
            "the policy's token entropy collapsed: its samples hardly differ any more",
            f"entropy {seen}" + (f", below the floor {cfg.entropy_floor:g}" if below_floor else ""),
            "the policy became (near-)deterministic, from training toward its own confident answers or from a "
            "confident start; with nothing different sampled there is nothing to compare",
            _either(fix.anchor, fix.sharpen),
            steps[0],
            steps[-1],
            ongoing=True,
        )
    )


def _reward_flat(train: list[dict[str, Any]], cfg: RunHealthConfig, fix: Remedies, report: HealthReport) -> None:
    steps, reward = series(train, "reward_mean")
    n = cfg.flat_steps
    if len(reward) < n:
        report.checked.append(f"train reward: {len(reward)} step(s) logged, the flatness check needs {n}")
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
    report.checked.append(f"train reward over the last {n} steps: {seen}")
    if abs(change) > limit:
        return
    if len(reward) >= n + len(a):  # a first window apart from the last n steps: did the reward ever move?
        first = reward[: len(a)]
        rise = _mean(window) - _mean(first)
        rise_noise = NOISE_SIGMAS * math.sqrt(_var(first) / len(first) + _var(window) / len(window))
        if rise > max(cfg.flat_tolerance, rise_noise):
            # a plateau the run climbed to (a decaying learning rate ends on one): it learnt, it is not stuck
            report.checked.append(
                f"train reward: a plateau, {rise:+.3f} above its first {len(first)} steps' mean {_mean(first):.3f} "
                f"(noise {rise_noise:.3f}): not flat"
            )
            return
    report.verdicts.append(
        Verdict(
            "reward_flat",
            f"the train reward did not move over the last {n} steps",
            f"train reward {seen}, range {min(window):.3f}..{max(window):.3f}",
            "the updates do not change what is sampled: a start that reads nothing of the task (its samples differ, "
            "but not with the input), groups without reward variance, or a collapsed entropy",
            _either(fix.read_first, fix.more_prompts, fix.sharpen),
            steps[0],
            steps[-1],
            ongoing=True,
        )
    )


def _validation_flat(
    train: list[dict[str, Any]], val: list[dict[str, Any]], cfg: RunHealthConfig, fix: Remedies, report: HealthReport
) -> None:
    metric = "accuracy" if series(val, "accuracy")[1] else "reward_mean"
    steps, scores = series(val, metric)
    last_train = int(train[-1]["step"]) if train else 0
    if not scores:
        report.checked.append("validation: none logged")
        return
    if last_train < cfg.flat_steps:
        report.checked.append(
            f"validation {metric}: {scores[0]:.3f} (step {steps[0]}) -> {scores[-1]:.3f} (step {steps[-1]}); the "
            f"flatness check needs {cfg.flat_steps} train steps, the run has {last_train}"
        )
        return
    start = last_train - cfg.flat_steps
    inside = [(s, v) for s, v in zip(steps, scores) if s >= start]
    if len(inside) < 2:
        report.checked.append(
            f"validation {metric}: {len(inside)} validation(s) in the last {cfg.flat_steps} steps, the check needs 2"
        )
        return
    values = [v for _, v in inside]
    spread = max(values) - min(values)
    seen = (
        f"{len(inside)} validations at steps {inside[0][0]}-{inside[-1][0]} all within {min(values):.3f}.."
        f"{max(values):.3f} (spread {spread:.3f}, tolerance {cfg.flat_tolerance:g})"
    )
    report.checked.append(f"validation {metric} over the last {cfg.flat_steps} steps: {seen}")
    if spread > cfg.flat_tolerance:
        return
    if metric == "accuracy" and min(values) >= 1.0 - cfg.flat_tolerance:
        report.checked.append(f"validation accuracy: at its ceiling ({min(values):.3f}), nothing left to learn")
        return
    if steps[0] < inside[0][0] and min(values) - scores[0] > cfg.flat_tolerance:
        # a plateau above where the run started: what it learnt holds
        report.checked.append(
            f"validation {metric}: a plateau {min(values) - scores[0]:+.3f} above its first validation "
            f"{scores[0]:.3f} (step {steps[0]}): not flat"
        )
        return
    report.verdicts.append(
        Verdict(
            "validation_flat",
            f"validation {metric} did not move over the last {cfg.flat_steps} steps",
            f"validation {metric}: {seen}",
            "the policy's answers to the validation prompts have not changed: training has no signal, or what it "
            "learns does not reach these prompts"
            + ("; the best export is then the starting weights" if fix.best_export else ""),
            _either(fix.read_first, fix.more_prompts, fix.sharpen),
            inside[0][0],
            inside[-1][0],
            ongoing=True,
        )
    )


def _clip_pinned(
    train: list[dict[str, Any]], cfg: RunHealthConfig, ratio_moves: bool | None, fix: Remedies, report: HealthReport
) -> None:
    rows = [(int(r["step"]), c, r) for r in train if (c := _value(r, "clip_fraction", "clip_frac")) is not None]
    if not rows:
        report.checked.append("clip fraction: not logged (no step made an update)")
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
    report.checked.append(
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
            change = _either(fix.clip_low, fix.sharpen)
        report.verdicts.append(
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


def _late_collapse(val: list[dict[str, Any]], cfg: RunHealthConfig, fix: Remedies, report: HealthReport) -> None:
    """The last validation well below the best one: the final weights lost what the run had reached (the issue's
    demo: accuracy 0.97 at step 210, 0.39 at step 300). Accuracy is a share, so the drop is in points; where the
    validation logs its size (n) the drop must also exceed NOISE_SIGMAS standard errors of the two scores, or a
    small validation set would give this verdict to noise. A reward (no accuracy) is in its own units."""
    metric = "accuracy" if series(val, "accuracy")[1] else "reward_mean"
    rows = [(int(v["step"]), x, v) for v in val if (x := _value(v, metric)) is not None]
    if len(rows) < 2:
        report.checked.append(f"late collapse: {len(rows)} validation(s) of {metric}, the check needs 2")
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
    report.checked.append(f"late collapse: {seen}")
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
    report.verdicts.append(
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


def assess(
    rows: Iterable[Mapping[str, Any]],
    cfg: RunHealthConfig,
    ratio_moves: bool | None = None,
    world_model: bool = False,
) -> HealthReport:
    """The verdicts on a run's metrics rows (RUN/metrics.jsonl: "kind" train / val, "step"). ratio_moves: whether
    the PPO ratio can differ from 1 (`ratio_moves_of`; None: read from the rows); world_model: the remedies name
    the world model's config keys (`WORLD_MODEL_REMEDIES`), else GRPO's."""
    metrics = [dict(r) for r in rows]
    train, val = per_step(metrics, "train"), per_step(metrics, "val")
    report = HealthReport(steps=len(train))
    if not train:
        report.checked.append("no train steps logged")
        return report
    fix = remedies_of(world_model)
    _zero_variance(train, cfg, fix, report)
    _entropy(train, cfg, fix, report)
    _reward_flat(train, cfg, fix, report)
    _validation_flat(train, val, cfg, fix, report)
    _clip_pinned(train, cfg, ratio_moves, fix, report)
    _late_collapse(val, cfg, fix, report)
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
    "GRPO_REMEDIES",
    "WORLD_MODEL_REMEDIES",
    "HealthReport",
    "HealthWatch",
    "Remedies",
    "Verdict",
    "assess",
    "assess_run",
    "ratio_moves_of",
    "remedies_of",
    "stuck_message",
]
