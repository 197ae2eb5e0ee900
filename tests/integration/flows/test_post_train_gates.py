"""The post-train pipeline's [gate], model cards and [filter] stage on the tiny recipes (CPU), uploading to a real
S3-compatible server on loopback: an SFT export that does not beat the base model by gate.min_gain is stopped (its
verdict read back, nothing uploaded, the CLI's exit code 4 on the rerun, which trains nothing); the same stages under
a lenient gate are promoted: the filter keeps the SFT export's rows with a pass rate inside the band, GRPO trains on
them, each promoted export gets its model card (README.md, uploaded with the export); a last rerun skips it all.

    pytest -x -q tests/integration/flows/test_post_train_gates.py
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from cosmos_train.promotion import EXIT_NOT_PROMOTED, NotPromoted
from tests.integration.flows.test_post_train_flow import write_pipeline
from tests.integration.prefect_server import flow_run_artifacts as _artifacts
from tests.s3_server import S3Server, s3_server

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

# SFT after which the tiny model answers with letters, some right: the filter keeps 32 of the 48 prompts (pass
# rates above 0); after 2 steps at the default lr it answers nothing readable and would keep none
SFT = ["sft.train.max_num_steps=20", "sft.train.optm_lr=3e-3"]


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with s3_server(tmp_path_factory.mktemp("moto")) as server:
        yield server


def _ran(summary: dict) -> dict[str, str]:
    return {row["stage"]: row["ran"] for row in summary["stages"]}


def test_a_stage_that_does_not_beat_its_parent_is_stopped_and_a_promoted_one_gets_its_card(
    s3: S3Server, tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cosmos_train import cli
    from flows.post_train import PostTrainParams, post_train

    for k, v in s3.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # the pipeline file names the store
    out = tmp_path / "pipelines"
    config = write_pipeline(tmp_path / "pipeline.toml", tiny_model_dir, synthetic_dir, out, grpo_steps=2)
    target = f"s3://{s3.bucket}/gates"
    with config.open("a") as f:
        f.write(
            f'[gate]\nmin_gain = 100.0\n[filter]\nsamples = 4\n[upload]\nto = ["{target}"]\n'
            f's3_endpoint_url = "{s3.url}"\n'
        )
    folder = out / "tiny"

    # 1. SFT cannot gain 100 points: stopped after its evaluation, before the filter and GRPO, nothing uploaded.
    state = post_train(PostTrainParams(config=str(config), overrides=SFT), return_state=True)
    assert state.is_failed(), state
    with pytest.raises(NotPromoted, match=r"the sft stage's export .* gain [+-]\d+\.\d points, below gate.min_gain"):
        state.result()
    record = json.loads((folder / "pipeline.json").read_text())
    assert {n: r["status"] for n, r in record["stages"].items()} == dict.fromkeys(
        ["prepare-sft", "prepare-grpo", "evaluate-base", "sft", "evaluate-sft"], "done"
    )
    gate = record["gates"]["sft"]
    assert list(record["gates"]) == ["sft"] and gate["promoted"] is False and gate["parent"] == "base"
    assert gate["min_gain"] == 100.0 and gate["n"] == gate["parent_n"] == 6
    sft_export = Path(record["stages"]["sft"]["result"]["export"])
    assert gate["model"] == str(sft_export) and not (sft_export / "README.md").exists()  # no card: not promoted
    arts = _artifacts(state.state_details.flow_run_id)
    verdict = arts["gate-sft"].data
    assert verdict.startswith("# Gate: `sft` NOT promoted")
    low, high = gate["ci95"]
    assert f"| sft (this stage) | {gate['accuracy']:.1f}% [{low:.1f}, {high:.1f}] | 6 |" in verdict
    assert f"| base (its parent) | {gate['parent_accuracy']:.1f}% [" in verdict
    assert "needed: at least +100 (gate.min_gain)" in verdict and "- verdict: **stopped**: gain" in verdict
    assert "nothing was uploaded" in verdict and "model-card-sft" not in arts and "error" not in arts
    table = {row["model"]: row for row in json.loads(arts["post-train-summary"].data)}
    assert table["sft"]["gate"].startswith("stopped: gain") and table["base"]["gate"] == ""
    assert s3.objects("gates/") == {}

    # 2. The same pipeline from the CLI: the same verdict without training again, exit code 4.
    monkeypatch.setattr(cli, "start_reaper", lambda: None)  # the sidecar is for a real CLI process, not pytest's
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["post-train", "--config", str(config), *(a for o in SFT for a in ("--set", o))])
    assert code == EXIT_NOT_PROMOTED == 4, err.getvalue()[-3000:]
    assert "error: post-train stopped by [gate]: the sft stage's export" in err.getvalue()
    assert "Traceback" not in err.getvalue()
    again = json.loads((folder / "pipeline.json").read_text())
    assert again["stages"] == record["stages"]  # every record as it was, start times included: nothing ran
    assert again["gates"] == record["gates"] and s3.objects("gates/") == {}

    # 3. A lenient gate: SFT promoted, the filter keeps rows its export sometimes answers right, GRPO trains on
    #    them from the SFT export, is promoted over SFT, and goes up with its card.
    lenient = [*SFT, "gate.min_gain=-100", "gate.blocking_flags=[]"]
    state = post_train(PostTrainParams(config=str(config), overrides=lenient), return_state=True)
    assert state.is_completed(), state
    summary = state.result()
    upload = f"upload grpo -> {target}"
    assert _ran(summary) == {
        **dict.fromkeys(
            ["prepare-sft", "prepare-grpo", "evaluate-base", "sft", "evaluate-sft"], "skipped (done earlier)"
        ),
        "gate-sft": "promoted",
        "filter": "ran",
        "grpo": "ran",
        "evaluate-grpo": "ran",
        "gate-grpo": "promoted",
        upload: "ran",
    }
    record = json.loads((folder / "pipeline.json").read_text())
    filtered = record["stages"]["filter"]["result"]
    prompts = filtered["kept"] + filtered["dropped"]
    assert filtered["kept"] > 0 and prompts >= 48, filtered  # the synthetic set's 48 RL rows, each a prompt or more
    filter_job = tomllib.loads((Path(filtered["run_dir"]) / "config.toml").read_text())
    assert filter_job["policy"]["model_name_or_path"] == str(sft_export)  # the SFT export, the GRPO job config
    assert filter_job["train"]["train_policy"]["type"] == "grpo"
    kept_rows = json.loads(Path(filtered["dataset"]).read_text())
    assert 0 < len(kept_rows) <= filtered["kept"]
    grpo_run = Path(record["stages"]["grpo"]["run_dir"])
    grpo_job = tomllib.loads((grpo_run / "config.toml").read_text())
    assert grpo_job["train"]["train_policy"]["dataset"]["name"] == filtered["dataset"]
    assert grpo_job["policy"]["model_name_or_path"] == str(sft_export)
    assert record["gates"]["grpo"]["parent"] == "sft" and record["gates"]["grpo"]["promoted"]
    assert summary["promoted"] == ["sft", "grpo"] and summary["stopped"] is None

    arts = _artifacts(state.state_details.flow_run_id)
    grpo_export = Path(summary["exports"]["grpo"])
    card = arts["model-card-grpo"].data  # the version published after the upload
    assert "# tiny: grpo" in card and "base -> sft -> grpo" in card
    assert f"| base | `{tiny_model_dir}` | - | - |" in card
    sft_run = record["stages"]["sft"]["run_dir"]
    assert f"| sft | `{sft_export}` | `{sft_run}` | `{sft_run}/config.toml` |" in card
    assert f"| grpo | `{grpo_export}` | `{grpo_run}` | `{grpo_run}/config.toml` |" in card
    kept = f"{filtered['kept']} kept of {prompts} prompts of `{synthetic_dir}`"
    assert f"| grpo | `{filtered['dataset']}` | {kept} (pass rate strictly between 0 and 1 over 4 samples" in card
    assert f"| sft | `{synthetic_dir}` | " in card and " used of " in card  # the prepare report's counts
    assert "| base | " in card and "| sft | " in card and " points (needed -100) | " in card
    assert f"- {target} (uploaded: " in card
    readme = (grpo_export / "README.md").read_text()  # the card as written before the upload
    assert re.sub(r"\(uploaded: [^)]*\)", "(upload target)", card) == readme
    stored = s3.objects("gates/")
    assert stored["gates/README.md"].decode() == readme  # the card travelled with the export
    assert any(k.endswith(".safetensors") for k in stored), sorted(stored)
    sft_card = arts["model-card-sft"].data
    assert (sft_export / "README.md").read_text() == sft_card and "Not uploaded by the pipeline." in sft_card

    # 4. Once more: every stage skipped, the filter and the upload included (the cards changed no stage's key).
    state = post_train(PostTrainParams(config=str(config), overrides=lenient), return_state=True)
    assert state.is_completed(), state
    ran = _ran(state.result())
    assert ran.pop("gate-sft") == ran.pop("gate-grpo") == "promoted"
    assert set(ran.values()) == {"skipped (done earlier)"} and {"filter", upload} <= set(ran), ran
