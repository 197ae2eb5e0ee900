"""GPUs as a Prefect global concurrency limit (tasks/torchrun.gpu_slots): a run takes one slot per GPU, so
two runs needing more GPUs than the pool has run one after the other; on a CPU-only machine no slot is
taken; a run needing more slots than the limit has is refused, naming the key."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from cosmos_train.config import ConfigError, load_config

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _limit(name: str, slots: int) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate

    with get_client(sync_client=True) as client:
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=slots))


def _cfg(name: str):  # noqa: ANN202
    return load_config(
        None, [f'launch.gpu_concurrency_limit="{name}"', "launch.nproc_per_node=2"], env={}, check_paths=False
    )


def _run_holding(cfg, events: list[str], tag: str, hold_s: float) -> None:  # noqa: ANN001
    from prefect import flow

    from tasks.torchrun import gpu_slots

    @flow(name=f"gpu-{tag}")
    def hold() -> None:
        with gpu_slots(cfg) as taken:
            events.append(f"{tag} in {taken}")
            time.sleep(hold_s)
            events.append(f"{tag} out")

    hold()


def test_two_runs_needing_more_gpus_than_the_pool_has_take_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    import tasks.torchrun as torchrun

    monkeypatch.setattr(torchrun, "gpus_used", lambda cfg: 2)  # as on a node with 2 GPUs per run
    _limit("gpu-pool-a", 3)
    events: list[str] = []
    runs = [threading.Thread(target=_run_holding, args=(_cfg("gpu-pool-a"), events, tag, 1.5)) for tag in "ab"]
    for t in runs:
        t.start()
        time.sleep(0.3)
    for t in runs:
        t.join(timeout=120)
    assert events in (["a in 2", "a out", "b in 2", "b out"], ["b in 2", "b out", "a in 2", "a out"]), events


def test_cpu_takes_no_slot_and_a_missing_limit_does_not_block(monkeypatch: pytest.MonkeyPatch) -> None:
    import tasks.torchrun as torchrun

    _limit("gpu-pool-b", 1)
    events: list[str] = []
    # CPU: gpus_used is 0 (no CUDA here), so even a limit another holder fills is not waited for
    from prefect.concurrency.sync import concurrency

    with concurrency("gpu-pool-b", occupy=1, strict=True):
        _run_holding(_cfg("gpu-pool-b"), events, "cpu", 0.0)
    monkeypatch.setattr(torchrun, "gpus_used", lambda cfg: 2)
    _run_holding(_cfg("no-such-limit"), events, "unlimited", 0.0)
    assert events == ["cpu in 0", "cpu out", "unlimited in 0", "unlimited out"]


def test_more_gpus_than_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import tasks.torchrun as torchrun

    monkeypatch.setattr(torchrun, "gpus_used", lambda cfg: 8)
    _limit("gpu-pool-c", 4)
    with pytest.raises(ConfigError, match=r"launch.gpu_concurrency_limit: this run needs 8 GPU slots .* has 4"):
        _run_holding(_cfg("gpu-pool-c"), [], "big", 0.0)


def test_multi_node_command_and_run_folder(tmp_path: Path) -> None:
    from tasks.run_folder import new_run_dir
    from tasks.torchrun import launch_env, torchrun_command

    cfg = load_config(
        None,
        [
            "launch.nnodes=2",
            "launch.node_rank=1",
            "launch.nproc_per_node=4",
            'launch.rdzv_endpoint="node0:29500"',
            'launch.rdzv_id="job-1"',
            'launch.socket_ifname="eth1"',
            f'train.output_dir="{tmp_path}"',
        ],
        env={},
        check_paths=False,
    )
    cmd = torchrun_command(cfg, "cosmos_train.train.sft", ["--config", "c.toml"])
    assert "--standalone" not in cmd and {
        "--nnodes=2",
        "--nproc_per_node=4",
        "--rdzv_backend=c10d",
        "--rdzv_endpoint=node0:29500",
        "--rdzv_id=job-1",
    } <= set(cmd)
    assert new_run_dir(cfg) == tmp_path.resolve() / "job-1" == new_run_dir(cfg)  # every node: the same folder
    assert launch_env(cfg) == {"GLOO_SOCKET_IFNAME": "eth1", "NCCL_SOCKET_IFNAME": "eth1"}
    with pytest.raises(ConfigError) as e:
        load_config(None, ["launch.nnodes=2"], env={}, check_paths=False)
    assert [p.split(":")[0] for p in e.value.problems] == ["launch.rdzv_endpoint", "launch.rdzv_id"]
