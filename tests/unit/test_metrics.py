"""Metrics go to metrics.jsonl, the console, and an offline wandb run in the run folder."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from cosmos_train.config import config_from_dict
from cosmos_train.metrics import MetricsLogger, read_metrics


def test_jsonl_console_and_offline_wandb(tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch) -> None:
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    cfg = config_from_dict(
        {"logging": {"logger": ["console", "wandb"], "project_name": "p", "experiment_name": "e", "log_interval": 2}}
    )
    m = MetricsLogger(tmp_path, cfg)
    m.log(1, {"loss": 2.5, "lr": 1e-3})
    m.log(2, {"loss": 2.0, "lr": 1e-3})
    m.log(2, {"loss": 2.2}, kind="val")
    m.close()
    rows = read_metrics(tmp_path)
    assert [(r["step"], r["kind"], r["loss"]) for r in rows] == [(1, "train", 2.5), (2, "train", 2.0), (2, "val", 2.2)]
    out = capsys.readouterr().out
    assert "[train] step 2 loss=2" in out and "[train] step 1 " not in out  # log_interval 2
    assert "[val] step 2 loss=2.2" in out
    # a real offline wandb run with our metrics in its history
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1
    # the run file (protobuf records, synced later with `wandb sync`) holds our metric names
    # (written by wandb's own service process, which may still be flushing when finish() returns)
    deadline = time.monotonic() + 20
    data = b""
    while time.monotonic() < deadline and not (b"train/loss" in data and b"val/loss" in data):
        time.sleep(0.2)
        data = b"".join(f.read_bytes() for f in runs[0].glob("*.wandb"))
    assert b"train/loss" in data and b"val/loss" in data


def test_non_main_rank_writes_nothing(tmp_path: Path) -> None:
    m = MetricsLogger(tmp_path, config_from_dict({}), enabled=False)
    m.log(1, {"loss": 1.0})
    assert not (tmp_path / "metrics.jsonl").exists()


def test_reader_skips_a_torn_last_line_and_the_logger_cuts_it_off(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "kind": "train"}\n{"step": 2, "kind": "tr')  # killed mid-write
    assert [r["step"] for r in read_metrics(tmp_path)] == [1]
    # A resumed run appends: the torn fragment must not swallow its first row.
    m = MetricsLogger(tmp_path, config_from_dict({"logging": {"logger": []}}))
    m.log(2, {"loss": 1.0})
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]
    assert path.read_text().count("\n") == 2


def test_reader_reports_a_corrupt_middle_line_once_and_keeps_the_rest(tmp_path: Path, caplog) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2, "lo\n{"step": 3, "note": "a\u2028b"}\n')
    with caplog.at_level("WARNING"):
        assert [r["step"] for r in read_metrics(tmp_path)] == [1, 3]
        assert [r["step"] for r in read_metrics(tmp_path)] == [1, 3]
    reported = [r.getMessage() for r in caplog.records if "corrupt metrics row" in r.getMessage()]
    assert len(reported) == 1 and reported[0].startswith(f"{tmp_path / 'metrics.jsonl'}:2: ")
