"""How far a background deep research has come, while the API says nothing but "still running".

A background run reports no progress of its own, so the job's percentage is estimated from the
time elapsed against the time such a run is expected to take: it moves through named phases
from 25% (submitted) to 90% at the expected duration, then creeps towards 99% and never claims
100% before the report is in. The message names the phase and the time left, or says the run is
taking longer than usual.

    research_progress(elapsed=30, expected=120)  # (41, "Searching the web... (about 90 s left)")
"""

from __future__ import annotations

import math

from pplx_nb._config import Settings

__all__ = ["EXPECTED_RESEARCH_SECONDS", "expected_research_seconds", "research_progress"]

EXPECTED_RESEARCH_SECONDS = 180.0
"""What a live deep research usually takes (Perplexity quotes two to four minutes)."""

_SUBMITTED, _AT_EXPECTED, _CEILING = 25, 90, 99
_PHASES = (
    (0.0, "Searching the web..."),
    (0.4, "Reading sources..."),
    (0.75, "Writing the research report..."),
)


def expected_research_seconds(settings: Settings) -> float:
    """The duration to measure progress against: the simulator's pace offline, else typical."""
    if settings.is_offline:
        return max(settings.sim_deep_research_seconds, 1.0)
    return EXPECTED_RESEARCH_SECONDS


def research_progress(elapsed: float, expected: float) -> tuple[int, str]:
    """The percentage and message for a run ``elapsed`` seconds after submission."""
    fraction = max(elapsed, 0.0) / expected
    if fraction <= 1:
        percentage = _SUBMITTED + int((_AT_EXPECTED - _SUBMITTED) * fraction)
        phase = next(text for start, text in reversed(_PHASES) if fraction >= start)
        return percentage, f"{phase} (about {max(math.ceil(expected - elapsed), 1)} s left)"
    overdue = 1 - math.exp(-(fraction - 1))
    percentage = min(_AT_EXPECTED + int((_CEILING - _AT_EXPECTED) * overdue), _CEILING)
    return percentage, "Writing the research report... (taking longer than usual)"
