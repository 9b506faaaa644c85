"""Runs that finish later: Agent background runs and Sonar async requests.

A run's phase is a pure function of the time since it was created, so nothing has to tick in the
background: ``queued`` for the first tenth of its duration, ``in_progress`` until the duration has
passed, then ``completed`` (or ``failed`` when a fault said so). A cancel accepted while the run
is pending ends it ``cancelled`` once ``cancel_seconds`` have passed (until then it is still
pending, as the live API's runs are while ``cancelling``), even if its duration ends first.
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
    cancel_seconds: float = 0.0
    cancel_asked: float | None = None

    def phase(self, now: float | None = None) -> Phase:
        """Where the run is at ``now`` (monotonic seconds; default: the current time)."""
        now = time.monotonic() if now is None else now
        elapsed = now - self.started
        if self.cancel_asked is not None:
            if now >= self.cancel_asked + self.cancel_seconds:
                return "cancelled"
            return "queued" if elapsed < self.duration * 0.1 else "in_progress"
        if elapsed < self.duration * 0.1:
            return "queued"
        if elapsed < self.duration:
            return "in_progress"
        return "failed" if self.failed else "completed"

    @property
    def finished_at(self) -> int:
        """Wall-clock second at which the run ends (or ended)."""
        return self.created + round(self.duration)

    def cancel(self, now: float | None = None) -> bool:
        """Ask a pending run to stop; False when it has already ended (nothing to cancel)."""
        now = time.monotonic() if now is None else now
        if self.phase(now) not in ("queued", "in_progress"):
            return False
        if self.cancel_asked is None:
            self.cancel_asked = now
        return True
