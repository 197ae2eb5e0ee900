"""The prepare-data flow under a Prefect test API: manifest, report artifacts, failure naming rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("prefect_harness")


def write_config(path: Path, model: Path, data: str, output_dir: Path, *extra: str) -> Path:
    lines = [
        "[train]",
        f'output_dir = "{output_dir}"',
        "[train.train_policy]",
        'type = "sft"',
        "[train.train_policy.dataset]",
        f'name = "{data}"',
        'split = "train_letter"',
        *extra,
        "[train.train_policy.dataset.vision]",
        "min_pixels = 3136",
        "max_pixels = 3136",
        "[policy]",
        f'model_name_or_path = "{model}"',
        "model_max_length = 1024",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def artifacts(key: str) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=[key])))
    return sorted(found, key=lambda a: a.created, reverse=True)  # newest first


def test_flow_writes_manifest_and_report(tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path) -> None:
    from flows.prepare_data import PrepareDataParams, prepare_data

    cfg = write_config(tmp_path / "job.toml", tiny_model_dir, str(synthetic_dir), tmp_path / "out")
    manifest = Path(prepare_data(PrepareDataParams(config=str(cfg), overrides=["validation.enable=true"])))
    run = manifest.parent
    assert run.parent == tmp_path / "out" and (run / "config.toml").is_file()
    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    assert len(rows) == 48 and rows[0]["messages"][-1]["content"] in "ABCD" and rows[0]["frames"] == [4]
    assert len((run / "manifest_val.jsonl").read_text().splitlines()) == 8
    report = artifacts("prepare-data-report")[0]
    assert report.type == "markdown" and "| 48 | 48 | 0 | 0 |" in report.data
    assert "data:image/png;base64," in report.data and str(run / "prep_histograms.png") in report.data
    progress = artifacts("prepare-data-progress")[0]
    assert progress.type == "progress" and float(progress.data) == 100.0


def test_flow_skips_and_fails_naming_rows(tmp_path: Path, tiny_model_dir: Path, synthetic_dir: Path) -> None:
    from cosmos_train.data.prepare import DataValidationError
    from flows.prepare_data import PrepareDataParams, prepare_data

    rows = json.loads((synthetic_dir / "sft" / "train_letter.json").read_text())[:4]
    rows[1]["video"] = "videos/train/not-there.mp4"
    rows[2]["conversations"] = [t for t in rows[2]["conversations"] if t["role"] != "assistant"]
    data = tmp_path / "rows.json"
    data.write_text(json.dumps(rows))
    # Media paths are relative to the synthetic folder: point media_path there.
    media = f'media_path = "{synthetic_dir}"'
    skip = write_config(
        tmp_path / "skip.toml", tiny_model_dir, str(data), tmp_path / "out", media, 'on_bad_row = "skip"'
    )
    run = tmp_path / "run-skip"
    manifest = prepare_data(PrepareDataParams(config=str(skip), run_dir=str(run)))
    assert manifest == str(run / "manifest.jsonl") and len(Path(manifest).read_text().splitlines()) == 2
    summary = json.loads((run / "prep_report.json").read_text())
    assert summary["skipped"] == {"missing_media": 1, "no_assistant_turn": 1}
    report = artifacts("prepare-data-report")[0].data
    assert "missing_media" in report and f"{data}:1" in report

    fail = write_config(tmp_path / "fail.toml", tiny_model_dir, str(data), tmp_path / "out", media)
    with pytest.raises(DataValidationError, match=rf"{data}:1 .*missing_media"):
        prepare_data(PrepareDataParams(config=str(fail), run_dir=str(tmp_path / "run-fail")))
    failed = artifacts("prepare-data-report")[0].data
    assert "Data preparation failed" in failed and "no_assistant_turn" in failed


def test_bad_parameters_are_refused() -> None:
    from pydantic import ValidationError

    from flows.prepare_data import PrepareDataParams

    with pytest.raises(ValidationError):
        PrepareDataParams(overrides="x")  # no config, overrides not a list
