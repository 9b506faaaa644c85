"""Researcher and context together: attached files, forks, the history budget, notes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from pplx_nb import Answer, Researcher, Settings, ValidationError
from pplx_nb._config import DEFAULT_MODEL
from pplx_nb.api import AsyncClient
from pplx_nb.backends import open_backends
from pplx_nb.context import CONTEXT_WINDOWS
from pplx_nb.research import DEEP_RESEARCH_MODEL

# The recorder reads Sonar request bodies, which the simulator serves in its Sonar mode only.
pytestmark = pytest.mark.sim_sonar


@pytest.fixture
def extra(tmp_path: Path) -> Path:
    """A folder outside the working directory, holding ``shared.md``."""
    folder = tmp_path / "extra"
    folder.mkdir()
    (folder / "shared.md").write_text("The shared style guide asks for asyncio.timeout.\n")
    return folder


@pytest.fixture
def researcher(settings: Settings, extra: Path) -> Iterator[Researcher]:
    """A Researcher that may attach files from ``extra``; its conversations in memory."""
    settings = settings.model_copy(update={"file_roots": (extra,)})
    r = Researcher(settings, backends=open_backends(settings, memory=True))
    yield r
    r.close()


def test_file_roots_add_to_the_working_directory(
    researcher: Researcher, workdir: Path, extra: Path
) -> None:
    answer = researcher.search(
        "How should we cancel tasks?", files=["notes.md", extra / "shared.md"]
    )
    question = researcher.history(answer.conversation_id or "").messages[0]
    assert "TaskGroup on shutdown" in question.content
    assert "asyncio.timeout" in question.content


def test_a_refused_file_names_the_working_directory_and_the_roots(
    researcher: Researcher, workdir: Path, extra: Path, tmp_path: Path
) -> None:
    (tmp_path / "elsewhere.md").write_text("not allowed\n")
    with pytest.raises(ValidationError) as refused:
        researcher.search("What is this?", files=[tmp_path / "elsewhere.md"])
    message = str(refused.value)
    assert str(workdir) in message and str(extra) in message
    assert "PPLX_NB_FILE_ROOTS" in message


def test_without_the_working_directory_only_the_roots_count(
    researcher: Researcher, workdir: Path, extra: Path
) -> None:
    researcher.attach_from_working_directory = False
    with pytest.raises(ValidationError, match="outside the allowed folders"):
        researcher.search("What is this?", files=["notes.md"])
    assert researcher.search("What is this?", files=[extra / "shared.md"]).text


@pytest.mark.parametrize(
    ("query", "files"),
    [("Show it", ["../../etc/shadow"]), ("Show it", ["missing.md"]), ("   ", None)],
)
def test_a_refused_fork_leaves_no_branch_behind(
    researcher: Researcher, workdir: Path, query: str, files: list[str] | None
) -> None:
    first = researcher.search("How do I cancel an asyncio task?")
    with pytest.raises(ValidationError):
        researcher.followup(first.conversation_id or "", query, fork=True, files=files)
    assert [c.conversation_id for c in researcher.conversations()] == [first.conversation_id]


def test_a_fork_continues_from_its_parent(researcher: Researcher, workdir: Path) -> None:
    first = researcher.search("How do I cancel an asyncio task?")
    branch = researcher.followup(
        first.conversation_id or "", "How do I wait for it?", fork=True, files=["notes.md"]
    )
    assert isinstance(branch, Answer) and branch.conversation_id != first.conversation_id
    child = researcher.history(branch.conversation_id or "")
    assert child.parent_conversation_id == first.conversation_id
    assert [m.role for m in child.messages] == ["user", "assistant", "user", "assistant"]
    assert "TaskGroup on shutdown" in child.messages[2].content
    assert len(researcher.history(first.conversation_id or "").messages) == 2


class _Recorder:
    """A transport handler that forwards to the simulator and keeps every chat request body."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    async def __call__(self, request: httpx2.Request) -> httpx2.Response:
        content = await request.aread()
        if content:
            body = json.loads(content)
            body = body.get("request", body)
            if "messages" in body:
                self.bodies.append(body)
        async with httpx2.AsyncClient() as real:
            forwarded = httpx2.Request(
                request.method, request.url, headers=request.headers, content=content
            )
            response = await real.send(forwarded)
            data = await response.aread()
        headers = {"content-type": response.headers.get("content-type", "application/json")}
        return httpx2.Response(response.status_code, headers=headers, content=data)

    def asked(self, question: str) -> list[dict[str, str]]:
        """The messages of the last request whose newest message starts with ``question``."""
        for body in reversed(self.bodies):
            if body["messages"][-1]["content"].startswith(question):
                return list(body["messages"])
        raise AssertionError(f"no request asked {question!r}")


def _recorded(settings: Settings, **options: Any) -> tuple[Researcher, _Recorder]:
    sonar = settings.model_copy(update={"api_style": "sonar"})
    recorder = _Recorder()
    client = AsyncClient(sonar, transport=httpx2.MockTransport(recorder))
    return Researcher(sonar, client=client, **options), recorder


OLDEST = "What does asyncio.gather do?"
NEWER = "What does the contextlib module provide?"


def _long_conversation(r: Researcher) -> str:
    """A conversation of two answered turns; returns its id."""
    first = r.search(OLDEST)
    cid = first.conversation_id or ""
    r.followup(cid, NEWER)
    return cid


def _window_for_the_newer_turn(r: Researcher, cid: str) -> int:
    """A window whose budget (4/5 of it) holds all but the oldest turn, plus a short question."""
    messages = r.history(cid, include_system=True).messages
    tokens = sum(len(m.content) // 4 + 8 for m in messages)
    oldest = sum(len(m.content) // 4 + 8 for m in messages[1:3])
    return (tokens - oldest + 30) * 5 // 4


def test_a_queued_research_job_tells_the_model_that_turns_were_left_out(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    r, recorder = _recorded(settings, async_deep_research=True)
    try:
        cid = _long_conversation(r)
        window = _window_for_the_newer_turn(r, cid)
        monkeypatch.setitem(CONTEXT_WINDOWS, DEEP_RESEARCH_MODEL, window)
        question = "Which exceptions does the json module raise?"
        r.followup(cid, question, mode="research", wait=False)
        r.wait(cid, timeout=30)
        sent = recorder.asked(question)
    finally:
        r.close()
    assert sent[0]["role"] == "system"
    assert "1 earlier turn was left out" in sent[0]["content"]
    assert all(OLDEST not in m["content"] for m in sent)
    assert any(NEWER in m["content"] for m in sent)


def test_a_followup_leaves_out_the_oldest_turn_and_says_so(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    r, recorder = _recorded(settings)
    try:
        cid = _long_conversation(r)
        monkeypatch.setitem(CONTEXT_WINDOWS, DEFAULT_MODEL, _window_for_the_newer_turn(r, cid))
        question = "Which exceptions does the json module raise?"
        r.followup(cid, question)
        sent = recorder.asked(question)
    finally:
        r.close()
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[0]["content"].endswith("1 earlier turn was left out to fit the context window.")
    assert all(OLDEST not in m["content"] for m in sent)
    assert sent[1]["content"] == NEWER
    stored = r.history(cid).messages
    assert [m.content for m in stored if m.role == "user"] == [OLDEST, NEWER, question]


def test_a_followup_within_the_window_sends_the_whole_history(settings: Settings) -> None:
    r, recorder = _recorded(settings)
    try:
        cid = _long_conversation(r)
        question = "Which exceptions does the json module raise?"
        r.followup(cid, question)
        sent = recorder.asked(question)
    finally:
        r.close()
    assert [m["content"] for m in sent if m["role"] == "user"] == [OLDEST, NEWER, question]
    assert "left out" not in sent[0]["content"]


ALREADY = "notes.md is already in the conversation history."


def test_a_file_already_in_the_history_is_noted_to_the_model_not_the_search(
    settings: Settings, workdir: Path
) -> None:
    r, recorder = _recorded(settings)
    try:
        first = r.search("How should we cancel tasks?", files=["notes.md"])
        question = "How does asyncio.timeout work?"
        again = r.followup(first.conversation_id or "", question, files=["notes.md"])
        sent = recorder.asked(question)
    finally:
        r.close()
    assert isinstance(again, Answer)
    assert again.notes == [ALREADY]
    assert r.history(again.conversation_id or "").messages[-1].notes == [ALREADY]
    assert sent[-1]["content"] == question
    assert sent[0]["role"] == "system" and sent[0]["content"].endswith(ALREADY)
    assert first.notes == []


def test_notes_show_under_the_answer_in_the_notebook_and_over_mcp(
    researcher: Researcher, workdir: Path
) -> None:
    from pplx_nb.mcp._render import answer_result
    from pplx_nb.notebook.display import answer_bundle, answer_html, linked_text

    first = researcher.search("How should we cancel tasks?", files=["notes.md"])
    again = researcher.followup(first.conversation_id or "", "And timeouts?", files=["notes.md"])
    assert isinstance(again, Answer)
    markdown = answer_bundle(again)["text/markdown"]
    assert f"<sub>{ALREADY}</sub>" in markdown
    assert markdown.index(ALREADY) > markdown.index(linked_text(again.text, again.sources))
    assert ALREADY in answer_html(again)
    assert ALREADY not in answer_bundle(first)["text/markdown"]
    text = answer_result(again, followup=True, show_thinking=False).content[0]
    assert f"_Note: {ALREADY}_" in getattr(text, "text", "")
    assert f"<sub>{ALREADY}</sub>" in again.to_markdown()
    hostile = again.model_copy(update={"notes": ["<img src=x onerror=alert(1)>.txt changed"]})
    assert "<img" not in hostile.to_markdown() and "&lt;img" in hostile.to_markdown()


def test_a_queued_research_job_gets_the_file_notes_in_its_system_message(
    settings: Settings, workdir: Path
) -> None:
    r, recorder = _recorded(settings, async_deep_research=True)
    try:
        first = r.search("How should we cancel tasks?", files=["notes.md"])
        cid = first.conversation_id or ""
        question = "Which exceptions does the json module raise?"
        r.followup(cid, question, mode="research", wait=False, files=["notes.md"])
        report = r.wait(cid, timeout=30)
        sent = recorder.asked(question)
        stored = r.history(cid).messages[-1]
    finally:
        r.close()
    assert sent[-1]["content"] == question
    assert sent[0]["role"] == "system" and sent[0]["content"].endswith(ALREADY)
    assert report.notes == [ALREADY]
    assert stored.role == "assistant" and stored.notes == [ALREADY]


@pytest.fixture
def two_big_files(workdir: Path) -> list[str]:
    """Two attachable files of 6,000 bytes (about 1,500 tokens) each."""
    for name in ("a.txt", "b.txt"):
        (workdir / name).write_text("asyncio " * 750)
    return ["a.txt", "b.txt"]


def test_a_question_over_the_window_is_refused_with_the_file_sizes(
    researcher: Researcher, two_big_files: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = researcher.search("How do I cancel an asyncio task?")
    cid = first.conversation_id or ""
    monkeypatch.setitem(CONTEXT_WINDOWS, DEFAULT_MODEL, 2_000)
    with pytest.raises(ValidationError) as refused:
        researcher.followup(cid, "Summarize these", files=two_big_files)
    message = str(refused.value)
    assert f"1,600 tokens that fit in the 2,000-token context window of {DEFAULT_MODEL}" in message
    assert f"about {refused.value.details['estimated_tokens']:,} tokens" in message
    assert refused.value.details["estimated_tokens"] > 3_000
    assert "a.txt (6,000 bytes)" in message and "b.txt (6,000 bytes)" in message
    assert "fewer or smaller files" in message
    with pytest.raises(ValidationError, match="context window"):
        researcher.search("Summarize these", files=two_big_files)
    with pytest.raises(ValidationError, match="context window"):
        researcher.followup(cid, "Summarize these", files=two_big_files, fork=True)
    assert [c.conversation_id for c in researcher.conversations()] == [cid]
    assert len(researcher.history(cid).messages) == 2
    assert researcher.followup(cid, "Summarize this", files=["a.txt"]).text


def test_a_follow_up_on_a_20000_message_conversation_is_prepared_in_under_5_s(
    researcher: Researcher,
) -> None:
    from pplx_nb import Message, Source

    # Every earlier question is itself a follow-up with nothing to carry over: the subject
    # search has to look at all of them, as it did when it was quadratic (20 s here).
    source = Source(url="https://docs.python.org/3/library/asyncio.html", title="asyncio")
    messages = [Message(role="system", content="You are a research assistant.")]
    for turn in range(10_000):
        messages.append(Message(role="user", content=f"and what about that one, #{turn}?"))
        messages.append(Message(role="assistant", content="It depends. " * 20, sources=[source]))
    cid = researcher.store.create(messages).conversation_id

    started = time.monotonic()
    answer = researcher.followup(cid, "How do I cancel it?")
    took = time.monotonic() - started

    assert took < 5, f"the follow-up took {took:.1f} s"
    assert researcher.history(cid).message_count == 20_003
    assert answer.conversation_id == cid
