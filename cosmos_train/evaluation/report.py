"""Comparisons across evaluated models: names, a side-by-side table, a wrong-answer digest.

Plain data in, plain data out (rows of dicts, markdown text), so the Prefect flow only publishes
them and tests check them without Prefect.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def unique_labels(models: Sequence[str]) -> list[str]:
    """Results-folder names for checkpoints: an export of a run folder by stage, run and step
    (`run_label`: 'sft@20261124193700-step40'), any other by its basename, or as many trailing path parts
    as it takes to tell them apart ('sft-final' and 'grpo-final' for two '.../final' folders)."""
    fallback = _path_labels(models)
    labels = [run_label(m) or f for m, f in zip(models, fallback)]
    return labels if len(set(labels)) == len(labels) else fallback


def _path_labels(models: Sequence[str]) -> list[str]:
    parts = [Path(m.rstrip("/")).parts or (m,) for m in models]
    depth = 1
    while True:
        labels = ["-".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels) or depth >= max(len(p) for p in parts):
            break
        depth += 1
    if len(set(labels)) != len(labels):  # the same path twice
        labels = [f"{p[-1]}-{i}" for i, p in enumerate(parts)]
    return labels


ONE_OPTION_SHARE = 0.8  # a model giving one option to this share of the questions is flagged
UNREADABLE_SHARE = 0.2  # and one whose answers are unreadable this often


def answer_profile(result: dict[str, Any]) -> dict[str, Any]:
    """What a score hides: the share of each option given, the unreadable share, the chance level and
    the flags (one option for >= 80% of the questions; >= 20% unreadable; accuracy not above chance).
    Multiple-choice only: a free-form evaluation has no options (empty profile)."""
    counts = dict(result.get("answers") or {})
    total = sum(counts.values())
    chance = result.get("chance")
    if not total or chance is None:
        return {}
    unreadable = counts.pop("", 0)
    shares = {k: v / total for k, v in sorted(counts.items())}
    flags = []
    top = max(shares, key=lambda k: shares[k], default=None)
    if top is not None and shares[top] >= ONE_OPTION_SHARE:
        flags.append(f"answers {top} to {100 * shares[top]:.0f}% of the questions")
    if unreadable / total >= UNREADABLE_SHARE:
        flags.append(f"{100 * unreadable / total:.0f}% of the answers unreadable")
    micro = result["scores"]["overall"]["micro"]
    if micro["ci95_low"] <= chance:
        flags.append(f"not above chance ({100 * chance:.1f}%)")
    return {
        "total": total,
        "shares": shares,
        "unreadable": unreadable / total,
        "chance": chance,
        "flags": flags,
        "accuracy": micro["accuracy"],
        "ci95": [micro["ci95_low"], micro["ci95_high"]],
    }


def verdict_markdown(label: str, result: dict[str, Any], run_dir: str | None = None) -> str:
    """A trained model's evaluation in a few lines: accuracy with its interval against chance, the answer
    distribution, the flags; what a training run shows when its flow evaluated it."""
    micro = result["scores"]["overall"]["micro"]
    lines = [f"# Evaluation of {label}", "", f"- model: `{result['model']}`"]
    if run_dir:
        lines.append(f"- run folder: `{run_dir}`")
    lines.append(
        f"- accuracy: {100 * micro['accuracy']:.1f}% [{100 * micro['ci95_low']:.1f}, "
        f"{100 * micro['ci95_high']:.1f}] on {micro['total']} questions"
    )
    profile = answer_profile(result)
    if profile:
        lines.append(f"- chance level: {100 * profile['chance']:.1f}%")
        lines.append(f"- answers: {_distribution(profile)}")
        lines.append(
            "- verdict: "
            + (
                "**check this model**: " + "; ".join(profile["flags"])
                if profile["flags"]
                else "above chance, no degenerate answers"
            )
        )
    lines.append(f"- predictions: `{result['run_dir']}`")
    return "\n".join(lines) + "\n"


def _distribution(profile: dict[str, Any]) -> str:
    parts = [f"{k} {100 * v:.0f}%" for k, v in profile["shares"].items()]
    return " · ".join(parts + [f"unreadable {100 * profile['unreadable']:.0f}%"])


def run_label(model: str) -> str | None:
    """'sft@20261124193700-step40' for an export inside a run folder (RUN/safetensors/<name>, the run's
    config.toml beside it): the stage (policy type), the run and the step; None for any other path."""
    path = Path(model.rstrip("/"))
    run = path.parent.parent
    if path.parent.name != "safetensors" or not (run / "config.toml").is_file():
        return None
    try:
        stage = tomllib.loads((run / "config.toml").read_text())["train"]["train_policy"]["type"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return None
    step = None
    if m := re.fullmatch(r"step_(\d+)", path.name):
        step = int(m.group(1))
    else:
        try:
            result = json.loads((run / "result.json").read_text())
            step = result.get("step") if path.name == "final" else (result.get(path.name) or {}).get("step")
        except (OSError, ValueError, AttributeError):
            pass
    tail = f"step{step}" if step is not None else path.name
    return f"{stage}@{run.name}-{tail}" + ("-best" if path.name == "best" else "")


def comparison_rows(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per dataset (then micro, macro): each model's accuracy with its Wilson 95% interval; then
    the chance level, each model's answer distribution, its flags and its checkpoint path.

    results: EvalResult.to_dict() of each model.
    """
    names: list[str] = []
    for r in results:
        for ds in r["scores"]["datasets"]:
            if ds not in names:
                names.append(ds)
    rows = []
    for name in [*names, "micro", "macro"]:
        row: dict[str, Any] = {"dataset": name if name in names else f"overall ({name})"}
        for r in results:
            s = r["scores"]["datasets"].get(name) or r["scores"]["overall"].get(name)
            if s is None:
                row[r["label"]] = "-"
                continue
            row[r["label"]] = f"{100 * s['accuracy']:.1f} [{100 * s['ci95_low']:.1f}, {100 * s['ci95_high']:.1f}]"
            row["n"] = s["total"]
        rows.append(row)
    profiles = {r["label"]: answer_profile(r) for r in results}
    if any(profiles.values()):
        rows.append(
            {
                "dataset": "chance level",
                **{lab: f"{100 * p['chance']:.1f}" if p else "-" for lab, p in profiles.items()},
            }
        )
        rows.append(
            {"dataset": "answers given", **{lab: _distribution(p) if p else "-" for lab, p in profiles.items()}}
        )
        rows.append(
            {
                "dataset": "flags",
                **{lab: ("⚠ " + "; ".join(p["flags"])) if p and p["flags"] else "ok" for lab, p in profiles.items()},
            }
        )
    rows.append({"dataset": "checkpoint", **{r["label"]: r["model"] for r in results}})
    return rows


def wrong_answers_markdown(results: Sequence[dict[str, Any]], per_model: int = 20) -> str:
    """The first `per_model` wrong answers of each model, as markdown (for a quick look)."""
    lines = ["# Wrong answers", ""]
    for r in results:
        wrong = r.get("wrong", [])
        total = r["scores"]["overall"]["micro"]["total"]
        lines += [f"## {r['label']} ({len(wrong)} wrong of {total}; unreadable: {len(r.get('unanswered', []))})", ""]
        if r.get("bad_media"):
            videos = sorted({b["video"] for b in r["bad_media"]})
            lines += [
                f"Left out, clip not decodable ({len(r['bad_media'])} questions): "
                + ", ".join(f"`{v}`" for v in videos),
                "",
            ]
        lines += [f"Predictions: `{r['run_dir']}`", ""]
        if not wrong:
            lines += ["None.", ""]
            continue
        lines += ["| dataset | video | question | correct | answer | response |", "|---|---|---|---|---|---|"]
        for w in wrong[:per_model]:
            response = " ".join(str(w["full_response"]).split())
            response = response if len(response) <= 120 else response[:117] + "..."
            cells = [w["dataset"], w["video_id"], w["question"], w["correct_answer"], w["answer"] or "(none)", response]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        if len(wrong) > per_model:
            lines.append(f"\n... and {len(wrong) - per_model} more in the prediction files.")
        lines.append("")
    return "\n".join(lines)


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")
