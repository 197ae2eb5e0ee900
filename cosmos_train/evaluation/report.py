"""Comparisons across evaluated models: names, a side-by-side table, a wrong-answer digest.

Plain data in, plain data out (rows of dicts, markdown text), so the Prefect flow only publishes
them and tests check them without Prefect.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def unique_labels(models: Sequence[str]) -> list[str]:
    """Results-folder names for checkpoints: the basename, or as many trailing path parts as it
    takes to tell them apart ('sft-final' and 'grpo-final' for two '.../final' folders)."""
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


def comparison_rows(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per dataset (then micro, macro): each model's accuracy with its Wilson 95% interval.

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
            lines += [f"Left out, clip not decodable ({len(r['bad_media'])} questions): "
                      + ", ".join(f"`{v}`" for v in videos), ""]
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
