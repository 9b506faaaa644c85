"""Keeping the server's event loop free: Researcher work runs on other threads.

The Researcher's coroutines read and write conversation files and wait on a conversation's lock
file between their awaits, and its sync readers (history, status, listing) are plain disk I/O.
Run on the server's loop, one call waiting on a lock would stall every other client. So:

- :func:`in_thread` runs a blocking function on anyio's worker threads;
- :class:`LoopPool` runs a coroutine on a private event loop that serves one call at a time,
  so a coroutine that blocks holds up its own loop only. Loops are reused (each keeps the
  Researcher's API client and its connections) and are at most ``size``; a call that finds
  every loop busy waits for one. Cancelling the awaiting task cancels the coroutine.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

import anyio
import anyio.to_thread

__all__ = ["LoopPool", "in_thread"]

T = TypeVar("T")
P = ParamSpec("P")


async def in_thread(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)`` on a worker thread; the event loop serves others meanwhile."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


class _Loop:
    """An event loop running forever on its own daemon thread."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def serve() -> None:
            asyncio.set_event_loop(self.loop)
            self.loop.call_soon(started.set)
            self.loop.run_forever()
            self.loop.close()

        self.thread = threading.Thread(target=serve, name=name, daemon=True)
        self.thread.start()
        started.wait()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


class LoopPool:
    """Private event loops for coroutines that may block; one call per loop at a time.

    Args:
        size: the most loops (so threads) kept; more concurrent calls wait for a free one.
    """

    def __init__(self, size: int = 32) -> None:
        self._size = size
        self._idle: list[_Loop] = []
        self._all: list[_Loop] = []
        self._free = threading.Semaphore(size)
        self._lock = threading.Lock()
        self._closed = False

    @property
    def loops(self) -> list[asyncio.AbstractEventLoop]:
        """The loops started so far."""
        with self._lock:
            return [each.loop for each in self._all]

    def _take(self) -> _Loop:
        with self._lock:
            if self._closed:
                raise RuntimeError("The server is shutting down.")
            if self._idle:
                return self._idle.pop()
            loop = _Loop(f"pplx_nb-mcp-call-{len(self._all) + 1}")
            self._all.append(loop)
            return loop

    def _give_back(self, loop: _Loop) -> None:
        with self._lock:
            self._idle.append(loop)
        self._free.release()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` run on a loop of its own; cancelling this await cancels it."""
        try:
            while not self._free.acquire(blocking=False):
                await anyio.sleep(0.01)
            try:
                loop = self._take()
            except BaseException:
                self._free.release()
                raise
        except BaseException:
            coro.close()
            raise
        future = asyncio.run_coroutine_threadsafe(self._on(loop, coro), loop.loop)
        try:
            return await asyncio.wrap_future(future)
        finally:
            if not future.done():
                future.cancel()

    async def _on(self, loop: _Loop, coro: Coroutine[Any, Any, T]) -> T:
        # The loop is handed on only once the call has really ended, cancelled or not.
        try:
            return await coro
        finally:
            self._give_back(loop)

    def close(self) -> None:
        """Stop every loop (call after the Researcher has closed its clients on them)."""
        with self._lock:
            self._closed = True
            loops, self._all, self._idle = self._all, [], []
        for each in loops:
            each.stop()
