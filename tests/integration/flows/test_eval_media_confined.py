"""`cosmos-train eval` on a benchmark whose clip lies outside the benchmark folder (`../` or an absolute path): one
paragraph naming the benchmark file, the row and the path, exit 2, before Prefect or any model starts; the file
outside (not a video) is never decoded: the refusal is confinement's, not a decoder's."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.cli_inprocess import RunCli

pytestmark = pytest.mark.slow

OPTS = {"A": "left", "B": "right"}


def _eval_job(tmp_path: Path, video: str) -> tuple[Path, Path]:
    """(eval config, QA file) of benchmark `ds` whose row 1 names `video`."""
    folder = tmp_path / "data" / "benchmark" / "ds"
    (folder / "clips").mkdir(parents=True)
    (folder / "clips" / "in.mp4").write_bytes(b"inside")
    rows = [
        {"video": v, "qa_pairs": {"question": "Where?", "index2ans": OPTS, "answer": "A"}}
        for v in ("clips/in.mp4", video)
    ]
    qa_file = folder / "ds_benchmark_qa_pairs.json"
    qa_file.write_text(json.dumps(rows))
    config = tmp_path / "eval.toml"
    config.write_text(
        f'datasets = ["ds"]\ndata_dir = "{tmp_path / "data"}"\nresults_dir = "{tmp_path / "results"}"\n'
        'engine = "hf"\ndevice = "cpu"\n[evaluation]\nanswer_type = "letter"\n'
    )
    return config, qa_file


@pytest.mark.parametrize("how", ["climbs out", "absolute"])
def test_eval_refuses_a_clip_outside_the_benchmark(
    tmp_path: Path, tiny_model_dir: Path, how: str, run_cli: RunCli
) -> None:
    secret = tmp_path / "private" / "secret.mp4"
    secret.parent.mkdir()
    secret.write_bytes(b"private bytes, not a video")
    video = "../../../private/secret.mp4" if how == "climbs out" else str(secret)
    config, qa_file = _eval_job(tmp_path, video)
    started = time.monotonic()
    # in this process: run_cli fails the test if the command reaches Prefect
    done = run_cli("eval", "--config", config, "--model", tiny_model_dir)
    seconds = time.monotonic() - started
    assert done.returncode == 2, done.stderr[-3000:]
    out = done.stdout + done.stderr
    assert "Traceback" not in out and "temporary server" not in out  # no Prefect, no model: the preflight's answer
    assert done.stderr.startswith("error: ") and done.stderr.strip().count("\n") == 0, done.stderr
    assert f"{qa_file}:row 1: video {video!r} resolves to {secret}, outside the benchmark folder" in done.stderr
    assert "evaluation.allow_media_outside_root = true" in done.stderr
    assert not (tmp_path / "results").exists()
    assert seconds < 60, seconds  # the preflight answers in seconds (imports only); generous for a loaded machine
