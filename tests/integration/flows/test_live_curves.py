"""The curves refresh while a trainer runs: tasks/torchrun.stream_process calls `on_new_steps` when steps
were logged, and every refresh is a new version of the same `training-curves` artifact (the UI keeps the
history), each holding a PNG that decodes and shows the steps logged so far."""

from __future__ import annotations

import base64
import io
import json
import sys
from pathlib import Path

import pytest

from tests.integration.prefect_server import flow_run_artifact_versions

pytestmark = pytest.mark.usefixtures("prefect_harness")

# A stand-in trainer: one train row a second for 7 steps, as cosmos_train.metrics writes them.
WRITER = """
import json, sys, time
path = sys.argv[1]
for step in range(1, 8):
    with open(path, "a") as f:
        f.write(json.dumps({"step": step, "kind": "train", "loss": 5.0 / step, "lr": 1e-3, "grad_norm": 1.0,
                            "tokens_per_s": 100.0, "total_steps": 7}) + "\\n")
    time.sleep(1.0)
"""


def test_curves_are_new_versions_of_one_artifact_while_training(tmp_path: Path) -> None:
    from PIL import Image
    from prefect import flow

    from tasks.curves import publish_curves
    from tasks.torchrun import stream_process

    run = tmp_path / "run"
    run.mkdir()
    refreshed: list[int] = []

    def refresh() -> None:
        refreshed.append(len((run / "metrics.jsonl").read_text().splitlines()))
        publish_curves(run, "sft")

    @flow(name="live-curves")
    def train() -> str:
        from prefect.context import get_run_context

        stream_process(
            [sys.executable, "-c", WRITER, str(run / "metrics.jsonl")],
            run,
            7,
            None,
            on_new_steps=refresh,
            refresh_s=0.01,
        )
        return str(get_run_context().flow_run.id)

    flow_run_id = train()
    assert len(refreshed) >= 2 and refreshed == sorted(refreshed), refreshed  # during the run, as steps came

    found = [a for a in flow_run_artifact_versions(flow_run_id) if a.key == "training-curves"]
    assert len(found) == len(refreshed)
    for art in found:
        png = base64.b64decode(art.data.split("data:image/png;base64,")[1].split(")")[0])
        assert Image.open(io.BytesIO(png)).format == "PNG"
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 7  # the run finished
