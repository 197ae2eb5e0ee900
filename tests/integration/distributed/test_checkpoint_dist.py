"""FSDP2 checkpoints across processes: save at 2 ranks (async), reload at 2 ranks and at 1 rank (resharded),
and export_safetensors from FSDP2 equals the full weights. Runs ckpt_dist_worker.py under torchrun (gloo, CPU)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from cosmos_train.checkpoint import CheckpointManager
from cosmos_train.config import CheckpointConfig
from cosmos_train.models.tiny import make_tiny_model
from tests.torchrun import torchrun

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import ckpt_dist_worker as worker  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ckpt_dist")
    (out / "base").mkdir()
    (out / "base" / "config.json").write_text(json.dumps({"model_type": "toy", "dtype": "float32"}))
    (out / "base" / "tokenizer.json").write_text("{}")
    tiny = make_tiny_model(out / "tiny")
    # a script, not a module (its own folder is its sys.path[0]): the repository on its path, for cosmos_train
    env = {"PYTHONPATH": str(HERE.parents[2])}
    torchrun(2, str(HERE / "ckpt_dist_worker.py"), str(out), str(tiny), env=env, timeout=300)
    return out


def assert_states_equal(a: dict, b: dict) -> None:
    assert a["model"].keys() == b["model"].keys()
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k
    sa, sb = a["optimizer"]["state"], b["optimizer"]["state"]
    assert sa.keys() == sb.keys() and len(sa) == len(a["model"])
    for fqn in sa:
        for k, v in sa[fqn].items():
            assert torch.equal(v, sb[fqn][k]), (fqn, k)
    assert a["optimizer"]["param_groups"] == b["optimizer"]["param_groups"]


def test_save_then_load_at_two_ranks(two_rank_run):
    out = two_rank_run
    ckpt = out / "run" / "checkpoints" / "step_2"
    assert CheckpointManager.find_latest(out / "run") == ckpt
    assert sorted(p.name for p in ckpt.glob("rng_rank*.pt")) == ["rng_rank0.pt", "rng_rank1.pt"]
    assert len(list(ckpt.glob("*.distcp"))) == 2  # one shard file per rank
    reference, loaded = torch.load(out / "reference.pt"), torch.load(out / "loaded.pt")
    # Wrapper prefixes never reach the checkpoint names.
    assert all("_checkpoint_wrapped_module" not in k for k in reference["model"])
    assert_states_equal(loaded, reference)
    info = json.loads((out / "extra.json").read_text())
    assert info == {"extra": {"consumed_samples": 16, "epoch": 0, "step": 2}, "last_epoch": 2}
    for r in (0, 1):
        expected, got = torch.load(out / f"rng_expected_rank{r}.pt"), torch.load(out / f"rng_loaded_rank{r}.pt")
        assert torch.equal(expected["torch"], got["torch"]) and torch.equal(expected["numpy"], got["numpy"])
        assert expected["python"] == got["python"]
    e0, e1 = torch.load(out / "rng_expected_rank0.pt"), torch.load(out / "rng_expected_rank1.pt")
    assert not torch.equal(e0["torch"], e1["torch"])  # per-rank state, not one copied everywhere


def test_load_at_one_rank_reshards(two_rank_run, tmp_path):
    out = two_rank_run
    reference = torch.load(out / "reference.pt")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg-store", rank=0, world_size=1)
    try:
        # A plain module (no FSDP, no checkpoint wrapper) reads the 2-rank FSDP2 checkpoint.
        model, opt, sched = worker.make(seed=77)
        mgr = CheckpointManager(tmp_path / "run1", CheckpointConfig(save_mode="sync"))
        extra = mgr.load(out / "run" / "checkpoints" / "step_2", model, opt, sched)
        from torch.distributed.checkpoint.state_dict import get_state_dict

        msd, osd = get_state_dict(model, opt)
        assert_states_equal({"model": msd, "optimizer": osd}, reference)
        assert extra["step"] == 2 and sched.last_epoch == 2
        assert torch.equal(torch.rand(4), torch.load(out / "rng_expected_rank0.pt")["torch"])
    finally:
        dist.destroy_process_group()


def test_export_from_fsdp2_equals_full_weights(two_rank_run):
    out = two_rank_run
    full = torch.load(out / "export_reference.pt")
    exported = load_file(out / "export" / "model.safetensors")
    assert exported.keys() == full.keys()
    for k, v in full.items():
        assert torch.equal(exported[k], v), k
    assert json.loads((out / "export" / "config.json").read_text())["model_type"] == "toy"
    assert (out / "export" / "tokenizer.json").exists()


def test_export_of_fsdp2_qwen_loads_with_from_pretrained(two_rank_run):
    from safetensors import safe_open
    from transformers import AutoModelForImageTextToText

    out = two_rank_run
    expected = AutoModelForImageTextToText.from_pretrained(out / "tiny")
    worker.perturb(expected)
    loaded = AutoModelForImageTextToText.from_pretrained(out / "qwen_export")
    want, got = expected.state_dict(), loaded.state_dict()
    assert want.keys() == got.keys()
    for k, v in want.items():
        assert torch.equal(got[k], v), k
    with (
        safe_open(str(out / "qwen_export" / "model.safetensors"), "pt") as a,
        safe_open(str(out / "tiny" / "model.safetensors"), "pt") as b,
    ):
        assert set(a.keys()) == set(b.keys())  # hub names (model.layers.*, visual.*), as save_pretrained
    assert (out / "qwen_export" / "chat_template.jinja").exists()
