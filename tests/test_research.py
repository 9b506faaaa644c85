"""The Researcher façade against the simulator over loopback, with a real store and job queue."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from pplx_nb import (
    Answer,
    ConversationNotFound,
    JobInProgress,
    JobStatus,
    Researcher,
    Settings,
    ValidationError,
)
from pplx_nb._models import Progress, Usage
from pplx_nb._pricing import estimate_cost
from pplx_nb.api import AsyncClient
from pplx_nb.backends import open_backends, open_queue
from pplx_nb.sim import inject_faults, stats


@pytest.fixture
def researcher(settings: Settings) -> Iterator[Researcher]:
    """A Researcher on the test's simulator, its conversations and jobs in memory (the tests
    that take it look at them only through the façade); deep research blocks."""
    backends = open_backends(settings, memory=True)
    with Researcher(settings, backends=backends, async_deep_research=False) as r:
        yield r


@pytest.fixture
def async_researcher(settings: Settings) -> Iterator[Researcher]:
    """:func:`researcher` whose deep research is queued for its in-process worker."""
    backends = open_backends(settings, memory=True)
    with Researcher(settings, backends=backends, async_deep_research=True) as r:
        yield r


def _file(answer: Answer) -> dict[str, object]:
    assert answer.conversation_path is not None
    data: dict[str, object] = json.loads(
        (Path(answer.conversation_path) / "conversation.json").read_text()
    )
    return data


def test_search_creates_a_conversation_with_system_user_and_cited_answer(
    researcher: Researcher,
) -> None:
    answer = researcher.search("How do I cancel an asyncio task?")
    assert answer.text and answer.sources
    assert all(s.url.startswith("https://docs.python.org/3/") for s in answer.sources)
    data = researcher.store.read_raw(answer.conversation_id or "")
    roles = [m["role"] for m in data["messages"]]  # type: ignore[index]
    assert roles == ["system", "user", "assistant"]
    assistant = data["messages"][2]  # type: ignore[index]
    assert assistant["tool"] == "perplexity_search"
    assert assistant["model"]
    assert assistant["sources"] and assistant["usage"]["totalTokens"] > 0
    assert assistant["cost"]["totalCost"] > 0
    assert assistant["timestamp"].endswith("Z")
    assert data["messageCount"] == 3
    assert researcher.status(answer.conversation_id or "") is None


def test_streaming_yields_deltas_that_add_up_to_the_stored_answer(researcher: Researcher) -> None:
    items = list(researcher.stream_search("What does pathlib.Path.glob do?"))
    deltas = [i for i in items if isinstance(i, str)]
    final = items[-1]
    assert isinstance(final, Answer)
    assert len(deltas) > 1
    assert "".join(deltas) == final.text
    assert researcher.history(final.conversation_id or "").messages[-1].content == final.text


def test_followups_continue_the_conversation_across_modes(researcher: Researcher) -> None:
    first = researcher.search("How do I cancel an asyncio task?")
    cid = first.conversation_id or ""
    second = researcher.followup(cid, "How do I wait for it to finish?")
    assert isinstance(second, Answer) and second.conversation_id == cid
    third = researcher.followup(
        cid, "Write a report on task cancellation", mode="research", wait=True
    )
    assert isinstance(third, Answer) and third.conversation_id == cid
    fourth = researcher.followup(cid, "Summarise that in one line")
    assert isinstance(fourth, Answer)
    history = researcher.history(cid)
    assert [m.role for m in history.messages] == ["user", "assistant"] * 4
    tools = [m.tool for m in history.messages if m.role == "assistant"]
    assert tools == [
        "perplexity_search",
        "perplexity_search_followup",
        "perplexity_deep_research_followup",
        "perplexity_search_followup",
    ]
    assert researcher.history(cid, include_system=True).messages[0].role == "system"


def test_blocking_deep_research_reports_progress_in_order(researcher: Researcher) -> None:
    seen: list[Progress] = []
    answer = researcher.deep_research(
        "Compare the threading and multiprocessing modules", wait=True, on_progress=seen.append
    )
    assert isinstance(answer, Answer)
    assert answer.text.count("## ") >= 2
    percentages = [p.percentage for p in seen]
    assert percentages[0] == 25 and percentages[-1] == 100
    assert percentages == sorted(percentages) and max(percentages[:-1]) < 100
    # What the run reported doing, in the order it did it.
    messages = [p.message for p in seen]
    searching = next(i for i, m in enumerate(messages) if m.startswith("Searching: "))
    reading = next(i for i, m in enumerate(messages) if m.startswith("Read "))
    assert searching < reading < messages.index("Writing the report...")


def test_async_deep_research_queues_then_completes_and_blocks_followups_meanwhile(
    async_researcher: Researcher,
) -> None:
    queued = async_researcher.deep_research("Explain the asyncio event loop in depth")
    assert isinstance(queued, JobStatus) and queued.status == "pending"
    cid = queued.conversation_id
    with pytest.raises(JobInProgress) as info:
        async_researcher.followup(cid, "and what about uvloop?")
    assert info.value.code == "JOB_IN_PROGRESS"
    report = async_researcher.wait(cid, timeout=30)
    assert report.text and report.sources
    status = async_researcher.status(cid)
    assert status is not None and status.status == "completed"
    after = async_researcher.followup(cid, "What is a coroutine?")
    assert isinstance(after, Answer)
    roles = [m.role for m in async_researcher.history(cid).messages]
    assert roles == ["user", "assistant", "user", "assistant"]


def test_wait_returns_the_jobs_report_after_the_conversation_moved_on(
    async_researcher: Researcher,
) -> None:
    """A monitor that reads the result late (follow-ups already answered) still gets the
    report its job stored, not the newest answer."""
    queued = async_researcher.deep_research("Explain the asyncio event loop in depth")
    assert isinstance(queued, JobStatus)
    cid = queued.conversation_id
    report = async_researcher.wait(cid, timeout=30)
    later = async_researcher.followup(cid, "What is a coroutine?")
    assert later.text != report.text
    again = async_researcher.wait(cid, timeout=5)
    assert (again.text, again.model) == (report.text, report.model)


def _resume_after_a_crash(r: Researcher, remote_id: str) -> tuple[str, Answer]:
    """Queue a job, let a worker that then crashes claim it with ``remote_id`` recorded, and
    run it on a fresh worker; the conversation id and the report."""
    from pplx_nb.jobs import Worker
    from pplx_nb.research import job_runner

    queue = open_queue(r.settings)
    queued = r.deep_research("Describe the json module", wait=False)
    assert isinstance(queued, JobStatus)
    job = queue.claim("crashed-worker")
    assert job is not None
    queue.set_remote_id(job, remote_id)
    queue.release(job)
    worker = Worker(queue, job_runner(r), concurrency=1)
    worker.start()
    try:
        return queued.conversation_id, r.wait(queued.conversation_id, timeout=30)
    finally:
        worker.stop()


def test_a_recovered_job_resumes_its_remote_run_instead_of_paying_twice(
    settings: Settings, sim_url: str
) -> None:
    from pplx_nb.api import AsyncClient, Request

    async def submit() -> str:
        async with AsyncClient(settings) as client:
            return await client.submit_background(
                Request(
                    messages=[{"role": "user", "content": "Describe the json module"}],
                    model="sonar-deep-research",
                )
            )

    r = Researcher(settings, async_deep_research=False)
    try:
        remote_id = asyncio.run(submit())
        before = stats(sim_url)["background_runs"]
        _, report = _resume_after_a_crash(r, remote_id)
        assert report.text
        assert stats(sim_url)["background_runs"] == before
    finally:
        r.close()


BAD_OPTION_VALUES = [
    ("search_recency_filter", "decade", "one of hour, day, week, month, year"),
    ("search_domain_filter", ["a.com"] * 25, "at most 20"),
    ("search_domain_filter", "python.org", "must be a list of domains"),
    ("search_domain_filter", ["python.org", ""], "'' in search_domain_filter is not a domain"),
    ("search_domain_filter", ["-"], "'-' in search_domain_filter is not a domain"),
    ("search_domain_filter", ["javascript:alert(1)"], "is not a domain"),
    ("search_domain_filter", ["a b c"], "is not a domain"),
    ("search_after_date_filter", "2025-01-01", "use MM/DD/YYYY, e.g. 01/31/2025"),
    ("search_before_date_filter", "13/45/2025", "use MM/DD/YYYY"),
    ("search_before_date_filter", "01/31/\u0662\u0660\u0662\u0665", "use MM/DD/YYYY"),
    ("reasoning_effort", "max", "one of minimal, low, medium, high"),
    ("search_mode", "foo", "one of web, academic, sec"),
    ("return_images", "yes", "True or False"),
    ("model", "", "not a model name"),
]


def test_bad_input_is_refused_before_any_call(researcher: Researcher, sim_url: str) -> None:
    with pytest.raises(ValidationError):
        researcher.search("   ")
    with pytest.raises(ValidationError, match="limit"):
        researcher.search("x" * 40_000)
    with pytest.raises(ValidationError, match="Unknown option"):
        researcher.search("hello", colour="blue")
    for option, value, accepted in BAD_OPTION_VALUES:
        with pytest.raises(ValidationError, match=accepted):
            researcher.search("hello", **{option: value})
    with pytest.raises(ValidationError, match="one of web, academic, sec"):
        researcher.deep_research("hello", wait=True, search_mode="foo")
    with pytest.raises(ValidationError):
        researcher.followup("../../etc/passwd", "hi")
    with pytest.raises(ConversationNotFound) as info:
        researcher.followup("20250124-1706102400123", "hi")
    assert "perplexity_search" in str(info.value)
    assert stats(sim_url)["generations"] == 0


def test_an_after_date_later_than_the_before_date_is_refused_naming_both(
    researcher: Researcher, sim_url: str
) -> None:
    dates = {"search_after_date_filter": "02/01/2025", "search_before_date_filter": "01/31/2025"}
    for ask in (researcher.search, researcher.stream_search):
        with pytest.raises(ValidationError) as refused:
            result = ask("hello", **dates)
            if not isinstance(result, Answer):
                list(result)  # a stream is checked when it starts
        assert str(refused.value).startswith(
            "search_after_date_filter='02/01/2025' is later than "
            "search_before_date_filter='01/31/2025'"
        )
    with pytest.raises(ValidationError, match="is later than"):
        researcher.deep_research("hello", wait=True, **dates)
    assert stats(sim_url)["generations"] == 0
    same_day = {"search_after_date_filter": "01/31/2025", "search_before_date_filter": "1/31/2025"}
    assert researcher.search("What is asyncio.gather?", **same_day).text


def test_a_web_address_in_the_domain_filter_is_cut_to_its_site(researcher: Researcher) -> None:
    answer = researcher.search(
        "What is asyncio.gather?",
        search_domain_filter=[
            " https://Docs.Python.org/3/library/ ",
            "-https://www.pinterest.com/x",
        ],
    )
    assert answer.sources and all(s.domain == "docs.python.org" for s in answer.sources)


def test_good_option_values_pass(researcher: Researcher) -> None:
    answer = researcher.search(
        "What is asyncio.gather?",
        search_recency_filter="year",
        search_domain_filter=["docs.python.org", "-pinterest.com"],
        search_after_date_filter="1/31/2020",
        search_before_date_filter="12/31/2030",
        search_mode="web",
        return_images=True,
    )
    assert answer.text


def test_an_effort_is_reported_in_the_answer_and_its_stored_turn(researcher: Researcher) -> None:
    answer = researcher.search("What is asyncio.gather?", effort="fast@2026-10-16.0")
    assert (answer.effort, answer.preset) == ("fast@2026-10-16.0", "fast@2026-10-16.0")
    document = researcher.store.read_raw(answer.conversation_id or "")
    stored = document["messages"][-1]
    assert (stored["effort"], stored["preset"]) == ("fast@2026-10-16.0", "fast@2026-10-16.0")
    again = researcher.history(answer.conversation_id or "").messages[-1]
    assert again.effort == "fast@2026-10-16.0"
    with pytest.raises(ValidationError, match="not an effort"):
        researcher.search("What is asyncio.gather?", effort="turbo")


def test_preset_is_taken_as_effort_with_one_warning_and_effort_wins(
    researcher: Researcher, caplog: pytest.LogCaptureFixture
) -> None:
    from pplx_nb._options import _warn_preset

    _warn_preset.cache_clear()
    with caplog.at_level("WARNING", logger="pplx_nb"):
        first = researcher.search("What is asyncio.gather?", preset="low")
        both = researcher.search("What is asyncio.wait?", preset="low", effort="fast")
    assert first.effort == "low" and both.effort == "fast"
    warned = [r for r in caplog.records if "preset option is deprecated" in r.getMessage()]
    assert len(warned) == 1


def test_a_search_answer_is_searched_and_one_that_was_not_is_marked(
    researcher: Researcher, sim_url: str
) -> None:
    answer = researcher.search("What is asyncio.gather?")
    assert answer.searched is True and answer.sources and not answer.notes
    inject_faults(sim_url, {"unsearched": True, "path": "/v1/agent"})
    alone = researcher.search("What is asyncio.wait?")
    assert alone.searched is False and not alone.sources
    assert alone.notes and alone.notes[-1].startswith("No web search was made for this answer")
    assert "No web search was made" in alone.to_markdown()
    stored = researcher.history(alone.conversation_id or "").messages[-1]
    assert stored.notes == alone.notes
    assert stats(sim_url)["generations"] == 2


def test_fork_continues_in_a_child_and_leaves_the_parent_alone(researcher: Researcher) -> None:
    first = researcher.search("What is itertools.groupby?")
    parent = first.conversation_id or ""
    child = researcher.followup(parent, "Show an example of it", fork=True)
    assert isinstance(child, Answer)
    assert child.conversation_id != parent
    assert len(researcher.history(parent).messages) == 2
    assert researcher.history(child.conversation_id or "").parent_conversation_id == parent


def test_metrics_and_health(researcher: Researcher) -> None:
    researcher.search("What is functools.lru_cache?")
    researcher.search("What is functools.lru_cache?")
    with pytest.raises(ValidationError):
        researcher.search("")
    m = researcher.metrics()
    assert m["requests"]["total"] == 3
    assert m["requests"]["success"] == 2 and m["requests"]["failed"] == 1
    assert m["requests"]["cached"] == 1
    assert m["latency"]["p50"] > 0 and m["api"]["tokens"] > 0
    h = researcher.health()
    assert h["status"] == "healthy", h
    assert h["checks"]["store"] and h["checks"]["api"]


def test_health_is_degraded_when_the_api_cannot_be_reached(settings: Settings) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with Researcher(settings.model_copy(update={"base_url": closed})) as r:
        report = r.health()
    assert report["status"] == "degraded", report
    assert report["checks"]["api"] is False and report["checks"]["store"] is True
    assert report["checks"]["cache"] is True


def test_health_is_unhealthy_when_the_store_cannot_be_written(
    settings: Settings, logs_dir: Path
) -> None:
    logs_dir.chmod(0o500)
    try:
        if os.access(logs_dir, os.W_OK):
            pytest.skip("running as root: a read-only mode does not stop writes")
        with Researcher(settings) as researcher:
            report = researcher.health()
    finally:
        logs_dir.chmod(0o700)
    assert report["status"] == "unhealthy", report
    assert report["checks"]["store"] is False


def test_health_is_unhealthy_when_the_store_folder_is_a_file(
    settings: Settings, tmp_path: Path
) -> None:
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    with Researcher(settings.model_copy(update={"conversation_logs_dir": blocked})) as r:
        report = r.health()
    assert report["status"] == "unhealthy", report
    assert report["checks"]["store"] is False


def _sonar_with(body: dict[str, Any], settings: Settings) -> Researcher:
    """A Researcher whose API answers every chat completion with ``body``."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json=body)

    sonar = settings.model_copy(update={"api_style": "sonar"})
    return Researcher(sonar, client=AsyncClient(sonar, transport=httpx2.MockTransport(handler)))


COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "sonar-pro",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "A cat [1]."},
            "finish_reason": "stop",
        }
    ],
    "search_results": [{"url": "https://example.org/cats", "title": "Cats"}],
    "images": [
        {
            "image_url": "https://example.org/cat.png",
            "origin_url": "https://example.org/cats",
            "height": 480,
            "width": 640,
        }
    ],
    "usage": {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500},
}


def test_images_are_stored_on_the_answer_message(settings: Settings) -> None:
    with _sonar_with(COMPLETION, settings) as r:
        answer = r.search("Show me a cat", return_images=True)
        stored = r.history(answer.conversation_id or "").messages[-1]
        reloaded = r.wait(answer.conversation_id or "")
    assert answer.images == COMPLETION["images"]
    assert stored.images == [
        {
            "imageUrl": "https://example.org/cat.png",
            "originUrl": "https://example.org/cats",
            "height": 480,
            "width": 640,
        }
    ]
    assert _file(answer)["messages"][-1]["images"] == stored.images  # type: ignore[index]
    assert reloaded.images == answer.images


def test_a_cost_the_api_does_not_give_is_stored_as_a_marked_estimate(settings: Settings) -> None:
    with _sonar_with(COMPLETION, settings) as r:
        answer = r.search("Show me a cat")
    usage = Usage(prompt_tokens=1200, completion_tokens=300, total_tokens=1500)
    expected = estimate_cost("sonar-pro", usage)
    assert answer.cost is not None and answer.cost.estimated
    stored = _file(answer)["messages"][-1]["cost"]  # type: ignore[index]
    assert stored["estimated"] is True
    assert stored["totalCost"] == pytest.approx(expected.total_cost) and expected.total_cost > 0


def test_an_answer_without_usage_is_stored_with_its_cost_unknown(settings: Settings) -> None:
    bare = {key: value for key, value in COMPLETION.items() if key != "usage"}
    with _sonar_with(bare, settings) as r:
        answer = r.search("Show me a cat")
    assert answer.usage is None and answer.cost is None
    stored = _file(answer)["messages"][-1]  # type: ignore[index]
    assert "cost" not in stored and "usage" not in stored


def test_sync_methods_work_while_an_event_loop_runs_in_the_thread(researcher: Researcher) -> None:
    async def inside_a_running_loop() -> Answer:
        return researcher.search("What does re.compile return?")

    answer = asyncio.run(inside_a_running_loop())
    assert answer.text


def test_async_methods_work_in_the_callers_loop(settings: Settings) -> None:
    async def main() -> Answer:
        r = Researcher(settings)
        try:
            answer = await r.asearch("What is a dataclass?")
            more = await r.afollowup(answer.conversation_id or "", "How do I make it frozen?")
            assert isinstance(more, Answer)
            return more
        finally:
            await r.aclose()

    assert asyncio.run(main()).text


def test_estimated_cost_is_marked_and_follows_the_price_table() -> None:
    cost = estimate_cost("sonar-pro", Usage(prompt_tokens=1_000_000, completion_tokens=1_000_000))
    assert cost.estimated
    assert cost.input_cost == pytest.approx(3.0)
    assert cost.output_cost == pytest.approx(15.0)
    assert cost.total_cost == pytest.approx(18.0 + cost.request_cost)


def test_attached_files_are_embedded_once_per_conversation(
    settings: Settings, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("Our service cancels tasks with TaskGroup on shutdown.\n")
    r = Researcher(settings.model_copy(update={"file_roots": (tmp_path,)}))
    try:
        first = r.search("How should we cancel tasks?", files=[notes])
        cid = first.conversation_id or ""
        r.followup(cid, "And timeouts?", files=[notes], mode="research", wait=True)
        notes.write_text("We moved to asyncio.timeout for shutdown.\n")
        r.followup(cid, "Is that still right?", files=[notes])
        users = [m for m in r.history(cid).messages if m.role == "user"]
        assert "TaskGroup on shutdown" in users[0].content
        assert users[0].files and users[0].files[0]["sha256"]
        assert "TaskGroup on shutdown" not in users[1].content and not users[1].files
        assert "asyncio.timeout for shutdown" in users[2].content
        assert users[2].files and users[2].files[0]["sha256"] != users[0].files[0]["sha256"]
        with pytest.raises(ValidationError):
            r.search("Read this", files=["../../etc/shadow"])
    finally:
        r.close()


def test_the_worker_starts_before_anything_else_touched_the_queue(settings: Settings) -> None:
    r = Researcher(settings, async_deep_research=True)
    try:
        worker = r.ensure_worker(concurrency=1)
        assert worker is r.ensure_worker()
    finally:
        r.close()


def test_a_remote_run_that_failed_is_submitted_again_not_polled_again(
    async_researcher: Researcher, sim_url: str
) -> None:
    from pplx_nb.sim import inject_faults

    inject_faults(sim_url, {"agent_failed": True, "path": "/v1/agent"})
    queued = async_researcher.deep_research("Describe the json module", wait=False)
    assert isinstance(queued, JobStatus)
    report = async_researcher.wait(queued.conversation_id, timeout=30)
    assert report.text
    status = async_researcher.status(queued.conversation_id)
    assert status is not None and status.status == "completed" and status.attempts == 2
    assert "submits a new background run" in status.error_history[0].message
    assert stats(sim_url)["background_runs"] == 2


def test_a_search_followup_that_loses_the_race_to_a_queued_research_followup_is_refused(
    settings: Settings,
) -> None:
    import threading
    import time

    from pplx_nb.sim import serve

    # The search follow-up is reformulated by the model first (300 ms here): the research
    # follow-up stores its question and queues its job meanwhile.
    with serve(latency_ms=300, deep_research_seconds=0.3) as url:
        r = Researcher(settings.model_copy(update={"base_url": url}), async_deep_research=False)
        try:
            cid = r.search("How do I create an asyncio task?").conversation_id or ""
            outcome: list[str] = []

            def search() -> None:
                try:
                    r.followup(cid, "how do I cancel it?")
                    outcome.append("answered")
                except JobInProgress:
                    outcome.append("refused")

            racer = threading.Thread(target=search)
            racer.start()
            time.sleep(0.1)
            queued = r.followup(cid, "Describe the json module", mode="research", wait=False)
            racer.join()
            assert isinstance(queued, JobStatus) and queued.status == "pending"
            assert outcome == ["refused"]
            roles = [m.role for m in r.history(cid).messages]
            assert roles == ["user", "assistant", "user"]
        finally:
            r.close()


def test_a_job_whose_remote_run_is_unknown_is_resubmitted_and_says_so(
    settings: Settings, sim_url: str
) -> None:
    r = Researcher(settings, async_deep_research=False)
    try:
        cid, report = _resume_after_a_crash(r, "resp_expired0123")
        assert report.text
        status = r.status(cid)
        assert status is not None and status.status == "completed" and status.attempts == 1
        [note] = status.error_history
        assert "resp_expired0123 is unknown to the API" in note.message
        assert f"resubmitted as {status.remote_id}" in note.message
        assert stats(sim_url)["background_runs"] == 1
    finally:
        r.close()


PUBLIC_NAMES = {
    "acancel",
    "aclose",
    "adeep_research",
    "aestimate",
    "afollowup",
    "ahealth",
    "answering_since",
    "aretry",
    "asearch",
    "astream_followup",
    "astream_search",
    "async_deep_research",
    "attach_from_working_directory",
    "await_job",
    "aweb_search",
    "budget",
    "cancel",
    "close",
    "conversations",
    "costs",
    "deep_research",
    "ensure_worker",
    "estimate",
    "followup",
    "health",
    "history",
    "jobs",
    "metrics",
    "queue",
    "retry",
    "search",
    "settings",
    "status",
    "store",
    "stream_followup",
    "stream_search",
    "wait",
    "web_search",
}


def test_the_researcher_shows_its_public_names_and_no_more() -> None:
    shown = {name for name in dir(Researcher) if not name.startswith("_")}
    assert shown == PUBLIC_NAMES


def test_every_sync_method_takes_what_its_async_twin_takes() -> None:
    import inspect

    twins = {
        "search": "asearch",
        "stream_search": "astream_search",
        "deep_research": "adeep_research",
        "followup": "afollowup",
        "stream_followup": "astream_followup",
        "retry": "aretry",
        "wait": "await_job",
        "health": "ahealth",
        "cancel": "acancel",
        "web_search": "aweb_search",
        "estimate": "aestimate",
    }
    for sync, async_ in twins.items():
        method, core = getattr(Researcher, sync), getattr(Researcher, async_)
        assert method.__name__ == sync
        assert inspect.signature(method) == inspect.signature(core)
        assert not inspect.iscoroutinefunction(method)
        assert inspect.getdoc(core) in (inspect.getdoc(method) or "")
