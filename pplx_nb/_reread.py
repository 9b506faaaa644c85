"""Reading a file another program may be rewriting in place, before calling it damaged.

pplx_nb replaces its files atomically, but the TypeScript perplexity-mcp-server rewrites
``conversation.json`` and ``job.json`` in place (it even removes the file first), so a reader can
catch one half-written or missing for a moment. :func:`read_settled` retries a read whose result
does not parse while the file keeps changing, and gives up quickly on a file that stays as it is:
a damaged file is still reported at once, a torn read never.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["read_settled"]

T = TypeVar("T")

_PAUSES = (0.005, 0.02, 0.05)
"""Seconds between attempts while the file looks unchanged; after the last, the error stands."""
_PATIENCE = 1.0
"""At most this long in all while the file keeps changing (a writer that never finishes)."""


def _stamp(path: str | os.PathLike[str]) -> tuple[int, int, int] | None:
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_ino, found.st_size, found.st_mtime_ns)


def read_settled(
    path: str | os.PathLike[str],
    load: Callable[[], T],
    retry_on: tuple[type[BaseException], ...],
) -> T:
    """``load()`` (which reads and parses ``path``), retried while it raises ``retry_on``.

    A failure is retried after a short pause, up to three times while the file looks unchanged
    (a writer between two writes), and for as long as it keeps changing, up to a second; then
    the last error is raised.
    """
    try:
        return load()  # the usual case costs nothing more
    except retry_on:
        pass
    deadline = time.monotonic() + _PATIENCE
    before = _stamp(path)
    quiet = 0
    while True:
        time.sleep(_PAUSES[quiet])
        try:
            return load()
        except retry_on:
            after = _stamp(path)
            quiet = 0 if after != before else quiet + 1
            before = after
            if quiet >= len(_PAUSES) or time.monotonic() >= deadline:
                raise
