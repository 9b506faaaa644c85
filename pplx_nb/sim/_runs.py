"""Runs that finish later: Agent background runs and Sonar async requests.

A run's phase is a pure function of the time since it was created, so nothing has to tick in the
background: ``queued`` for the first tenth of its duration, ``in_progress`` until the duration has
passed, then ``completed`` (or ``failed`` when a fault said so).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from pplx_nb.sim._answers import Answer

__all__ = ["Phase", "Run"]

Phase = Literal["queued", "in_progress", "completed", "failed", "cancelled"]


@dataclass(slots=True)
class Run:
    """One run: its answer is computed up front and revealed when the run completes."""

    ident: str
    answer: Answer
    duration: float
    failed: bool = False
    created: int = field(default_factory=lambda: int(time.time()))
    started: float = field(default_factory=time.monotonic)
    cancelled_at: int | None = None

    def phase(self, now: float | None = None) -> Phase:
        """Where the run is at ``now`` (monotonic seconds; default: the current time)."""
        if self.cancelled_at is not None:
            return "cancelled"
        elapsed = (time.monotonic() if now is None else now) - self.started
        if elapsed < self.duration * 0.1:
            return "queued"
        if elapsed < self.duration:
            return "in_progress"
        return "failed" if self.failed else "completed"

    @property
    def finished_at(self) -> int:
        """Wall-clock second at which the run ends (or ended)."""
        return self.created + round(self.duration)

    def cancel(self) -> bool:
        """Cancel the run if it has not finished; return whether it is now cancelled."""
        if self.phase() in ("queued", "in_progress"):
            self.cancelled_at = int(time.time())
        return self.cancelled_at is not None
