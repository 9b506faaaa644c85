"""The answer guard on its own, over a real store and job queue: a question and its answer stay
together, whoever else asks in between."""

from __future__ import annotations

import pytest

from pplx_nb import JobInProgress, Settings
from pplx_nb._models import Message, now_iso
from pplx_nb.backends import open_queue, open_store
from pplx_nb.research._guard import AnswerGuard
from pplx_nb.store import ConversationStore

MODEL = "perplexity/sonar"


@pytest.fixture
def store(settings: Settings) -> ConversationStore:
    return open_store(settings)


@pytest.fixture
def guard(settings: Settings, store: ConversationStore) -> AnswerGuard:
    queue = open_queue(settings)
    return AnswerGuard(settings, store, lambda: queue)


def _user(text: str) -> Message:
    return Message(role="user", content=text, timestamp=now_iso())


def _assistant(text: str) -> Message:
    return Message(role="assistant", content=text, timestamp=now_iso())


def _roles(store: ConversationStore, cid: str) -> list[str]:
    return [m.role for m in store.load(cid).messages]


def test_a_question_is_answered_before_another_can_be_asked(
    guard: AnswerGuard, store: ConversationStore
) -> None:
    system = Message(role="system", content="Be brief.")
    ticket = guard.ask(_user("What is asyncio?"), MODEL, seed=[system])
    cid = ticket.conversation_id
    assert ticket.created and guard.answering_since(cid) is not None
    with pytest.raises(JobInProgress):
        guard.ask(_user("And trio?"), MODEL, cid)
    with pytest.raises(JobInProgress):
        guard.enqueue(_user("And curio?"), "perplexity_deep_research_followup", {}, cid)
    with pytest.raises(JobInProgress):
        guard.refuse_if_busy(cid)
    assert _roles(store, cid) == ["system", "user"]

    ticket.answer(_assistant("An event loop library."))
    assert guard.answering_since(cid) is None
    follow = guard.ask(_user("And trio?"), MODEL, cid)
    assert not follow.created
    follow.answer(_assistant("Another one."))
    assert _roles(store, cid) == ["system", "user", "assistant", "user", "assistant"]


def test_an_abandoned_question_frees_its_conversation_and_a_new_one_can_be_discarded(
    guard: AnswerGuard, store: ConversationStore
) -> None:
    first = guard.ask(_user("What is asyncio?"), MODEL)
    cid = first.conversation_id
    first.answer(_assistant("An event loop library."))
    follow = guard.ask(_user("And trio?"), MODEL, cid)
    follow.abandon(discard=True)  # not a conversation it created: kept, question and all
    assert guard.answering_since(cid) is None and _roles(store, cid)[-1] == "user"

    new = guard.ask(_user("What is curio?"), MODEL)
    new.abandon(discard=True)
    assert not store.exists(new.conversation_id)


def test_a_queued_question_and_its_job_land_together(
    guard: AnswerGuard, store: ConversationStore
) -> None:
    status = guard.enqueue(
        _user("Compare asyncio and trio"), "perplexity_deep_research", {"model": "m"}
    )
    cid = status.conversation_id
    assert status.status == "pending" and _roles(store, cid) == ["user"]
    with pytest.raises(JobInProgress):
        guard.ask(_user("And curio?"), MODEL, cid)
    assert _roles(store, cid) == ["user"]


def test_a_stored_question_is_queued_again_only_once_its_answer_on_the_way_has_landed(
    guard: AnswerGuard, store: ConversationStore, settings: Settings
) -> None:
    ticket = guard.ask(_user("What is asyncio?"), MODEL)
    cid = ticket.conversation_id
    with pytest.raises(JobInProgress) as info:
        guard.enqueue(None, "perplexity_deep_research", {"model": "m"}, cid)
    assert "still answering" in info.value.message
    queue = open_queue(settings)
    assert queue.status(cid) is None and queue.pending_count() == 0

    ticket.abandon()
    status = guard.enqueue(None, "perplexity_deep_research", {"model": "m"}, cid)
    assert status.status == "pending" and queue.pending_count() == 1
    with pytest.raises(JobInProgress) as info:
        guard.ask(_user("And trio?"), MODEL, cid)
    assert "research job that is pending" in info.value.message
    assert guard.answering_since(cid) is None and _roles(store, cid) == ["user"]


def test_the_deadline_covers_every_attempt(guard: AnswerGuard, settings: Settings) -> None:
    attempts = settings.max_retries + 1
    assert guard.deadline(MODEL) == (settings.timeout_ms / 1000 + 60) * attempts
    deep = settings.deep_research_timeout_ms / 1000
    assert guard.deadline("sonar-deep-research") == (max(deep, 5.0) + 60) * attempts
