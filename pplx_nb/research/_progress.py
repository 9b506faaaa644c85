"""How far an answer has come, as a percentage and a message.

A live (streamed) answer moves through the seed server's steps — 25 % querying, 50 % processing,
75-95 % finalizing as its text grows, 100 % once stored — and is reported at least every 5 s.

A background deep research reports no progress of its own, so its percentage is estimated from
the time elapsed against the time such a run is expected to take: it moves through named phases
from 25 % (submitted) to 90 % at the expected duration, then creeps towards 99 % and never claims
100 % before the report is in. The message names the phase and the time left, or says the run is
taking longer than usual::

    research_progress(elapsed=30, expected=120)  # (41, "Searching the web... (about 90 s left)")
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from pplx_nb._config import Settings
from pplx_nb._models import Progress

__all__ = [
    "COMPLETED",
    "EXPECTED_RESEARCH_SECONDS",
    "FINALIZING",
    "QUERYING",
    "ProgressCallback",
    "Tracker",
    "expected_research_seconds",
    "research_progress",
]

ProgressCallback = Callable[[Progress], object]

Step = tuple[int, str]
QUERYING: Step = (25, "Querying Perplexity API...")
PROCESSING: Step = (50, "Processing response...")
FINALIZING: Step = (95, "Finalizing research report...")
COMPLETED: Step = (100, "Completed")

_EVERY = 5.0
"""How often a live answer reports its progress even when it has not moved (seconds)."""
_TEXT_SCALE = 4000
"""Characters of answer that take the finalizing step two thirds of its way from 75 % to 95 %."""

EXPECTED_RESEARCH_SECONDS = 180.0
"""What a live deep research usually takes (Perplexity quotes two to four minutes)."""

_SUBMITTED, _AT_EXPECTED, _CEILING = QUERYING[0], 90, 99
_PHASES = (
    (0.0, "Searching the web..."),
    (0.4, "Reading sources..."),
    (0.75, "Writing the research report..."),
)


class Tracker:
    """Reports a live answer's steps to a callback as its text grows, and at least every 5 s."""

    def __init__(self, callback: ProgressCallback) -> None:
        self._callback = callback
        self._started = time.monotonic()
        self.current = Progress(percentage=QUERYING[0], message=QUERYING[1], attempt=1)

    def update(self, step: Step) -> None:
        """Move to ``step`` and report it."""
        self.current = Progress(percentage=step[0], message=step[1], attempt=1)
        self.emit()

    def emit(self) -> None:
        """Report the current step with the time elapsed so far."""
        self.current.elapsed_ms = int((time.monotonic() - self._started) * 1000)
        self._callback(self.current)

    def text_grew(self, chars: int) -> None:
        """The answer's text is ``chars`` characters long now."""
        if self.current.percentage < PROCESSING[0]:
            self.update(PROCESSING)
        elif chars > 0:
            percentage = 75 + min(20, int(20 * (1 - math.exp(-chars / _TEXT_SCALE))))
            if percentage != self.current.percentage:
                self.update((percentage, FINALIZING[1]))

    @contextmanager
    def ticking(self) -> Iterator[None]:
        """Report now, then every 5 s until the block ends (a long silence still shows time)."""
        ticker = asyncio.ensure_future(self._tick())
        try:
            self.emit()
            yield
        finally:
            ticker.cancel()

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(_EVERY)
            self.emit()


def expected_research_seconds(settings: Settings) -> float:
    """The duration to measure progress against: the simulator's pace offline, else typical."""
    if settings.is_offline:
        return max(settings.sim_deep_research_seconds, 1.0)
    return EXPECTED_RESEARCH_SECONDS


def research_progress(elapsed: float, expected: float) -> Step:
    """The percentage and message for a background run ``elapsed`` seconds after submission."""
    fraction = max(elapsed, 0.0) / expected
    if fraction <= 1:
        percentage = _SUBMITTED + int((_AT_EXPECTED - _SUBMITTED) * fraction)
        phase = next(text for start, text in reversed(_PHASES) if fraction >= start)
        return percentage, f"{phase} (about {max(math.ceil(expected - elapsed), 1)} s left)"
    overdue = 1 - math.exp(-(fraction - 1))
    percentage = min(_AT_EXPECTED + int((_CEILING - _AT_EXPECTED) * overdue), _CEILING)
    return percentage, "Writing the research report... (taking longer than usual)"
