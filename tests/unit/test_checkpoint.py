"""CheckpointManager: exact resume, async == sync, atomicity, rotation, find_latest, RNG (one process).

Multi-rank save/load and resharding are in tests/integration/distributed/test_checkpoint_dist.py.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import time

import numpy as np
import pytest
import torch
from torch import nn
from torch.distributed.checkpoint import FileSystemWriter

from cosmos_train import signals
from cosmos_train.checkpoint import COMPLETE, CheckpointManager, complete_checkpoints, is_complete
from cosmos_train.config import CheckpointConfig
from cosmos_train.errors import CheckpointError, DiskFullError
from cosmos_train.signals import install_exit_handlers


def make(seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    return model, opt, sched


def train(model, opt, sched, steps: int) -> list[float]:
    """Steps whose data come from torch's, numpy's and python's RNGs, so resume must restore all three."""
    losses = []
    for _ in range(steps):
        x = torch.randn(4, 6) + float(np.random.rand()) + random.random()
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.item())
    return losses


def snapshot(model, opt, sched) -> dict:
    return {
        "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "opt": {
            i: {k: v.clone() if torch.is_tensor(v) else v for k, v in s.items()}
            for i, s in opt.state_dict()["state"].items()
        },
        "lr": sched.get_last_lr(),
        "sched_epoch": sched.last_epoch,
    }


def assert_same(a: dict, b: dict) -> None:
    assert a["model"].keys() == b["model"].keys()
    for k in a["model"]:
        assert torch.equal(a["model"][k], b["model"][k]), k
    assert a["opt"].keys() == b["opt"].keys()
    for i in a["opt"]:
        for k, v in a["opt"][i].items():
            w = b["opt"][i][k]
            assert torch.equal(v, w) if torch.is_tensor(v) else v == w, (i, k)
    assert a["lr"] == b["lr"] and a["sched_epoch"] == b["sched_epoch"]


def cfg(**kw) -> CheckpointConfig:
    return CheckpointConfig(**{"save_mode": "sync", **kw})


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_resume_continues_exactly(pg, tmp_path, mode):
    model, opt, sched = make()
    train(model, opt, sched, 3)
    mgr = CheckpointManager(tmp_path / "run", cfg(save_mode=mode))
    path = mgr.save(3, model, opt, sched, {"consumed_samples": 12, "epoch": 0})
    saved = snapshot(model, opt, sched)
    after = train(model, opt, sched, 3)  # training goes on while an async save writes
    mgr.wait()
    assert is_complete(path) and path == tmp_path / "run" / "checkpoints" / "step_3"
    continued = snapshot(model, opt, sched)

    model2, opt2, sched2 = make(seed=99)
    mgr2 = CheckpointManager(tmp_path / "run", cfg(save_mode=mode))
    extra = mgr2.load(path, model2, opt2, sched2)
    assert extra == {"consumed_samples": 12, "epoch": 0, "step": 3}
    assert_same(snapshot(model2, opt2, sched2), saved)
    # Same data (RNG restored), same state: the resumed run retraces the original bit for bit.
    assert train(model2, opt2, sched2, 3) == after
    assert_same(snapshot(model2, opt2, sched2), continued)


def test_async_and_sync_write_identical_states(tmp_path):
    model, opt, sched = make()
    train(model, opt, sched, 2)
    before = snapshot(model, opt, sched)
    s = CheckpointManager(tmp_path / "s", cfg(save_mode="sync"))
    a = CheckpointManager(tmp_path / "a", cfg(save_mode="async"))
    ps = s.save(2, model, opt, sched, {})
    pa = a.save(2, model, opt, sched, {})
    assert a.in_flight and not pa.exists()  # step_N appears only once the write is finalized
    # Mutate everything in place right away, as the next optimizer steps would.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    for st in opt.state.values():
        st["exp_avg"].mul_(-3)
    train(model, opt, sched, 2)
    a.wait()
    loaded_s, loaded_a = make(seed=5), make(seed=6)
    s.load(ps, *loaded_s)
    a.load(pa, *loaded_a)
    assert_same(snapshot(*loaded_s), before)
    assert_same(snapshot(*loaded_a), before)


class WriterCrash(RuntimeError):
    pass


def crash_in_writer(monkeypatch):
    """Make DCP's file writer die after the shards are written, before .metadata: a crash mid-save."""

    def finish(self, metadata, results):
        raise WriterCrash("simulated crash while writing the checkpoint")

    monkeypatch.setattr(FileSystemWriter, "finish", finish)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_crash_mid_save_is_never_loaded(pg, tmp_path, monkeypatch, mode):
    model, opt, sched = make()
    mgr = CheckpointManager(tmp_path / "run", cfg(save_mode=mode, max_keep=5))
    good = mgr.save(1, model, opt, sched, {"tag": "good"}, blocking=True)
    train(model, opt, sched, 1)
    with monkeypatch.context() as m:
        crash_in_writer(m)
        with pytest.raises((WriterCrash, RuntimeError)) as info:
            mgr.save(2, model, opt, sched, {"tag": "bad"})
            mgr.wait()
        assert "simulated crash" in repr(info.value) + repr(info.value.__cause__)
    root = tmp_path / "run" / "checkpoints"
    leftovers = [p.name for p in root.iterdir() if p.name.startswith("step_2")]
    assert len(leftovers) == 1 and leftovers[0].startswith("step_2.tmp-"), leftovers
    assert CheckpointManager.find_latest(tmp_path / "run") == good
    with pytest.raises(CheckpointError, match=r"not a complete checkpoint.*complete ones under .*step_1"):
        mgr.load(root / leftovers[0], *make())
    # A plain step_N folder without the marker (e.g. copied half-way) is ignored too.
    (root / "step_9").mkdir()
    assert CheckpointManager.find_latest(tmp_path / "run") == good
    # The next save succeeds and deletes the interrupted one.
    mgr.save(3, model, opt, sched, {}, blocking=True)
    assert not (root / leftovers[0]).exists()
    assert [p.name for p in complete_checkpoints(root)] == ["step_1", "step_3"]
    assert mgr.load(good, *make())["tag"] == "good"


def test_rotation_keeps_newest(tmp_path):
    model, opt, sched = make()
    mgr = CheckpointManager(tmp_path / "run", cfg(max_keep=2, save_mode="async"))
    for step in (10, 20, 30, 40):
        train(model, opt, sched, 1)
        mgr.save(step, model, opt, sched, {})
    mgr.wait()
    assert [p.name for p in complete_checkpoints(tmp_path / "run" / "checkpoints")] == ["step_30", "step_40"]
    keep_all = CheckpointManager(tmp_path / "all", cfg(max_keep=-1))
    for step in (1, 2, 3):
        keep_all.save(step, model, opt, sched, {})
    assert len(complete_checkpoints(tmp_path / "all" / "checkpoints")) == 3
    with pytest.raises(ValueError, match="max_keep"):
        CheckpointManager(tmp_path / "x", cfg(max_keep=0))


def test_saving_an_existing_step_again_is_a_noop(tmp_path):
    model, opt, sched = make()
    mgr = CheckpointManager(tmp_path / "run", cfg(save_mode="async"))
    p = mgr.save(5, model, opt, sched, {"n": 1})
    # The exit handler's blocking save at the same step finalizes the in-flight one and keeps it.
    assert mgr.save(5, model, opt, sched, {"n": 2}, blocking=True) == p
    assert mgr.load(p, *make())["n"] == 1


def test_find_latest_over_run_and_output_dirs(tmp_path):
    model, opt, sched = make()
    out = tmp_path / "outputs"
    older = CheckpointManager(out / "20250101-000000", cfg(max_keep=-1))
    older.save(50, model, opt, sched, {})
    older.save(70, model, opt, sched, {})
    time.sleep(0.01)
    newer = CheckpointManager(out / "20250102-000000", cfg(max_keep=-1))
    newer.save(5, model, opt, sched, {})  # fewer steps, but written last
    (out / "20250103-000000" / "checkpoints").mkdir(parents=True)  # a run that died before saving
    (out / "notes.txt").write_text("not a run")

    assert CheckpointManager.find_latest(out) == out / "20250102-000000" / "checkpoints" / "step_5"
    assert CheckpointManager.find_latest(out / "20250101-000000") == out / "20250101-000000" / "checkpoints" / "step_70"
    assert CheckpointManager.find_latest(out / "20250101-000000" / "checkpoints").name == "step_70"
    step50 = out / "20250101-000000" / "checkpoints" / "step_50"
    assert CheckpointManager.find_latest(step50) == step50
    assert CheckpointManager.find_latest(out / "20250103-000000") is None
    assert CheckpointManager.find_latest(tmp_path / "does-not-exist") is None
    (step50 / COMPLETE).unlink()
    assert CheckpointManager.find_latest(step50) is None


def test_rng_restored_and_missing_rank_seeded(pg, tmp_path, caplog):
    model, opt, sched = make()
    torch.manual_seed(123)
    np.random.seed(123)
    random.seed(123)
    mgr = CheckpointManager(tmp_path / "run", cfg(), seed=7)
    path = mgr.save(1, model, opt, sched, {})
    expected = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])

    mgr.load(path, *make())
    got = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)])
    assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1]) and got[2] == expected[2]

    # As if this rank did not exist when the checkpoint was written (world size grew).
    (path / "rng_rank0.pt").unlink()
    draws = []
    for seed in (7, 7, 8):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="cosmos_train.checkpoint"):
            CheckpointManager(tmp_path / "run", cfg(), seed=seed).load(path, *make())
        assert "no RNG state for rank 0" in caplog.text and f"seed={seed}" in caplog.text
        draws.append((torch.rand(2).tolist(), np.random.rand(2).tolist(), random.random()))
    assert draws[0] == draws[1] and draws[0] != draws[2]


def test_extra_must_be_json(tmp_path):
    model, opt, sched = make()
    mgr = CheckpointManager(tmp_path / "run", cfg())
    with pytest.raises(TypeError, match=r"\['bad'\]"):
        mgr.save(1, model, opt, sched, {"ok": 1, "bad": torch.zeros(1)})
    assert CheckpointManager.find_latest(tmp_path / "run") is None


def test_trainer_state_file_is_readable(tmp_path):
    model, opt, sched = make()
    train(model, opt, sched, 2)
    path = CheckpointManager(tmp_path / "run", cfg()).save(2, model, opt, sched, {"epoch": 1})
    state = json.loads((path / "trainer_state.json").read_text())
    assert state["step"] == 2 and state["world_size"] == 1 and state["extra"]["epoch"] == 1
    assert state["scheduler"]["last_epoch"] == 2
    assert json.loads((path / COMPLETE).read_text())["step"] == 2


def test_load_without_optimizer_and_scheduler(tmp_path):
    model, opt, sched = make()
    train(model, opt, sched, 1)
    path = CheckpointManager(tmp_path / "run", cfg()).save(1, model, opt, sched, {})
    fresh, _, _ = make(seed=3)
    CheckpointManager(tmp_path / "run", cfg()).load(path, fresh, None, None)
    for k, v in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v)


def test_exit_handler_sets_flag_then_second_signal_is_default(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        request = install_exit_handlers(seen.append, signals=(signal.SIGUSR1,))
        assert not request and not request.agreed()
        os.kill(os.getpid(), signal.SIGUSR1)
        assert request and request.signum == signal.SIGUSR1 and request.agreed() and seen == [signal.SIGUSR1]
        # The same signal at once again (a scheduler's copy and torchrun's forwarded one): one request, still handled
        os.kill(os.getpid(), signal.SIGUSR1)
        assert seen == [signal.SIGUSR1]
        # A second request later hands the previous handler back and re-delivers: catch it with a test handler.
        monkeypatch.setattr(signals, "REPEAT_S", 0.0)
        caught = []
        signal.signal(signal.SIGUSR1, lambda s, f: caught.append(s))
        request2 = install_exit_handlers(None, signals=(signal.SIGUSR1,))
        os.kill(os.getpid(), signal.SIGUSR1)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert request2 and caught == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, previous)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_full_disk_raises_disk_full_and_keeps_the_previous_checkpoint(pg, small_disk, fill_disk, mode):
    torch.manual_seed(0)
    model = nn.Linear(128, 128)  # 64 KiB of weights, 192 KiB with AdamW's moments
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 128)).sum().backward()
    opt.step()
    run = small_disk / "run"
    mgr = CheckpointManager(run, cfg(save_mode=mode, max_keep=-1))
    good = mgr.save(1, model, opt, None, {}, blocking=True)
    filler = fill_disk(small_disk, leave_bytes=96 * 1024)  # room for a part of the next checkpoint only
    step2 = run / "checkpoints" / "step_2"
    with pytest.raises(DiskFullError, match=rf"no space left on {step2}: free space there") as info:
        mgr.save(2, model, opt, None, {})
        mgr.wait()  # an async write fails in the background: its error surfaces here
    assert info.value.__cause__ is not None  # the OSError (or DCP's report of it) stays attached
    assert not mgr.in_flight
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_1"]  # no .tmp left
    assert CheckpointManager.find_latest(run) == good
    filler.unlink()  # space freed: the same manager saves again
    assert is_complete(mgr.save(3, model, opt, None, {}, blocking=True))


def test_manager_start_removes_leftovers_of_a_crashed_save(tmp_path, caplog):
    model, opt, sched = make()
    CheckpointManager(tmp_path / "run", cfg()).save(1, model, opt, sched, {})
    root = tmp_path / "run" / "checkpoints"
    (root / "step_2.tmp-0123456789ab").mkdir()
    (root / "step_2.tmp-0123456789ab" / "__0_0.distcp").write_bytes(b"half")
    (root / "notes.tmp").mkdir()  # not the checkpoint's naming: not ours to delete
    with caplog.at_level(logging.WARNING):
        CheckpointManager(tmp_path / "run", cfg())
    assert sorted(p.name for p in root.iterdir()) == ["notes.tmp", "step_1"]
    assert "step_2.tmp-0123456789ab" in caplog.text


def test_listing_complete_checkpoints_for_messages(tmp_path):
    from cosmos_train.checkpoint import describe_complete, list_complete

    model, opt, sched = make()
    for run, steps in (("r1", (2, 4)), ("r2", (1,))):
        mgr = CheckpointManager(tmp_path / run, cfg(max_keep=-1))
        for step in steps:
            mgr.save(step, model, opt, sched, {})
    (tmp_path / "r1" / "checkpoints" / "step_6").mkdir()  # no COMPLETE marker: not listed
    r1 = tmp_path / "r1" / "checkpoints"
    assert list_complete(tmp_path) == [r1 / "step_2", r1 / "step_4", tmp_path / "r2" / "checkpoints" / "step_1"]
    assert list_complete(tmp_path / "r1") == list_complete(r1) == [r1 / "step_2", r1 / "step_4"]
    assert list_complete(r1 / "step_6") == []
    assert describe_complete(r1) == f"complete ones under {r1}: {r1 / 'step_2'}, {r1 / 'step_4'}"
    assert describe_complete(tmp_path / "none") == f"there is no complete checkpoint under {tmp_path / 'none'}"
