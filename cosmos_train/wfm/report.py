"""What a world-model RL run shows: the before/after sample grid and the summary numbers, from the run folder.

png = sample_grid(Path("RUN"))        # RUN/plots/samples.png: per prompt, the first evaluation's frames
                                      # (before training) above the last one's, same prompt and noise
summary = run_summary(Path("RUN"))    # reward and held-out diffusion loss before / after, the export
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from cosmos_train.metrics import read_metrics

PAD = 2
LABEL_H = 12


def evaluation_files(run_dir: Path) -> list[tuple[int, Path]]:
    """(iteration, RUN/samples/iter_N.npy) in iteration order."""
    found = []
    for p in (Path(run_dir) / "samples").glob("iter_*.npy"):
        m = re.fullmatch(r"iter_(\d+)\.npy", p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def _strip(video: np.ndarray, scale: int) -> np.ndarray:
    """[3, T, H, W] uint8 -> frames side by side [H*scale, T*(W*scale + PAD), 3]."""
    frames = [
        np.kron(f.transpose(1, 2, 0), np.ones((scale, scale, 1), dtype=np.uint8)) for f in video.transpose(1, 0, 2, 3)
    ]
    pad = np.full((frames[0].shape[0], PAD, 3), 255, dtype=np.uint8)
    return np.concatenate([x for f in frames for x in (f, pad)], axis=1)


def sample_grid(run_dir: Path, max_prompts: int = 8, scale: int = 2) -> Path | None:
    """RUN/plots/samples.png: for each evaluation prompt, the frames before training (first evaluation) and
    after (last), from the same noise; None when fewer than two evaluations were saved."""
    files = evaluation_files(run_dir)
    if len(files) < 2:
        return None
    (it0, first), (it1, last) = files[0], files[-1]
    before, after = np.load(first), np.load(last)
    prompts_file = Path(run_dir) / "samples" / "prompts.json"
    prompts = json.loads(prompts_file.read_text()) if prompts_file.is_file() else [""] * len(before)
    rows = []
    for i in range(min(max_prompts, len(before))):
        for tag, video in ((f"iter {it0}", before[i]), (f"iter {it1}", after[i])):
            strip = _strip(video, scale)
            label = Image.new("RGB", (strip.shape[1], LABEL_H), "white")
            ImageDraw.Draw(label).text((1, 0), f"{tag}: {prompts[i]}"[:90], fill="black")
            rows.append(np.concatenate([np.asarray(label), strip], axis=0))
    width = max(r.shape[1] for r in rows)
    rows = [np.pad(r, ((0, PAD), (0, width - r.shape[1]), (0, 0)), constant_values=255) for r in rows]
    out = Path(run_dir) / "plots" / "samples.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.concatenate(rows, axis=0)).save(out)
    return out


def run_summary(run_dir: Path) -> dict[str, Any]:
    """Evaluation before / after (reward, held-out diffusion loss), the last iteration's training numbers and the
    result file's export path."""
    rows = read_metrics(Path(run_dir))
    val = [r for r in rows if r.get("kind") == "val"]
    train = [r for r in rows if r.get("kind") == "train"]
    result_file = Path(run_dir) / "result.json"
    result = json.loads(result_file.read_text()) if result_file.is_file() else {}
    return {
        "before": val[0] if val else {},
        "after": val[-1] if len(val) > 1 else {},
        "last_iteration": train[-1] if train else {},
        "final": result.get("final"),
        "algorithm": result.get("algorithm"),
        "iterations": result.get("step"),
    }


def _number(v: Any) -> str:
    return f"{v:.4f}" if isinstance(v, int | float) else "-"


def summary_markdown(summary: dict[str, Any], run_dir: Path) -> str:
    b, a = summary["before"], summary["after"]
    lines = [
        f"# World-model RL ({summary.get('algorithm')}): {Path(run_dir).name}",
        "",
        "| | before | after |",
        "|---|---|---|",
    ]
    for key in sorted({k for k in (*b, *a) if k.startswith("reward") or k == "heldout_diffusion_loss"}):
        lines.append(f"| {key} | {_number(b.get(key))} | {_number(a.get(key))} |")
    lines += [
        "",
        f"- iterations: {summary.get('iterations')}",
        f"- export (diffusers folder): `{summary.get('final')}`",
        f"- run folder: `{run_dir}`",
    ]
    return "\n".join(lines) + "\n"
