"""How far an answer has come: what the run reports doing (searching, reading, fetching, writing)
and, when it reports nothing, a background deep research's estimated progress (phases, time left);
never 100% before the end."""

from __future__ import annotations

import json
import time
from pathlib import Path

from conftest import TEST_KEY
from support.misbehaving import Misbehaving

from pplx_nb import JobStatus, Researcher, Settings
from pplx_nb.api._activity import Activity, ActivityLog
from pplx_nb.backends import open_queue
from pplx_nb.research._progress import (
    EXPECTED_RESEARCH_SECONDS,
    RunProgress,
    activity_step,
    expected_research_seconds,
    research_progress,
)
from pplx_nb.sim import serve, stats


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


def test_activity_progress_grows_with_the_work_and_stays_below_100() -> None:
    log = ActivityLog()
    steps = []
    for kind, payload in [
        ("response.reasoning.started", {}),
        *[
            step
            for n in range(8)
            for step in (
                ("response.reasoning.search_queries", {"queries": [f"query {n}"]}),
                ("response.reasoning.search_results", {"results": [{}] * 5}),
            )
        ],
        ("response.reasoning.fetch_url_queries", {"urls": ["https://a.example/"] * 4}),
        ("response.reasoning.stopped", {}),
    ]:
        log.reasoning(kind, json.dumps(payload))
        assert log.current is not None
        steps.append(activity_step(log.current))
    for _ in range(200):
        log.writing(100)
        assert log.current is not None
        steps.append(activity_step(log.current))
    percentages = [p for p, _ in steps]
    assert percentages == sorted(percentages) and percentages[0] == 25 and max(percentages) < 100
    messages = [m for _, m in steps]
    assert messages[0] == "Planning the research..."
    assert messages[1] == 'Searching: 1 query ("query 0")' and messages[2] == "Read 5 results"
    assert messages[16] == "Read 40 results" and messages[17] == "Fetching 4 pages"
    assert set(messages[18:]) == {"Writing the report..."}
    assert activity_step(Activity("writing"), report=False)[1] == "Writing the answer..."
    log.skill(json.dumps({"type": "response.skill.loaded", "name": "office/pdf"}))
    assert log.current is not None
    assert activity_step(log.current)[1] == "Loaded the office/pdf skill"


def test_a_followed_runs_percentage_moves_with_time_and_says_85_only_late() -> None:
    now = [0.0]
    progress = RunProgress(20.0, 0.0, clock=lambda: now[0])
    seen = []
    for second in range(0, 60):
        now[0] = float(second)
        if second == 2:  # a run that starts writing a tenth of the way in
            progress.saw(Activity("writing", queries=2, results=8, chars=500))
        seen.append(progress.now())
    percentages = [p for p, _ in seen]
    assert percentages == sorted(percentages) and max(percentages) < 100
    assert len(set(percentages[:20])) == 20, "moves every second without a new event"
    assert all(p < 85 for p in percentages[:10]), "not 85% a tenth (nor half) of the way in"
    assert seen[2][1] == "Writing the report..."
    quiet = RunProgress(20.0, 0.0, clock=lambda: 100.0)
    assert quiet.now()[0] < 85, "below 85% until the run writes, however long it takes"


def test_a_queued_job_shows_what_its_run_is_doing_while_it_runs(logs_dir: Path) -> None:
    with serve(latency_ms=0, deep_research_seconds=2.5) as url:
        settings = Settings(
            api_key=TEST_KEY, base_url=url, offline=False, conversation_logs_dir=logs_dir
        )
        with Researcher(settings, async_deep_research=True) as researcher:
            queued = researcher.deep_research("How do asyncio tasks work?")
            assert isinstance(queued, JobStatus)
            queue = open_queue(settings)
            researcher.ensure_worker()
            seen: list[tuple[int, str]] = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                status = queue.status(queued.conversation_id)
                assert status is not None
                if status.done:
                    break
                if status.progress is not None:
                    seen.append((status.progress.percentage, status.progress.message))
                time.sleep(0.02)
            assert status.status == "completed"
            assert researcher.wait(queued.conversation_id, timeout=10).text
        counters = stats(url)
    percentages = [p for p, _ in seen]
    assert len(set(percentages)) >= 3, seen
    assert percentages == sorted(percentages) and max(percentages) < 100
    assert any(m.startswith("Searching: ") for _, m in seen), seen
    # Followed by its stream: one run paid for, read once, never submitted again.
    assert counters["background_runs"] == 1 and counters["generations"] == 1
    assert counters["requests"]["GET /v1/responses/{id}"] == 1


def test_a_run_whose_stream_is_refused_is_polled_to_its_end(
    sim_url: str, settings: Settings
) -> None:
    with Misbehaving(sim_url) as bad:
        bad.refuse_streams = True
        tuned = settings.model_copy(update={"base_url": bad.url})
        with Researcher(tuned, async_deep_research=True) as researcher:
            queued = researcher.deep_research("How do asyncio locks work?")
            assert isinstance(queued, JobStatus)
            answer = researcher.wait(queued.conversation_id, timeout=30)
        assert answer.text and answer.sources
        assert bad.requests["GET /v1/responses"] >= 2  # the refused stream, then polls
    assert stats(sim_url)["background_runs"] == 1
