"""Researcher.cancel: a queued job leaves the queue, a running one stops and so does its paid run at
the API (counted at the simulator); the conversation takes follow-ups afterwards."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pandas as pd
import pytest
from conftest import TEST_KEY

from pplx_nb import Researcher, Settings
from pplx_nb._errors import ConversationNotFound, ValidationError
from pplx_nb._models import Answer, JobStatus
from pplx_nb.sim import inject_faults, serve, stats

QUESTION = "Compare asyncio and trio cancellation"


@pytest.fixture
def slow_sim() -> Iterator[str]:
    """A simulator whose deep research lasts long enough to be cancelled mid-run."""
    with serve(latency_ms=0, deep_research_seconds=60) as url:
        yield url


def _settings(url: str, logs: Path, **extra: Any) -> Settings:
    fields: dict[str, Any] = {
        "api_key": TEST_KEY,
        "base_url": url,
        "offline": False,
        "conversation_logs_dir": logs,
        "max_retries": 1,
        "timeout_ms": 5_000,
        "job_lease_seconds": 1.5,
        **extra,
    }
    return Settings(**fields)


def _until(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _run_phase(url: str, remote_id: str) -> str:
    response = httpx2.get(
        f"{url}/v1/responses/{remote_id}", headers={"authorization": f"Bearer {TEST_KEY}"}
    )
    return str(response.json()["status"])


def _closed_as_cancelled(researcher: Researcher, cid: str) -> bool:
    last = researcher.history(cid).messages[-1]
    return (
        last.role == "assistant"
        and last.unanswered is not None
        and (last.unanswered.state == "cancelled")
    )


def test_a_pending_job_leaves_the_queue_unpaid_and_the_conversation_takes_a_follow_up(
    settings: Settings, sim_url: str
) -> None:
    with Researcher(settings, async_deep_research=False) as r:
        job = r.deep_research(QUESTION, wait=False)
        assert isinstance(job, JobStatus) and job.status == "pending"
        cid = job.conversation_id
        cancelled = r.cancel(cid)
        assert cancelled is not None and cancelled.status == "cancelled"
        assert "costUnknown" not in (cancelled.model_extra or {}).get("result", {})
        stored = r.status(cid)
        assert stored is not None and stored.status == "cancelled"
        assert r._jobs.queue.pending_count() == 0
        assert not (settings.logs_dir() / cid / "job.json").exists()
        assert _closed_as_cancelled(r, cid)
        closing = r.history(cid).messages[-1].unanswered
        assert closing is not None and closing.cost_unknown is None
        again = r.cancel(cid)
        assert again is not None and again.status == "cancelled"
        assert again.completed_at == stored.completed_at
        followup = r.followup(cid, "What does asyncio.Task.cancel do?")
    assert isinstance(followup, Answer) and "cancel" in followup.text.lower()
    billed = stats(sim_url)
    assert billed["background_runs"] == 0 and billed["cancels"] == 0


def test_a_running_job_is_cancelled_here_and_at_the_api(slow_sim: str, logs_dir: Path) -> None:
    with Researcher(_settings(slow_sim, logs_dir), async_deep_research=True) as r:
        job = r.deep_research(QUESTION, wait=False)
        assert isinstance(job, JobStatus)
        cid = job.conversation_id
        running = _until(lambda: (s := r.status(cid)) and s.remote_id and s, "the run's id")
        remote_id = running.remote_id
        cancelled = r.cancel(cid)
        assert cancelled is not None and cancelled.status == "cancelled"
        result = (cancelled.model_extra or {})["result"]
        assert result["remoteCancelled"] is True and result["costUnknown"] is True
        assert stats(slow_sim)["cancels"] == 1
        _until(lambda: _run_phase(slow_sim, remote_id) == "cancelled", "the run to end")
        assert _closed_as_cancelled(r, cid)
        followup = r.followup(cid, "What does asyncio.Task.cancel do?")
        assert isinstance(followup, Answer) and followup.text
        time.sleep(2)  # the worker has heartbeated since: it stopped, it resubmitted nothing
        stored = r.status(cid)
    assert stored is not None and stored.status == "cancelled"
    assert (stored.model_extra or {})["result"]["costUnknown"] is True
    billed = stats(slow_sim)
    assert billed["background_runs"] == 1 and billed["cancels"] == 1


def test_a_cancelled_runs_unknown_cost_is_recorded_and_the_export_total_says_so(
    slow_sim: str, logs_dir: Path
) -> None:
    from pplx_nb.export import to_dataframe

    with Researcher(_settings(slow_sim, logs_dir), async_deep_research=True) as r:
        job = r.deep_research(QUESTION, wait=False)
        assert isinstance(job, JobStatus)
        cid = job.conversation_id
        _until(lambda: (s := r.status(cid)) and s.remote_id, "the run's id")
        r.cancel(cid)
        assert _closed_as_cancelled(r, cid)
        closing = r.history(cid).messages[-1].unanswered
        assert closing is not None and closing.cost_unknown is True
        answer = r.followup(cid, "What does asyncio.Task.cancel do?")
        assert isinstance(answer, Answer) and answer.cost is not None
        row = to_dataframe(r.store, level="conversations").set_index("conversation_id").loc[cid]
    assert pd.isna(row["total_cost_usd"]) and row["unknown_costs"] == 1
    assert row["known_cost_usd"] == pytest.approx(answer.cost.total_cost)


def test_the_worker_cancels_the_run_when_the_canceller_cannot_reach_the_api(
    slow_sim: str, logs_dir: Path
) -> None:
    """The job runs in one Researcher (another process's worker, say); another cancels it but
    its API is unreachable: the worker notices at its next heartbeat and stops the run."""
    worker_side = Researcher(_settings(slow_sim, logs_dir), async_deep_research=True)
    offline = _settings("http://127.0.0.1:9", logs_dir, max_retries=0, timeout_ms=1_000)
    with worker_side, Researcher(offline, async_deep_research=False) as canceller:
        job = worker_side.deep_research(QUESTION, wait=False)
        assert isinstance(job, JobStatus)
        cid = job.conversation_id
        running = _until(lambda: (s := canceller.status(cid)) and s.remote_id and s, "the run's id")
        cancelled = canceller.cancel(cid)
        assert cancelled is not None and cancelled.status == "cancelled"
        assert (cancelled.model_extra or {})["result"]["remoteCancelled"] is False
        _until(lambda: stats(slow_sim)["cancels"] == 1, "the worker's cancel", timeout=30)
        _until(lambda: _run_phase(slow_sim, running.remote_id) == "cancelled", "the run's end")
        followup = canceller.status(cid)
    assert followup is not None and followup.status == "cancelled"
    assert stats(slow_sim)["background_runs"] == 1


def test_cancel_without_a_job_returns_none_and_refuses_unknown_or_malformed_ids(
    settings: Settings,
) -> None:
    with Researcher(settings) as r:
        cid = r.search("What does asyncio.Task.cancel do?").conversation_id or ""
        assert r.cancel(cid) is None
        with pytest.raises(ConversationNotFound):
            r.cancel("20250124-1706102400123")
        with pytest.raises(ValidationError):
            r.cancel("../etc")


def test_a_run_submitted_while_its_job_is_cancelled_is_cancelled_by_the_worker(
    slow_sim: str, logs_dir: Path
) -> None:
    """The job is cancelled while its submission is in flight: the canceller knows no run id,
    and the worker cannot record the one it gets; it stops that run rather than leave it."""
    inject_faults(slow_sim, {"hang": 1.5, "path": "/v1/agent"})
    with Researcher(_settings(slow_sim, logs_dir), async_deep_research=True) as r:
        job = r.deep_research(QUESTION, wait=False)
        assert isinstance(job, JobStatus)
        cid = job.conversation_id
        _until(lambda: (s := r.status(cid)) and s.submitting_at, "the submission to start")
        cancelled = r.cancel(cid)
        assert cancelled is not None and cancelled.status == "cancelled"
        assert cancelled.remote_id is None
        result = (cancelled.model_extra or {})["result"]
        assert result["costUnknown"] is True and "remoteCancelled" not in result
        _until(lambda: stats(slow_sim)["cancels"] == 1, "the worker's cancel of the orphan run")
        stored = r.status(cid)
    assert stored is not None and stored.status == "cancelled" and stored.remote_id is None
    assert stats(slow_sim)["background_runs"] == 1
