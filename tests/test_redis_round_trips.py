"""Round trips to Redis per job transition, counted exactly (a counting connection, not a timer):
a whole job cycle in 7 (at most 10), a progress write in one. Each round trip crosses the network
to the server, so these counts are what a team's workers pay on every job."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.round_trips import RoundTrips, counting

from pplx_nb import ConversationStore, Settings
from pplx_nb._models import Message, Usage
from pplx_nb.backends import open_backends
from pplx_nb.jobs import Job, JobQueue

TOOL = "perplexity_deep_research"


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> RoundTrips:
    with counting(monkeypatch) as counted:
        yield counted


def _parts(redis_url: str, logs_dir: Path) -> tuple[ConversationStore, JobQueue]:
    settings = Settings(store_url=redis_url, conversation_logs_dir=logs_dir, offline=True)
    backends = open_backends(settings)
    store = backends.conversation_store()
    return store, backends.job_queue(store)


def _answer(job: Job) -> Message:
    return Message.model_validate(
        {
            "role": "assistant",
            "content": "An answer [1].",
            "tool": TOOL,
            "usage": Usage(prompt_tokens=10, completion_tokens=20, total_tokens=30),
            "jobId": job.job_id,
        }
    )


def _cycle(store: ConversationStore, queue: JobQueue, conversation_id: str) -> Job:
    """Enqueue, claim, store the answer fenced by the job's owner check, complete."""
    queue.enqueue(conversation_id, TOOL, {"searchQuery": "q"})
    job = queue.claim("w1")
    assert job is not None
    store.append(
        conversation_id, _answer(job), check=lambda doc: queue.check_owner(job, document=doc)
    )
    queue.complete(job, tokens=30)
    return job


def test_a_job_cycle_makes_at_most_10_round_trips(
    redis_url: str, logs_dir: Path, trips: RoundTrips
) -> None:
    store, queue = _parts(redis_url, logs_dir)
    first, second = (
        store.create([Message(role="user", content=f"question {n}")]).conversation_id
        for n in range(2)
    )
    _cycle(store, queue, first)  # scripts loaded, clients connected
    trips.reset()
    _cycle(store, queue, second)
    # Queue 1, claim 2 (pop with the read, write), the fenced append 3, complete 1 (budget: 10).
    assert trips.count == 7, trips.commands
    status = queue.status(second)
    assert status is not None and status.status == "completed" and status.attempts == 1
    assert queue.pending_count() == 0


def test_a_progress_write_is_one_round_trip(
    redis_url: str, logs_dir: Path, trips: RoundTrips
) -> None:
    store, queue = _parts(redis_url, logs_dir)
    conversation_id = store.create([Message(role="user", content="q")]).conversation_id
    queue.enqueue(conversation_id, TOOL, {"searchQuery": "q"})
    job = queue.claim("w1")
    assert job is not None
    queue.progress(job, 10, "warming up")
    for n in range(5):
        trips.reset()
        queue.progress(job, 20 + n, f"step {n}")
        assert trips.count == 1, trips.commands
        trips.reset()
        queue.heartbeat(job)
        assert trips.count == 1, trips.commands
    status = queue.status(conversation_id)
    assert status is not None and status.progress is not None
    assert (status.progress.percentage, status.progress.message) == (24, "step 4")


def test_holding_a_conversations_lock_is_two_round_trips_and_a_missing_one_refused(
    redis_url: str, logs_dir: Path, trips: RoundTrips
) -> None:
    import redis

    from pplx_nb._errors import ConversationNotFound
    from pplx_nb._layout import RedisKeys

    store, _ = _parts(redis_url, logs_dir)
    conversation_id = store.create([Message(role="user", content="q")]).conversation_id
    with store.locked(conversation_id):
        pass  # scripts loaded, clients connected
    trips.reset()
    with store.locked(conversation_id):
        pass
    # Taken with whether the conversation exists, then let go.
    assert trips.count == 2, trips.commands
    store.delete(conversation_id)
    with pytest.raises(ConversationNotFound), store.locked(conversation_id):
        pass
    lock = RedisKeys().conversation(conversation_id, "lock")
    assert not redis.Redis.from_url(redis_url).exists(lock)  # let go of when refused


def test_a_connection_the_server_closed_is_opened_again_not_an_error(
    redis_url: str, logs_dir: Path
) -> None:
    import redis

    store, queue = _parts(redis_url, logs_dir)
    first, second = (
        store.create([Message(role="user", content=f"question {n}")]).conversation_id
        for n in range(2)
    )
    _cycle(store, queue, first)
    # Every client connection of this database but the one asking (the server restarted, or
    # its idle timeout closed them).
    raw = redis.Redis.from_url(redis_url)
    assert raw.client_kill_filter(_type="normal", skipme=True) >= 1
    job = _cycle(store, queue, second)
    status = queue.status(second)
    assert status is not None and status.status == "completed" and status.job_id == job.job_id


def test_a_threads_connection_closes_when_the_thread_ends(redis_url: str, logs_dir: Path) -> None:
    import threading

    import redis
    from support.waiting import poll_until

    store, queue = _parts(redis_url, logs_dir)
    raw = redis.Redis.from_url(redis_url)

    def own() -> int:
        """Connections whose last command ran a script: each thread's own (redis-py's pool
        sends no script here)."""
        return sum(client["cmd"] == "evalsha" for client in raw.client_list())

    ids = [store.create([Message(role="user", content=f"q{n}")]).conversation_id for n in range(5)]
    before = own()
    threads = [threading.Thread(target=_cycle, args=(store, queue, cid)) for cid in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert all(queue.status(cid).status == "completed" for cid in ids)  # type: ignore[union-attr]
    poll_until(lambda: own() <= before, 30, 0.05, what="the threads' connections closed")
