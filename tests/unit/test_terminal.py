"""How a command run from a terminal ends (flows/terminal.py): the paragraph and exit code of a run that stopped
saved, the command that continues it, a lost Prefect API told apart from other HTTP failures, the temporary
server started in a session of its own, and a finished command's last lines (its runs' verdicts). The real faults
are in tests/faults/; real runs' last lines in tests/integration/flows/test_run_health_flow.py."""

from __future__ import annotations

import os

import httpx
import pytest

from cosmos_train.errors import ConfigError, RunInterrupted, ServiceUnavailable
from cosmos_train.train.health_checks import Verdict
from cosmos_train.train.run_health import HealthReport
from flows import terminal


def _halted(run_dir: str = "/runs/r1") -> RunInterrupted:
    error = RunInterrupted("stopped by Ctrl-C at step 4 of 40")
    error.run_dir = run_dir
    return error


@pytest.mark.parametrize(
    ("command", "argv", "expected"),
    [
        (
            "sft",
            ["sft", "--config", "job.toml", "--set", "a.b=1"],
            "cosmos-train sft --config job.toml --set a.b=1 --run-dir /runs/r1",
        ),
        (  # its own --run-dir (both spellings) is replaced by the run folder, never repeated
            "grpo",
            ["grpo", "--config", "job.toml", "--run-dir", "/old", "--run-dir=/older"],
            "cosmos-train grpo --config job.toml --run-dir /runs/r1",
        ),
        (  # a pipeline continues by running it again: its finished stages are skipped
            "post-train",
            ["post-train", "--config", "p.toml"],
            "cosmos-train post-train --config p.toml",
        ),
        ("sft", ["sft", "--config", "my job.toml"], "cosmos-train sft --config 'my job.toml' --run-dir /runs/r1"),
    ],
)
def test_the_command_that_continues_a_stopped_run(command: str, argv: list[str], expected: str) -> None:
    assert terminal.how_to_continue(_halted(), command, argv) == f". To continue from there: {expected}"


def test_a_user_error_gets_no_command() -> None:
    assert terminal.how_to_continue(ConfigError("x: bad"), "sft", ["sft"]) == ""


def test_a_stop_behind_a_later_error_is_still_what_the_cli_says() -> None:
    """The flow's report of a stop failed too (the API died): the stop, not that failure, is the paragraph."""
    try:
        try:
            raise _halted()
        except RunInterrupted as stop:
            raise RuntimeError("could not record the state") from stop
    except RuntimeError as e:
        ending = terminal.ending_of(e, "sft", ["sft", "--config", "job.toml"])
    assert ending is not None
    paragraph, code, api_lost = ending
    assert code == 130 and not api_lost
    assert paragraph.startswith("stopped by Ctrl-C at step 4") and paragraph.endswith("--run-dir /runs/r1")


def test_a_crash_is_not_explained() -> None:
    assert terminal.ending_of(KeyError("bug"), "sft", ["sft"]) is None
    assert not terminal.said_by_the_cli(KeyError("bug"))


def test_a_lost_prefect_api_is_told_apart_from_other_http_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(terminal, "api_address", lambda: "127.0.0.1:4200")

    def refused(url: str) -> httpx.ConnectError:
        return httpx.ConnectError("[Errno 111] Connection refused", request=httpx.Request("POST", url))

    api = refused("http://127.0.0.1:4200/api/flow_runs/abc/set_state")
    ending = terminal.ending_of(api, "eval", ["eval", "--config", "e.toml"])
    assert ending is not None
    paragraph, code, api_lost = ending
    assert code == ServiceUnavailable.exit_code == 75 and api_lost
    assert "the Prefect API at 127.0.0.1:4200 stopped answering" in paragraph
    assert paragraph.endswith("cosmos-train eval --config e.toml")
    # another service's connection error (the Hub, a reward service) is not the Prefect API: a crash as before
    assert terminal.ending_of(refused("http://127.0.0.1:8080/api/reward/enqueue"), "eval", ["eval"]) is None


def test_the_temporary_server_runs_in_a_session_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[dict] = []

    def popen(*args: object, **kwargs: object) -> object:
        started.append(kwargs)
        raise OSError("not started in this test")

    monkeypatch.setattr(terminal.subprocess, "Popen", popen)
    with pytest.raises(OSError, match="not started"):
        terminal._NewSessionSubprocess().Popen(["true"], env=dict(os.environ))
    assert started == [{"env": dict(os.environ), "start_new_session": True}]
    assert terminal._NewSessionSubprocess().TimeoutExpired is terminal.subprocess.TimeoutExpired


def test_a_finished_command_stops_its_own_server_then_says_its_folder_and_each_runs_verdicts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    own, callers = object(), object()  # the server prepare_prefect started, one its caller runs
    stopped: list[list[object]] = []
    monkeypatch.setattr(terminal, "_STARTED", [own])
    monkeypatch.setattr(terminal, "temporary_servers", lambda: [callers, own])
    monkeypatch.setattr(terminal, "stop_temporary_servers", lambda keep: stopped.append(keep))
    late = Verdict("late_collapse", "fell", "best 0.9 at step 5, final 0.4", "lr too high", "export best", 5, 9, True)
    health = {"sft": None, "grpo": HealthReport(steps=9, verdicts=[late]).to_dict()}
    assert terminal.finished("/runs/p", {**health, "": HealthReport(steps=2).to_dict()}) == 0
    out, err = capsys.readouterr()
    assert stopped == [[callers]] and terminal._STARTED == []  # its own only, before its lines
    assert out == "/runs/p\n"  # stdout: the folder alone
    assert err.splitlines() == [
        *HealthReport(steps=9, verdicts=[late]).closing_lines("grpo"),
        "run health: healthy over 2 step(s), none of the run-health verdicts",
    ]
    assert err.splitlines()[1] == f"  - {late.sentence()}" and "Change: export best." in err
    terminal.finished("/runs/q", {})  # nothing started by this command, nothing judged: the folder alone
    assert capsys.readouterr() == ("/runs/q\n", "") and stopped == [[callers]]
