"""Lease expiry judged by the reader's own clock, so workers whose clocks disagree stay correct.

A heartbeat's timestamp comes from the clock of the worker that wrote it. Comparing it with the
reader's wall clock lets a reader whose clock runs two minutes ahead take over healthy jobs, and
a dead worker whose clock ran an hour ahead block its job for that hour. So a timestamp is only
compared for change: a reader remembers, per job, the last heartbeat it saw and when, by its
monotonic clock, it first saw that value; the lease has expired once it has seen the same value
for ``lease_seconds``. A heartbeat the process wrote itself counts as seen when written.

A heartbeat dated in the future therefore buys its job nothing beyond the lease, and one dated
in the past costs it nothing. The price: a process that has just started waits one lease
(from its first look) before it takes over the job of a worker that died before it started.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable, Iterable

__all__ = ["LeaseClock", "WatchedLeases"]

_MAX_KEYS = 100_000
"""Jobs remembered at most (a queue that never recovers stale jobs would otherwise only grow)."""


class LeaseClock:
    """When this process first saw each job's current heartbeat, by its monotonic clock.

    Args:
        clock: seconds from a monotonic clock (tests pass one they advance).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._seen: dict[str, tuple[Hashable, float]] = {}
        self._lock = threading.Lock()

    def saw(self, key: str, stamp: Hashable) -> float:
        """Record that ``key``'s heartbeat reads ``stamp`` now; return for how many seconds this
        process has seen that same value (0 when it is new)."""
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and seen[0] == stamp:
                return now - seen[1]
            self._seen.pop(key, None)
            self._seen[key] = (stamp, now)
            if len(self._seen) > _MAX_KEYS:
                del self._seen[next(iter(self._seen))]
        return 0.0

    def keep_only(self, keys: Iterable[str]) -> None:
        """Forget every job but ``keys`` (the ones still claimed)."""
        wanted = set(keys)
        with self._lock:
            for key in [key for key in self._seen if key not in wanted]:
                del self._seen[key]


class WatchedLeases:
    """The lease methods of a claim index whose leases this process judges by watching each
    job's heartbeat (the file and memory indexes; the Redis one asks the server's clock).

    A lease runs out only in the eyes of a process that watches it, so a write is never refused
    for a lease here: recovery requeues the job instead.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._leases = LeaseClock(clock)

    def recoverable(self, claimed: list[str]) -> list[str]:
        """All of them: a lease is judged by watching its heartbeat, so each is looked at."""
        self._leases.keep_only(claimed)
        return claimed

    def renew(self, marker: str, heartbeat: str | None) -> bool:
        """Note the heartbeat this process wrote; always True (see the class docstring)."""
        self._leases.saw(marker, heartbeat)
        return True

    def lease_age(self, marker: str, heartbeat: str | None) -> float:
        """For how long this process has seen ``heartbeat`` unchanged."""
        return self._leases.saw(marker, heartbeat)

    def held(self, marker: str) -> bool:
        """Always True: see :meth:`renew`."""
        return True
