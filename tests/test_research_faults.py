"""Money and time under a misbehaving server: paid answers are never lost or paid twice, and
every wait ends.

The API here is :class:`support.misbehaving.Misbehaving` in front of the simulator, so billed
work is counted where it happens: the simulator's ``generations`` (answers produced) and
``background_runs`` (deep-research runs started).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_KEY
from support.misbehaving import Misbehaving

from pplx_nb import Researcher, Settings
from pplx_nb._errors import (
    APIServerError,
    APITimeoutError,
    ConversationCorrupted,
    FilesystemError,
    RunRequiresAction,
    SubmissionUnknown,
)
from pplx_nb._models import Answer, JobStatus
from pplx_nb.backends import open_queue
from pplx_nb.jobs import JobQueue, Worker
from pplx_nb.research import job_runner
from pplx_nb.sim import inject_faults, serve, stats

REPO = Path(__file__).resolve().parent.parent


def _researcher(settings: Settings, bad: Misbehaving, **update: Any) -> Researcher:
    """A Researcher talking to ``bad``; deep research queued unless ``wait=True`` is passed."""
    return Researcher(
        settings.model_copy(update={"base_url": bad.url, **update}), async_deep_research=True
    )


def _queue(r: Researcher) -> JobQueue:
    """The job queue of ``r``'s conversation folder, as another process would open it."""
    return open_queue(r.settings)


def _billed(sim_url: str) -> tuple[int, int]:
    counters = stats(sim_url)
    return counters["generations"], counters["background_runs"]


def _answers(r: Researcher, cid: str) -> list[str]:
    """The answers stored (not the turns that close a question as not answered)."""
    return [
        m.content for m in r.history(cid).messages if m.role == "assistant" and m.unanswered is None
    ]


def _queued(r: Researcher, query: str = "Describe the json module") -> str:
    queued = r.deep_research(query, wait=False)
    assert isinstance(queued, JobStatus)
    return queued.conversation_id


# -- 1. polling survives outages ----------------------------------------------------------------


def test_a_poll_outage_shorter_than_the_deadline_stores_the_answer_once_and_bills_one_run(
    settings: Settings, bad: Misbehaving, sim_url: str
) -> None:
    # 503s, 502s, dropped connections and stalled replies for 4 s: more than the client's own
    # retries (3) and more than the job's attempts (3) used to survive.
    bad.poll_outage = 4.0
    with _researcher(settings, bad, timeout_ms=1_000, deep_research_timeout_ms=120_000) as r:
        cid = _queued(r)
        report = r.wait(cid, timeout=90)
        status = r.status(cid)
    assert report.text
    assert status is not None and status.status == "completed" and status.attempts == 1
    assert len(_answers(r, cid)) == 1
    assert bad.requests["GET /v1/responses"] >= 4
    assert _billed(sim_url)[1] == 1


# -- 2. no blind re-submission of paid work -----------------------------------------------------


def test_a_lost_submission_reply_bills_at_most_one_run_and_ends_submission_unknown(
    settings: Settings, bad: Misbehaving, sim_url: str
) -> None:
    bad.drop_submission_replies = 1
    with _researcher(settings, bad) as r:
        cid = _queued(r)
        with pytest.raises(SubmissionUnknown) as caught:
            r.wait(cid, timeout=60)
        status = r.status(cid)
        assert _billed(sim_url)[1] <= 1
        assert status is not None and status.status == "failed" and status.attempts == 1
        assert status.error is not None and status.error.code == "SUBMISSION_UNKNOWN"
        assert f"Researcher.retry('{cid}')" in str(caught.value)
        assert "may be billed" in str(caught.value)
        # Resubmitting is a deliberate act: it pays for one more run and stores one answer.
        again = r.retry(cid)
        assert isinstance(again, JobStatus) and again.status == "pending"
        report = r.wait(cid, timeout=60)
    assert report.text and len(_answers(r, cid)) == 1
    assert _billed(sim_url)[1] == 2


@pytest.mark.parametrize(
    ("reply", "declared", "why"),
    [
        ("huge", True, r"it was over the 0\.05 MiB limit, PPLX_NB_MAX_RESPONSE_MB"),
        ("huge", False, r"it was over the 0\.05 MiB limit, PPLX_NB_MAX_RESPONSE_MB"),
        ("garbage", True, "it was not in the API's format"),
        ("no_id", True, "it was not in the API's format"),
        ("truncated", True, "RemoteProtocolError"),
    ],
    ids=["huge-declared", "huge-chunked", "garbage", "no-id", "truncated"],
)
def test_a_submission_reply_that_cannot_be_read_is_sent_once_and_ends_submission_unknown(
    settings: Settings, bad: Misbehaving, sim_url: str, reply: str, declared: bool, why: str
) -> None:
    bad.submission_reply = reply
    bad.huge_body_mib = 1
    bad.huge_declared = declared
    with _researcher(settings, bad, max_response_mb=0.05) as r:
        cid = _queued(r)
        with pytest.raises(SubmissionUnknown, match=why) as caught:
            r.wait(cid, timeout=60)
        status = r.status(cid)
    assert status is not None and status.status == "failed" and status.attempts == 1
    assert status.error is not None and status.error.code == "SUBMISSION_UNKNOWN"
    assert [e.code for e in status.error_history] == ["SUBMISSION_UNKNOWN"]
    assert "API_SERVER_ERROR" not in str(caught.value) and "may be billed" in str(caught.value)
    assert bad.requests["POST /v1/agent"] == 1
    assert _billed(sim_url)[1] == 1


def test_a_blocking_deep_research_whose_stream_is_over_the_size_cap_is_not_sent_again(
    settings: Settings, bad: Misbehaving, sim_url: str
) -> None:
    """The stream named its run, then ran past PPLX_NB_MAX_RESPONSE_MB: the run is read back
    by its id (here the API does not know it), never sent again, and the error names both the
    run and the limit."""
    bad.stream, bad.drip_every, bad.bill_streams = "drip", 0.001, True
    with _researcher(settings, bad, max_response_mb=0.05) as r:
        with pytest.raises(SubmissionUnknown) as caught:
            r.deep_research("Describe the json module", wait=True)
        cid = str(caught.value.details["conversation_id"])
        closing = r.history(cid).messages[-1].unanswered
    assert closing is not None and closing.code == "SUBMISSION_UNKNOWN"
    assert closing.remote_id == "resp_endless" and closing.cost_unknown is True
    message = str(caught.value)
    assert "its stream was over the 0.05 MiB limit, PPLX_NB_MAX_RESPONSE_MB" in message
    assert "its run resp_endless could not be read back" in message
    assert caught.value.request_id == "resp_endless"
    assert "API_SERVER_ERROR" not in message
    assert bad.requests["POST /v1/agent"] == 1
    assert _billed(sim_url)[0] == 1


def test_a_lost_reply_to_a_blocking_deep_research_is_not_sent_again(
    settings: Settings, bad: Misbehaving, sim_url: str
) -> None:
    bad.drop_answer_replies = 1
    with _researcher(settings, bad) as r:
        with pytest.raises(SubmissionUnknown) as caught:
            r.deep_research("Describe the json module", wait=True)
        assert _billed(sim_url)[0] == 1
        cid = str(caught.value.details["conversation_id"])
        # The question stays (closed as not answered), so the deliberate resubmission has
        # something to answer.
        messages = r.history(cid).messages
        assert [m.role for m in messages] == ["user", "assistant"]
        assert messages[-1].unanswered is not None
        assert messages[-1].unanswered.code == "SUBMISSION_UNKNOWN"
        report = r.retry(cid, wait=True)
    assert isinstance(report, Answer) and report.conversation_id == cid
    assert _answers(r, cid) == [report.text]
    assert _billed(sim_url)[0] == 2


def test_a_blocking_deep_research_whose_stream_breaks_is_read_back_not_paid_again(
    settings: Settings, sim_url: str
) -> None:
    """The stream is cut after the API named the run (``response.created``): the rest of the
    run is read by its id (its events after the last one seen), the report is stored once,
    and the research is not sent again."""
    inject_faults(sim_url, {"disconnect_after": 3, "path": "/v1/agent"})
    with Researcher(settings) as r:
        answer = r.deep_research("Describe the json module", wait=True)
        assert isinstance(answer, Answer) and answer.text and answer.cost is not None
        assert _answers(r, answer.conversation_id or "") == [answer.text]
    counters = stats(sim_url)
    assert counters["requests"]["POST /v1/agent"] == 1 and counters["generations"] == 1
    assert counters["requests"]["GET /v1/responses/{id}"] == 1


def test_a_broken_deep_research_stream_the_api_will_not_resume_is_polled_by_its_id(
    settings: Settings, sim_url: str
) -> None:
    inject_faults(sim_url, {"disconnect_after": 3, "path": "/v1/agent"})
    inject_faults(sim_url, {"status": 400, "path": "/v1/responses/"})  # no stream of it again
    with Researcher(settings) as r:
        answer = r.deep_research("Describe the json module", wait=True)
        assert isinstance(answer, Answer) and answer.text
        assert _answers(r, answer.conversation_id or "") == [answer.text]
    counters = stats(sim_url)
    assert counters["requests"]["POST /v1/agent"] == 1 and counters["generations"] == 1
    assert counters["requests"]["GET /v1/responses/{id}"] >= 2


def test_a_broken_deep_research_stream_whose_run_is_unknown_is_submission_unknown(
    settings: Settings, sim_url: str
) -> None:
    """The API does not know the run (404: not stored, or expired): its outcome is unknown,
    so it is never sent again, and the error names the run to look for."""
    inject_faults(sim_url, {"disconnect_after": 3, "path": "/v1/agent"})
    inject_faults(sim_url, {"status": 404, "path": "/v1/responses/", "times": 2})
    with Researcher(settings) as r:
        with pytest.raises(SubmissionUnknown, match=r"its run resp_\w+ could not be read back"):
            r.deep_research("Describe the json module", wait=True)
        (summary,) = r.conversations()
        closing = r.history(summary.conversation_id).messages[-1].unanswered
    assert closing is not None and closing.code == "SUBMISSION_UNKNOWN"
    counters = stats(sim_url)
    assert counters["requests"]["POST /v1/agent"] == 1 and counters["generations"] == 1


def test_a_long_retry_after_on_a_poll_does_not_keep_a_finished_run_from_being_read(
    settings: Settings,
) -> None:
    """The first read of a run that finishes 2 s later is a 429 asking to pause 5000 s, far
    past the run's 10 s deadline: the report, paid for, is still read and stored in time."""
    with serve(latency_ms=0, deep_research_seconds=2) as sim, Misbehaving(sim) as bad:
        bad.poll_retry_after = 5000
        update = {"base_url": bad.url, "timeout_ms": 2_000, "deep_research_timeout_ms": 10_000}
        with Researcher(settings.model_copy(update=update), async_deep_research=True) as r:
            cid = _queued(r)
            started = time.monotonic()
            report = r.wait(cid, timeout=60)
            elapsed = time.monotonic() - started
            status = r.status(cid)
            assert _answers(r, cid) == [report.text]
        billed = _billed(sim)
    assert status is not None and status.status == "completed" and status.attempts == 1
    assert elapsed < 10
    assert billed[1] == 1


def test_a_run_past_its_deadline_says_it_could_not_be_read_and_that_a_cancel_was_sent(
    settings: Settings, bad: Misbehaving, sim_url: str
) -> None:
    """Every poll fails until the deadline: the message says the run could not be read (not
    that it was still running) and that the cancel sent for it went unconfirmed."""
    bad.poll_outage = 60.0
    update = {"timeout_ms": 500, "deep_research_timeout_ms": 2_000}
    with _researcher(settings, bad, **update) as r:
        cid = _queued(r)
        with pytest.raises(APITimeoutError) as caught:
            r.wait(cid, timeout=60)
    message = str(caught.value)
    assert "could not be read (" in message and "on its last poll" in message
    assert "the API did not confirm the cancel sent for it" in message
    assert "still running" not in message
    assert bad.requests["POST /v1/responses"] == 1  # the cancel was sent
    assert _billed(sim_url)[1] == 1


_BLOCKING_RESEARCH = """
import sys
from pplx_nb import Researcher, Settings
settings = Settings(
    api_key=sys.argv[3], base_url=sys.argv[1], offline=False, conversation_logs_dir=sys.argv[2]
)
with Researcher(settings) as r:
    r.deep_research("Describe the json module", wait=True)
"""


def _marked_run(logs_dir: Path, timeout: float) -> tuple[str, str | None]:
    """The conversation being answered under ``logs_dir`` and the run its mark names, once it
    names one (or ``None`` after ``timeout`` seconds)."""
    import json

    until = time.monotonic() + timeout
    found = ""
    while time.monotonic() < until:
        for mark in logs_dir.glob("*/.answering"):
            found = mark.parent.name
            try:
                run = json.loads(mark.read_text()).get("remoteId")
            except (OSError, ValueError):
                continue
            if run:
                return found, str(run)
        time.sleep(0.05)
    return found, None


def _killed_while_researching(sim: str, logs_dir: Path) -> tuple[str, str | None]:
    """Run ``deep_research(wait=True)`` in a child process and SIGKILL it once the question's
    mark names its run (or after 30 s); the conversation and that run."""
    child = subprocess.Popen(
        [sys.executable, "-c", _BLOCKING_RESEARCH, sim, str(logs_dir), TEST_KEY],
        env={**os.environ, "PPLX_NB_OFFLINE": "0"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        cid, run = _marked_run(logs_dir, timeout=30)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert cid, "the question was never stored"
    return cid, run


def test_a_blocking_deep_research_killed_after_submission_leaves_its_run_and_an_unknown_cost(
    settings: Settings, logs_dir: Path
) -> None:
    """SIGKILL while ``deep_research(wait=True)`` waits for its run: whoever closes the open
    question later names the run (so its report can still be read) and marks its cost
    unknown (so exports do not count it as free)."""
    from pplx_nb.export import to_dataframe

    with serve(latency_ms=0, deep_research_seconds=60) as sim:
        cid, run = _killed_while_researching(sim, logs_dir)
        assert _billed(sim)[0] == 1
        with Researcher(settings.model_copy(update={"base_url": sim})) as r:
            r.followup(cid, "What does json.dumps return?")
            messages = r.history(cid).messages
            frame = to_dataframe(r.store, "conversations")
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    closing = messages[1].unanswered
    assert run is not None and run.startswith("resp_")
    assert closing is not None and closing.state == "interrupted"
    assert closing.remote_id == run and closing.cost_unknown is True
    assert frame["unknown_costs"].tolist() == [1]


@pytest.mark.parametrize("wait", [True, False], ids=["blocking", "queued"])
def test_retry_after_a_killed_deep_research_collects_its_run_without_paying_again(
    settings: Settings, logs_dir: Path, wait: bool
) -> None:
    with serve(latency_ms=0, deep_research_seconds=8) as sim:
        cid, run = _killed_while_researching(sim, logs_dir)
        assert run is not None
        update = {"base_url": sim}
        with Researcher(settings.model_copy(update=update), async_deep_research=True) as r:
            retried = r.retry(cid, wait=wait)
            report = retried if isinstance(retried, Answer) else r.wait(cid, timeout=60)
            messages = r.history(cid).messages
        billed = _billed(sim)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[1].unanswered is not None and messages[1].unanswered.remote_id == run
    assert messages[-1].unanswered is None and messages[-1].content == report.text
    assert report.text and report.cost is not None
    assert billed == (1, 0)  # the one run the killed process paid for, read twice


def test_retry_of_a_job_whose_run_could_not_be_read_collects_it_without_paying_again(
    settings: Settings, bad: Misbehaving, sim_url: str
) -> None:
    """Every read of the job's run is a 200 that is not JSON: the job fails (its run never
    submitted again) and its closing turn names the run, which retry then reads by its id."""
    bad.garbage_polls = True
    with _researcher(settings, bad, max_retries=0) as r:
        cid = _queued(r)
        with pytest.raises(APIServerError, match="cannot read"):
            r.wait(cid, timeout=60)
        with r.store.locked(cid):  # the job ends, then closes its question, in one locked step
            status = r.status(cid)
        assert status is not None and status.status == "failed" and status.remote_id
        closing = r.history(cid).messages[-1].unanswered
        assert closing is not None and closing.remote_id == status.remote_id
        assert closing.cost_unknown is True
        bad.garbage_polls = False
        report = r.retry(cid, wait=True)
        assert isinstance(report, Answer) and _answers(r, cid) == [report.text]
    assert bad.requests["POST /v1/agent"] == 1
    assert _billed(sim_url) == (1, 1)  # one run, the job's, paid once and read twice


def test_a_submission_refused_before_it_reached_the_api_is_sent_again(
    settings: Settings, bad: Misbehaving, sim_url: str
) -> None:
    bad.refuse_submissions = 2
    with _researcher(settings, bad) as r:
        cid = _queued(r)
        r.wait(cid, timeout=60)
        status = r.status(cid)
    assert status is not None and status.status == "completed" and status.attempts == 1
    assert bad.requests["POST /v1/agent"] == 3
    assert _billed(sim_url)[1] == 1


def test_a_job_whose_worker_died_mid_submission_is_not_submitted_again(
    settings: Settings, sim_url: str
) -> None:
    with Researcher(settings, async_deep_research=False) as r:
        cid = _queued(r)
        job = _queue(r).claim("dying-worker")
        assert job is not None
        _queue(r).begin_submission(job)  # then it died before the reply arrived
        _queue(r).release(job)
        with pytest.raises(SubmissionUnknown, match="stopped while its reply was arriving"):
            r.wait(cid, timeout=30)
    assert _billed(sim_url)[1] == 0


def test_a_run_whose_id_cannot_be_recorded_is_still_polled_not_paid_again(
    settings: Settings, sim_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pplx_nb.jobs import JobQueue

    def disk_full(self: JobQueue, job: object, remote_id: str) -> None:
        raise FilesystemError("Could not write status.json: No space left on device.")

    monkeypatch.setattr(JobQueue, "set_remote_id", disk_full)
    with Researcher(settings, async_deep_research=True) as r:
        cid = _queued(r)
        report = r.wait(cid, timeout=60)
        status = r.status(cid)
    assert report.text and status is not None and status.attempts == 1
    assert _billed(sim_url)[1] == 1


# -- 3. every wait has a deadline ---------------------------------------------------------------


def test_a_never_ending_run_is_cancelled_at_its_deadline_and_the_conversation_stays_open(
    settings: Settings, bad: Misbehaving, sim_url: str
) -> None:
    bad.never_ending = True
    with _researcher(settings, bad, deep_research_timeout_ms=3_000) as r:
        cid = _queued(r)
        started = time.monotonic()
        with pytest.raises(APITimeoutError, match="PERPLEXITY_DEEP_RESEARCH_TIMEOUT") as caught:
            r.wait(cid, timeout=60)
        elapsed = time.monotonic() - started
        status = r.status(cid)
        assert caught.value.code == "TIMEOUT_ERROR"
        assert status is not None and status.status == "failed" and status.attempts == 1
        assert bad.requests["POST /v1/responses"] == 1  # the cancel
        assert status.remote_id is None
        followup = r.followup(cid, "What does json.dumps return?")
    assert 3 <= elapsed < 30
    assert isinstance(followup, Answer) and followup.text
    assert _billed(sim_url)[1] == 1


def test_an_answer_whose_run_requires_action_is_stopped_once_and_its_cost_is_stored(
    researcher: Researcher, sim_url: str
) -> None:
    inject_faults(sim_url, {"requires_action": True, "path": "/v1/agent"})
    with pytest.raises(RunRequiresAction, match="requires_action") as caught:
        researcher.search("How do I cancel an asyncio task?")
    error = caught.value
    assert error.code == "RUN_REQUIRES_ACTION" and error.cost is not None
    counters = stats(sim_url)
    assert counters["generations"] == 1 and counters["requests"]["POST /v1/agent"] == 1
    closing = researcher.history(researcher.conversations()[0].conversation_id).messages[-1]
    assert closing.unanswered is not None and closing.unanswered.code == "RUN_REQUIRES_ACTION"
    assert closing.cost is not None and closing.cost.total_cost == error.cost.total_cost > 0
    assert closing.unanswered.cost_unknown is None, "its cost is known: the run reported it"


@pytest.mark.parametrize("wait", [True, False], ids=["blocking", "queued"])
def test_a_deep_research_whose_run_requires_action_fails_at_once_billed_once(
    settings: Settings, sim_url: str, wait: bool
) -> None:
    inject_faults(sim_url, {"requires_action": True, "path": "/v1/agent"})
    long = settings.model_copy(update={"deep_research_timeout_ms": 600_000})
    started = time.monotonic()
    with Researcher(long, async_deep_research=not wait) as r:
        with pytest.raises(RunRequiresAction):
            if wait:
                r.deep_research("Describe the json module", wait=True)
            else:
                r.wait(_queued(r), timeout=120)
        cid = r.conversations()[0].conversation_id
        status = r.status(cid)
        closing = r.history(cid).messages[-1]
    assert time.monotonic() - started < 60, "not polled until its 600 s deadline"
    assert closing.unanswered is not None and closing.unanswered.code == "RUN_REQUIRES_ACTION"
    assert closing.cost is not None and closing.cost.total_cost > 0
    assert closing.unanswered.cost_unknown is None
    counters = stats(sim_url)
    assert counters["generations"] == 1 and counters["requests"]["POST /v1/agent"] == 1
    if not wait:
        assert status is not None and status.status == "failed" and status.attempts == 1
        assert status.error is not None and status.error.code == "RUN_REQUIRES_ACTION"
        assert counters["background_runs"] == 1


@pytest.mark.parametrize("kind", ["ping", "drip"])
def test_a_stream_of_pings_or_dripping_text_ends_within_four_timeouts(
    settings: Settings, bad: Misbehaving, sim_url: str, kind: str
) -> None:
    bad.stream = kind
    with _researcher(settings, bad, timeout_ms=1_000) as r:
        started = time.monotonic()
        with pytest.raises(APITimeoutError):
            for _ in r.stream_search("How do I cancel an asyncio task?"):
                pass
        elapsed = time.monotonic() - started
        assert r.conversations() == []  # a failed search costs nothing and leaves nothing
    assert elapsed < 4.0


@pytest.mark.parametrize("kind", ["drip", "in_progress"])
def test_a_deep_research_whose_stream_never_ends_stops_within_a_second_of_its_deadline(
    settings: Settings, bad: Misbehaving, kind: str
) -> None:
    """Its stream names the run, then drips text or says ``in_progress`` forever (and so does
    every read of the run by its id, for ``in_progress``): it is never sent again, and
    reading it back after the deadline must not add a poll's own timeout. Timed from the
    request's arrival: storing the question before it is no part of the deadline."""
    bad.stream = kind
    with _researcher(settings, bad, timeout_ms=5_000, deep_research_timeout_ms=2_000) as r:
        with pytest.raises(SubmissionUnknown, match="may be billed"):
            r.deep_research("Describe the json module", wait=True)
        ended = time.monotonic()
    assert bad.stream_started is not None
    elapsed = ended - bad.stream_started
    assert elapsed < 2.0 + 1.0, f"took {elapsed:.1f} s"
    assert bad.requests["POST /v1/agent"] == 1


def test_wait_without_a_worker_runs_the_job_in_process(settings: Settings, sim_url: str) -> None:
    with Researcher(settings, async_deep_research=False) as r:
        cid = _queued(r)
        report = r.wait(cid, timeout=30)
    assert report.text and _billed(sim_url)[1] == 1


def test_wait_on_a_job_whose_worker_died_recovers_it_in_process(
    settings: Settings, sim_url: str
) -> None:
    with Researcher(settings, async_deep_research=False) as r:
        cid = _queued(r)
        assert _queue(r).claim("dead-worker") is not None  # then it died, heartbeating no more
        started = time.monotonic()
        report = r.wait(cid, timeout=60)
        status = r.status(cid)
    assert report.text and time.monotonic() - started < 30
    assert status is not None and status.attempts == 2
    assert [e.code for e in status.error_history] == ["JOB_LEASE_EXPIRED"]
    assert _billed(sim_url)[1] == 1


def test_the_readme_python_snippet_runs_as_a_script(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    snippet = re.search(r"## In Python\n\n```python\n(.*?)```", readme, re.S)
    assert snippet is not None
    script = tmp_path / "snippet.py"
    script.write_text(snippet.group(1) + "print('REPORT', len(report.text), len(df))\n")
    env = {
        **os.environ,
        "PPLX_NB_OFFLINE": "1",
        "PPLX_NB_SIM_LATENCY_MS": "0",
        "PPLX_NB_SIM_DEEP_RESEARCH_SECONDS": "1",
        "CONVERSATION_LOGS_DIR": str(tmp_path / "logs"),
        "XDG_CACHE_HOME": os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache")),
    }
    env.pop("PERPLEXITY_API_KEY", None)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-2000:]
    assert "REPORT" in done.stdout
    assert elapsed < 30, f"took {elapsed:.1f} s"


# -- 4. check before paying ---------------------------------------------------------------------


@pytest.fixture
def read_only(logs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Call it to make ``logs_dir`` refuse every write as a read-only file system does (EROFS).

    Patched at the OS calls, because the tests may run as root, whom file modes do not stop.
    """
    root = str(logs_dir)
    writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT

    def refuse(path: object) -> None:
        if str(path).startswith(root):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    real_open, real_mkdir, real_link = os.open, os.mkdir, os.link

    def fake_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & writes:
            refuse(path)
        return real_open(path, flags, *args, **kwargs)

    def fake_mkdir(path: Any, *args: Any, **kwargs: Any) -> None:
        refuse(path)
        real_mkdir(path, *args, **kwargs)

    def fake_link(source: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        refuse(target)
        real_link(source, target, *args, **kwargs)

    def apply() -> None:
        monkeypatch.setattr(os, "open", fake_open)
        monkeypatch.setattr(os, "mkdir", fake_mkdir)
        monkeypatch.setattr(os, "link", fake_link)

    return apply


def test_a_read_only_store_fails_before_anything_is_billed(
    settings: Settings, sim_url: str, read_only: Callable[[], None]
) -> None:
    with Researcher(settings, async_deep_research=False) as r:
        cid = r.search("How do I cancel an asyncio task?").conversation_id or ""
        before = _billed(sim_url)
        read_only()
        asks: list[Callable[[], object]] = [
            lambda: r.search("What is asyncio.timeout?"),
            lambda: list(r.stream_search("What is asyncio.timeout?")),
            lambda: r.deep_research("Describe the json module", wait=True),
            lambda: r.deep_research("Describe the json module", wait=False),
            lambda: r.followup(cid, "and how do I wait for it?"),
            lambda: r.followup(cid, "Describe the json module", mode="research", wait=True),
            lambda: r.followup(cid, "Describe the json module", mode="research", wait=False),
        ]
        for ask in asks:
            with pytest.raises(FilesystemError, match="Read-only file system"):
                ask()
        assert _billed(sim_url) == before


# -- 5. bounded reads ---------------------------------------------------------------------------


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "until-close"])
def test_a_300_mib_body_is_refused_with_a_clear_error_and_nothing_stored(
    settings: Settings, bad: Misbehaving, declared: bool
) -> None:
    import resource

    bad.huge_body_mib = 300
    bad.huge_declared = declared
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with _researcher(settings, bad, timeout_ms=20_000) as r:
        with pytest.raises(APIServerError, match="more than 32 MiB") as caught:
            r.search("How do I cancel an asyncio task?")
        assert "PPLX_NB_MAX_RESPONSE_MB" in str(caught.value)
        assert r.conversations() == []
    grew_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before) / 1024
    assert bad.requests["POST /v1/agent"] == 1  # not retried
    assert bad.bytes_sent < 100 * 2**20 and grew_mib < 150


def test_a_stream_over_the_size_cap_is_refused(settings: Settings, bad: Misbehaving) -> None:
    bad.stream = "drip"
    bad.drip_every = 0.001
    with (
        _researcher(settings, bad, timeout_ms=20_000, max_response_mb=0.05) as r,
        pytest.raises(APIServerError, match=r"more than 0\.05 MiB"),
    ):
        list(r.stream_search("How do I cancel an asyncio task?"))


# -- 7. clean delete, consistent ids, all-or-nothing enqueue ------------------------------------


def _files_mentioning(root: Path, text: str) -> list[Path]:
    return [
        path for path in root.rglob("*") if path.is_file() and text.encode() in path.read_bytes()
    ]


def test_deleting_a_conversation_with_a_queued_job_leaves_no_trace(
    settings: Settings, logs_dir: Path
) -> None:
    question = "Describe the zipfile module in depth"
    with Researcher(settings, async_deep_research=False) as r:
        cid = _queued(r, question)
        assert _files_mentioning(logs_dir, question)
        r.store.delete(cid)
        assert _files_mentioning(logs_dir, question) == []
        assert not [p for p in logs_dir.rglob("*") if cid in p.name]
        assert _queue(r).pending_count() == 0
        assert _queue(r).claim("w") is None


def test_a_folder_whose_inner_id_differs_is_corrupted_before_anything_is_billed(
    settings: Settings, sim_url: str, logs_dir: Path
) -> None:
    with Researcher(settings, async_deep_research=False) as r:
        cid = r.search("How do I cancel an asyncio task?").conversation_id or ""
        copy = f"{cid[:9]}{int(cid[9:]) + 1:013d}"
        shutil.copytree(logs_dir / cid, logs_dir / copy)
        before = _billed(sim_url)
        asks: list[Callable[[], object]] = [
            lambda: r.followup(copy, "and how do I wait for it?"),
            lambda: r.followup(copy, "Describe the json module", mode="research", wait=True),
            lambda: r.followup(copy, "Describe the json module", mode="research", wait=False),
        ]
        for ask in asks:
            with pytest.raises(ConversationCorrupted, match=cid):
                ask()
        assert _billed(sim_url) == before
        assert r.status(copy) is None and len(r.history(cid).messages) == 2


@pytest.mark.parametrize("fails_at", ["job.json", "status.json", "marker"])
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_failed_enqueue_rolls_back_completely(
    settings: Settings,
    sim_url: str,
    logs_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    fails_at: str,
    code: int,
) -> None:
    from pplx_nb.jobs import _index

    def fail(*args: Any, **kwargs: Any) -> None:
        raise OSError(code, os.strerror(code))

    real_replace = os.replace

    def failing_replace(source: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        if os.path.basename(target) == fails_at:
            fail()
        real_replace(source, target, *args, **kwargs)

    with Researcher(settings, async_deep_research=False) as r:
        cid = r.search("How do I cancel an asyncio task?").conversation_id or ""
        before = (logs_dir / cid / "conversation.json").read_bytes()
        with monkeypatch.context() as patch:
            if fails_at == "marker":
                patch.setattr(_index, "_make_marker", fail)
            else:
                patch.setattr(os, "replace", failing_replace)
            with pytest.raises(FilesystemError, match=os.strerror(code)):
                r.deep_research("Describe the json module", wait=False)
            with pytest.raises(FilesystemError, match=os.strerror(code)):
                r.followup(cid, "Describe the json module", mode="research", wait=False)
        assert r.store.ids() == [cid]
        assert (logs_dir / cid / "conversation.json").read_bytes() == before
        assert sorted(p.name for p in (logs_dir / cid).iterdir() if p.is_file()) == [
            ".lock",
            "conversation.json",
        ]
        assert _queue(r).recover_stale() == 0 and _queue(r).pending_count() == 0
        # A worker that has looked at the queue three times found nothing to take.
        queue = _queue(r)
        real_claim = queue.claim
        claimed: list[object] = []
        looked = threading.Event()

        def claim(worker_id: str) -> object:
            claimed.append(real_claim(worker_id))
            if len(claimed) >= 3:
                looked.set()
            return claimed[-1]

        monkeypatch.setattr(queue, "claim", claim)
        worker = Worker(queue, job_runner(r), concurrency=1, poll_interval=0.05)
        worker.start()
        assert looked.wait(60), "the worker never polled the queue"
        worker.stop()
        assert set(claimed) == {None}
        follow = r.followup(cid, "and how do I wait for it?")
    assert isinstance(follow, Answer)
    assert _billed(sim_url)[1] == 0


def test_pplx_retry_resubmits_an_unanswered_question_once(settings: Settings, sim_url: str) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from pplx_nb._models import Message
    from pplx_nb.notebook import magics
    from pplx_nb.research import SYSTEM_PROMPT

    with Researcher(settings, async_deep_research=True) as r:
        question = [
            Message(role="system", content=SYSTEM_PROMPT),
            Message(role="user", content="Describe the json module"),
        ]
        waited = r.store.create(question).conversation_id
        queued = r.store.create(question).conversation_id
        shell = InteractiveShell.instance()
        magics.set_researcher(r)
        shell.run_line_magic("load_ext", "pplx_nb")
        try:
            with capture_output():
                report = shell.run_cell(f"%pplx_retry {waited} --wait").result
                job = shell.run_cell(f"%pplx_retry {queued}").result
                done = shell.run_cell(f"%pplx_wait {queued} --timeout 60").result
            with capture_output() as refused:
                again = shell.run_cell(f"%pplx_retry {waited}").result
        finally:
            shell.run_line_magic("unload_ext", "pplx_nb")
            magics.set_researcher(None)
    assert isinstance(report, Answer) and report.conversation_id == waited
    assert isinstance(job, JobStatus) and isinstance(done, Answer)
    shown = "\n".join(str(value) for output in refused.outputs for value in output.data.values())
    assert again is None and "no unanswered question" in shown + refused.stdout
    assert _billed(sim_url) == (2, 1)
