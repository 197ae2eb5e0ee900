"""What keeps a run's processes going, and stopping once, when the process above them dies: a console whose reader
is gone (the CLI killed) never kills a rank, its lines go on in the run's log; the dead CLI's reaper signals only
the top of each tree, so a rank hears one SIGTERM (from torchrun), never two; the launcher acts on its first stop
signal only. Real pipes, real signals, real processes."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torch.distributed.elastic.multiprocessing import api as elastic_processes
from torch.distributed.elastic.multiprocessing.api import SignalException

from cosmos_train.launch import run_log_of, stop_signals_once
from cosmos_train.process_tree import _stop_tree, descendants
from tests.conftest import ROOT

# A rank's console: log lines, a warning and a metrics line, first to the pipe its reader drains, then (after
# the parent closed its end, said on stdin) to nobody. Exits 0 unless a write to the dead pipe killed it.
RANK = """
import logging, sys
from pathlib import Path
from cosmos_train.logs import setup_logging, write_console

log_file = Path(sys.argv[1]) if sys.argv[1] != "-" else None
setup_logging("sft", rank=0, log_file=log_file)
log = logging.getLogger("cosmos_train.rank")
log.info("before the reader died")
print("ready", flush=True)
sys.stdin.readline()  # the reader closed its end
for i in range(50):  # enough to fill any pipe buffer if the lines went there
    log.info("after the reader died %d", i)
log.warning("a warning after it")
write_console("stdout", "[train] step 7 loss=1.0\\n")
if log_file is not None:
    print("a plain print at the end", flush=True)
"""


def _rank_whose_reader_dies(tmp_path: Path, log_file: Path | None) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", RANK, str(log_file) if log_file else "-"],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline().strip() == "[sft] before the reader died"
    assert proc.stdout.readline().strip() == "ready"
    proc.stdout.close()  # the reader dies: the rank's stdout and stderr are a pipe nobody reads
    time.sleep(0.3)
    proc.stdin.write("go\n")
    proc.stdin.close()
    return proc


def test_a_rank_whose_console_reader_died_goes_on_in_the_run_log(tmp_path: Path) -> None:
    log_file = tmp_path / "logs" / "train.log"
    proc = _rank_whose_reader_dies(tmp_path, log_file)
    assert proc.wait(timeout=60) == 0
    text = log_file.read_text()
    assert "before the reader died" not in text  # the reader had it: nothing doubled
    assert text.count("[sft] the console's reader is gone") == 1
    assert all(text.count(f"after the reader died {i}\n") == 1 for i in range(50)), text
    assert text.count("WARNING cosmos_train.rank: a warning after it") == 1
    assert text.count("[train] step 7 loss=1.0") == 1
    assert text.count("a plain print at the end") == 1
    assert "BrokenPipe" not in text


def test_without_a_run_log_the_lines_to_a_dead_console_are_dropped(tmp_path: Path) -> None:
    """No fallback file (nothing follows the console): each write that finds the pipe broken points the console at
    /dev/null and the rank goes on."""
    proc = _rank_whose_reader_dies(tmp_path, None)
    assert proc.wait(timeout=60) == 0


# A parent that forwards SIGTERM once to its child (as torchrun's agent does to its ranks) and waits for it; the
# child counts the SIGTERMs it gets for 1 s after the first, writes the count and exits.
CHILD = """
import signal, sys, time
got = []
signal.signal(signal.SIGTERM, lambda *a: got.append(time.monotonic()))
print("ready", flush=True)
while not got:
    time.sleep(0.05)
time.sleep(1.0)
open(sys.argv[1], "w").write(str(len(got)))
"""
PARENT = """
import signal, subprocess, sys
child = subprocess.Popen(
    [sys.executable, "-c", sys.argv[1], sys.argv[2]], start_new_session=True, stdout=subprocess.PIPE, text=True
)
child.stdout.readline()  # its handler is installed
signal.signal(signal.SIGTERM, lambda *a: child.send_signal(signal.SIGTERM))
print("ready", flush=True)
child.wait()
"""
STUBBORN = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)
"""


def test_the_reaper_signals_the_top_of_each_tree_once_and_kills_what_is_left(tmp_path: Path) -> None:
    count = tmp_path / "sigterms"
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD, str(count)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    # a process that ignores SIGTERM: stopped only by the SIGKILL after the grace. It says "ready" once it ignores
    # it: a SIGTERM sent while its interpreter still starts would kill it (-15, seen under CI load)
    stubborn = subprocess.Popen([sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        assert stubborn.stdout is not None and stubborn.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while len(known := descendants(parent.pid)) < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        known = {parent.pid: _start(parent.pid), **known, stubborn.pid: _start(stubborn.pid)}
        t0 = time.monotonic()
        _stop_tree(known, grace_s=2.5)
        assert parent.wait(timeout=5) == 0 and stubborn.wait(timeout=5) == -signal.SIGKILL
        assert 2.0 < time.monotonic() - t0 < 10
        assert count.read_text() == "1", "the child got a SIGTERM of its own besides its parent's"
    finally:
        for p in (parent, stubborn):
            if p.poll() is None:
                p.kill()


def _start(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def test_the_launcher_acts_on_its_first_stop_signal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(elastic_processes, "_terminate_process_handler", elastic_processes._terminate_process_handler)
    stop_signals_once()
    stop_signals_once()  # idempotent: still one wrapper
    handler = elastic_processes._terminate_process_handler
    with pytest.raises(SignalException):
        handler(signal.SIGTERM, None)
    handler(signal.SIGTERM, None)  # the second one (the reaper's besides the watchdog's): ignored
    handler(signal.SIGINT, None)


def test_the_launcher_logs_into_the_run_folder_of_its_trainer() -> None:
    assert run_log_of(["--config", "/r/run1/config.toml"]) == Path("/r/run1/logs/train.log")
    assert run_log_of(["--resume-own-run", "--config=/r/run2/config.toml"]) == Path("/r/run2/logs/train.log")
    assert run_log_of(["x.py"]) is None
