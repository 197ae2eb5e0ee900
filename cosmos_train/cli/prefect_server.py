"""Prefect around a flow command: the client's settings, the terminal set-up, and the temporary API servers Prefect
starts in this process (stopped before an error paragraph is printed).

    cosmos-train sft --config configs/tiny-sft.toml    # Prefect's temporary API server, set up here

Every function imports Prefect (through flows/terminal.py) only when a flow command needs it, so `--help` and
`config check` never load it.
"""

from __future__ import annotations

import os
import sys
from typing import Any

# Prefect's temporary API server gives up after 20 s by default, which a loaded machine exceeds.
EPHEMERAL_STARTUP_TIMEOUT_S = "180"
# Prefect retries a call to a server it reached 5 times, backing off 2 ... 32 s: a minute per call to a dead server.
# 2 retries (~6 s) ride out a server's restart and tell a lost API within a minute (the user's setting wins).
PREFECT_CLIENT_RETRIES = "2"


def set_env_defaults() -> None:
    """Prefect's server start-up timeout and client retries, unless the user set them."""
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", EPHEMERAL_STARTUP_TIMEOUT_S)
    os.environ.setdefault("PREFECT_CLIENT_MAX_RETRIES", PREFECT_CLIENT_RETRIES)


def prepare_prefect() -> None:
    """Called once the flows are imported: how a flow behaves in a terminal (flows/terminal.py)."""
    from flows import terminal

    terminal.prepare_prefect(debug=os.environ.get("COSMOS_TRAIN_DEBUG") == "1")


def temporary_servers() -> list[Any]:
    """The temporary API servers Prefect has started in this process (none before prefect's server is imported)."""
    module = sys.modules.get("prefect.server.api.server")
    return [] if module is None else list(getattr(module.SubprocessASGIServer, "_instances", {}).values())


def stop_temporary_servers(keep: list[Any]) -> None:
    """Stop the temporary servers Prefect started in this process, but those in `keep` (started before)."""
    if temporary_servers():  # Prefect started one in this process
        from flows import terminal

        terminal.stop_temporary_servers(keep)
