"""`scripts/gpu_check.sh --dry-run`: the GPU check's kit is whole and every step runs, on the tiny model on the CPU.

It downloads the kit of scripts/gpu_wheels.txt for CPython 3.12 (what the GPU machine runs; its size checked
under 60 MiB; kept under ~/.cache/cosmos-train by the list's hash, so a clean clone does not download it again),
builds a clean venv holding only what that machine has (torch, transformers, peft, safetensors,
accelerate at .venv's versions; cached under ~/.cache/cosmos-train/gpu-check-env), installs exactly the listed
wheels for this interpreter into a fresh folder and runs bench/gpu_check.py --dry-run there: a module of the
GPU path that imported anything else (PyAV, Prefect, matplotlib, datasets, ...) would fail it.
About 3 minutes on a warm cache (2 cores); a cold one adds the clean venv and the downloads (about a minute here).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow


@pytest.mark.timeout(1800)
def test_gpu_check_dry_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    listing = (ROOT / "scripts" / "gpu_wheels.txt").read_bytes()
    cache = Path(os.environ.get("COSMOS_TRAIN_CACHE") or Path.home() / ".cache" / "cosmos-train")
    kit_root = cache / f"gpu-kit-{hashlib.sha256(listing).hexdigest()[:12]}"  # GPU_CHECK_KIT, as .gpu-wheels is
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run", str(out)],
        cwd=ROOT,
        env={**env, "OMP_NUM_THREADS": "1", "GPU_CHECK_KIT": str(kit_root)},
        capture_output=True,
        text=True,
        timeout=1700,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    pins = [x.split("#")[0].strip() for x in (ROOT / "scripts" / "gpu_wheels.txt").read_text().splitlines()]
    kit = f"kit {kit_root / 'cp312'}: {len([p for p in pins if p])} wheels"
    assert kit in proc.stdout + proc.stderr  # the real kit (CPython 3.12) was fetched and found whole
    result = json.loads((out / "gpu_check.json").read_text())
    assert result["ok"] and result["dry_run"]
    steps = {s["key"]: s for s in result["steps"]}
    assert set(steps) == {"0", "a1", "a2", "a3", "b", "c", "d", "e"}
    assert all(s["ok"] for s in steps.values()), steps
    losses = steps["c"]["data"]["losses"]
    assert losses[-1] < losses[0]
    assert steps["e"]["data"]["max_abs_diff"] <= 1e-4
    assert steps["b"]["data"]["fused_peak_gib"] < steps["b"]["data"]["unfused_peak_gib"]
    assert any("vLLM" in u for u in result["unmeasured"])
    # the one table, with a row per step
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert [line.split("|")[1].strip() for line in table[1:9]] == ["0", "a1", "a2", "a3", "b", "c", "d", "e"]


def test_a_step_past_its_time_is_killed_with_its_children(tmp_path: Path) -> None:
    from bench.gpu_check import Plan, _run

    plan = Plan.make(tmp_path, dry_run=True, budget_s=60)
    pid_file = tmp_path / "grandchild.pid"
    with pytest.raises(TimeoutError, match="timed out after 1 s"):
        _run(plan, "sleeper", ["bash", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], cap_s=1)
    grandchild = Path(f"/proc/{int(pid_file.read_text())}/stat")

    def dead() -> bool:  # gone, or a zombie its new parent has yet to reap
        try:
            return grandchild.read_text().split(")")[-1].split()[0] == "Z"
        except FileNotFoundError:
            return True

    deadline = time.monotonic() + 5  # SIGKILL is delivered at once, but dying takes a moment
    while not dead() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dead()
    plan.deadline = 0.0  # the budget spent: the next step does not start
    with pytest.raises(TimeoutError, match="budget was spent"):
        _run(plan, "late", ["true"], cap_s=10)
