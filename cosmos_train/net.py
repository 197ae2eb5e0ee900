"""Loopback networking shared by what starts local servers (torch's rendezvous, the reward service,
tests' Prefect and reward servers): no torch import here."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it; a caller binds it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
