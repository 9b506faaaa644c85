"""How far an answer has come, as a percentage and a message.

The Agent API says what a run is doing (its ``response.reasoning.*`` events, read by the client
as an :class:`~pplx_nb.api._activity.Activity`), and that is what progress shows when it is
there — "Searching: 3 queries", "Read 12 results", "Fetching 4 pages", "Writing the report..."
— with a percentage that grows with the work done (25 % at the start, towards 80 % while
searching and reading, 85-95 % while the text is written) and never goes back
(:func:`activity_step`). A live (streamed) answer without such events moves through the seed
server's steps — 25 % querying, 50 % processing, 75-95 % finalizing as its text grows, 100 % once
stored — and is reported at least every 5 s.

A background deep research polled without its events is estimated from the time elapsed against
the time such a run is expected to take: it moves through named phases from 25 % (submitted) to
90 % at the expected duration, then creeps towards 99 % and never claims 100 % before the report
is in. The message names the phase and the time left, or says the run is taking longer than
usual::

    research_progress(elapsed=30, expected=120)  # (41, "Searching the web... (about 90 s left)")

Followed through its events, a background run shows what they say, but its percentage is halfway
between the stage they reached and that estimate (:class:`RunProgress`): events come in bursts
(a run may start writing a tenth of the way in, or search for a minute without a word), while
the time keeps moving, so the bar moves between events and reaches 85 % only once the run writes
and the time is well on.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pplx_nb._config import Settings
from pplx_nb._models import Progress

if TYPE_CHECKING:
    from pplx_nb.api import Activity

__all__ = [
    "COMPLETED",
    "EXPECTED_RESEARCH_SECONDS",
    "FINALIZING",
    "QUERYING",
    "ProgressCallback",
    "RunProgress",
    "Tracker",
    "activity_step",
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


_WRITING, _WRITTEN = 85, 95
_WORK_SCALE = 20.0
"""Units of work (3 a query, 2 a page, 0.5 a result) that take progress 63 % of its way from
25 % towards 80 % before the writing starts."""


def _count(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def activity_step(activity: Activity, *, report: bool = True) -> Step:
    """The percentage and message for what a run is doing (``report``: a research report).

    The percentage only grows with the totals of ``activity``, so a caller that never reports
    less than before shows a bar that never moves back; it stays below 100.
    """
    if activity.stage == "writing":
        grown = 1 - math.exp(-activity.chars / _TEXT_SCALE)
        written = min(_WRITTEN - _WRITING, int((_WRITTEN - _WRITING) * grown))
        return _WRITING + written, f"Writing the {'report' if report else 'answer'}..."
    work = 3 * activity.queries + 0.5 * activity.results + 2 * activity.urls
    percentage = QUERYING[0] + int(55 * (1 - math.exp(-work / _WORK_SCALE)))
    if activity.stage == "searching":
        message = f"Searching: {_count(activity.queries, 'query', 'queries')}"
        if activity.query:
            shown = activity.query if len(activity.query) <= 60 else activity.query[:59] + "…"
            message += f' ("{shown}")'
    elif activity.stage == "reading":
        message = f"Read {_count(activity.results, 'result', 'results')}"
    elif activity.stage == "fetching":
        message = f"Fetching {_count(activity.urls, 'page', 'pages')}"
    elif activity.stage == "skill":
        message = f"Loaded the {activity.skill or 'requested'} skill"
    else:
        message = "Planning the research..." if report else "Planning the search..."
    return percentage, message


class Tracker:
    """Reports a live answer's steps to a callback as the run works and its text grows, and at
    least every 5 s.

    ``report``: the answer is a research report (said so in the messages).
    """

    def __init__(self, callback: ProgressCallback, *, report: bool = False) -> None:
        self._callback = callback
        self._report = report
        self._started = time.monotonic()
        self._activity: Activity | None = None
        self.current = Progress(percentage=QUERYING[0], message=QUERYING[1], attempt=1)

    def update(self, step: Step) -> None:
        """Move to ``step`` and report it."""
        self.current = Progress(percentage=step[0], message=step[1], attempt=1)
        self.emit()

    def emit(self) -> None:
        """Report the current step with the time elapsed so far."""
        self.current.elapsed_ms = int((time.monotonic() - self._started) * 1000)
        self._callback(self.current)

    def activity(self, activity: Activity) -> None:
        """The run reported what it is doing (a reasoning event moved it on)."""
        self._activity = activity
        self._advance(activity_step(activity, report=self._report))

    def _advance(self, step: Step) -> None:
        """Move to ``step`` if it says something new; the percentage never goes back."""
        percentage = max(step[0], self.current.percentage)
        if (percentage, step[1]) != (self.current.percentage, self.current.message):
            self.update((percentage, step[1]))

    def text_grew(self, chars: int) -> None:
        """The answer's text is ``chars`` characters long now (a run that reports its
        activity says so itself)."""
        if self._activity is not None:
            return
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


class RunProgress:
    """The progress of a background run followed through its events, from its submission at
    ``started`` (a ``clock`` reading).

    Its percentage is the mean of the stage its events reached (:func:`activity_step`) and the
    time since submission against ``expected`` (:func:`research_progress`); below 85 % until
    the run writes, it never goes back and never reaches 100 %. Its message is the events'.
    """

    def __init__(
        self,
        expected: float,
        started: float,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._expected = expected
        self._started = started
        self._clock = clock
        self._stage: Step = QUERYING
        self._percentage = QUERYING[0]

    @property
    def interval(self) -> float:
        """How often to look again between events (seconds): the time moves the percentage
        by about half a point in that while."""
        return max(self._expected / (_AT_EXPECTED - _SUBMITTED), 0.25)

    def saw(self, activity: Activity) -> None:
        """The run's events say it is doing ``activity``."""
        self._stage = activity_step(activity)

    def now(self) -> Step:
        """The percentage and message to show now."""
        stage, message = self._stage
        timed, _ = research_progress(self._clock() - self._started, self._expected)
        percentage = (stage + timed) // 2
        if stage < _WRITING:
            percentage = min(percentage, _WRITING - 1)
        self._percentage = max(self._percentage, percentage)
        return self._percentage, message
