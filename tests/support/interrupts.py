"""Interrupting a question while its request is in flight, the same way on any machine.

Two things make an interrupt test hold wherever the suite runs:

* SIGINT must raise ``KeyboardInterrupt`` as it does in a person's shell. A process started in
  the background of a non-interactive shell (``make test &`` in a script, some CI runners)
  inherits SIGINT *ignored*; Python then installs no handler, ``_thread.interrupt_main()`` does
  nothing and Ctrl-C in a child terminal is lost. :func:`sigint_raises` and
  :func:`default_sigint` put the usual behaviour back for the test.
* The interrupt must land while the request is in flight: :func:`wait_asked` waits until the
  simulator has received the request (its counters), not for a fixed time that a loaded machine
  overruns.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

from pplx_nb.sim import stats

__all__ = ["HANG_SECONDS", "api_requests", "default_sigint", "sigint_raises", "wait_asked"]

HANG_SECONDS = 600
"""How long an injected ``hang`` holds a request: past any interrupt window and test timeout;
the hang ends at once when the interrupted client drops the connection or the simulator stops."""


def api_requests(base_url: str) -> int:
    """How many API requests the simulator at ``base_url`` has received."""
    return sum(stats(base_url)["requests"].values())


def wait_asked(base_url: str, before: int, *, deadline: float = 120.0) -> None:
    """Return once the simulator has received more than ``before`` API requests.

    Raises AssertionError if none came within ``deadline`` seconds (the question never left).
    """
    give_up = time.monotonic() + deadline
    while api_requests(base_url) <= before:
        assert time.monotonic() < give_up, f"no request reached the simulator in {deadline:.0f} s"
        time.sleep(0.05)


@contextmanager
def sigint_raises() -> Iterator[None]:
    """In this process, SIGINT (and ``_thread.interrupt_main``) raises KeyboardInterrupt."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def default_sigint() -> None:
    """A ``preexec_fn`` for child processes: SIGINT back to its default, so Python handles it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
