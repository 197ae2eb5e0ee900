"""Multi-host: the same two ranks on one host (nproc_per_node = 2) and on two hosts (one process each, over a
network): time to form the group, checkpoint time and steady-state step time.

    sudo HF_HUB_OFFLINE=1 .venv/bin/python bench/multihost.py [--reps 3] [--steps 60] [--save-freq 10]
                                                              [--warmup 5] [--endpoint name|address] [--workdir DIR]

Needs root: it makes its own pair of hosts with scripts/two_hosts.sh (network namespaces host0 and host1 joined by
veth pairs, a management network mgmt0 the host names resolve to and a training network train0; the filesystem
shared) and removes them at the end; where they cannot be made it says why and exits 2.

The job: tests/conftest.py's tiny SFT (the tiny Qwen2.5-VL on 56x56 synthetic clips, fp32, gloo on the CPU) for
--steps steps, a synchronous checkpoint every --save-freq steps, one torch thread per rank (OMP_NUM_THREADS=1), each
node started as a user starts it: `cosmos-train sft` (its own temporary Prefect server) running our torchrun. Both
layouts run on all of the machine's cores (TWO_HOSTS_CORES=all; the bed otherwise gives each host half of them), so
the ranks have the same CPUs and only the path between them differs.
- one host: one node inside host0 (the same kernel and namespace costs as a host of the pair), nproc_per_node = 2,
  torchrun's --standalone rendezvous on host0's loopback; the ranks talk over loopback.
- two hosts: one node per host, nproc_per_node = 1, launch.nnodes = 2, the rendezvous endpoint on host0 (--endpoint
  name: "host0:29500", its host name, which resolves to its mgmt0 address; address: "10.78.0.1:29500", its train0
  address), launch.socket_ifname = "train0": the ranks talk over train0.
The layouts alternate inside each repetition (and which goes first alternates between repetitions), since the
machine is shared; medians over the repetitions are reported, with the load average before and after each run.

What each number counts, from the nodes' consoles. The torch elastic agent's lines (LOGLEVEL=INFO) carry the time
their process wrote them; every other line is timed by the node's torchrun task as it relays it (Prefect's record
time, milliseconds, a relay that lags only when the CPUs are busy). c10d's C++ lines (TORCH_CPP_LOG_LEVEL=INFO) carry
a stamp of their own, but its fraction of a second is not the wall clock's (torch 2.13: a client connecting at
HH:MM:46.255 by time.time() logs HH:MM:46.020, one at :50.192 logs :50.957), so it is not used.
- launch: the node's torchrun task logs "launch: ..." right before it starts the torchrun agent; with two hosts,
  the later of the two nodes' launches (before it the group cannot form; the skew is the two CLIs' start-up).
- rendezvous: from the last agent entering torchrun's rendezvous ("Rendezvous'ing worker group") to the last agent
  leaving it ("Rendezvous complete for workers"): the agents meeting at the endpoint, alone.
- group formed: from the launch to the moment the last rank connected to the group's store inside
  init_process_group (c10d's "The client socket has connected" line, each rank's first after its agent's
  "Starting worker group"). It counts the agent's start, the rendezvous, the ranks' start (Python, torch and the
  trainer's imports) and their joining the group; gloo's pairwise connections right after it (milliseconds here)
  are not in it.
- ranks' start: the part of it from the last agent's "Starting worker group" to that last connection (the rank
  processes' start and imports, then init_process_group).
- first step starts: from the launch to the start of step 1 (RUN/metrics.jsonl's first train row: its end time
  minus its step_time): the group, the model load, FSDP2's wrap and the first batch.
- checkpoint: the seconds rank 0 logs for each synchronous checkpoint ("[sft] checkpoint step N saved to ...
  (X s)"), the median of the run's checkpoints; the export to safetensors after each is not in it.
- step time: the median step_time of RUN/metrics.jsonl's train rows after the first --warmup steps.
- ranks' CPU s per step: the training ranks' CPU time (user + system, /proc/PID/stat, read every 0.25 s while the
  run goes) over the steps logged meanwhile, summed over the ranks, after --warmup steps and leaving out the
  intervals that hold a checkpoint: the work a step costs, blind to the time a rank waits descheduled on a shared
  machine (the wall step time is not).
- sent: what host0 and host1 together sent on train0 (MB) and on mgmt0 (kB) during the run (the interfaces'
  tx_bytes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cosmos_train.data.synthetic import make_synthetic_dataset  # noqa: E402
from cosmos_train.models.tiny import make_tiny_model  # noqa: E402
from tests.conftest import write_tiny_sft_config  # noqa: E402
from tests.two_hosts import TwoHosts, node_env, why_no_hosts  # noqa: E402

log = logging.getLogger("bench.multihost")

LAYOUTS = ("one host", "two hosts")
NETS = ("train0", "mgmt0")
RUN_TIMEOUT_S = 900
SAMPLE_S = 0.25  # how often the ranks' CPU time is read while a run goes

# Prefect's console line: "20:18:54.529 | INFO    | Task run 'torchrun-25e' - launch: ..."
PREFECT_LINE = re.compile(r"^(\d\d:\d\d:\d\d\.\d+) \| \w+ +\| .*? - (.*)$")
# torch.distributed.elastic's (LOGLEVEL=INFO): "I1128 20:18:56.918000 8960 .../api.py:553] [default] ..."
AGENT_LINE = re.compile(r"^[IWE]\d{4} (\d\d:\d\d:\d\d\.\d+) \d+ \S+\] (.*)$")
# c10d's C++ log (TORCH_CPP_LOG_LEVEL=INFO): "[I1128 20:19:01.338745244 socket.cpp:955] [c10d] The client ..."
# (its own stamp is not the wall clock's: see the docstring; the line's relay time is used)
CPP_LINE = re.compile(r"^\[[IWE]\d{4} \d\d:\d\d:\d\d\.\d+ \S+\] (.*)$")
CHECKPOINT = re.compile(r"\[sft\] checkpoint step (\d+) saved to \S+ \((\d+(?:\.\d+)?)s\)")


def wall_time(hms: str, near: float) -> float:
    """The epoch time of a local "HH:MM:SS.fff" stamp written within hours of `near` (a run may cross midnight)."""
    h, m, s = hms.split(":")
    day = datetime.fromtimestamp(near).replace(hour=int(h), minute=int(m), second=0, microsecond=0)
    t = day.timestamp() + float(s)
    return min((t + d * 86400 for d in (-1, 0, 1)), key=lambda x: abs(x - near))


@dataclass
class NodeEvents:
    """What one node's console said, with the times its writers stamped."""

    launch: float
    rdzv_start: float
    rdzv_done: float
    workers: float  # the agent starts its ranks
    rank_joins: list[float]  # each rank's connection to the group's store, in init_process_group
    checkpoints: dict[int, float]  # step -> seconds rank 0 took to save it


def node_events(text: str, nproc: int, near: float, where: Path) -> NodeEvents:
    """Parse one node's console (`cosmos-train sft` run with LOGLEVEL=INFO and TORCH_CPP_LOG_LEVEL=INFO)."""
    launch = rdzv_start = rdzv_done = workers = None
    joins: list[float] = []
    checkpoints: dict[int, float] = {}
    for line in text.splitlines():
        prefect = PREFECT_LINE.match(line)
        if not prefect:
            continue
        stamp, msg = prefect.groups()
        if msg.startswith("launch: ") and launch is None:
            launch = wall_time(stamp, near)
        elif agent := AGENT_LINE.match(msg):
            at, what = wall_time(agent.group(1), near), agent.group(2)
            if "Rendezvous'ing worker group" in what and rdzv_start is None:
                rdzv_start = at
            elif "Rendezvous complete for workers" in what and rdzv_done is None:
                rdzv_done = at
            elif "Starting worker group" in what and workers is None:
                workers = at
        elif (cpp := CPP_LINE.match(msg)) and workers is not None and len(joins) < nproc:
            # the agent writes "Starting worker group" before it spawns the ranks, so every store connection
            # after it is a rank's: one each, in init_process_group (env:// under torchrun: the agent's store)
            if "The client socket has connected" in cpp.group(1):
                joins.append(wall_time(stamp, near))
        elif ckpt := CHECKPOINT.search(msg):
            checkpoints[int(ckpt.group(1))] = float(ckpt.group(2))
    missing = [
        name
        for name, value in (
            ("launch", launch),
            ("rendezvous start", rdzv_start),
            ("rendezvous end", rdzv_done),
            ("worker group start", workers),
        )
        if value is None
    ]
    if missing or len(joins) < nproc:
        raise RuntimeError(
            f"{where}: no {', '.join(missing) or 'store connection of every rank'} line found "
            f"({len(joins)} of {nproc} ranks' store connections): the console format changed?"
        )
    # checked just above
    assert launch is not None and rdzv_start is not None and rdzv_done is not None and workers is not None
    return NodeEvents(launch, rdzv_start, rdzv_done, workers, joins, checkpoints)


def rank_cpu_seconds(pids: list[int]) -> dict[int, float]:
    """CPU seconds (user + system, all threads) of each training rank among `pids` (the trainer module's processes,
    not their torchrun agent's, whose command line names the module too)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue  # exited meanwhile
        if b"cosmos_train.train.sft" in argv and b"cosmos_train.launch" not in argv:
            fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": fields 3.. of proc(5)
            out[pid] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return out


def steps_logged(metrics: list[Path]) -> int:
    """The last train step in the run's metrics.jsonl (0 before the first, or before the run folder exists)."""
    for path in metrics:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        rows = [json.loads(x) for x in lines if x.strip().endswith("}")]  # a line being written is left out
        return max((r["step"] for r in rows if r.get("kind") == "train"), default=0)
    return 0


def cpu_per_step(samples: list[tuple[int, float]], warmup: int, save_freq: int) -> float | None:
    """The ranks' CPU seconds per step, summed over the ranks, from (last step logged, CPU seconds so far) samples:
    only the intervals after `warmup` steps whose steps hold no checkpoint (saved after its step's row is logged,
    so an interval from step a to b holds one when a <= k < b for a multiple k of save_freq)."""
    cpu = steps = 0.0
    for (a, ca), (b, cb) in zip(samples, samples[1:]):
        if a < warmup or b <= a or any(k % save_freq == 0 for k in range(a, b)):
            continue
        cpu, steps = cpu + cb - ca, steps + b - a
    return cpu / steps if steps else None


@dataclass
class RunResult:
    """One run of one layout: the measures (seconds, MB) and what they were read from."""

    layout: str
    rep: int
    run_dir: str
    group_s: float
    rendezvous_s: float
    ranks_start_s: float
    first_step_s: float
    checkpoint_s: float
    step_s: float
    cpu_step_s: float | None  # the ranks' CPU seconds per step (summed over ranks): blind to time descheduled
    launch_skew_s: float
    mb_sent: dict[str, float]
    checkpoints: dict[int, float]
    load_before: float
    load_after: float
    wall_s: float
    extra: dict[str, Any] = field(default_factory=dict)


class Bench:
    def __init__(self, hosts: TwoHosts, work: Path, config: Path, args: argparse.Namespace):
        self.hosts, self.work, self.config, self.args = hosts, work, config, args
        self.endpoint = "host0:29500" if args.endpoint == "name" else hosts.endpoint("train0")

    def node_base_env(self, host: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "COSMOS_TRAIN__"))}
        env.update(
            PREFECT_HOME=str(self.work / f"prefect-{host}"),  # each node its own temporary Prefect server
            PREFECT_SERVER_ANALYTICS_ENABLED="false",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            WANDB_MODE="offline",
            # torchrun sets 1 thread per rank only when a node runs several; both layouts get the same
            OMP_NUM_THREADS="1",
            PYTHONUNBUFFERED="1",
            LOGLEVEL="INFO",  # torch.distributed.elastic's agent: its rendezvous lines, with their times
            TORCH_CPP_LOG_LEVEL="INFO",  # c10d: a line for each store connection (the ranks joining the group)
            # every host on every core: the bed's default gives each host half of them, which would leave the one-host
            # layout's two ranks one core where the two hosts' ranks have one each
            TWO_HOSTS_CORES="all",
        )
        return env

    def cli(self, *sets: str) -> list[str]:
        args = [sys.executable, "-m", "cosmos_train.cli", "sft", "--config", str(self.config)]
        for s in (f"train.ckpt.save_freq={self.args.save_freq}", *sets):
            args += ["--set", s]
        return args

    def sent(self) -> dict[str, int]:
        return {f"host{i} {net}": self.hosts.bytes_sent(i, net) for i in (0, 1) for net in NETS}

    def run(self, layout: str, rep: int) -> RunResult:
        out = self.work / "runs" / f"{layout.replace(' ', '-')}-{rep}"
        out.mkdir(parents=True)
        nodes: list[tuple[int, dict[str, str], list[str]]] = []
        if layout == "one host":
            env = self.node_base_env(0)
            env["COSMOS_TRAIN__TRAIN__OUTPUT_DIR"] = str(out)
            nodes.append((0, env, self.cli("launch.nproc_per_node=2")))
            nproc = 2
        else:
            rdzv_id = f"mhb-{os.getpid()}-{rep}"
            for i in (0, 1):
                env = self.node_base_env(i)
                env.update(
                    node_env(
                        i, nnodes=2, endpoint=self.endpoint, rdzv_id=rdzv_id, socket_ifname="train0", output_dir=out
                    )
                )
                nodes.append((i, env, self.cli("launch.nproc_per_node=1")))
            nproc = 1
        load_before = os.getloadavg()[0]
        bytes_before = self.sent()
        t0 = time.time()
        procs = [(i, self.hosts.popen(i, args, env, out / f"node{i}.log")) for i, env, args in nodes]
        # while it runs: the ranks' CPU time against the steps logged (a rank's CPU time is gone once it exits)
        samples: list[tuple[int, float]] = []
        cpu: dict[int, float] = {}
        affinity: dict[int, list[int]] = {}
        while any(p.poll() is None for _, p in procs):
            if time.time() > t0 + RUN_TIMEOUT_S:
                for i, _ in procs:
                    self.hosts.kill(i)
                raise RuntimeError(f"{layout} rep {rep}: not done after {RUN_TIMEOUT_S} s; logs in {out}")
            step = steps_logged(list(out.glob("*/metrics.jsonl")))
            now = rank_cpu_seconds([pid for i, _ in procs for pid in self.hosts.pids(i)])
            if len(now) == nproc * len(procs) and (not cpu or now.keys() == cpu.keys()):
                if not cpu:  # the cores each rank may run on, as the run had them
                    with contextlib.suppress(OSError):
                        affinity = {pid: sorted(os.sched_getaffinity(pid)) for pid in now}
                cpu = now
                samples.append((step, sum(now.values())))
            time.sleep(SAMPLE_S)
        wall = time.time() - t0
        load_after = os.getloadavg()[0]
        bytes_after = self.sent()
        for i, p in procs:
            if p.returncode != 0:
                tail = (out / f"node{i}.log").read_text()[-4000:]
                raise RuntimeError(f"{layout} rep {rep}: node on host{i} exited {p.returncode}:\n{tail}")
        events = [node_events((out / f"node{i}.log").read_text(), nproc, t0, out / f"node{i}.log") for i, _ in procs]
        result = self.measure(layout, rep, out, events, load_before, load_after, wall, bytes_before, bytes_after)
        result.cpu_step_s = cpu_per_step(samples, self.args.warmup, self.args.save_freq)
        result.extra["rank_cores"] = list(affinity.values())
        return result

    def measure(
        self,
        layout: str,
        rep: int,
        out: Path,
        events: list[NodeEvents],
        load_before: float,
        load_after: float,
        wall: float,
        bytes_before: dict[str, int],
        bytes_after: dict[str, int],
    ) -> RunResult:
        runs = [p for p in out.iterdir() if p.is_dir()]
        if len(runs) != 1:
            raise RuntimeError(f"{out}: expected one run folder, found {[p.name for p in runs]}")
        run_dir = runs[0]
        rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
        train = sorted((r for r in rows if r.get("kind") == "train"), key=lambda r: r["step"])
        if [r["step"] for r in train] != list(range(1, self.args.steps + 1)):
            raise RuntimeError(
                f"{run_dir}: train rows for steps {[r['step'] for r in train]}, not 1..{self.args.steps}"
            )
        launch = max(e.launch for e in events)
        checkpoints = events[0].checkpoints  # rank 0's node logs them
        expected = list(range(self.args.save_freq, self.args.steps + 1, self.args.save_freq))
        if sorted(checkpoints) != expected:
            raise RuntimeError(f"{run_dir}: checkpoints at steps {sorted(checkpoints)}, expected {expected}")
        mb = {k: (bytes_after[k] - bytes_before[k]) / 1e6 for k in bytes_after}
        return RunResult(
            layout=layout,
            rep=rep,
            run_dir=str(run_dir),
            group_s=max(t for e in events for t in e.rank_joins) - launch,
            rendezvous_s=max(e.rdzv_done for e in events) - max(e.rdzv_start for e in events),
            ranks_start_s=max(t for e in events for t in e.rank_joins) - max(e.workers for e in events),
            first_step_s=train[0]["time"] - train[0]["step_time"] - launch,
            checkpoint_s=statistics.median(checkpoints.values()),
            step_s=statistics.median(r["step_time"] for r in train[self.args.warmup :]),
            cpu_step_s=None,  # from the samples taken while it ran
            launch_skew_s=launch - min(e.launch for e in events),
            mb_sent=mb,
            checkpoints=checkpoints,
            load_before=load_before,
            load_after=load_after,
            wall_s=wall,
        )


MEASURES = (
    ("group_s", "group formed (s)"),
    ("rendezvous_s", "of it: rendezvous (s)"),
    ("ranks_start_s", "of it: ranks' start (s)"),
    ("first_step_s", "launch to step 1 (s)"),
    ("checkpoint_s", "checkpoint (s)"),
    ("step_s", "step time (s)"),
    ("cpu_step_s", "ranks' CPU s per step"),
)


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _cell(value: float | None, fmt: str = ".3f", suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:{fmt}}{suffix}"


def table(results: list[RunResult]) -> str:
    """The markdown table of medians over the repetitions; the ratio two hosts / one host of the medians, and the
    median of each repetition's own ratio (its two runs ran back to back, so the load drifted less between them)."""
    med = {
        layout: {key: _median([getattr(r, key) for r in results if r.layout == layout]) for key, _ in MEASURES}
        for layout in LAYOUTS
    }
    lines = [
        "| layout | " + " | ".join(name for _, name in MEASURES) + " | train0 MB sent | mgmt0 kB sent |",
        "|---|" + "---:|" * (len(MEASURES) + 2),
    ]
    for layout in LAYOUTS:
        rs = [r for r in results if r.layout == layout]
        train0 = statistics.median(r.mb_sent["host0 train0"] + r.mb_sent["host1 train0"] for r in rs)
        mgmt0 = statistics.median(r.mb_sent["host0 mgmt0"] + r.mb_sent["host1 mgmt0"] for r in rs)
        cells = [_cell(med[layout][key]) for key, _ in MEASURES]
        lines.append(f"| {layout} | " + " | ".join(cells) + f" | {train0:.1f} | {mgmt0 * 1000:.1f} |")
    ratios, paired = [], []
    for key, _ in MEASURES:
        one, two = med["one host"][key], med["two hosts"][key]
        ratios.append(_cell(two / one if one and two is not None else None, ".2f", "x"))
        by_rep = {(r.layout, r.rep): getattr(r, key) for r in results}
        per_rep = [
            by_rep[("two hosts", rep)] / by_rep[("one host", rep)]
            for rep in sorted({r.rep for r in results})
            if by_rep.get(("one host", rep)) and by_rep.get(("two hosts", rep)) is not None
        ]
        paired.append(_cell(_median(list(per_rep)), ".2f", "x"))
    lines.append("| two hosts / one host (medians) | " + " | ".join(f"**{c}**" for c in ratios) + " | | |")
    lines.append("| median of each repetition's ratio | " + " | ".join(paired) + " | | |")
    return "\n".join(lines)


def runs_table(results: list[RunResult]) -> str:
    """Every run, in the order it ran."""
    lines = [
        "| run | layout | " + " | ".join(name for _, name in MEASURES) + " | launch skew (s) | load before / after |",
        "|---:|---|" + "---:|" * (len(MEASURES) + 2),
    ]
    for n, r in enumerate(results, 1):
        cells = [_cell(getattr(r, key)) for key, _ in MEASURES]
        lines.append(
            f"| {n} | {r.layout} | "
            + " | ".join(cells)
            + f" | {r.launch_skew_s:.2f} | {r.load_before:.2f} / {r.load_after:.2f} |"
        )
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return {
        "when": datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "uptime": uptime,
    }


def _stop(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # through the finally that removes the hosts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each layout")
    ap.add_argument("--steps", type=int, default=60, help="training steps per run")
    ap.add_argument("--save-freq", type=int, default=10, help="a checkpoint every this many steps")
    ap.add_argument("--warmup", type=int, default=5, help="first steps left out of the step time")
    ap.add_argument(
        "--endpoint",
        choices=("name", "address"),
        default="name",
        help="two hosts' rendezvous endpoint: host0's host name (host0:29500) or its train0 address",
    )
    ap.add_argument(
        "--workdir", type=Path, default=None, help="where the model, data and runs go (default: a temp dir)"
    )
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    reason = why_no_hosts()
    if reason is not None:
        log.error("bench/multihost.py needs two hosts (network namespaces), which cannot be made here: %s", reason)
        return 2
    work = args.workdir or Path(tempfile.mkdtemp(prefix="multihost-"))
    work.mkdir(parents=True, exist_ok=True)
    if (work / "runs").exists():
        raise SystemExit(f"{work / 'runs'} exists: give a fresh --workdir")
    model = make_tiny_model(work / "model")
    data = make_synthetic_dataset(work / "data", n_train=48, n_val=8, n_test=12)  # tests/conftest.py's
    config = write_tiny_sft_config(work / "job.toml", model, data, work / "unused", max_num_steps=args.steps)

    signal.signal(signal.SIGTERM, _stop)
    before = machine()
    hosts = TwoHosts.up(f"mhb{os.getpid() % 100000}")
    results: list[RunResult] = []
    try:
        bench = Bench(hosts, work, config, args)
        for rep in range(args.reps):
            for layout in LAYOUTS if rep % 2 == 0 else LAYOUTS[::-1]:
                r = bench.run(layout, rep)
                log.info(
                    "%s, rep %d: group %.2f s (rendezvous %.2f, ranks' start %.2f), step 1 at %.2f s, "
                    "checkpoint %.3f s, step %.4f s, ranks' CPU %s s per step, ranks' cores %s, load %.2f -> %.2f",
                    layout,
                    rep,
                    r.group_s,
                    r.rendezvous_s,
                    r.ranks_start_s,
                    r.first_step_s,
                    r.checkpoint_s,
                    r.step_s,
                    _cell(r.cpu_step_s),
                    r.extra["rank_cores"],
                    r.load_before,
                    r.load_after,
                )
                results.append(r)
    finally:
        hosts.down()
    report = {
        "machine_before": before,
        "machine_after": machine(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "endpoint": bench.endpoint,
        "runs": [asdict(r) for r in results],
    }
    (work / "results.json").write_text(json.dumps(report, indent=2))
    log.info("%s\n\n%s\n\n%s", json.dumps(report["machine_before"]), table(results), runs_table(results))
    log.info("raw results: %s", work / "results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
