"""Progress notifications for a long tool call, fed by the Researcher's ``on_progress``.

Clients reset their request timeouts on each ``notifications/progress``, so a blocking deep research
must send one at least every 10 s even when the Researcher has nothing new to say: a timer re-sends
the latest step with the elapsed time. MCP requires the progress value to increase with every
notification, so a repeated step advances it by a hundredth.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

import anyio

from pplx_nb._models import Progress

__all__ = ["HEARTBEAT_SECONDS", "ProgressRelay", "ProgressSink"]

HEARTBEAT_SECONDS = 5.0


class ProgressSink(Protocol):
    """Where notifications go: the SDK ``Context.report_progress`` (a no-op without a token)."""

    async def __call__(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None: ...


class ProgressRelay:
    """A callable for ``on_progress`` that forwards each step to the client, with a heartbeat.

    Use :meth:`running` around the awaited call; the callable itself only records the newest step
    and wakes the sender, so it is safe to call at any moment, from the server's event loop or
    from the thread of the private loop a Researcher call runs on.
    """

    def __init__(self, sink: ProgressSink, heartbeat: float = HEARTBEAT_SECONDS) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._sink = sink
        self._heartbeat = heartbeat
        self._started = time.monotonic()
        self._latest = Progress(percentage=0, message="Starting deep research...")
        self._changed = anyio.Event()
        self._sent = -1.0

    def __call__(self, progress: Progress) -> None:
        self._latest = progress
        if threading.get_ident() == self._thread:
            self._changed.set()
        else:
            self._loop.call_soon_threadsafe(lambda: self._changed.set())

    async def _send(self) -> None:
        step = self._latest
        value = float(min(max(step.percentage, 0), 100))
        if value <= self._sent:  # rounded: repeated + 0.01 would drift to 94.02000000000001
            step_up = round(self._sent + 0.01, 2)
            value = math.nextafter(self._sent, math.inf) if self._sent >= 100 else step_up
        self._sent = value
        elapsed = time.monotonic() - self._started
        await self._sink(value, 100.0, f"{step.message} ({elapsed:.0f} s)")

    async def _pump(self) -> None:
        while True:
            with anyio.move_on_after(self._heartbeat):
                await self._changed.wait()
            self._changed = anyio.Event()
            await self._send()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[ProgressRelay]:
        """Send notifications while the body runs; stop when it ends."""
        async with anyio.create_task_group() as group:
            group.start_soon(self._pump)
            try:
                yield self
            finally:
                group.cancel_scope.cancel()
