"""Promotion in the post-train pipeline: the gate's decision on a stage's export, its verdict, the model card.

    decision = gate_decision("sft", "base", sft_eval, base_eval, min_gain=2.0, blocking=FLAG_KINDS)
    gate_markdown(decision)                     # the `gate-<stage>` artifact
    raise NotPromoted(stop_paragraph(decision, folder))   # the CLI exits EXIT_NOT_PROMOTED (4)
    model_card(...)                             # README.md of a promoted export and its `model-card-<stage>` artifact

An export is promoted when its evaluation's overall (micro) accuracy is at least `min_gain` points above its
parent's (SFT's parent: the base model; GRPO's: the SFT export) and it raises none of the blocking flags of
`evaluation.report.answer_profile` (one answer for most questions, unreadable answers, not above chance).
Plain data in, plain data out: cosmos_train/pipeline.py holds the [gate] section, flows/post_train.py applies
the decision (stops before the next stage, uploads nothing) and publishes the texts.

Not being promoted is a `UserError` (kind "gate"): the same inputs give the same verdict, so it is never
retried and shows as its paragraph without a traceback; its own exit code, 4, tells a script "trained, did not
beat its parent" from 2 (bad input), 3 (a run stopped as stuck) and 1 (a crash).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from cosmos_train.errors import UserError
from cosmos_train.evaluation.report import answer_profile
from cosmos_train.metrics import reaches

EXIT_NOT_PROMOTED = 4  # 2: bad input, 3: a run train.stop_when_stuck ended (errors.EXIT_RUN_STUCK)
CARD_FILE = "README.md"  # a Hugging Face model folder's card: it travels with the upload

FlagKind = Literal["constant_answer", "unreadable", "not_above_chance"]
FLAG_KINDS: tuple[FlagKind, ...] = ("constant_answer", "unreadable", "not_above_chance")
# answer_profile's flag sentences, by kind (tests/unit/test_promotion.py checks every flag it raises is known)
_FLAG_PATTERNS: tuple[tuple[FlagKind, str], ...] = (
    ("constant_answer", r"answers .+ to \d+% of the questions"),
    ("unreadable", r"\d+% of the answers unreadable"),
    ("not_above_chance", r"not above chance.*"),
)


class NotPromoted(UserError):
    """A stage's export the gate stopped: its score against its parent's and the flags, in one paragraph."""

    kind = "gate"
    exit_code = EXIT_NOT_PROMOTED


def flag_kind(flag: str) -> FlagKind | None:
    """The kind of one of answer_profile's flags; None for a sentence this module does not know."""
    for kind, pattern in _FLAG_PATTERNS:
        if re.fullmatch(pattern, flag):
            return kind
    return None


def score(result: Mapping[str, Any]) -> dict[str, Any]:
    """An evaluation's overall micro accuracy and Wilson 95% interval, in percent, and its question count."""
    micro = result["scores"]["overall"]["micro"]
    return {
        "accuracy": 100 * micro["accuracy"],
        "ci95": [100 * micro["ci95_low"], 100 * micro["ci95_high"]],
        "n": micro["total"],
    }


def gate_decision(
    stage: str,
    parent: str,
    result: Mapping[str, Any],
    parent_result: Mapping[str, Any],
    min_gain: float,
    blocking: Sequence[str],
) -> dict[str, Any]:
    """Whether stage `stage`'s export (evaluated as `result`) is promoted over `parent` (`parent_result`):
    gain (accuracy points) >= min_gain and none of its flags of a kind in `blocking` (a flag of an unknown kind
    blocks unless `blocking` is empty). Returns the decision as JSON-able data, the reasons when stopped."""
    mine, theirs = score(result), score(parent_result)
    gain = mine["accuracy"] - theirs["accuracy"]
    flags = []
    for text in answer_profile(dict(result)).get("flags", []):
        kind = flag_kind(text)
        flags.append({"flag": text, "kind": kind, "blocks": bool(blocking) and (kind is None or kind in blocking)})
    reasons = []
    if not reaches(gain, min_gain):
        reasons.append(f"gain {gain:+.1f} points, below gate.min_gain = {min_gain:g}")
    reasons += [f"flag: {f['flag']}" for f in flags if f["blocks"]]
    return {
        "stage": stage,
        "parent": parent,
        "promoted": not reasons,
        "model": result["model"],
        "parent_model": parent_result["model"],
        **mine,
        "parent_accuracy": theirs["accuracy"],
        "parent_ci95": theirs["ci95"],
        "parent_n": theirs["n"],
        "gain": gain,
        "min_gain": min_gain,
        "blocking_flags": list(blocking),
        "flags": flags,
        "reasons": reasons,
    }


def _pct(accuracy: float, ci95: Sequence[float]) -> str:
    return f"{accuracy:.1f}% [{ci95[0]:.1f}, {ci95[1]:.1f}]"


def gate_markdown(decision: Mapping[str, Any]) -> str:
    """The gate's verdict on one stage: the two scores with their intervals, the gain needed, the flags."""
    d = decision
    head = "promoted" if d["promoted"] else "NOT promoted"
    lines = [
        f"# Gate: `{d['stage']}` {head}",
        "",
        "| model | accuracy [95% interval] | questions | export |",
        "|---|---|---|---|",
        f"| {d['stage']} (this stage) | {_pct(d['accuracy'], d['ci95'])} | {d['n']} | `{d['model']}` |",
        f"| {d['parent']} (its parent) | {_pct(d['parent_accuracy'], d['parent_ci95'])} | {d['parent_n']} | "
        f"`{d['parent_model']}` |",
        "",
        f"- gain: {d['gain']:+.1f} points; needed: at least {d['min_gain']:+g} (gate.min_gain)",
    ]
    if d["flags"]:
        blocking = ", ".join(d["blocking_flags"]) or "none"
        lines.append(f"- flags (gate.blocking_flags = {blocking}):")
        lines += [f"  - {f['flag']}: {'blocks' if f['blocks'] else 'noted, does not block'}" for f in d["flags"]]
    else:
        lines.append("- flags: none")
    if d["promoted"]:
        lines.append(f"- verdict: **promoted**: `{d['stage']}`'s export goes on to the next stage and the upload")
    else:
        lines += [
            "- verdict: **stopped**: " + "; ".join(d["reasons"]),
            "",
            "No later stage ran and nothing was uploaded. Train this stage better (more steps, other data), or "
            "change [gate] (min_gain, blocking_flags) on purpose, and run the same pipeline again: the stages "
            "that finished are skipped and the gate decides again.",
        ]
    return "\n".join(lines) + "\n"


def stop_paragraph(decision: Mapping[str, Any], folder: str | Path) -> str:
    """NotPromoted's message: what the CLI prints and the failed flow run's state message."""
    d = decision
    return (
        f"post-train stopped by [gate]: the {d['stage']} stage's export {d['model']} scored "
        f"{_pct(d['accuracy'], d['ci95'])} on {d['n']} questions against "
        f"{_pct(d['parent_accuracy'], d['parent_ci95'])} for its parent ({d['parent']}): "
        f"{'; '.join(d['reasons'])}. It was not promoted: no later stage ran and nothing was uploaded. The "
        f"verdict is the gate-{d['stage']} artifact and gates.{d['stage']} in "
        f"{Path(folder) / 'pipeline.json'}; train that stage better or change [gate], then run the same pipeline "
        "again (finished stages are skipped)."
    )


def _hub_id(model: str) -> bool:
    """A Hugging Face repo id (org/name) rather than a local folder: the Hub's `base_model` accepts only those."""
    return bool(re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", model)) and not Path(model).expanduser().exists()


def model_card(
    *,
    pipeline: str,
    folder: str | Path,
    stage: str,
    lineage: Sequence[Mapping[str, Any]],
    data: Sequence[Mapping[str, Any]],
    evaluations: Mapping[str, Mapping[str, Any]],
    decisions: Mapping[str, Mapping[str, Any]],
    eval_config: str | None,
    uploads: Sequence[Mapping[str, Any]],
) -> str:
    """A promoted export's card (Hugging Face README.md: YAML metadata, then markdown). No timestamps: the same
    pipeline gives the same card, so a rerun does not upload it again.

    lineage: {"stage", "model", "run_dir", "config"} from the base model to `stage`, in order.
    data: {"stage", "dataset", "rows"} per training (or filter) stage.
    evaluations: label -> the evaluate flow's result (EvalResult.to_dict) for the labels of `lineage`.
    decisions: stage -> gate_decision (empty without a gate).
    uploads: {"url", "status"} per target this export goes to ("upload target", "uploaded: ...", ...).
    """
    base = lineage[0]["model"]
    stages = [step["stage"] for step in lineage[1:]]
    meta = ["---", "library_name: transformers", f"tags: [cosmos-train, {', '.join(stages)}]"]
    if _hub_id(base):
        meta.append(f"base_model: {base}")
    lines = [*meta, "---", "", f"# {pipeline}: {stage}", ""]
    lines.append(
        f"Trained by the cosmos-train post-train pipeline `{pipeline}` (pipeline folder `{folder}`): "
        + " -> ".join(["base", *stages])
        + "."
    )
    lines += ["", "## Lineage", "", "| step | model | run folder | resolved config |", "|---|---|---|---|"]
    for step in lineage:
        run, config = (f"`{step[k]}`" if step.get(k) else "-" for k in ("run_dir", "config"))
        lines.append(f"| {step['stage']} | `{step['model']}` | {run} | {config} |")
    lines += ["", "## Data", "", "| stage | dataset | rows |", "|---|---|---|"]
    lines += [f"| {d['stage']} | `{d['dataset']}` | {d.get('rows') or 'not counted'} |" for d in data]
    lines += ["", "## Scores", ""]
    scored = [step["stage"] for step in lineage if step["stage"] in evaluations]
    if not scored:
        lines.append("Not evaluated (the pipeline has no [evaluate] section).")
    else:
        datasets = sorted({ds for label in scored for ds in evaluations[label]["scores"]["datasets"]})
        where = f" (config `{eval_config}`)" if eval_config else ""
        lines += [
            f"Accuracy on {', '.join(datasets)}{where}, with its Wilson 95% interval:",
            "",
            "| model | accuracy [95% interval] | questions | gain vs parent | flags | gate |",
            "|---|---|---|---|---|---|",
        ]
        for label in scored:
            s = score(evaluations[label])
            flags = "; ".join(answer_profile(dict(evaluations[label])).get("flags", [])) or "none"
            d = decisions.get(label)
            gain = f"{d['gain']:+.1f} points (needed {d['min_gain']:+g})" if d else "-"
            gate = "-" if d is None else ("promoted" if d["promoted"] else "stopped")
            lines.append(f"| {label} | {_pct(s['accuracy'], s['ci95'])} | {s['n']} | {gain} | {flags} | {gate} |")
    lines += ["", "## Where it is published", ""]
    lines += [f"- {u['url']} ({u['status']})" for u in uploads] or ["Not uploaded by the pipeline."]
    return "\n".join(lines) + "\n"
