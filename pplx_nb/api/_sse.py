"""Server-sent events: the ``data:`` payloads of a streamed response, one event at a time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

__all__ = ["Event", "events", "is_progress"]


@dataclass(frozen=True, slots=True)
class Event:
    """One event: its ``event:`` name (``""`` when absent) and its joined ``data:`` lines."""

    name: str
    data: str


def is_progress(line: str) -> bool:
    """Whether a stream line carries an event (``data:`` / ``event:``), not a keep-alive.

    Comments (``: ping``), blank lines and ``id:`` / ``retry:`` fields are not progress.
    """
    field = line.partition(":")[0]
    return field in ("data", "event")


async def events(lines: AsyncIterator[str]) -> AsyncIterator[Event]:
    """Group decoded lines into events; comments and ``id:``/``retry:`` fields are skipped."""
    name = ""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield Event(name, "\n".join(data))
            name, data = "", []
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "data":
            data.append(value)
        elif field == "event":
            name = value
    if data:
        yield Event(name, "\n".join(data))
