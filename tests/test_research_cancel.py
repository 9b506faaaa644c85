"""Researcher.cancel: a queued job leaves the queue, a running one stops and so does its paid run at
the API (counted at the simulator); the conversation takes follow-ups afterwards."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pandas as pd
import pytest
from conftest import TEST_KEY
from support.waiting import log_of, poll_until

from pplx_nb import Researcher, Settings
from pplx_nb._cancel import cancel_outcome, cancelled_now
from pplx_nb._errors import ConversationNotFound, LeaseLost, ValidationError
from pplx_nb._models import Answer, JobStatus
from pplx_nb.jobs import JobContext
from pplx_nb.research._progress import FINALIZING
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


def _run_phase(url: str, remote_id: str) -> str:
    response = httpx2.get(
        f"{url}/v1/responses/{remote_id}", headers={"authorization": f"Bearer {TEST_KEY}"}
    )
    return str(response.json()["status"])


def _worker_stopped(log: list[logging.LogRecord], cid: str) -> bool:
    """Whether the in-process worker has let go of the job of ``cid``: it logs so once the
    job's work (and any request of it) has ended."""
    return any(f" stopped job {cid}:" in record.getMessage() for record in log)


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
        assert "costUnknown" not in (cancelled.result or {})
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
    with (
        log_of("pplx_nb.jobs") as log,
        Researcher(_settings(slow_sim, logs_dir), async_deep_research=True) as r,
    ):
        job = r.deep_research(QUESTION, wait=False)
        assert isinstance(job, JobStatus)
        cid = job.conversation_id
        running = poll_until(
            lambda: (s := r.status(cid)) and s.remote_id and s, what="the run's id"
        )
        remote_id = running.remote_id
        cancelled = r.cancel(cid)
        assert cancelled is not None and cancelled.status == "cancelled"
        result = cancelled.result
        assert result["remoteCancelled"] is True and result["costUnknown"] is True
        assert stats(slow_sim)["cancels"] == 1
        poll_until(lambda: _run_phase(slow_sim, remote_id) == "cancelled", what="the run to end")
        assert _closed_as_cancelled(r, cid)
        followup = r.followup(cid, "What does asyncio.Task.cancel do?")
        assert isinstance(followup, Answer) and followup.text
        poll_until(lambda: _worker_stopped(log, cid), what="the worker to stop the job")
        stored = r.status(cid)
    assert stored is not None and stored.status == "cancelled"
    assert (stored.result or {})["costUnknown"] is True
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
        poll_until(lambda: (s := r.status(cid)) and s.remote_id, what="the run's id")
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
        running = poll_until(
            lambda: (s := canceller.status(cid)) and s.remote_id and s, what="the run's id"
        )
        cancelled = canceller.cancel(cid)
        assert cancelled is not None and cancelled.status == "cancelled"
        assert (cancelled.result or {})["remoteCancelled"] is False
        poll_until(lambda: stats(slow_sim)["cancels"] == 1, what="the worker's cancel")
        poll_until(
            lambda: _run_phase(slow_sim, running.remote_id) == "cancelled", what="the run's end"
        )
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
        poll_until(lambda: (s := r.status(cid)) and s.submitting_at, what="the submission to start")
        cancelled = r.cancel(cid)
        assert cancelled is not None and cancelled.status == "cancelled"
        assert cancelled.remote_id is None
        result = cancelled.result
        assert result["costUnknown"] is True and "remoteCancelled" not in result
        poll_until(
            lambda: stats(slow_sim)["cancels"] == 1, what="the worker's cancel of the orphan run"
        )
        stored = r.status(cid)
    assert stored is not None and stored.status == "cancelled" and stored.remote_id is None
    assert stats(slow_sim)["background_runs"] == 1


@pytest.fixture(params=["files", "redis"])
def where(request: pytest.FixtureRequest) -> dict[str, Any]:
    """Where conversations and jobs live: the logs folder, or a real Redis (``store_url``)."""
    if request.param == "files":
        return {}
    return {"store_url": request.getfixturevalue("redis_url")}


@pytest.fixture
def quick_sim() -> Iterator[str]:
    """A simulator whose deep research ends in half a second."""
    with serve(latency_ms=0, deep_research_seconds=0.5) as url:
        yield url


def _queued(researcher: Researcher) -> str:
    """The conversation of a deep research just queued."""
    job = researcher.deep_research(QUESTION, wait=False)
    assert isinstance(job, JobStatus)
    return job.conversation_id


def _finished_run(url: str, researcher: Researcher, cid: str) -> str:
    """The id of the job's run, once the API reports it completed (billed, report ready)."""
    running = poll_until(
        lambda: (s := researcher.status(cid)) and s.remote_id and s, what="the run's id"
    )
    remote_id = str(running.remote_id)
    poll_until(
        lambda: _run_phase(url, remote_id) == "completed", what="the run to finish at the API"
    )
    return remote_id


def _report_of(researcher: Researcher, cid: str) -> list[tuple[str, bool, bool]]:
    """Each message as (role, is a job's answer, closes a question unanswered)."""
    return [
        (m.role, bool(m.job_id), m.unanswered is not None) for m in researcher.history(cid).messages
    ]


def test_a_cancel_that_comes_after_the_run_finished_stores_its_report_once(
    quick_sim: str, logs_dir: Path, where: dict[str, Any]
) -> None:
    """The run completed (and was billed) while its worker's read of it was held up: the
    API refuses the cancel, so the canceller reads the run and stores its report, says so
    with its cost, and the worker, once it gets there, stores nothing twice."""
    inject_faults(quick_sim, {"hang": 6, "path": "/v1/responses/resp_"})
    with (
        log_of("pplx_nb.jobs") as log,
        Researcher(_settings(quick_sim, logs_dir, **where), async_deep_research=True) as r,
    ):
        cid = _queued(r)
        _finished_run(quick_sim, r, cid)
        assert (before := r.status(cid)) is not None and before.status == "in_progress"
        outcome = r.cancel(cid)
        assert outcome is not None and outcome.status == "completed"
        result = outcome.result
        assert result["finishedBeforeCancel"] is True and result["alreadyEnded"] is True
        said = cancel_outcome(cid, outcome)
        assert "had already finished: its report is stored ($0.0" in said
        assert not cancelled_now(outcome)
        poll_until(lambda: _worker_stopped(log, cid), what="the worker to stop the job")
        answer = r.wait(cid, timeout=10)
        stored = r.status(cid)
        messages = _report_of(r, cid)
        again = r.cancel(cid)
    assert messages == [("user", False, False), ("assistant", True, False)]
    assert answer.cost is not None and answer.cost.total_cost == result["cost"] > 0
    assert stored is not None and stored.status == "completed"
    assert again is not None and "Nothing was cancelled" in cancel_outcome(cid, again)
    billed = stats(quick_sim)
    assert billed["background_runs"] == 1 and billed["generations"] == 1
    assert billed["cancels"] == 0


def test_the_worker_keeps_a_finished_runs_report_in_place_of_the_cancel_notice(
    quick_sim: str, logs_dir: Path, where: dict[str, Any]
) -> None:
    """The canceller cannot reach the API, so it records the job cancelled and closes its
    question; the conversation takes a follow-up. The worker then notices the cancel, finds
    the run had finished, and its report takes the notice's place: nothing paid is dropped."""
    inject_faults(quick_sim, {"hang": 8, "path": "/v1/responses/resp_"})
    inject_faults(quick_sim, {"hang": 3, "path": "/cancel"})  # the worker's cancel: slow
    worker_side = Researcher(_settings(quick_sim, logs_dir, **where), async_deep_research=True)
    offline = _settings("http://127.0.0.1:9", logs_dir, max_retries=0, timeout_ms=1_000, **where)
    with worker_side, Researcher(offline, async_deep_research=False) as canceller:
        cid = _queued(worker_side)
        _finished_run(quick_sim, worker_side, cid)
        cancelled = canceller.cancel(cid)
        assert cancelled is not None and cancelled.status == "cancelled"
        assert (cancelled.result or {})["remoteCancelled"] is False
        assert _closed_as_cancelled(canceller, cid)
        worker_side.followup(cid, "What does asyncio.Task.cancel do?")
        poll_until(
            lambda: (s := canceller.status(cid)) and s.status == "completed", what="the report"
        )
        stored = canceller.status(cid)
        messages = _report_of(canceller, cid)
    assert messages == [
        ("user", False, False),
        ("assistant", True, False),
        ("user", False, False),
        ("assistant", False, False),
    ]
    assert stored is not None and (stored.result or {})["finishedBeforeCancel"]
    billed = stats(quick_sim)
    assert billed["background_runs"] == 1 and billed["cancels"] == 0


class _CancelledWhileStoring(JobContext):
    """A job context whose job is cancelled right after the worker reports it is finalizing:
    the cancel lands between the run's completion and the storing of its report."""

    async def report(self, percentage: int, message: str) -> None:
        await super().report(percentage, message)
        if (percentage, message) == FINALIZING:
            self._queue.cancel(self.job.conversation_id)


def test_a_report_the_worker_holds_when_its_job_is_cancelled_is_stored_not_dropped(
    quick_sim: str, logs_dir: Path, where: dict[str, Any]
) -> None:
    with Researcher(_settings(quick_sim, logs_dir, **where), async_deep_research=False) as r:
        cid = _queued(r)
        queue = r._jobs.queue
        claimed = queue.claim("test-worker")
        assert claimed is not None
        context = _CancelledWhileStoring(queue, claimed)
        with pytest.raises(LeaseLost):
            asyncio.run(r._deep(claimed, context))
        stored = r.status(cid)
        messages = _report_of(r, cid)
        answer = r.wait(cid, timeout=5)
    assert stored is not None and stored.status == "completed"
    assert (stored.result or {})["finishedBeforeCancel"] is True
    assert messages == [("user", False, False), ("assistant", True, False)]
    assert answer.text and answer.cost is not None
    billed = stats(quick_sim)
    assert billed["background_runs"] == 1 and billed["cancels"] == 0


def test_cancelling_twice_says_the_job_was_already_cancelled_and_sends_nothing(
    slow_sim: str, logs_dir: Path
) -> None:
    with (
        log_of("pplx_nb.jobs") as log,
        Researcher(_settings(slow_sim, logs_dir), async_deep_research=True) as r,
    ):
        cid = _queued(r)
        poll_until(lambda: (s := r.status(cid)) and s.remote_id, what="the run's id")
        first = r.cancel(cid)
        assert first is not None and cancelled_now(first)
        assert f"Its run {first.remote_id} was stopped at the API" in cancel_outcome(cid, first)
        poll_until(lambda: _worker_stopped(log, cid), what="the worker to stop the job")
        requests = sum(stats(slow_sim)["requests"].values())
        second = r.cancel(cid)
        sent = sum(stats(slow_sim)["requests"].values()) - requests
    assert second is not None and second.status == "cancelled" and not cancelled_now(second)
    said = cancel_outcome(cid, second)
    assert said.startswith(f"The research of conversation {cid} was already cancelled at ")
    assert "nothing was sent" in said and "stop" not in said
    assert sent == 0 and stats(slow_sim)["cancels"] == 1
