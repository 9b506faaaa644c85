"""Count the round trips pplx_nb makes to Redis: every packed command sent on a connection.

A single command and a whole pipeline are each one send followed by the replies, so counting
``Connection.send_packed_command`` counts round trips exactly (health-check ``PING``s aside,
which redis-py sends on its own every 30 s of idleness and are not counted).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
import redis.connection

__all__ = ["RoundTrips", "counting"]


class RoundTrips:
    """The round trips counted so far, and the first word of each command sent (for messages)."""

    def __init__(self) -> None:
        self.commands: list[str] = []

    @property
    def count(self) -> int:
        """Round trips since the counter started or was last reset."""
        return len(self.commands)

    def reset(self) -> None:
        """Start counting again from zero."""
        self.commands.clear()


@contextlib.contextmanager
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[RoundTrips]:
    """Count every round trip made through redis-py while the block runs."""
    trips = RoundTrips()
    send = redis.connection.AbstractConnection.send_packed_command

    def counted(self: Any, command: Any, check_health: bool = True) -> None:
        first = _first_word(command)
        if first != "PING":
            trips.commands.append(first)
        send(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
    yield trips


def _first_word(command: Any) -> str:
    """The command's name (the first bulk string of the first packed command)."""
    chunk = command if isinstance(command, (bytes, str)) else (command[0] if command else b"")
    raw = chunk if isinstance(chunk, bytes) else chunk.encode()
    parts = raw.split(b"\r\n")
    return parts[2].decode("ascii", "replace").upper() if len(parts) > 2 else "?"
