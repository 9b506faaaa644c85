"""ConversationStore and JobQueue on the memory backend that ships in the package.

The tests imported from ``test_store`` are the backend-independent part of the store's contract
(``test_store_redis`` runs them on Redis); collected here, they run against this module's
``store`` fixture: a store in memory (``open_backends(memory=True)``). The job queue's contract
runs on memory in ``test_jobs`` (its ``world`` fixture).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_store import (  # noqa: F401 - collected again here, in memory
    test_a_late_report_is_put_back_when_its_step_fails_and_refused_when_misplaced,
    test_a_late_report_takes_the_place_of_its_cancelled_jobs_closing_turn,
    test_appended_conversation_behaves_like_a_loaded_one,
    test_create_assigns_a_dated_millisecond_id_and_stores_the_messages,
    test_empty_conversation_accepts_appends,
    test_fork_copies_the_messages_and_links_the_parent,
    test_invalid_messages_are_refused_and_nothing_is_stored,
    test_list_is_newest_first_and_filters,
    test_malformed_ids_are_refused_before_any_file_access,
    test_the_header_summary_stays_out_of_loaded_conversations,
    test_threads_appending_at_once_lose_nothing,
    test_unknown_conversation_says_how_to_start_one,
)

from pplx_nb import ConversationNotFound, ConversationStore, Settings
from pplx_nb.backends import Backends, open_backends
from pplx_nb.store import MemoryBackend


@pytest.fixture
def backends() -> Backends:
    return open_backends(memory=True)


@pytest.fixture
def store(backends: Backends) -> ConversationStore:
    """A store in memory, asking the job side of the same space."""
    return backends.conversation_store()


def user(content: str) -> dict[str, str]:
    return {"role": "user", "content": content}


def test_memory_is_chosen_by_the_factory_and_nothing_is_written_anywhere(
    logs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(logs_dir)
    settings = Settings(conversation_logs_dir=logs_dir)
    store = open_backends(settings, memory=True).conversation_store()
    assert isinstance(store.backend, MemoryBackend) and store.location == "memory"
    cid = store.create([user("What is the GIL?")]).conversation_id
    store.append(cid, {"role": "assistant", "content": "A lock."})
    assert store.load(cid).message_count == 2
    assert list(logs_dir.iterdir()) == []


def test_each_opening_is_a_space_of_its_own(store: ConversationStore) -> None:
    cid = store.create([user("only here")]).conversation_id
    assert not open_backends(memory=True).conversation_store().exists(cid)


def test_a_job_lives_and_dies_with_its_conversation(backends: Backends) -> None:
    store = backends.conversation_store()
    queue = backends.job_queue(store)
    cid = store.create([user("Compare asyncio and trio")]).conversation_id
    queue.enqueue(cid, "perplexity_deep_research", {"searchQuery": "x"})
    assert [s.job_status for s in store.list()] == ["pending"]
    assert store.job_state(cid) == "pending" and queue.pending_count() == 1
    store.delete(cid)
    assert queue.pending_count() == 0 and queue.status(cid) is None
    assert queue.claim("w") is None
    with pytest.raises(ConversationNotFound):
        queue.enqueue(cid, "perplexity_deep_research", {})
