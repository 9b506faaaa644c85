"""Request metrics kept by the Researcher: counts, latency percentiles, API calls, tokens, cost."""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

__all__ = ["Metrics"]


def _percentile(ordered: list[float], fraction: float) -> float:
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


class Metrics:
    """Thread-safe counters; latencies of the last ``window`` requests give p50/p95/p99 in ms."""

    def __init__(self, window: int = 1000) -> None:
        self._lock = threading.Lock()
        self._latencies: deque[float] = deque(maxlen=window)
        self.started = time.monotonic()
        self.total = self.success = self.failed = self.cached = 0
        self.api_calls = self.tokens = 0
        self.cost_usd = 0.0

    def record(
        self,
        seconds: float,
        *,
        ok: bool,
        cached: bool = False,
        api_calls: int = 0,
        tokens: int = 0,
        cost: float = 0.0,
    ) -> None:
        """Count one finished request."""
        with self._lock:
            self.total += 1
            self.success += ok
            self.failed += not ok
            self.cached += cached
            self.api_calls += api_calls
            self.tokens += tokens
            self.cost_usd += cost
            self._latencies.append(seconds * 1000)

    def snapshot(self) -> dict[str, Any]:
        """The seed's metrics shape: requests, latency (ms), api, uptime."""
        with self._lock:
            ordered = sorted(self._latencies)
            return {
                "requests": {
                    "total": self.total,
                    "success": self.success,
                    "failed": self.failed,
                    "cached": self.cached,
                },
                "latency": {
                    "p50": round(_percentile(ordered, 0.50), 2),
                    "p95": round(_percentile(ordered, 0.95), 2),
                    "p99": round(_percentile(ordered, 0.99), 2),
                },
                "api": {
                    "calls": self.api_calls,
                    "tokens": self.tokens,
                    "cost": round(self.cost_usd, 6),
                },
                "uptime": round(time.monotonic() - self.started, 3),
            }
