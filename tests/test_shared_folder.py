"""The conversation-logs folder as other programs meet it: formats and writes pplx_nb shares.

The TypeScript perplexity-mcp-server (and any tool that replays a history) reads and writes the
same files; ``test_ts_server.py`` runs that server itself. These tests pin, without node, what
pplx_nb writes for it and how pplx_nb reads what it writes: turns that always alternate, a
status that shows a live job as live, job files both workers can run, ``<think>`` blocks read as
reasoning, and files written non-atomically read without false alarms.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from pathlib import Path

import pytest
from support.folder import alternates, document, failed_follow_up, rewrite_in_place, turns
from support.waiting import FakeClock

from pplx_nb import ConversationStore, Researcher, Settings
from pplx_nb._errors import ConversationCorrupted, PplxError
from pplx_nb.backends import open_queue, open_store
from pplx_nb.export import to_dataframe, to_markdown
from pplx_nb.jobs import Job, JobContext, Worker
from pplx_nb.sim import inject_faults, reset, stats

DATA = Path(__file__).parent / "data"
TS_FIXTURE = DATA / "ts_server_conversation.json"
TS_ID = json.loads(TS_FIXTURE.read_text())["conversationId"]
QUESTION = "How does asyncio.TaskGroup cancel its tasks when one of them fails?"
TS_SYSTEM_PROMPT = "You are an expert-level AI research assistant."


def install_ts_fixture(logs_dir: Path) -> None:
    (logs_dir / TS_ID).mkdir()
    shutil.copyfile(TS_FIXTURE, logs_dir / TS_ID / "conversation.json")


# -- turns alternate whatever fails ---------------------------------------------------------


def test_a_failed_follow_up_is_closed_by_a_marked_assistant_turn(
    researcher: Researcher, sim_url: str, logs_dir: Path
) -> None:
    conversation_id, error = failed_follow_up(researcher, sim_url, QUESTION)

    doc = document(logs_dir, conversation_id)
    assert turns(doc) == ["user", "assistant", "user", "assistant"]
    closing = doc["messages"][-1]
    assert closing["unanswered"]["state"] == "failed"
    assert closing["unanswered"]["code"] == error.code == "INVALID_INPUT"
    assert closing["content"].strip()
    history = researcher.history(conversation_id)
    assert "not answered" in to_markdown(history).lower()

    # pplx_nb goes on from there; the closed turn is context for nobody.
    reset(sim_url)  # the faults the failed follow-up left unused
    answer = researcher.followup(conversation_id, "What does asyncio.shield do?")
    assert answer.text
    assert alternates(document(logs_dir, conversation_id))


def test_a_failed_job_and_its_retry_keep_turns_alternating(
    settings: Settings, sim_url: str, logs_dir: Path
) -> None:
    inject_faults(sim_url, {"status": 400, "path": "/v1/", "times": 1})
    with Researcher(settings, async_deep_research=True) as researcher:
        conversation_id = researcher.deep_research(QUESTION).conversation_id
        with pytest.raises(PplxError):
            researcher.wait(conversation_id, timeout=30)
        closing = document(logs_dir, conversation_id)["messages"][-1]
        assert closing["role"] == "assistant"
        assert closing["unanswered"] == {
            "state": "failed",
            "code": "INVALID_INPUT",
            "message": closing["unanswered"]["message"],
        }

        researcher.retry(conversation_id)
        answer = researcher.wait(conversation_id, timeout=30)

    doc = document(logs_dir, conversation_id)
    assert turns(doc) == ["user", "assistant", "user", "assistant"]
    assert doc["messages"][-2]["content"] == QUESTION
    assert doc["messages"][-1]["content"] == answer.text
    assert "unanswered" not in doc["messages"][-1]
    assert stats(sim_url)["background_runs"] == 1


def test_a_cancelled_job_is_closed_by_a_marked_assistant_turn(
    researcher: Researcher, settings: Settings, sim_url: str, logs_dir: Path
) -> None:
    conversation_id = researcher.deep_research(QUESTION, wait=False).conversation_id
    open_queue(settings).cancel(conversation_id)

    doc = document(logs_dir, conversation_id)
    assert turns(doc) == ["user", "assistant"]
    assert doc["messages"][-1]["unanswered"]["state"] == "cancelled"
    assert stats(sim_url)["generations"] == 0
    frame = to_dataframe(researcher.store, level="messages")
    assert frame["content"].str.contains("not answered", case=False).iloc[-1]


def test_a_question_left_unanswered_by_another_program_is_closed_before_the_next(
    researcher: Researcher, logs_dir: Path
) -> None:
    # Another program stored a question and stopped before answering it (the TypeScript
    # server's failed jobs end this way).
    conversation = researcher.store.create(
        [{"role": "system", "content": TS_SYSTEM_PROMPT}, {"role": "user", "content": QUESTION}]
    )

    researcher.followup(conversation.conversation_id, "What does asyncio.shield do?")

    doc = document(logs_dir, conversation.conversation_id)
    assert turns(doc) == ["user", "assistant", "user", "assistant"]
    assert doc["messages"][2]["unanswered"]["state"] == "interrupted"


# -- updatedAt moves with every heartbeat -----------------------------------------------------


def test_updated_at_moves_with_every_heartbeat_while_progress_stands_still(
    logs_dir: Path,
) -> None:
    store = open_store(root=logs_dir)
    conversation_id = store.create([{"role": "user", "content": QUESTION}]).conversation_id
    queue = open_queue(root=logs_dir, lease_seconds=0.6)  # a heartbeat every 0.2 s
    queue.enqueue(conversation_id, "perplexity_deep_research", {"query": QUESTION})
    seen: list[str] = []

    async def silent(job: Job, ctx: JobContext) -> None:
        for _ in range(20):  # two seconds without reporting any progress
            await asyncio.sleep(0.1)
            status = queue.status(conversation_id)
            assert status is not None
            seen.append(status.updated_at)
        store.append(conversation_id, {"role": "assistant", "content": "Done."})

    worker = Worker(queue, silent, concurrency=1)
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while (status := queue.status(conversation_id)) is None or not status.done:
            assert time.monotonic() < deadline, "the job did not end"
            time.sleep(0.05)
    finally:
        worker.stop()
    assert status.status == "completed"
    assert len(set(seen)) >= 4, seen


# -- job files both workers can run ------------------------------------------------------------


TS_JOB_KEYS = {"conversationId", "toolName", "params", "createdAt"}


def test_job_json_carries_the_ts_servers_fields_beside_pplx_nbs(
    researcher: Researcher, logs_dir: Path
) -> None:
    conversation_id = researcher.deep_research(QUESTION, wait=False).conversation_id

    job = json.loads((logs_dir / conversation_id / "job.json").read_text())
    assert set(job) >= TS_JOB_KEYS, job
    assert job["toolName"] == "perplexity_deep_research"
    assert job["params"]["query"] == QUESTION
    assert job["createdAt"].endswith("Z")
    assert isinstance(job["attempts"], int) and job["attempts"] >= 0
    assert isinstance(job["maxAttempts"], int) and job["maxAttempts"] >= 1
    assert isinstance(job["priority"], int)
    assert {"jobId", "request", "queueKey"} <= set(job)  # pplx_nb's own, unchanged


def _ts_job(logs_dir: Path, store: ConversationStore) -> str:
    """A conversation with a deep research queued as the TypeScript server queues one."""
    conversation_id = store.create(
        [{"role": "system", "content": TS_SYSTEM_PROMPT}, {"role": "user", "content": QUESTION}]
    ).conversation_id
    now = "2025-01-24T13:20:00.123Z"
    directory = logs_dir / conversation_id
    status = {
        "conversationId": conversation_id,
        "status": "pending",
        "toolName": "perplexity_deep_research",
        "startedAt": now,
        "updatedAt": now,
        "attempts": 0,
    }
    job = {
        "conversationId": conversation_id,
        "toolName": "perplexity_deep_research",
        "params": {"query": QUESTION, "reasoning_effort": "low"},
        "createdAt": now,
        "attempts": 0,
        "maxAttempts": 3,
        "priority": 0,
    }
    (directory / "status.json").write_text(json.dumps(status, indent=2))
    (directory / "job.json").write_text(json.dumps(job, indent=2))
    return conversation_id


def test_a_pending_ts_job_is_adopted_once_no_ts_worker_took_it_for_a_lease(
    logs_dir: Path,
) -> None:
    conversation_id = _ts_job(logs_dir, open_store(root=logs_dir))
    clock = FakeClock()
    queue = open_queue(root=logs_dir, lease_seconds=60, clock=clock)

    queue.recover_stale()
    assert queue.claim("early") is None, "a TypeScript worker may still take it"
    clock.advance(60)
    queue.recover_stale()
    assert queue.claim("early") is None, "pending for one lease only: not yet past it"
    clock.advance(0.001)
    queue.recover_stale()
    job = queue.claim("adopter")
    assert job is not None, "the TypeScript job was not adopted past its lease"

    assert job.conversation_id == conversation_id
    assert job.tool == "perplexity_deep_research"
    status = json.loads((logs_dir / conversation_id / "status.json").read_text())
    assert status["status"] == "in_progress" and status["attempts"] == 1
    kept = json.loads((logs_dir / conversation_id / "job.json").read_text())
    assert kept["params"] == {"query": QUESTION, "reasoning_effort": "low"}
    assert kept["createdAt"] == "2025-01-24T13:20:00.123Z"


def test_an_adopted_ts_job_is_answered_by_the_researchers_worker(
    settings: Settings, sim_url: str, logs_dir: Path
) -> None:
    with Researcher(settings, async_deep_research=True) as researcher:
        conversation_id = _ts_job(logs_dir, researcher.store)
        researcher.ensure_worker()
        answer = researcher.wait(conversation_id, timeout=30)

    doc = document(logs_dir, conversation_id)
    assert turns(doc) == ["user", "assistant"]
    assert doc["messages"][-1]["content"] == answer.text
    assert stats(sim_url)["background_runs"] == 1


# -- <think> blocks -------------------------------------------------------------------------------


def test_ts_answers_with_think_blocks_read_as_thinking_and_answer(
    researcher: Researcher, logs_dir: Path
) -> None:
    install_ts_fixture(logs_dir)
    raw = document(logs_dir, TS_ID)["messages"][-1]["content"]
    assert raw.startswith("<think>")

    answer = researcher.wait(TS_ID, timeout=5)
    assert answer.text == raw.split("</think>", 1)[1].strip()
    assert answer.thinking == raw[len("<think>") : raw.index("</think>")].strip()
    rendered = to_markdown(researcher.history(TS_ID))
    assert "<think>" not in rendered and "</think>" not in rendered
    contents = to_dataframe(researcher.store, level="messages")["content"]
    assert not contents.str.contains("<think>", regex=False).any()
    assert (logs_dir / TS_ID / "conversation.json").read_text() == TS_FIXTURE.read_text()


# -- files another program writes non-atomically ----------------------------------------------


def test_files_rewritten_non_atomically_are_read_whole(logs_dir: Path) -> None:
    install_ts_fixture(logs_dir)
    store = open_store(root=logs_dir)
    path = logs_dir / TS_ID / "conversation.json"
    stop = threading.Event()
    writer = threading.Thread(
        target=rewrite_in_place, args=(path, path.read_bytes(), stop), daemon=True
    )
    writer.start()
    try:
        for _ in range(150):
            assert store.load(TS_ID).message_count == 5
    finally:
        stop.set()
        writer.join()


def test_a_file_that_stays_broken_is_still_reported_corrupted(logs_dir: Path) -> None:
    install_ts_fixture(logs_dir)
    path = logs_dir / TS_ID / "conversation.json"
    path.write_bytes(path.read_bytes()[:200])
    started = time.monotonic()
    with pytest.raises(ConversationCorrupted):
        open_store(root=logs_dir).load(TS_ID)
    assert time.monotonic() - started < 3
