"""How far an answer has come: a background deep research's estimated progress (phases, time
left, never 100% before the end)."""

from __future__ import annotations

from pplx_nb import Settings
from pplx_nb.research._progress import (
    EXPECTED_RESEARCH_SECONDS,
    expected_research_seconds,
    research_progress,
)


def test_progress_rises_through_the_phases_and_stays_below_100() -> None:
    steps = [research_progress(second, 120) for second in range(0, 3600, 5)]
    percentages = [percentage for percentage, _ in steps]
    assert percentages == sorted(percentages)
    assert percentages[0] == 25 and 95 <= max(percentages) < 100
    assert len(set(percentages[:25])) == 25, "moves every 5 s while within the expected time"
    messages = [message for _, message in steps]
    assert messages[0].startswith("Searching the web...") and "120 s left" in messages[0]
    assert messages[12].startswith("Reading sources...")
    assert messages[20].startswith("Writing the research report...")
    assert messages[-1].endswith("(taking longer than usual)")
    assert research_progress(120, 120) == (90, "Writing the research report... (about 1 s left)")


def test_expected_duration_follows_the_simulator_offline() -> None:
    offline = Settings(offline=True, api_key=None, sim_deep_research_seconds=4)
    assert expected_research_seconds(offline) == 4
    live = Settings(offline=False, api_key="pplx-0123456789abcdef0123")
    assert expected_research_seconds(live) == EXPECTED_RESEARCH_SECONDS
