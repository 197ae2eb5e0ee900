"""World-model RL under torchrun with 2 processes (FSDP2 over the DiT, gloo): Flow-GRPO and DDRL run, checkpoint,
resume to the same numbers and weights as an uninterrupted run, export a diffusers folder holding exactly the
trained weights, and score through the real reward service over HTTP. The runs that read no other run (`runs`)
share one launch, one after another; a resumed run and the runs that talk to a reward service have their own."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from cosmos_train.export import read_checkpoint_model
from cosmos_train.metrics import read_metrics
from cosmos_train.wfm.config import load_wfm_config
from tests.cli_inprocess import RunCli
from tests.conftest import ROOT
from tests.torchrun import LAUNCH, torchrun, wfm_runs

TIMED = {"time", "rollout_time", "step_time"}


@pytest.fixture()
def wfm_dir(tiny_wfm_dir: Path) -> Path:
    return tiny_wfm_dir


@pytest.fixture()
def wfm_data(wfm_data_dir: Path) -> Path:
    return wfm_data_dir


def _run(
    run: Path,
    recipe: str,
    overrides: list[str],
    nproc: int = 2,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    args = ["-m", "cosmos_train.wfm.trainer", "--config", str(_config(run, recipe, overrides))]
    # its output (stderr merged) in .stdout
    return torchrun(nproc, *args, launcher=LAUNCH, env=env, check=False)


def _config(run: Path, recipe: str, overrides: list[str]) -> Path:
    """RUN/config.toml of `recipe` with `overrides` (the trainer writes next to it)."""
    run.mkdir(parents=True, exist_ok=True)
    load_wfm_config(ROOT / "configs" / recipe, overrides, env={}).write(run / "config.toml")
    return run / "config.toml"


def _common(wfm_dir: Path, wfm_data: Path, out: Path, iters: int) -> list[str]:
    return [
        f"model.model_name_or_path='{wfm_dir}'",
        f"job.output_dir='{out}'",
        f"trainer.max_iter={iters}",
        "dataloader_train.type='local'",
        f"dataloader_train.video_dataloader.dataset_dir='{wfm_data}'",
        "dataloader_train.video_dataloader.batch_size=1",
        "dataloader_train.video_dataloader.heldout_videos=2",
        "model.rl.sample_steps=4",
        "evaluation.num_prompts=2",
    ]


def _exported(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "transformer" / "diffusion_pytorch_model.safetensors"))


RESUMED_KEYS = ["checkpoint.save_iter=2", "model.rl.kl_beta=0.01"]  # the resumed case's (4 iterations)
SERVICE_KEYS = ["checkpoint.export_diffusers=false"]  # the reward service case's (2 iterations)


@pytest.fixture(scope="module")
def runs(tiny_wfm_dir: Path, wfm_data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The runs no other run feeds, on 2 processes in one launch: each one's run folder.
    - each recipe's 3 iterations with a checkpoint at 2 (its file name);
    - hsdp: 2 iterations on [model] dp_replicate_size = 2, fsdp_shard_size = 1;
    - whole: DDRL with the KL term for 4 iterations, which the resumed case compares with;
    - local: Flow-GRPO's 2 iterations with the local reward, which the reward service case compares with."""
    tmp = tmp_path_factory.mktemp("wfm-runs")
    common = _common(tiny_wfm_dir, wfm_data_dir, tmp, 3) + ["checkpoint.save_iter=2"]
    two = _common(tiny_wfm_dir, wfm_data_dir, tmp, 2)
    configs = {
        "tiny-wfm-flow-grpo.toml": _config(tmp / "flow-grpo", "tiny-wfm-flow-grpo.toml", common),
        "tiny-wfm-ddrl.toml": _config(tmp / "ddrl", "tiny-wfm-ddrl.toml", common),
        "hsdp": _config(
            tmp / "hsdp", "tiny-wfm-flow-grpo.toml", two + ["model.dp_replicate_size=2", "model.fsdp_shard_size=1"]
        ),
        "whole": _config(
            tmp / "whole", "tiny-wfm-ddrl.toml", _common(tiny_wfm_dir, wfm_data_dir, tmp, 4) + RESUMED_KEYS
        ),
        "local": _config(tmp / "local", "tiny-wfm-flow-grpo.toml", two + SERVICE_KEYS),
    }
    wfm_runs(list(configs.values()), 2)
    return {name: cfg.parent for name, cfg in configs.items()}


@pytest.mark.parametrize("recipe", ["tiny-wfm-flow-grpo.toml", "tiny-wfm-ddrl.toml"])
def test_two_processes_train_checkpoint_and_export(
    recipe: str, runs: dict[str, Path], wfm_dir: Path, tmp_path: Path, run_cli: RunCli
) -> None:
    run = runs[recipe]
    result = json.loads((run / "result.json").read_text())
    assert result["step"] == 3 and result["data"]["heldout"] == 2
    rows = read_metrics(run)
    train = [r for r in rows if r["kind"] == "train"]
    val = [r for r in rows if r["kind"] == "val"]
    assert [r["step"] for r in train] == [1, 2, 3] and [r["step"] for r in val] == [0, 3]
    assert all(0 <= r["reward_mean"] <= 1 and r["reward_brightness"] == pytest.approx(r["reward_mean"]) for r in train)
    assert "heldout_diffusion_loss" in val[0] and "clip_frac" in train[0]
    assert ("data_loss" in train[0]) == (recipe == "tiny-wfm-ddrl.toml")
    # the export holds exactly the last checkpoint's weights, and diffusers loads it
    final = Path(result["final"])
    exported, saved = _exported(final), read_checkpoint_model(run / "checkpoints" / "step_3")
    assert exported.keys() == saved.keys()
    assert all(torch.equal(exported[k], saved[k]) for k in saved)
    # `cosmos-train export` of a world-model checkpoint (in this process): the same diffusers folder
    done = run_cli("export", run / "checkpoints" / "step_3", tmp_path / "exported", cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    again = _exported(tmp_path / "exported")
    assert all(torch.equal(again[k], saved[k]) for k in saved)
    base = _exported(wfm_dir)
    assert any(not torch.equal(base[k], exported[k]) for k in base), "training changed no weight"
    from diffusers import CosmosTransformer3DModel

    CosmosTransformer3DModel.from_pretrained(final, subfolder="transformer")
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_2", "step_3"]
    assert (run / "samples" / "iter_0.npy").is_file() and (run / "samples" / "iter_3.npy").is_file()


def test_hsdp_replicas(runs: dict[str, Path], wfm_dir: Path) -> None:
    """[model] dp_replicate_size = 2, fsdp_shard_size = 1 (HSDP: two replicas of one shard) trains and exports the
    same weight names; the seed guide's keys are the ones that set it."""
    assert _exported(runs["hsdp"] / "diffusers" / "final").keys() == _exported(wfm_dir).keys()


def test_resume_equals_an_uninterrupted_run(
    runs: dict[str, Path], wfm_dir: Path, wfm_data: Path, tmp_path: Path
) -> None:
    """DDRL with the KL term too (a reference model): 4 iterations at once ("whole"), and a run resumed from that
    run's step_2 checkpoint (checkpoint.resume = its path; a launch of its own) for the last 2. A relaunch of the
    run's own folder (--resume-own-run) is what a flow's retry does: test_wfm_flow's killed rank."""
    common = _common(wfm_dir, wfm_data, tmp_path, 4) + RESUMED_KEYS
    whole, part = runs["whole"], tmp_path / "part"
    done = _run(part, "tiny-wfm-ddrl.toml", [*common, f"checkpoint.resume='{whole / 'checkpoints' / 'step_2'}'"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert json.loads((part / "result.json").read_text())["resumed_from"].endswith("step_2")

    def train_rows(run: Path) -> list[dict]:
        return [{k: v for k, v in r.items() if k not in TIMED} for r in read_metrics(run) if r["kind"] == "train"]

    resumed = [r for r in train_rows(part) if r["step"] > 2]
    assert [r["step"] for r in resumed] == [3, 4] and resumed == train_rows(whole)[2:]
    a, b = _exported(whole / "diffusers" / "final"), _exported(part / "diffusers" / "final")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_rewards_through_the_reward_service(
    runs: dict[str, Path], wfm_dir: Path, wfm_data: Path, tmp_path: Path
) -> None:
    """The video payload over real HTTP to the service (its brightness handler): the same scores the local
    handler gives for the same pixels ("local"), so the same run."""
    from tests.reward_server import TOKEN, ServiceThread

    service = ServiceThread().start()
    try:
        env = {
            "WFM_REWARD_ENQUEUE_URL": f"{service.url}/api/reward/enqueue",
            "WFM_REWARD_FETCH_URL": f"{service.url}/api/reward/pull",
            "WFM_REWARD_TOKEN": TOKEN,
        }
        common = _common(wfm_dir, wfm_data, tmp_path, 2) + SERVICE_KEYS
        remote, local = tmp_path / "remote", runs["local"]
        done = _run(
            remote, "tiny-wfm-flow-grpo.toml", [*common, "reward.backend='service'", "reward.batch_size=3"], env=env
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    finally:
        service.stop()
    pick = ("reward_mean", "reward_brightness", "policy_loss")
    rows = [[{k: r[k] for k in pick if k in r} for r in read_metrics(run)] for run in (remote, local)]
    assert rows[0] == rows[1]


def test_offline_text_embeddings_and_the_latent_payload(wfm_dir: Path, tmp_path: Path, run_cli: RunCli) -> None:
    """A dataset with text_embedding/*.pickle written by `make-synthetic-wfm-data --text-embeddings-from` trains
    without the text encoder; the latent payload reaches a service handler that reads latents; embeddings of the
    wrong width are refused naming the file."""
    from cosmos_train.reward_service.handlers import Batch, Handler, register_handler
    from tests.reward_server import TOKEN, ServiceThread

    data = tmp_path / "data"
    args = ["--n", "6", "--num-frames", "5", "--text-embeddings-from", str(wfm_dir)]
    done = run_cli("make-synthetic-wfm-data", data, *args, cwd=ROOT)  # in this process
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(list((data / "text_embedding").glob("*.pickle"))) == 6

    @register_handler("latent_energy")
    class LatentEnergy(Handler):  # registered in this process: the service thread runs here
        media_types = ("latent",)

        def score(self, batch: Batch) -> list[float]:
            assert batch.media is not None and batch.media.ndim == 5
            return [float((x.astype("float64") ** 2).mean()) for x in batch.media]

    service = ServiceThread().start()
    try:
        env = {
            "WFM_REWARD_ENQUEUE_URL": f"{service.url}/api/reward/enqueue",
            "WFM_REWARD_FETCH_URL": f"{service.url}/api/reward/pull",
            "WFM_REWARD_TOKEN": TOKEN,
        }
        common = _common(wfm_dir, data, tmp_path, 2) + [
            "dataloader_train.video_dataloader.offline_text_embedding=true",
            "checkpoint.export_diffusers=false",
            "reward.backend='service'",
            "reward.payload='latent'",
            "reward.fns={latent_energy=1.0}",
        ]
        run = tmp_path / "run"
        done = _run(run, "tiny-wfm-flow-grpo.toml", common, nproc=1, env=env)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    finally:
        service.stop()
    train = [r for r in read_metrics(run) if r["kind"] == "train"]
    assert len(train) == 2 and all(r["reward_latent_energy"] > 0 for r in train)

    import pickle

    import numpy as np

    for f in (data / "text_embedding").glob("*.pickle"):  # the first one read is refused, whichever it is
        f.write_bytes(pickle.dumps(np.ones((4, 7), np.float16)))
    done = _run(
        tmp_path / "bad",
        "tiny-wfm-flow-grpo.toml",
        _common(wfm_dir, data, tmp_path, 1) + ["dataloader_train.video_dataloader.offline_text_embedding=true"],
        nproc=1,
    )
    error = json.loads((tmp_path / "bad" / "error.json").read_text())
    assert done.returncode == 2 and error["kind"] == "data" and ".pickle: embeddings of width 7" in error["message"]
