"""The job queue on both backends (a real directory, a real Redis): lifecycle, order, retries,
leases, fencing, index healing."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections import Counter
from itertools import count
from pathlib import Path
from typing import Any

import pytest
import redis
from support.waiting import FakeClock, poll_until

from pplx_nb import ConversationStore, Message, Settings
from pplx_nb._errors import (
    APIKeyInvalid,
    APIServerError,
    ConversationNotFound,
    FilesystemError,
    JobInProgress,
    SubmissionUnknown,
    ValidationError,
)
from pplx_nb._fs import ensure_dir, id_from_ms
from pplx_nb._layout import RedisKeys
from pplx_nb._memory import MemorySpace
from pplx_nb.backends import Backends, open_backends
from pplx_nb.jobs import Job, JobContext, JobQueue, LeaseLost, format_status_message
from pplx_nb.store import MemoryBackend

_ms = count(int(time.time() * 1000))
_KEYS = RedisKeys()


class World:
    """Where a test's conversations and jobs live: a folder, a Redis database, or memory."""

    def __init__(self, logs_dir: Path, redis_url: str | None, *, memory: bool = False) -> None:
        self.logs_dir = logs_dir
        self.redis_url = redis_url
        self.redis = redis.Redis.from_url(redis_url) if redis_url else None
        self.clock = FakeClock()
        """The clock by which queues over files and memory judge leases."""
        self.memory = open_backends(memory=True, clock=self.clock) if memory else None

    def settings(self, **fields: Any) -> Settings:
        return Settings(
            conversation_logs_dir=self.logs_dir, store_url=self.redis_url, offline=True, **fields
        )

    def backends(self, lease_seconds: float = 60.0) -> Backends:
        """The world's backends (on memory: the same space every time)."""
        if self.memory is not None:
            return dataclasses.replace(self.memory, lease_seconds=lease_seconds)
        return open_backends(self.settings(), lease_seconds=lease_seconds, clock=self.clock)

    def queue(self, *, lease_seconds: float = 60.0, max_job_retries: int = 2) -> JobQueue:
        """A queue over this world (``max_job_retries``, ``lease_seconds`` as given)."""
        return self.backends(lease_seconds).job_queue(max_job_retries=max_job_retries)

    def pass_time(self, seconds: float) -> None:
        """Let ``seconds`` go by for the leases: the clock of queues over files and memory is
        advanced; Redis judges leases by its server's clock, so there that much time really
        passes."""
        if self.redis is None:
            self.clock.advance(seconds)
        else:
            time.sleep(seconds)

    def store(self) -> ConversationStore:
        return self.backends().conversation_store()

    @property
    def space(self) -> MemorySpace:
        assert self.memory is not None
        store = self.memory.store
        assert isinstance(store, MemoryBackend)
        return store.space

    def new_conversation(self) -> str:
        """A conversation the queue accepts jobs for (a bare folder; a bare meta hash)."""
        conversation_id = id_from_ms(next(_ms))
        if self.memory is not None:
            self.space.folders[conversation_id] = {}
        elif self.redis is None:
            ensure_dir(self.logs_dir / conversation_id)
        else:
            self.redis.hset(_KEYS.conversation(conversation_id, "meta"), "conversationId", "1")
            self.redis.zadd(_KEYS.conversations, {conversation_id: int(conversation_id[9:])})
        return conversation_id

    def parts(self, conversation_id: str) -> set[str]:
        """Which of job.json and status.json (or their keys) the conversation holds."""
        if self.memory is not None:
            return set(self.space.folders[conversation_id]) & {"job.json", "status.json"}
        if self.redis is None:
            folder = self.logs_dir / conversation_id
            return {p.name for p in folder.iterdir() if p.name in ("job.json", "status.json")}
        return {
            f"{part}.json"
            for part in ("job", "status")
            if self.redis.exists(_KEYS.conversation(conversation_id, part))
        }

    def _raw(self, conversation_id: str, part: str) -> dict[str, Any]:
        if self.memory is not None:
            return dict(json.loads(self.space.folders[conversation_id][f"{part}.json"]))
        if self.redis is None:
            return dict(json.loads((self.logs_dir / conversation_id / f"{part}.json").read_text()))
        raw = self.redis.get(_KEYS.conversation(conversation_id, part))
        assert isinstance(raw, bytes)
        return dict(json.loads(raw))

    def raw_status(self, conversation_id: str) -> dict[str, Any]:
        return self._raw(conversation_id, "status")

    def raw_job(self, conversation_id: str) -> dict[str, Any]:
        return self._raw(conversation_id, "job")

    def put_status(self, conversation_id: str, text: str) -> None:
        """Overwrite the stored status with ``text`` as it is (to damage it)."""
        if self.memory is not None:
            self.space.folders[conversation_id]["status.json"] = text.encode()
        elif self.redis is None:
            (self.logs_dir / conversation_id / "status.json").write_text(text)
        else:
            self.redis.set(_KEYS.conversation(conversation_id, "status"), text)

    def drop_index(self) -> None:
        """Lose every pending and claimed marker, as a crash between writes could."""
        if self.memory is not None:
            index = self.memory.index
            for marker in index.pending() + index.claimed():
                index.drop(marker)
        elif self.redis is None:
            for marker in (self.logs_dir / ".jobs").rglob("*-*-*"):
                if marker.is_file():
                    marker.unlink()
        else:
            self.redis.delete(_KEYS.jobs("pending"), _KEYS.jobs("claimed"))

    def claimed(self) -> list[str]:
        """The claimed markers."""
        if self.memory is not None:
            return self.memory.index.claimed()
        if self.redis is None:
            return sorted(p.name for p in (self.logs_dir / ".jobs" / "claimed").iterdir())
        return sorted(m.decode() for m in self.redis.zrange(_KEYS.jobs("claimed"), 0, -1))


@pytest.fixture(params=["files", "redis", "memory"])
def world(request: pytest.FixtureRequest, logs_dir: Path) -> World:
    """Each test runs on files, on Redis (``redis_url``: a real server, an emptied DB) and in
    memory."""
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    return World(logs_dir, url, memory=request.param == "memory")


def _claimed(queue: JobQueue, world: World, worker: str = "w") -> Job:
    """A new conversation with a job enqueued and claimed by ``worker``."""
    cid = world.new_conversation()
    queue.enqueue(cid, "t", {})
    job = queue.claim(worker)
    assert job is not None
    return job


@pytest.fixture
def queue(world: World) -> JobQueue:
    return world.queue(max_job_retries=2, lease_seconds=60)


def test_enqueue_writes_job_and_pending_status_with_every_field(
    queue: JobQueue, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    cid = world.new_conversation()
    with caplog.at_level(logging.INFO, logger="pplx_nb.jobs"):
        status = queue.enqueue(cid, "perplexity_deep_research", {"searchQuery": "x"}, priority=3)
    assert status.status == "pending" and status.attempts == 0 and status.priority == 3
    assert world.parts(cid) == {"job.json", "status.json"}
    on_disk = world.raw_status(cid)
    for key in ("conversationId", "status", "toolName", "startedAt", "updatedAt", "attempts"):
        assert key in on_disk
    assert on_disk["errorHistory"] == []
    job = world.raw_job(cid)
    assert job["request"] == {"searchQuery": "x"} and job["jobId"] == on_disk["jobId"]
    assert queue.status(cid) == status
    assert queue.pending_count() == 1
    enqueued = [r for r in caplog.records if r.getMessage().startswith("Job enqueued")]
    assert [getattr(r, "tool", None) for r in enqueued] == ["perplexity_deep_research"]


def test_enqueue_refuses_bad_input_and_a_second_active_job(queue: JobQueue, world: World) -> None:
    cid = world.new_conversation()
    with pytest.raises(ValidationError):
        queue.enqueue("../etc", "t", {})
    with pytest.raises(ConversationNotFound):
        queue.enqueue(id_from_ms(next(_ms)), "t", {})
    with pytest.raises(ValidationError):
        queue.enqueue(cid, "t", {}, priority=10_000)
    with pytest.raises(ValidationError):
        queue.enqueue(cid, "t", {"when": object()})
    queue.enqueue(cid, "t", {})
    with pytest.raises(JobInProgress):
        queue.enqueue(cid, "t", {})
    job = queue.claim("w")
    assert job is not None
    with pytest.raises(JobInProgress):
        queue.enqueue(cid, "t", {})
    queue.complete(job)
    assert queue.enqueue(cid, "t", {"again": True}).status == "pending"


def test_claim_takes_highest_priority_first_then_oldest(queue: JobQueue, world: World) -> None:
    plan = [("a", 0), ("b", 5), ("c", 0), ("d", -2), ("e", 5), ("f", 1)]
    for name, priority in plan:
        queue.enqueue(world.new_conversation(), "t", {"name": name}, priority=priority)
    order = []
    while (job := queue.claim("w")) is not None:
        order.append(job.request["name"])
        queue.complete(job)
    assert order == ["b", "e", "f", "a", "c", "d"]
    assert queue.claim("w") is None


def test_claim_flips_status_to_in_progress_with_worker_attempt_and_start_progress(
    queue: JobQueue, world: World
) -> None:
    cid = world.new_conversation()
    queued = queue.enqueue(cid, "perplexity_deep_research", {"q": 1}, priority=2)
    job = queue.claim("worker-1")
    assert job is not None
    assert (job.conversation_id, job.tool, job.request, job.priority) == (
        cid,
        "perplexity_deep_research",
        {"q": 1},
        2,
    )
    assert job.attempt == 1 and job.worker_id == "worker-1"
    assert job.job_id == queued.job_id is not None
    status = queue.status(cid)
    assert status is not None and status.status == "in_progress"
    assert status.worker_id == "worker-1" and status.attempts == 1 and status.heartbeat_at
    assert status.progress is not None
    assert (status.progress.percentage, status.progress.message) == (
        25,
        "Querying Perplexity API...",
    )
    assert queue.pending_count() == 0


def test_threads_racing_to_claim_get_every_job_exactly_once(queue: JobQueue, world: World) -> None:
    ids = [world.new_conversation() for _ in range(120)]
    for cid in ids:
        queue.enqueue(cid, "t", {})
    claimed: list[str] = []
    lock = threading.Lock()

    def drain(worker: str) -> None:
        while (job := queue.claim(worker)) is not None:
            queue.complete(job)
            with lock:
                claimed.append(job.conversation_id)

    threads = [threading.Thread(target=drain, args=(f"w{i}",)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Counter(claimed) == Counter(ids)
    assert all(s.status == "completed" and s.attempts == 1 for s in queue.jobs())


def test_completion_removes_job_json_and_keeps_status(queue: JobQueue, world: World) -> None:
    job = _claimed(queue, world)
    cid = job.conversation_id
    status = queue.complete(job, tokens=120, cost=0.01)
    assert status.status == "completed" and status.completed_at
    assert status.progress is not None and status.progress.percentage == 100
    assert world.parts(cid) == {"status.json"}
    assert status.result == {"tokens": 120, "cost": 0.01}


def test_failed_attempts_are_retried_then_the_job_fails_after_three(
    queue: JobQueue, world: World
) -> None:
    cid = world.new_conversation()
    queue.enqueue(cid, "t", {})
    for attempt in (1, 2):
        job = queue.claim("w")
        assert job is not None and job.attempt == attempt
        status = queue.fail(job, APIServerError(f"boom {attempt}"))
        assert status.status == "pending" and status.attempts == attempt
        message = format_status_message(status)
        assert f"Retry Attempt: {attempt + 1}" in message and f"boom {attempt}" in message
    job = queue.claim("w")
    assert job is not None and job.attempt == 3
    status = queue.fail(job, APIServerError("boom 3"))
    assert status.status == "failed" and status.attempts == 3
    assert [e.message for e in status.error_history] == ["boom 1", "boom 2", "boom 3"]
    assert status.error is not None and status.error.code == "API_SERVER_ERROR"
    assert world.parts(cid) == {"status.json"}
    assert queue.claim("w") is None


def test_an_error_that_cannot_succeed_on_retry_fails_at_once(queue: JobQueue, world: World) -> None:
    job = _claimed(queue, world)
    status = queue.fail(job, APIKeyInvalid("bad key"))
    assert status.status == "failed" and status.attempts == 1


def test_retry_count_follows_the_setting(world: World) -> None:
    assert open_backends(world.settings(max_job_retries=0)).max_job_retries == 0
    queue = world.backends().job_queue(max_job_retries=0)
    job = _claimed(queue, world)
    assert queue.fail(job, APIServerError("once")).status == "failed"


def test_a_job_whose_worker_stopped_heartbeating_is_requeued_after_the_lease(
    world: World,
) -> None:
    queue = world.queue(lease_seconds=0.3)
    job = _claimed(queue, world, "dead-worker")
    cid = job.conversation_id
    assert queue.recover_stale() == 0
    world.pass_time(0.4)
    assert queue.recover_stale() == 1
    status = queue.status(cid)
    assert status is not None and status.status == "pending" and status.attempts == 1
    assert [e.code for e in status.error_history] == ["JOB_LEASE_EXPIRED"]
    again = queue.claim("live-worker")
    assert again is not None and again.attempt == 2 and again.job_id == job.job_id


def test_heartbeats_keep_a_long_job_from_being_recovered(world: World) -> None:
    # Redis judges leases on its own clock, so time passes for real there: a lease long enough
    # that a loaded machine's pause between a heartbeat and the check cannot outlast it.
    lease = 0.3 if world.redis is None else 2.0
    queue = world.queue(lease_seconds=lease)
    job = _claimed(queue, world)
    for _ in range(4):
        world.pass_time(lease / 2)
        time.sleep(0.002)  # stamps are in milliseconds: each heartbeat must read differently
        queue.heartbeat(job)
        assert queue.recover_stale() == 0
    assert queue.complete(job).status == "completed"


def test_a_worker_that_lost_its_lease_cannot_write_to_the_job(world: World) -> None:
    queue = world.queue(lease_seconds=0.2)
    stale = _claimed(queue, world, "slow")
    cid = stale.conversation_id
    world.pass_time(0.3)
    queue.recover_stale()
    current = queue.claim("fast")
    assert current is not None
    for write in (
        lambda: queue.complete(stale),
        lambda: queue.fail(stale, APIServerError("late")),
        lambda: queue.progress(stale, 60, "late"),
        lambda: queue.heartbeat(stale),
        lambda: queue.set_remote_id(stale, "run-late"),
        lambda: queue.release(stale),
    ):
        with pytest.raises(LeaseLost):
            write()
    status = queue.status(cid)
    assert status is not None and status.worker_id == "fast" and status.status == "in_progress"
    assert queue.complete(current).status == "completed"
    with pytest.raises(LeaseLost):
        queue.complete(stale)


def test_release_requeues_without_counting_the_attempt(queue: JobQueue, world: World) -> None:
    job = _claimed(queue, world)
    status = queue.release(job)
    assert status.status == "pending" and status.attempts == 0 and status.worker_id is None
    again = queue.claim("w2")
    assert again is not None and again.attempt == 1


def test_remote_id_is_kept_for_the_next_attempt(world: World) -> None:
    queue = world.queue(lease_seconds=0.2)
    cid = world.new_conversation()
    queue.enqueue(cid, "t", {})
    job = queue.claim("w")
    assert job is not None and job.remote_id is None
    queue.set_remote_id(job, "run-123")
    queue.note_error(job, APIServerError("remote run restarted"))
    world.pass_time(0.3)
    queue.recover_stale()
    again = queue.claim("w2")
    assert again is not None and again.remote_id == "run-123"
    status = queue.status(cid)
    assert status is not None
    assert [e.code for e in status.error_history] == ["API_SERVER_ERROR", "JOB_LEASE_EXPIRED"]


def test_cancel_ends_pending_and_running_jobs(queue: JobQueue, world: World) -> None:
    waiting, running = world.new_conversation(), world.new_conversation()
    queue.enqueue(running, "t", {}, priority=1)
    queue.enqueue(waiting, "t", {})
    job = queue.claim("w")
    assert job is not None and job.conversation_id == running
    for cid in (waiting, running):
        status = queue.cancel(cid)
        assert status is not None and status.status == "cancelled"
        assert world.parts(cid) == {"status.json"}
    with pytest.raises(LeaseLost):
        queue.heartbeat(job)
    assert queue.claim("w") is None
    assert queue.cancel(world.new_conversation()) is None
    with pytest.raises(ConversationNotFound):
        queue.cancel(id_from_ms(next(_ms)))


def test_deleting_a_conversation_retires_its_jobs_quietly(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    store = world.store()
    queue = world.queue(lease_seconds=0.05)
    running = _claimed(queue, world)
    waiting = world.new_conversation()
    queue.enqueue(waiting, "t", {})
    store.delete(running.conversation_id)
    store.delete(waiting)
    with pytest.raises(LeaseLost, match="conversation was deleted"):
        queue.heartbeat(running)
    world.pass_time(0.1)
    with caplog.at_level(logging.WARNING, logger="pplx_nb.jobs"):
        assert queue.recover_stale() == 0
        assert queue.claim("w") is None
    assert caplog.records == []
    assert queue.pending_count() == 0 and world.claimed() == []


def test_missing_markers_are_rebuilt_from_status_files(queue: JobQueue, world: World) -> None:
    cids = [world.new_conversation() for _ in range(3)]
    for cid in cids:
        queue.enqueue(cid, "t", {})
    running = queue.claim("w")
    assert running is not None
    world.drop_index()
    assert queue.claim("w") is None
    assert queue.recover_stale() == 3
    claimed = {job.conversation_id for job in iter(lambda: queue.claim("w"), None)}
    assert claimed == set(cids) - {running.conversation_id}
    assert running.marker in world.claimed()


def test_markers_of_ended_or_replaced_jobs_are_dropped(queue: JobQueue, world: World) -> None:
    cid = world.new_conversation()
    queue.enqueue(cid, "t", {})
    status = world.raw_status(cid)
    status["status"] = "completed"
    world.put_status(cid, json.dumps(status))
    assert queue.claim("w") is None
    assert queue.pending_count() == 0


def test_jobs_lists_statuses_newest_first_and_filters_by_state(
    queue: JobQueue, world: World
) -> None:
    first, second = world.new_conversation(), world.new_conversation()
    world.new_conversation()
    queue.enqueue(first, "t", {})
    time.sleep(0.002)
    queue.enqueue(second, "t", {})
    job = queue.claim("w")
    assert job is not None
    queue.complete(job)
    assert [s.conversation_id for s in queue.jobs()] == [second, first]
    assert [s.conversation_id for s in queue.jobs(states=("pending",))] == [second]


def test_a_damaged_status_file_is_reported_as_corrupted(queue: JobQueue, world: World) -> None:
    from pplx_nb._errors import ConversationCorrupted

    cid = world.new_conversation()
    world.put_status(cid, "{not json")
    with pytest.raises(ConversationCorrupted):
        queue.status(cid)


@pytest.mark.parametrize(
    "damage",
    ['{"status": "exploded", "attempts": 1}', '{"status": "completed", "attempts": null}', "[]"],
)
def test_queueing_over_a_status_without_a_valid_state_is_refused_and_writes_nothing(
    queue: JobQueue, world: World, damage: str
) -> None:
    from pplx_nb._errors import ConversationCorrupted

    cid = world.new_conversation()
    world.put_status(cid, damage)
    with pytest.raises(ConversationCorrupted, match="Delete it to reset"):
        queue.enqueue(cid, "t", {})
    assert queue.pending_count() == 0
    world.put_status(cid, '{"status": "completed", "attempts": 1}')
    assert queue.enqueue(cid, "t", {}).status == "pending"


def test_listing_jobs_skips_a_damaged_status_with_a_warning(
    queue: JobQueue, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    fine, broken = world.new_conversation(), world.new_conversation()
    queue.enqueue(fine, "t", {})
    queue.enqueue(broken, "t", {})
    world.put_status(broken, "{truncated")
    assert [s.conversation_id for s in queue.jobs()] == [fine]
    assert f"Skipping the job status of {broken}" in caplog.text


def test_status_messages_name_the_state_progress_and_errors(queue: JobQueue, world: World) -> None:
    cid = world.new_conversation()
    pending = queue.enqueue(cid, "t", {})
    assert "queued" in format_status_message(pending)
    assert "Retry Attempt" not in format_status_message(pending)
    job = queue.claim("w")
    assert job is not None
    queue.progress(job, 50, "Processing response...")
    running = queue.status(cid)
    assert running is not None
    assert "50% — Processing response..." in format_status_message(running)
    done = queue.complete(job)
    assert "completed" in format_status_message(done)
    assert "cancelled" in format_status_message(done.model_copy(update={"status": "cancelled"}))


def test_a_job_with_a_damaged_status_does_not_block_the_others(
    queue: JobQueue, world: World, caplog: pytest.LogCaptureFixture
) -> None:
    broken, fine = world.new_conversation(), world.new_conversation()
    queue.enqueue(broken, "t", {}, priority=9)
    queue.enqueue(fine, "t", {})
    world.put_status(broken, "{truncated")
    job = queue.claim("w")
    assert job is not None and job.conversation_id == fine
    caplog.clear()
    assert queue.recover_stale() == 0
    # Files look at every claimed job, Redis at expired leases only: both keep reporting it.
    assert any(f"Job {broken} cannot be" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "damage", [{"status": None}, {"status": "exploded"}, {"attempts": "x"}, {"attempts": None}]
)
def test_a_status_without_a_valid_state_is_corrupted_not_a_crash(
    world: World, damage: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    from pplx_nb._errors import ConversationCorrupted

    queue = world.queue(lease_seconds=0.05)
    claimed = _claimed(queue, world)
    waiting = world.new_conversation()
    queue.enqueue(waiting, "t", {})
    for cid in (claimed.conversation_id, waiting):
        status = world.raw_status(cid)
        status.update(damage)
        world.put_status(cid, json.dumps(status))
    world.pass_time(0.1)
    assert queue.recover_stale() == 0
    assert queue.claim("w") is None
    with pytest.raises(ConversationCorrupted, match="Delete it to reset"):
        queue.cancel(waiting)
    assert sum("cannot be" in r.getMessage() for r in caplog.records) >= 2


def test_an_answer_from_a_worker_that_lost_its_lease_is_not_stored(world: World) -> None:
    store = world.store()
    queue = world.queue(lease_seconds=0.2)
    cid = store.create([{"role": "user", "content": "Describe the json module"}]).conversation_id
    queue.enqueue(cid, "perplexity_deep_research", {})
    stale = queue.claim("slow")
    assert stale is not None
    world.pass_time(0.3)
    queue.recover_stale()
    current = queue.claim("fast")
    assert current is not None
    answer = {"role": "assistant", "content": "the report", "jobId": current.job_id}
    store.append(cid, answer, check=JobContext(queue, current).check_owner)
    with pytest.raises(LeaseLost, match="under another worker"):
        store.append(cid, answer, check=JobContext(queue, stale).check_owner)
    with pytest.raises(LeaseLost, match="already answered"):
        store.append(cid, answer, check=JobContext(queue, current).check_owner)
    assert [m.role for m in store.load(cid).messages] == ["user", "assistant"]
    assert queue.complete(current).status == "completed"


def test_a_request_with_numbers_that_are_not_json_is_refused(queue: JobQueue, world: World) -> None:
    cid = world.new_conversation()
    with pytest.raises(ValidationError, match="JSON"):
        queue.enqueue(cid, "t", {"opts": {"temperature": float("nan")}})
    assert queue.status(cid) is None and world.parts(cid) == set()


def test_waiting_on_a_job_whose_last_lease_expired_raises_that_code(
    settings: Settings, world: World
) -> None:
    from pplx_nb import Researcher
    from pplx_nb._errors import error_from_code

    queue = world.queue(max_job_retries=0, lease_seconds=0.2)
    job = _claimed(queue, world, "dead-worker")
    assert queue.recover_stale() == 0
    world.pass_time(0.3)
    assert queue.recover_stale() == 1
    status = queue.status(job.conversation_id)
    assert status is not None and status.status == "failed" and status.error is not None
    assert status.error.code == "JOB_LEASE_EXPIRED"
    assert isinstance(error_from_code(status.error.code, status.error.message), LeaseLost)
    with (
        Researcher(settings, backends=world.backends(), async_deep_research=False) as researcher,
        pytest.raises(LeaseLost) as caught,
    ):
        researcher.wait(job.conversation_id, timeout=30)
    assert caught.value.code == "JOB_LEASE_EXPIRED"
    assert "sent no heartbeat" in caught.value.message


def test_job_states_answer_for_a_batch_with_none_for_no_job_and_a_damaged_one(
    queue: JobQueue, world: World
) -> None:
    idle, waiting, running, broken = (world.new_conversation() for _ in range(4))
    for cid in (waiting, running, broken):
        queue.enqueue(cid, "t", {}, priority=1 if cid == running else 0)
    assert queue.claim("w") is not None
    world.put_status(broken, "{truncated")
    ids = [idle, waiting, running, broken]
    assert queue.job_states(ids) == [None, "pending", "in_progress", None]
    assert queue.job_states(ids) == [queue.job_state(cid) for cid in ids]
    assert queue.job_states([]) == []


def _running_research(world: World, queue: JobQueue) -> tuple[ConversationStore, Job]:
    store = world.store()
    cid = store.create([{"role": "user", "content": "Describe the json module"}]).conversation_id
    queue.enqueue(cid, "perplexity_deep_research", {})
    job = queue.claim("w")
    assert job is not None
    return store, job


def _report(job: Job) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "the report",
        "jobId": job.job_id,
        "usage": {"promptTokens": 10, "completionTokens": 5, "totalTokens": 15},
        "cost": {"totalCost": 0.0126},
    }


def test_a_cancel_after_the_worker_stored_its_answer_completes_the_job(world: World) -> None:
    """The worker stored the report and was about to say so when the cancel came: the job is
    completed with its cost, its question is not closed a second time."""
    queue = world.queue()
    store, job = _running_research(world, queue)
    store.append(job.conversation_id, _report(job), check=JobContext(queue, job).check_owner)
    status = queue.cancel(job.conversation_id)
    assert status is not None and status.status == "completed"
    assert status.result == {"tokens": 15, "cost": 0.0126}
    assert world.parts(job.conversation_id) == {"status.json"}
    assert [m.role for m in store.load(job.conversation_id).messages] == ["user", "assistant"]
    with pytest.raises(LeaseLost, match="completed"):
        queue.complete(job)


def _late(store: ConversationStore, queue: JobQueue, job: Job) -> bool:
    """The report of ``job`` brought by no attempt owning it (the canceller, or an attempt
    that lost its lease), stored as the research side stores it."""
    cid = job.conversation_id
    return store.answer_closed(
        cid,
        Message.model_validate(_report(job)),
        job.job_id,
        check=lambda document: queue.check_late_report(cid, job.job_id, document),
        then=lambda: queue.finish_late_locked(cid, job.job_id),
    )


def _lose_lease(queue: JobQueue, world: World) -> None:
    """Let the one running job's lease run out and this process requeue it."""
    world.pass_time(queue.lease_seconds * 1.25)
    poll_until(lambda: queue.recover_stale() == 1, what="the lease to run out")


def test_a_late_report_completes_its_cancelled_job_once_in_place_of_the_notice(
    world: World,
) -> None:
    queue = world.queue()
    store, job = _running_research(world, queue)
    cid = job.conversation_id
    cancelled = queue.cancel(cid)
    assert cancelled is not None and cancelled.status == "cancelled"
    closing = store.load(cid).messages[-1]
    assert closing.unanswered is not None and closing.closes_job == job.job_id
    assert _late(store, queue, job)
    status = queue.status(cid)
    assert status is not None and status.status == "completed"
    result = status.result
    assert result == {"tokens": 15, "cost": 0.0126, "finishedBeforeCancel": True}
    assert status.progress is not None and status.progress.percentage == 100
    assert [m.content for m in store.load(cid).messages] == [
        "Describe the json module",
        "the report",
    ]
    with pytest.raises(LeaseLost, match="completed"):
        _late(store, queue, job)
    assert len(store.load(cid).messages) == 2


def test_the_report_of_an_attempt_past_its_lease_completes_the_job_it_lost_once(
    world: World,
) -> None:
    """The attempt's lease ran out and another attempt took the job before the report was
    stored: the report is stored all the same, once, and no attempt runs the job again."""
    queue = world.queue(lease_seconds=0.2)
    store, job = _running_research(world, queue)
    cid = job.conversation_id
    _lose_lease(queue, world)
    with pytest.raises(LeaseLost):
        store.append(cid, _report(job), check=JobContext(queue, job).check_owner)
    again = queue.claim("next")
    assert again is not None and again.attempt == 2
    assert _late(store, queue, job)
    status = queue.status(cid)
    assert status is not None and status.status == "completed" and status.error is None
    result = status.result
    assert result == {"tokens": 15, "cost": 0.0126, "handedOver": True}
    assert world.parts(cid) == {"status.json"}
    assert queue.claim("third") is None
    with pytest.raises(LeaseLost, match="completed"):
        queue.heartbeat(again)
    with pytest.raises(LeaseLost, match="completed"):
        _late(store, queue, job)
    assert [m.content for m in store.load(cid).messages] == [
        "Describe the json module",
        "the report",
    ]


def test_a_late_report_takes_the_place_of_the_notice_of_a_job_that_failed_meanwhile(
    world: World,
) -> None:
    """Another attempt found the submission's outcome unknown and failed the job: the report
    of that submission's run, handed over after all, answers the question instead."""
    queue = world.queue()
    store, job = _running_research(world, queue)
    cid = job.conversation_id
    failed = queue.fail(job, SubmissionUnknown("The run request's reply was lost."))
    assert failed.status == "failed"
    assert store.load(cid).messages[-1].unanswered is not None
    assert _late(store, queue, job)
    status = queue.status(cid)
    assert status is not None and status.status == "completed" and status.error is None
    assert [e.code for e in status.error_history] == ["SUBMISSION_UNKNOWN"]
    messages = store.load(cid).messages
    assert [m.content for m in messages] == ["Describe the json module", "the report"]


def test_a_run_handed_over_after_a_lost_lease_is_followed_by_the_next_attempt(
    world: World,
) -> None:
    queue = world.queue(lease_seconds=0.2)
    store, job = _running_research(world, queue)
    cid = job.conversation_id
    queue.begin_submission(job)
    _lose_lease(queue, world)
    with pytest.raises(LeaseLost):
        queue.set_remote_id(job, "resp_1")
    assert queue.hand_over_run(job, "resp_1")
    again = queue.claim("next")
    assert again is not None and again.remote_id == "resp_1" and not again.submitting
    assert again.submitted_at is not None
    assert queue.hand_over_run(job, "resp_1"), "the same run again: nothing changes"
    assert not queue.hand_over_run(job, "resp_2"), "the job follows another run"
    queue.complete(again)
    assert not queue.hand_over_run(job, "resp_1"), "the job ended"
    assert world.parts(cid) == {"status.json"}
    assert store.load(cid).messages[-1].role == "user"


def test_an_attempt_claimed_before_the_hand_over_adopts_the_run_instead_of_giving_up(
    world: World,
) -> None:
    queue = world.queue(lease_seconds=0.2)
    _, job = _running_research(world, queue)
    queue.begin_submission(job)
    _lose_lease(queue, world)
    again = queue.claim("next")
    assert again is not None and again.submitting and again.remote_id is None
    ctx = JobContext(queue, again)
    assert ctx.submission_unfinished and ctx.adopt_handed_over_run() is None
    assert queue.hand_over_run(job, "resp_1")
    assert ctx.adopt_handed_over_run() == "resp_1"
    assert ctx.remote_id == "resp_1" and not ctx.submission_unfinished
    assert ctx.submitted_at is not None
    queue.heartbeat(again)  # the job is still the new attempt's


def test_a_pending_marker_is_made_when_a_claimer_empties_its_folder_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three processes queueing into one folder: a claimer removes an emptied marker folder while
    # another process makes it again, whose mkdir of the folder then meets a missing parent.
    from pplx_nb.jobs import _index

    index = _index.JobIndex(tmp_path)
    real, raced = _index.ensure_dir, []

    def racing(path: Path) -> Path:
        if index._ready and not raced:
            raced.append(path)
            raise FilesystemError(f"Could not create directory {path}: No such file or directory")
        return real(path)

    monkeypatch.setattr(_index, "ensure_dir", racing)
    marker = _index.marker_name(0, 1, "20260101-1767225600000")
    index.add_pending(marker)
    assert raced and index.pending_path(marker).exists()
