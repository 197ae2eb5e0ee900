"""Retake the screenshots of the Prefect UI (docs/deployments.md, docs/sweeps.md): a real server, the tiny
post-train pipeline and a sweep, headless Chromium.

    apt-get install -y chromium          # Debian's Chromium (once)
    .venv/bin/python scripts/screenshots.py [--out docs/img] [--sft-steps 40] [--only sweep]

Starts `prefect server start` on a free loopback port through the tests' helper
(tests/integration/prefect_server.py, which sets PREFECT_UI_API_URL to that port: without it the UI's
page calls port 4200), makes the tiny model and synthetic videos, runs
`cosmos-train post-train` on configs/tiny-post-train.toml against that server (a short SFT and GRPO,
evaluation of each) and `cosmos-train sweep` of configs/tiny-sft.toml over three learning rates (two trials at
a time), then opens the artifacts in Chromium and saves PNGs: the SFT run's curves, the SFT evaluation's
comparison table (answers, flags, chance level), the pipeline's summary and the sweep's comparison table.
`--only post-train` / `--only sweep` runs one of the two and takes its screenshots. Every process it starts
is stopped at the end.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.integration.prefect_server import start_server  # noqa: E402

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
SHOTS = {  # file -> (flow name, artifact key), by the run that makes them
    "post-train": {
        "ui-training-curves.png": ("sft", "training-curves"),
        "ui-evaluation-flags.png": ("evaluate", "eval-comparison"),
        "ui-pipeline-summary.png": ("post-train", "post-train-summary"),
    },
    "sweep": {
        "ui-sweep-table.png": ("sweep", "sweep-table"),
    },
}
SWEEP_GRID = "train.optm_lr=1e-4,3e-4,1e-3"


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if path := shutil.which(name):
            return path
    sys.exit("no Chromium found: apt-get install -y chromium")


def _artifact_id(api: str, flow_name: str, key: str) -> str:
    """The newest artifact `key` created by a run of the flow `flow_name`."""
    arts = httpx.post(f"{api}/artifacts/filter", json={"artifacts": {"key": {"any_": [key]}}}, timeout=30).json()
    for art in sorted(arts, key=lambda a: a["created"], reverse=True):
        run = httpx.get(f"{api}/flow_runs/{art['flow_run_id']}", timeout=30).json()
        if httpx.get(f"{api}/flows/{run['flow_id']}", timeout=30).json()["name"] == flow_name:
            return art["id"]
    sys.exit(f"no artifact {key!r} on a {flow_name!r} run")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    ap.add_argument("--sft-steps", type=int, default=40)
    ap.add_argument("--grpo-steps", type=int, default=20)
    ap.add_argument("--sweep-steps", type=int, default=40, help="Steps of each sweep trial.")
    ap.add_argument("--only", choices=sorted(SHOTS), default=None, help="Run only this one and take its shots.")
    args = ap.parse_args()
    runs = [args.only] if args.only else list(SHOTS)
    chromium = _chromium()
    work = Path(tempfile.mkdtemp(prefix="cosmos-screenshots-"))
    with start_server(work / "prefect") as server:  # the tests' real server: loopback, free port, own home
        server.wait_healthy(deadline_s=120)
        url = server.url.removesuffix("/api")
        env = server.env()
        cli = [sys.executable, "-m", "cosmos_train.cli"]
        subprocess.run([*cli, "make-tiny-model", str(work / "model")], env=env, cwd=ROOT, check=True)
        subprocess.run(
            [*cli, "make-synthetic-data", str(work / "data"), "--n-train", "256", "--n-test", "40"],
            env=env,
            cwd=ROOT,
            check=True,
        )
        data = work / "data"
        if "post-train" in runs:
            _post_train(cli, work, data, args, env)
        if "sweep" in runs:
            _sweep(cli, work, data, args, env)
        args.out.mkdir(parents=True, exist_ok=True)
        for name, (flow_name, key) in [shot for run in runs for shot in SHOTS[run].items()]:
            page = f"{url}/artifacts/artifact/{_artifact_id(f'{url}/api', flow_name, key)}"
            subprocess.run(
                [
                    chromium,
                    *CHROMIUM_FLAGS,
                    f"--user-data-dir={work / 'chromium'}",
                    f"--screenshot={args.out / name}",
                    "--window-size=1600,900",
                    "--virtual-time-budget=20000",
                    page,
                ],
                check=True,
                capture_output=True,
                timeout=180,
            )
            print(args.out / name)
    shutil.rmtree(work, ignore_errors=True)  # the server (and every run it started) was stopped above
    return 0


def _sweep(cli: list[str], work: Path, data: Path, args: argparse.Namespace, env: dict[str, str]) -> None:
    """Three learning rates of the tiny SFT recipe, two trials at a time, validation loss picking the best."""
    subprocess.run(
        [
            *cli,
            "sweep",
            "--config",
            str(ROOT / "configs" / "tiny-sft.toml"),
            "--grid",
            SWEEP_GRID,
            "--parallel",
            "2",
            "--name",
            "lr",
            "--output-dir",
            str(work / "sweeps"),
            "--set",
            f'policy.model_name_or_path="{work / "model"}"',
            "--set",
            f'train.train_policy.dataset.name="{data}"',
            "--set",
            f"train.max_num_steps={args.sweep_steps}",
            "--set",
            "validation.enable=true",
            "--set",
            f"validation.freq={max(1, args.sweep_steps // 4)}",
        ],
        env=env,
        cwd=ROOT,
        check=True,
    )


def _post_train(cli: list[str], work: Path, data: Path, args: argparse.Namespace, env: dict[str, str]) -> None:
    """The tiny post-train pipeline: SFT, evaluation, GRPO, evaluation."""
    subprocess.run(
        [
            *cli,
            "post-train",
            "--config",
            str(ROOT / "configs" / "tiny-post-train.toml"),
            "--set",
            f'output_dir="{work / "runs"}"',
            "--set",
            f'model="{work / "model"}"',
            "--set",
            f'sft.train.train_policy.dataset.name="{data}"',
            "--set",
            f"sft.train.max_num_steps={args.sft_steps}",
            "--set",
            f'grpo.train.train_policy.dataset.name="{data}"',
            "--set",
            f"grpo.train.max_num_steps={args.grpo_steps}",
            "--set",
            f'evaluate.data_dir="{data}"',
        ],
        env=env,
        cwd=ROOT,
        check=True,
    )


if __name__ == "__main__":
    sys.exit(main())
