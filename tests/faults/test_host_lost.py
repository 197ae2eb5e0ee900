"""A host lost: a two-node `cosmos-train sft` on two real hosts (tests/two_hosts.py), and host1's power cut mid-run,
its cables out first (no FIN or RST reaches host0, as with a power cut) then every process on it killed. The cut
comes while a checkpoint is being written: the survivor's rank is then in the save's collectives (or the step's stop
agreement after it), and a half-written checkpoint lies on the shared storage.

- The survivor (node 0, whose launcher hosts the rendezvous) learns of it only by its rank's collective timing out
  (`launch.collective_timeout_s`, whichever process group the collective is on): its launch ends within that and a
  margin, and the flow's retry relaunches it into the rendezvous, where it waits (`launch.rdzv_timeout_s`) for
  node 1.
- host1 comes back and node 1's command is run again (what a Slurm requeue or the deployment's re-run does): both
  nodes resume from the newest complete checkpoint, end 0, and the final weights equal `uninterrupted_sft`'s (the
  suite's job on one node with 2 processes); nothing is left running on either host.

Skipped, with the reason, where network namespaces cannot be made. About 3-5 minutes on a loaded 2-core machine (the
uninterrupted run included). `-s` shows the times measured.

    pytest -x -q -s tests/faults/test_host_lost.py
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from cosmos_train.checkpoint_paths import complete_checkpoints, step_of
from tests.faults.conftest import FAULT_SFT_STEPS, fault_env, session_of, train_steps, write_fault_sft_config
from tests.run_outputs import same_weights
from tests.two_hosts import TwoHosts, node_env, why_no_hosts

pytestmark = pytest.mark.slow

NO_HOSTS = why_no_hosts()
COLLECTIVE_TIMEOUT_S = 20  # launch.collective_timeout_s: the only way the survivor learns of a silent peer
# After the collective's timeout, the survivor's launch still has to end: what the rank did before it entered the
# collective that waits (a collective's clock starts when the rank enters it), its failure path (the half-written
# checkpoint removed, RUN/error.json) and exit, and the launcher's stop. Measured: 1.5 s (a cut in a forward pass),
# 7 s (a cut in a save).
STOP_MARGIN_S = 15
# launch.rdzv_timeout_s: the relaunched node 0 waits this for node 1's re-run (a Prefect server start, the job's
# resolution and data preparation on a loaded machine) to join
RDZV_TIMEOUT_S = 180
GONE_WITHIN_S = 30  # nothing left on a host this long after its command ended


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def tails(*logs: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in logs if p.exists())


def wait_for(
    what: str,
    ready: Callable[[], bool],
    timeout: float,
    logs: list[Path],
    alive: list[subprocess.Popen],
    poll: float = 0.05,
) -> float:
    """Poll `ready()` every `poll` s until true; the monotonic time it became so. Fails with the nodes' logs when it
    times out or a process of `alive` ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return time.monotonic()
        ended = [p.returncode for p in alive if p.poll() is not None]
        assert not ended, f"a node's command ended ({ended}) before {what}:\n{tails(*logs)}"
        time.sleep(poll)
    raise AssertionError(f"not within {timeout} s: {what}\n{tails(*logs)}")


@pytest.mark.skipif(NO_HOSTS is not None, reason=str(NO_HOSTS))
def test_a_host_lost_stops_the_survivor_and_both_nodes_resume(
    tiny_model_dir: Path, synthetic_dir: Path, tmp_path: Path, uninterrupted_sft: Path
) -> None:
    out = tmp_path / "shared"  # the run folder's parent, on the filesystem both hosts share
    cfg = write_fault_sft_config(tmp_path / "job.toml", tiny_model_dir, synthetic_dir, out)
    rdzv_id = f"lost-{os.getpid()}"
    run = out / rdzv_id
    args = [sys.executable, "-m", "cosmos_train.cli", "sft", "--config", str(cfg), "--set", "launch.nproc_per_node=1"]
    hosts = TwoHosts.up(f"ct{os.getpid() % 100000}l")
    envs = [
        fault_env(
            tmp_path / f"node{i}",  # each node's CLI its own Prefect home, so its own temporary server
            **node_env(i, nnodes=2, endpoint=hosts.endpoint(), rdzv_id=rdzv_id, socket_ifname="train0", output_dir=out),
            COSMOS_TRAIN__LAUNCH__COLLECTIVE_TIMEOUT_S=str(COLLECTIVE_TIMEOUT_S),
            COSMOS_TRAIN__LAUNCH__RDZV_TIMEOUT_S=str(RDZV_TIMEOUT_S),
            # every rank logs its progress, so each node's own output says where its rank resumed from
            COSMOS_TRAIN_LOG_ALL_RANKS="1",
        )
        for i in (0, 1)
    ]
    logs = [tmp_path / "node0.log", tmp_path / "node1.log", tmp_path / "node1-again.log"]
    procs: list[subprocess.Popen] = []
    try:
        node0 = hosts.popen(0, args, envs[0], logs[0])
        node1 = hosts.popen(1, args, envs[1], logs[1])
        procs += [node0, node1]

        def saving_again() -> bool:  # a checkpoint saved, and the next one being written now
            ckpts = run / "checkpoints"
            return bool(complete_checkpoints(ckpts)) and any(ckpts.glob("step_*.tmp-*"))

        # The cut comes while a checkpoint is being written: the survivor is then inside the save's collectives (or
        # the step's stop agreement after it), and the folder half written on the shared storage must be passed over
        wait_for("a checkpoint being written after a complete one", saving_again, 600, logs[:2], procs, poll=0.01)
        launcher0 = [p for p in hosts.pids(0) if "cosmos_train.launch" in cmdline(p)]
        assert len(launcher0) == 1, [cmdline(p) for p in hosts.pids(0)]
        # the power cut: the cables first, so that nothing host1's kernel would say on its processes' death (FIN,
        # RST) reaches host0; then every process on it dies
        hosts.link(1, up=False)
        hosts.kill(1)
        cut = time.monotonic()
        stepped = train_steps(run)[-1]
        assert node1.wait(timeout=30) == -signal.SIGKILL

        # The survivor: its rank's collective times out, its launch ends, the flow's retry relaunches it
        bound = COLLECTIVE_TIMEOUT_S + STOP_MARGIN_S
        ended = wait_for(
            "node 0's first launch ended", lambda: session_of(launcher0[0]) is None, bound + 10, logs[:1], [node0]
        )

        def relaunch_said() -> bool:
            return logs[0].read_text(errors="replace").count("launch: ") == 2

        relaunched = wait_for("node 0 relaunched", relaunch_said, 60, logs[:1], [node0])
        print(
            f"host1 cut after step {stepped}: node 0's launch ended {ended - cut:.1f} s later "
            f"(collective_timeout_s = {COLLECTIVE_TIMEOUT_S}), its relaunch {relaunched - cut:.1f} s after the cut"
        )
        assert ended - cut < bound, tails(logs[0])
        newest = complete_checkpoints(run / "checkpoints")[-1]
        assert 2 <= step_of(newest) <= stepped

        # host1 back (or its replacement): node 1's command again, as a requeue runs it; both resume and finish
        hosts.link(1, up=True)
        node1_again = hosts.popen(1, args, envs[1], logs[2])
        procs.append(node1_again)
        for p, log in ((node1_again, logs[2]), (node0, logs[0])):
            try:
                code = p.wait(timeout=600)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"{log.name}: still running after 600 s\n{tails(*logs)}") from None
            assert code == 0, tails(*logs)
        left = {}
        for i in (0, 1):
            deadline = time.monotonic() + GONE_WITHIN_S
            while (pids := hosts.pids(i)) and time.monotonic() < deadline:
                time.sleep(0.2)
            left[i] = {p: cmdline(p) for p in pids}
        assert left == {0: {}, 1: {}}, left
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        hosts.down()

    output0 = logs[0].read_text(errors="replace")
    assert output0.count("launch: ") == 2, output0[-4000:]  # the first launch and the flow's one retry
    first, second = output0.rsplit("launch: ", 1)
    again = logs[2].read_text(errors="replace")
    # the first launch ended on its rank's collective timing out after launch.collective_timeout_s, and the flow's
    # retry took that crash for one
    assert f"Timed out waiting {COLLECTIVE_TIMEOUT_S * 1000}ms" in first, first[-4000:]
    assert "Retry 1/1" in first, first[-4000:]
    # The only tracebacks are the crashed rank's own, before the relaunch (torchrun prints a failed rank's,
    # "[rank0]: Traceback ..."); none from the flow or the CLI, none after the relaunch, none in node 1's re-run
    said = [line for line in output0.splitlines() if "Traceback" in line]
    assert said and all(re.search(r"\[rank\d+\]: Traceback", line) for line in said), said
    assert "Traceback" not in second, second[-4000:]
    assert "Traceback" not in again, again[-4000:]
    # both nodes resumed from the newest complete checkpoint (the half-written one passed over, then removed)
    resumed = f"resumed from {newest} at step {step_of(newest)}"
    assert resumed in second, second[-4000:]
    assert resumed in again and again.count("launch: ") == 1, again[-4000:]
    assert not list((run / "checkpoints").glob("*.tmp-*")), sorted(p.name for p in (run / "checkpoints").iterdir())
    assert train_steps(run) == list(range(1, FAULT_SFT_STEPS + 1))
    assert same_weights(run / "safetensors" / "final", uninterrupted_sft)
