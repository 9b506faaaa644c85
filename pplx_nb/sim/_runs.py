"""Runs that finish later: Agent background runs and Sonar async requests.

A run's phase is a pure function of the time since it was created, so nothing has to tick in the
background: ``queued`` for the first tenth of its duration, ``in_progress`` until the duration has
passed, then ``completed`` (or ``failed`` / ``requires_action`` when a fault said so). A cancel
accepted while the run
is pending ends it ``cancelled`` once ``cancel_seconds`` have passed (until then it is still
pending, as the live API's runs are while ``cancelling``), even if its duration ends first. The
moment each event of its stream is due is a function of time too (:func:`frame_times`): the
research over most of the run, the report's text last.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal

from pplx_nb.sim._answers import Answer

__all__ = ["RESEARCH_ENDS", "Phase", "Run", "frame_times"]

RESEARCH_ENDS = 0.75
"""The share of a deep run's duration spent researching; its output is written in the rest."""
_QUEUED = 0.1

Phase = Literal["queued", "in_progress", "completed", "failed", "cancelled", "requires_action"]


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
    requires_action: bool = False
    billed: float = 0.0
    """The cost (USD) the simulator billed for it: given back if it is cancelled."""

    def phase(self, now: float | None = None) -> Phase:
        """Where the run is at ``now`` (monotonic seconds; default: the current time)."""
        now = time.monotonic() if now is None else now
        elapsed = now - self.started
        if self.cancel_asked is not None:
            if now >= self.cancel_asked + self.cancel_seconds:
                return "cancelled"
            return "queued" if elapsed < self.duration * _QUEUED else "in_progress"
        if elapsed < self.duration * _QUEUED:
            return "queued"
        if elapsed < self.duration:
            return "in_progress"
        if self.failed:
            return "failed"
        return "requires_action" if self.requires_action else "completed"

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


def frame_times(frames: int, research: int, duration: float) -> list[float]:
    """When each of a deep run's ``frames`` stream frames is due (seconds after it began).

    The first ``research`` frames (the run's start and its reasoning events: searches, results,
    page reads) spread evenly from the end of its queued tenth to :data:`RESEARCH_ENDS` of
    ``duration``, and the output (the report's items and text) over the rest, as a live run
    spends most of its time searching and reading before it writes. A stream without research
    spreads its frames evenly over ``duration``.
    """
    research = min(research, frames)
    if research == 0:
        return [duration * (n + 1) / frames for n in range(frames)]
    span = RESEARCH_ENDS - _QUEUED
    times = [duration * (_QUEUED + span * (n + 1) / research) for n in range(research)]
    output = frames - research
    tail = 1 - RESEARCH_ENDS
    times += [duration * (RESEARCH_ENDS + tail * (n + 1) / output) for n in range(output)]
    return times
