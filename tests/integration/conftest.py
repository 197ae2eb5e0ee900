"""Integration fixtures: one Prefect test API for the whole session (about 10 s to start).

Prefect's home and database live in a temporary folder, analytics are off (no network here), and
flow heartbeats are disabled inside the harness, which takes each small flow from ~1.1 s to ~0.15 s.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.prefect_server import PrefectServer, start_server


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    home = tmp_path_factory.mktemp("prefect-home")
    os.environ["PREFECT_HOME"] = str(home)
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, PREFECT_HOME, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    # its server starts in ~10 s on a quiet machine; Prefect's default bound (30 s) was missed under load ~9
    with temporary_settings({PREFECT_HOME: Path(home)}), prefect_test_harness(server_startup_timeout=120):
        with temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            yield


@pytest.fixture(scope="session")
def prefect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrefectServer]:
    """A real `prefect server start` for the CLI run as a user runs it (a subprocess with PREFECT_API_URL), shared by
    the session: a command without one would start Prefect's temporary server, ~10 s a command."""
    with start_server(tmp_path_factory.mktemp("prefect-server")) as srv:
        srv.wait_healthy(120)
        yield srv
