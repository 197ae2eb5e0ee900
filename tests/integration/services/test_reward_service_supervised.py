"""The reward service a flow starts for its run (tasks/reward_service.py: local_reward_service), supervised: a real
`cosmos-train reward-service` process killed with SIGKILL is started again on the same port with the same token and
state_dir, one log line per restart; one that keeps dying, or does not come back up, is left down and says why
(the run then stops saved: tests/faults/test_reward_service_down.py)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from cosmos_train.errors import ServiceUnavailable
from tasks import reward_service as supervised
from tasks.reward_service import SupervisedService, local_reward_service

pytestmark = pytest.mark.slow


def kill_and_wait_for_the_verdict(service: SupervisedService, timeout: float = 120) -> int:
    """SIGKILL the service; return its pid once the supervisor has restarted it or given up."""
    dead = service.proc
    assert dead is not None
    os.kill(dead.pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while service.proc is dead and service.gave_up is None and time.monotonic() < deadline:
        time.sleep(0.1)
    return dead.pid


def test_a_killed_service_comes_back_on_its_port_with_its_token_and_state(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=supervised.__name__)
    # the run ends with ServiceUnavailable (its ranks gave up): the paragraph is told why the service is gone
    with pytest.raises(ServiceUnavailable) as got, local_reward_service(tmp_path, "MY_TOKEN_VAR") as service:
        url, token = service.env["REMOTE_REWARD_ENQUEUE_URL"], service.env["MY_TOKEN_VAR"]
        config = tmp_path / ".reward_service" / "rewards.toml"
        assert (tmp_path / ".reward_service" / "state").is_dir() and "state" in config.read_text()
        first = kill_and_wait_for_the_verdict(service)
        assert service.wait_serving(timeout=60) and service.gave_up is None and service.restarts == 1
        # the ranks' environment still holds: same port, same token (wait_serving pinged with it)
        assert service.env == {
            "REMOTE_REWARD_ENQUEUE_URL": url,
            "REMOTE_REWARD_FETCH_URL": url.removesuffix("enqueue") + "pull",
            "MY_TOKEN_VAR": token,
        }
        port = url.split(":")[2].split("/")[0]
        restarted = [r.getMessage() for r in caplog.records if "restarting it on port" in r.getMessage()]
        assert restarted == [
            f"the run's reward service (pid {first}) was killed by SIGKILL; restarting it on port {port} with the "
            "same token and state (restart 1)"
        ]
        # the next restart reads a config it refuses (an unknown key): it exits before it answers, and is left down
        config.write_text("no_such_key = 1\n")
        kill_and_wait_for_the_verdict(service)
        assert service.gave_up is not None and service.restarts == 2
        assert service.gave_up.startswith("was killed by SIGKILL and did not come back up (the run's reward service ")
        assert not service.wait_serving(timeout=60)  # at once: nothing is coming back
        # a relaunch of the training is not held up either, and its retry condition still decides
        assert service.up_before(lambda *_: False)(None, None, None) is False
        raise ServiceUnavailable("reward service URL: no answer after 9 tries in 45 s (last: refused)")
    assert str(got.value) == (
        "reward service URL: no answer after 9 tries in 45 s (last: refused). The run's own reward service "
        f"(local_service) {service.gave_up}; its log: {tmp_path}/logs/reward_service.log"
    )
    log = (tmp_path / "logs" / "reward_service.log").read_text()
    assert log.count("the run restarts its reward service") == 2
    assert not (tmp_path / ".reward_service").exists()


def test_a_service_that_keeps_dying_is_left_down(tmp_path: Path) -> None:
    """The bound, without a process: the MAX_QUICK_DEATHS-th death within the window is not restarted."""
    service = SupervisedService(tmp_path / "service.log", 1, "t" * 32, "rewards.toml", logging.getLogger(), "TOKEN")
    now = time.monotonic()
    service.deaths = [now - supervised.QUICK_DEATH_WINDOW_S - 1, *[now - 1] * (supervised.MAX_QUICK_DEATHS - 1)]
    dead = subprocess.Popen(["sh", "-c", "exit 3"])
    dead.wait()
    assert service._restart(dead) is False and service.restarts == 0
    assert service.gave_up == (
        f"died {supervised.MAX_QUICK_DEATHS} times within {supervised.QUICK_DEATH_WINDOW_S:.0f} s (the last exited "
        "with code 3), so it was not restarted again"
    )
    assert service.note().startswith("The run's own reward service (local_service) died 3 times within 120 s")
