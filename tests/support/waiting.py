"""Time in tests: a clock a test advances by hand, and one way to wait for something to happen.

Code that judges time takes a clock (default ``time.monotonic``); a test hands it a
:class:`FakeClock` and advances it, so no test sleeps through a lease or proves that nothing
happened by sleeping. What another thread or process does is waited for with
:func:`poll_until`, under a generous deadline (the machine running the tests may be busy).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import TypeVar

__all__ = ["FakeClock", "attached", "log_of", "poll_until"]

T = TypeVar("T")


class FakeClock:
    """A monotonic clock that moves only when :meth:`advance` is called."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward."""
        assert seconds >= 0, "a monotonic clock never goes back"
        self.now += seconds


def poll_until(
    predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.05, *, what: str = ""
) -> T:
    """``predicate()``'s first truthy value, asked every ``interval`` seconds.

    Raises AssertionError naming ``what`` (or the predicate) and its last value once ``timeout``
    seconds have passed without one.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            waited_for = what or getattr(predicate, "__qualname__", repr(predicate))
            raise AssertionError(
                f"timed out after {timeout:g} s waiting for {waited_for} (last value: {value!r})"
            )
        time.sleep(interval)


@contextlib.contextmanager
def attached(handler: logging.Handler, logger: logging.Logger, level: int) -> Iterator[None]:
    """``handler`` on ``logger``, set to ``level``, for the block; both as they were after."""
    before = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)


@contextlib.contextmanager
def log_of(name: str) -> Iterator[list[logging.LogRecord]]:
    """Every record the logger ``name`` emits in the block, INFO and up, from any thread (a
    positive event to wait for)."""
    records: list[logging.LogRecord] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    with attached(_Keep(logging.INFO), logging.getLogger(name), logging.INFO):
        yield records
