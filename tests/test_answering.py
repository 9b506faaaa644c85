"""A follow-up answered on the spot keeps its question and answer together.

Its question is stored with an ``.answering`` marker that the answer removes; meanwhile other
follow-ups of the conversation are refused with JOB_IN_PROGRESS, as during a queued job. Runs
against the simulator over loopback with a real store and queue.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.waiting import poll_until

from pplx_nb import Answer, InvalidInput, JobInProgress, JobStatus, Researcher, Settings
from pplx_nb._layout import ANSWERING_FILE as MARKER
from pplx_nb._models import Progress
from pplx_nb.sim import inject_faults, serve


@pytest.fixture
def slow(settings: Settings) -> Iterator[Researcher]:
    """A Researcher whose every API answer takes 0.8 s (a deep-research run 0.3 s)."""
    with serve(latency_ms=800, deep_research_seconds=0.3) as url:
        r = Researcher(settings.model_copy(update={"base_url": url}), async_deep_research=False)
        try:
            yield r
        finally:
            r.close()


def _roles_and_texts(r: Researcher, cid: str) -> list[tuple[str, str]]:
    return [(m.role, m.content[:40]) for m in r.history(cid).messages]


def _in_background(call: object) -> tuple[threading.Thread, list[object]]:
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())  # type: ignore[operator]
        except Exception as exc:  # the test inspects it
            outcome.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def _wait_for(path: Path, present: bool = True) -> None:
    """Wait (at most 10 s) until ``path`` exists, or until it is gone."""
    poll_until(
        lambda: path.exists() == present,
        10,
        0.01,
        what=f"{path} to {'appear' if present else 'go'}",
    )


def test_a_research_followup_waits_for_the_search_answer_already_on_its_way(
    slow: Researcher,
) -> None:
    cid = slow.search("How do I create an asyncio task?").conversation_id or ""
    marker = slow.store.path(cid) / MARKER
    search, outcome = _in_background(lambda: slow.followup(cid, "Describe the json module"))
    _wait_for(marker)  # the question is stored; its answer is 0.8 s away

    with pytest.raises(JobInProgress) as info:
        slow.followup(cid, "Explain asyncio.gather in depth", mode="research", wait=False)
    assert info.value.code == "JOB_IN_PROGRESS"
    assert "still answering" in info.value.message
    with pytest.raises(JobInProgress):
        slow.followup(cid, "And the csv module?")

    search.join()
    assert isinstance(outcome[0], Answer)
    assert not marker.exists()
    queued = slow.followup(cid, "Explain asyncio.gather in depth", mode="research", wait=False)
    assert isinstance(queued, JobStatus)
    assert _roles_and_texts(slow, cid) == [
        ("user", "How do I create an asyncio task?"),
        ("assistant", _roles_and_texts(slow, cid)[1][1]),
        ("user", "Describe the json module"),
        ("assistant", _roles_and_texts(slow, cid)[3][1]),
        ("user", "Explain asyncio.gather in depth"),
    ]


def test_a_failed_followup_leaves_no_marker_and_the_next_one_goes_through(
    researcher: Researcher, sim_url: str
) -> None:
    r = researcher
    cid = r.search("How do I create an asyncio task?").conversation_id or ""
    inject_faults(sim_url, {"status": 400})
    with pytest.raises(InvalidInput):
        r.followup(cid, "Describe the json module")
    assert not (r.store.path(cid) / MARKER).exists()
    answer = r.followup(cid, "Describe the csv module")
    assert isinstance(answer, Answer) and answer.text


def test_a_followup_whose_request_cannot_be_built_leaves_no_marker(
    researcher: Researcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = researcher
    cid = r.search("How do I create an asyncio task?").conversation_id or ""

    def broken(*args: object, **kwargs: object) -> None:
        raise InvalidInput("The request could not be built.")

    from pplx_nb.research._turns import Turn

    monkeypatch.setattr(Turn, "request", broken)
    with pytest.raises(InvalidInput):
        r.followup(cid, "Describe the json module")
    assert not (r.store.path(cid) / MARKER).exists()
    monkeypatch.undo()
    assert isinstance(r.followup(cid, "Describe the csv module"), Answer)


def test_a_stream_stopped_early_removes_its_marker_at_once(slow: Researcher) -> None:
    cid = slow.search("How do I create an asyncio task?").conversation_id or ""

    async def first_delta() -> None:
        stream = slow.astream_followup(cid, "Describe the json module")
        async for item in stream:
            assert isinstance(item, str)
            break
        await stream.aclose()  # what `async for` leaves to the caller, as a notebook cell does

    asyncio.run(first_delta())
    assert not (slow.store.path(cid) / MARKER).exists()
    assert isinstance(slow.followup(cid, "Describe the csv module"), Answer)


def test_a_sync_stream_closed_early_as_an_interrupted_cell_does_removes_its_marker(
    slow: Researcher,
) -> None:
    cid = slow.search("How do I create an asyncio task?").conversation_id or ""
    marker = slow.store.path(cid) / MARKER
    stream = slow.stream_followup(cid, "Describe the json module")
    assert isinstance(next(iter(stream)), str)
    assert marker.exists()
    stream.close()  # what KeyboardInterrupt in a %%pplx cell does to the stream it was reading
    _wait_for(marker, present=False)
    assert isinstance(slow.followup(cid, "Describe the csv module"), Answer)


def test_a_marker_left_by_a_dead_process_or_past_its_deadline_blocks_nothing(
    researcher: Researcher,
) -> None:
    r, store = researcher, researcher.store
    cid = r.search("How do I create an asyncio task?").conversation_id or ""
    directory = store.path(cid)
    with store.locked(cid):
        token = store.mark_answering(cid, 600)
    with pytest.raises(JobInProgress):
        r.followup(cid, "Describe the json module")  # our own live marker

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stored = json.loads((directory / MARKER).read_text())
    (directory / MARKER).write_text(json.dumps({**stored, "pid": dead.pid}))
    assert store.answering(cid) is None
    assert isinstance(r.followup(cid, "Describe the json module"), Answer)

    with store.locked(cid):
        store.mark_answering(cid, -1)  # a process that hung past every timeout
    assert store.answering(cid) is None
    with store.locked(cid):
        store.clear_answering(cid, token)  # a newer marker is not the old token's to remove
    assert (directory / MARKER).exists()
    (directory / MARKER).write_text("{not json")
    assert store.answering(cid) is None


def test_a_blocking_research_followup_holds_the_conversation_until_its_report_lands(
    slow: Researcher,
) -> None:
    cid = slow.search("How do I create an asyncio task?").conversation_id or ""
    marker = slow.store.path(cid) / MARKER
    research, outcome = _in_background(
        lambda: slow.followup(cid, "Explain asyncio.gather in depth", mode="research", wait=True)
    )
    _wait_for(marker)
    with pytest.raises(JobInProgress):
        slow.followup(cid, "Describe the json module")
    research.join()
    assert isinstance(outcome[0], Answer)
    _wait_for(marker, present=False)
    roles = [role for role, _ in _roles_and_texts(slow, cid)]
    assert roles[-2:] == ["user", "assistant"]


def test_a_progress_callback_failing_at_the_end_costs_neither_the_answer_nor_the_conversation(
    researcher: Researcher,
) -> None:
    r = researcher
    cid = r.search("How do I create an asyncio task?").conversation_id or ""

    def display(progress: Progress) -> None:
        if progress.percentage == 100:
            raise RuntimeError("the display went away")

    with pytest.raises(RuntimeError):
        r.followup(cid, "Explain asyncio.gather", mode="research", wait=True, on_progress=display)
    assert not (r.store.path(cid) / MARKER).exists()
    assert [m.role for m in r.history(cid).messages][-2:] == ["user", "assistant"]
    assert isinstance(r.followup(cid, "Describe the csv module"), Answer)


def test_a_long_streaming_answer_keeps_its_marker_live(
    slow: Researcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pplx_nb.research import _guard

    cid = slow.search("How do I create an asyncio task?").conversation_id or ""
    path = slow.store.path(cid) / MARKER
    monkeypatch.setattr(_guard, "_RENEW_SECONDS", 0.0)  # renew at every delta
    seen: list[dict[str, object]] = []
    for item in slow.stream_followup(cid, "Describe the json module"):
        if isinstance(item, str) and path.exists():
            seen.append(json.loads(path.read_text()))
    assert len(seen) >= 2
    deadlines = [float(str(m["deadline"])) for m in seen]
    assert deadlines == sorted(deadlines) and deadlines[-1] > deadlines[0]
    assert {m["startedAt"] for m in seen} == {seen[0]["startedAt"]}
    assert not path.exists()
