"""The job side on Redis: what files cannot show (server-clock leases, one lock with the store,
nothing on disk, an unreachable server), and worker processes on "several machines" sharing one
queue. The queue's whole contract runs on Redis too, in tests/test_jobs.py."""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from conftest import TEST_KEY
from support.waiting import poll_until

from pplx_nb import ConversationStore, Researcher, Settings
from pplx_nb._errors import FilesystemError
from pplx_nb._layout import RedisKeys
from pplx_nb._models import JobStatus, Message
from pplx_nb.backends import open_backends, open_queue, open_store
from pplx_nb.jobs import Job, JobContext, JobQueue, LeaseLost, Worker

REPO = Path(__file__).resolve().parent.parent
KEYS = RedisKeys()


def _store(redis_url: str, logs_dir: Path) -> ConversationStore:
    return open_store(Settings(store_url=redis_url, conversation_logs_dir=logs_dir, offline=True))


def _ask(store: ConversationStore, query: str = "How do I cancel an asyncio task?") -> str:
    return store.create([Message(role="user", content=query)]).conversation_id


def _done(queue: JobQueue, conversation_id: str) -> bool:
    status = queue.status(conversation_id)
    return status is not None and status.done


def test_opened_with_a_store_url_the_queue_is_in_redis_and_writes_no_file(
    redis_url: str, logs_dir: Path
) -> None:
    settings = Settings(store_url=redis_url, conversation_logs_dir=logs_dir, offline=True)
    queue = open_queue(settings)
    assert queue.location == redis_url
    assert repr(queue).startswith(f"JobQueue(location={redis_url!r}") and str(logs_dir) not in repr(
        queue
    )
    store = _store(redis_url, logs_dir)
    cid = _ask(store)
    queue.enqueue(cid, "perplexity_deep_research", {"query": "q"})
    job = queue.claim("w")
    assert job is not None and job.conversation_id == cid
    queue.complete(job)
    found = redis.Redis.from_url(redis_url)
    keys = {key.decode() for key in found.keys("*")}
    assert f"pplx_nb:conv:{cid}:status" in keys and f"pplx_nb:conv:{cid}:job" not in keys
    assert all(key.startswith("pplx_nb:") for key in keys)
    assert list(logs_dir.iterdir()) == []


def test_a_researcher_on_redis_queues_there_and_writes_nothing_under_its_folder(
    redis_url: str, sim_url: str, logs_dir: Path
) -> None:
    settings = Settings(
        api_key=TEST_KEY,
        base_url=sim_url,
        offline=False,
        conversation_logs_dir=logs_dir,
        store_url=redis_url,
        job_lease_seconds=10,
    )
    with Researcher(settings, async_deep_research=True) as researcher:
        assert researcher.queue.location == redis_url
        queued = researcher.deep_research("How does json.dumps handle floats?", wait=False)
        assert isinstance(queued, JobStatus)
        answer = researcher.wait(queued.conversation_id, timeout=60)
        assert answer.text
        status = researcher.queue.status(queued.conversation_id)
        assert status is not None and status.status == "completed"
    assert list(logs_dir.iterdir()) == []


def test_a_worker_whose_lease_ran_out_is_refused_before_anyone_recovers_the_job(
    redis_url: str, logs_dir: Path
) -> None:
    queue = open_backends(Settings(store_url=redis_url), lease_seconds=0.3).job_queue()
    cid = _ask(_store(redis_url, logs_dir))
    queue.enqueue(cid, "t", {})
    job = queue.claim("slow")
    assert job is not None
    queue.heartbeat(job)
    time.sleep(0.5)
    with pytest.raises(LeaseLost, match="past its lease"):
        queue.progress(job, 60, "late")
    with pytest.raises(LeaseLost, match="past its lease"):
        JobContext(queue, job).check_owner(b'{"messages": []}')
    with pytest.raises(LeaseLost):
        queue.complete(job)
    assert queue.recover_stale() == 1
    again = queue.claim("fast")
    assert again is not None and again.attempt == 2 and again.job_id == job.job_id
    status = queue.status(cid)
    assert status is not None and status.worker_id == "fast"
    assert [e.code for e in status.error_history] == ["JOB_LEASE_EXPIRED"]


def test_a_worker_writing_from_its_remembered_status_is_refused_after_another_process_cancels(
    redis_url: str, logs_dir: Path
) -> None:
    store = _store(redis_url, logs_dir)
    worker_side = open_backends(Settings(store_url=redis_url)).job_queue(store)
    cid = _ask(store)
    worker_side.enqueue(cid, "t", {})
    job = worker_side.claim("w")
    assert job is not None
    worker_side.progress(job, 40, "reading")  # the worker now remembers the status it wrote
    other_process = open_backends(Settings(store_url=redis_url)).job_queue()
    cancelled = other_process.cancel(cid)
    assert cancelled is not None and cancelled.status == "cancelled"
    for write in (
        lambda: worker_side.progress(job, 50, "late"),
        lambda: worker_side.heartbeat(job),
        lambda: worker_side.complete(job, tokens=1),
    ):
        with pytest.raises(LeaseLost, match="cancelled"):
            write()
    assert worker_side.status(cid) == cancelled


def test_a_progress_write_waits_while_another_process_holds_the_conversation_lock(
    redis_url: str, logs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from support.round_trips import counting

    from pplx_nb._redis import RedisLock

    queue = open_backends(Settings(store_url=redis_url)).job_queue()
    cid = _ask(_store(redis_url, logs_dir))
    queue.enqueue(cid, "t", {})
    job = queue.claim("w")
    assert job is not None
    before = queue.status(cid)
    with counting(monkeypatch) as trips, RedisLock(redis_url, KEYS.conversation(cid, "lock")):
        writer = threading.Thread(target=queue.progress, args=(job, 70, "while locked"))
        writer.start()
        # The write refused, then several tries to take the lock (each a script call): the
        # writer is waiting for it, not writing past it.
        poll_until(lambda: trips.commands.count("EVALSHA") >= 4, 30, 0.01, what="lock attempts")
        assert queue.status(cid) == before
    writer.join(timeout=30)
    status = queue.status(cid)
    assert status is not None and status.progress is not None
    assert status.progress.message == "while locked" and status.worker_id == "w"


@pytest.mark.parametrize("damage", ["a list", "not JSON"])
def test_a_claimed_job_whose_status_is_damaged_is_reported_and_the_next_one_claimed(
    redis_url: str, logs_dir: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    raw = redis.Redis.from_url(redis_url)
    queue = open_backends(Settings(store_url=redis_url)).job_queue()
    store = _store(redis_url, logs_dir)
    damaged, fine = _ask(store), _ask(store)
    queue.enqueue(damaged, "t", {})
    queue.enqueue(fine, "t", {})
    status_key = KEYS.conversation(damaged, "status")
    raw.delete(status_key)
    if damage == "a list":
        raw.rpush(status_key, "x")
    else:
        raw.set(status_key, b"{not json")
    with caplog.at_level(logging.ERROR, logger="pplx_nb.jobs"):
        job = queue.claim("w")
    assert job is not None and job.conversation_id == fine
    assert f"Job {damaged} cannot be claimed" in caplog.text
    claimed = [m.decode() for m in raw.zrange(KEYS.jobs("claimed"), 0, -1)]
    assert any(marker.endswith(damaged) for marker in claimed)  # recovery keeps reporting it


def test_a_marker_that_is_not_text_is_dropped_and_the_queue_goes_on(
    redis_url: str, logs_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = redis.Redis.from_url(redis_url)
    damaged = b"\x00\xff\xfe-not-utf8"  # sorts before every real marker
    queue = open_backends(Settings(store_url=redis_url), lease_seconds=0.3).job_queue()
    cid = _ask(_store(redis_url, logs_dir))
    queue.enqueue(cid, "t", {})
    raw.zadd(KEYS.jobs("pending"), {damaged: 0})
    raw.zadd(KEYS.jobs("claimed"), {damaged + b"-old": 0})
    with caplog.at_level(logging.WARNING, logger="pplx_nb.jobs"):
        assert queue.recover_stale() == 0
        assert queue.pending_count() == 1
        job = queue.claim("w")
    assert job is not None and job.conversation_id == cid
    assert raw.zrange(KEYS.jobs("pending"), 0, -1) == []
    assert damaged not in raw.zrange(KEYS.jobs("claimed"), 0, -1)
    assert "damaged entry" in caplog.text
    raw.zadd(KEYS.jobs("claimed"), {damaged: 0})  # its deadline long past: recovery sees it
    queue.recover_stale()
    assert damaged not in raw.zrange(KEYS.jobs("claimed"), 0, -1)


def test_a_claim_held_up_past_its_lease_is_claimed_afresh_not_lost(
    redis_url: str, logs_dir: Path
) -> None:
    store = _store(redis_url, logs_dir)
    queue = open_backends(Settings(store_url=redis_url), lease_seconds=0.3).job_queue(store)
    cid = _ask(store)
    queue.enqueue(cid, "t", {})
    held = threading.Event()

    def hold_the_lock() -> None:
        with store.locked(cid):
            held.set()
            time.sleep(0.6)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    assert held.wait(30)
    job = queue.claim("w")  # pops the job, then waits for the lock longer than a lease
    holder.join()
    assert job is not None and job.attempt == 1
    queue.heartbeat(job)  # its lease runs from the claim that took it, not the one held up
    status = queue.status(cid)
    assert status is not None and status.status == "in_progress" and status.error_history == []
    assert queue.complete(job).status == "completed"


def test_leases_are_judged_by_the_server_clock_not_this_machines(
    redis_url: str, logs_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = open_backends(Settings(store_url=redis_url), lease_seconds=30).job_queue()
    cid = _ask(_store(redis_url, logs_dir))
    queue.enqueue(cid, "t", {})
    job = queue.claim("w")
    assert job is not None
    # A machine whose clock jumps an hour ahead (both clocks) takes no healthy job over.
    real_time, real_monotonic = time.time, time.monotonic
    monkeypatch.setattr(time, "time", lambda: real_time() + 3600)
    monkeypatch.setattr(time, "monotonic", lambda: real_monotonic() + 3600)
    assert queue.recover_stale() == 0
    queue.heartbeat(job)
    monkeypatch.undo()
    status = queue.status(cid)
    assert status is not None and status.status == "in_progress" and status.worker_id == "w"
    assert queue.complete(job).status == "completed"


def test_store_appends_and_job_transitions_take_the_same_lock(
    redis_url: str, logs_dir: Path
) -> None:
    store = _store(redis_url, logs_dir)
    queue = open_backends(Settings(store_url=redis_url)).job_queue(store)
    cid = _ask(store)
    appended = threading.Event()

    def append() -> None:
        store.append(cid, Message(role="assistant", content="an answer"))
        appended.set()

    with queue._statuses.locked(cid):
        assert redis.Redis.from_url(redis_url).exists(KEYS.conversation(cid, "lock"))
        writer = threading.Thread(target=append)
        writer.start()
        assert not appended.wait(0.5)
    assert appended.wait(30)
    writer.join()
    assert [m.role for m in store.load(cid).messages] == ["user", "assistant"]


def test_a_status_written_after_its_lock_expired_is_refused(redis_url: str, logs_dir: Path) -> None:
    from pplx_nb.jobs._redis import RedisStatusBackend

    store = _store(redis_url, logs_dir)
    cid = _ask(store)
    queue = open_backends(Settings(store_url=redis_url)).job_queue(store)
    status = queue.enqueue(cid, "t", {})
    statuses = RedisStatusBackend(redis_url, lock_seconds=0.2)
    with statuses.locked(cid):
        time.sleep(0.4)
        # Another process takes the expired lock; the late write must not land.
        with store.locked(cid), pytest.raises(FilesystemError, match="lock expired"):
            statuses.write(status.model_copy(update={"status": "cancelled"}))
    assert queue.status(cid) == status


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_worker_that_cannot_reach_redis_backs_off_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"redis://127.0.0.1:{_closed_port()}/0"
    queue = open_backends(Settings(store_url=url), lease_seconds=60).job_queue()

    async def runner(job: Job, ctx: JobContext) -> None:
        raise AssertionError("nothing can be claimed")

    worker = Worker(queue, runner, poll_interval=0.02)
    with caplog.at_level(logging.INFO, logger="pplx_nb.jobs"):
        worker.start()
        try:
            poll_until(
                lambda: "Trying again in 2 s" in caplog.text, 30, what="the second, longer pause"
            )
            assert worker.running
        finally:
            worker.stop(timeout=10)
    tries = [r for r in caplog.records if "cannot reach the store" in r.getMessage()]
    # At a 0.02 s poll a loop without backoff would have logged ~150 times in 3 s.
    assert 2 <= len(tries) <= 6
    assert all(r.levelno == logging.WARNING and url in r.getMessage() for r in tries)
    assert "Traceback" not in caplog.text


# -- worker processes on "several machines" ------------------------------------------------------


@pytest.fixture
def spawn(
    redis_url: str, sim_url: str, tmp_path: Path
) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """Start ``python -m pplx_nb.worker`` with a folder of its own and the shared store."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO / "tests"),
            "PPLX_NB_STORE": redis_url,
            "PERPLEXITY_BASE_URL": sim_url,
            "PERPLEXITY_API_KEY": TEST_KEY,
            "PPLX_NB_OFFLINE": "false",
            "CONVERSATION_LOGS_DIR": str(tmp_path / f"{name}-logs"),
            "PPLX_NB_JOB_LEASE_SECONDS": "6",
            "PERPLEXITY_MAX_JOB_RETRIES": "2",
            "LOG_LEVEL": "info",
        }
        command = [
            sys.executable,
            "-m",
            "pplx_nb.worker",
            "--poll-interval",
            "0.05",
            "--concurrency",
            "4",
            "--worker-id",
            name,
            "--runner",
            "support.runners:sim_runner",
        ]
        with (tmp_path / f"{name}.log").open("wb") as out:
            proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=out)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


@pytest.mark.slow
@pytest.mark.sim_sonar
def test_four_worker_processes_drain_300_jobs_exactly_once_with_one_killed(
    spawn: Callable[[str], subprocess.Popen[bytes]],
    redis_url: str,
    sim_url: str,
    tmp_path: Path,
    logs_dir: Path,
) -> None:
    from pplx_nb.sim import stats

    store = _store(redis_url, logs_dir)
    queue = open_backends(Settings(store_url=redis_url), lease_seconds=6).job_queue(store)
    ids = []
    for i in range(300):
        cid = _ask(store, f"asyncio question {i}")
        # Each job takes 0.3 s or more, so the worker killed below is surely in the middle of one.
        queue.enqueue(cid, "perplexity_deep_research", {"query": f"asyncio {i}", "sleep": 0.3})
        ids.append(cid)
    names = ["w0", "w1", "w2", "w3"]
    procs = {name: spawn(name) for name in names}

    def running_on(name: str) -> list[str]:
        return [s.conversation_id for s in queue.jobs(("in_progress",)) if s.worker_id == name]

    poll_until(lambda: len(queue.jobs(("completed",))) >= 40, 120, 0.5, what="the first 40 jobs")
    poll_until(lambda: bool(running_on("w0")), 60, 0.1, what="w0 to hold a job")
    procs["w0"].send_signal(signal.SIGKILL)
    procs["w0"].wait(timeout=10)
    orphans = running_on("w0")
    assert orphans

    poll_until(lambda: all(_done(queue, c) for c in ids), 300, 0.5, what="every job")
    for name in names[1:]:
        procs[name].send_signal(signal.SIGTERM)
    assert [procs[name].wait(timeout=30) for name in names[1:]] == [0, 0, 0]

    statuses = {cid: queue.status(cid) for cid in ids}
    assert all(s is not None and s.status == "completed" for s in statuses.values())
    for cid, status in statuses.items():
        assert status is not None
        replies = [m for m in store.load(cid).messages if m.role == "assistant"]
        # Answered exactly once, by the attempt the status says completed it.
        assert [m.job_id for m in replies] == [status.job_id]
    for cid in orphans:
        status = statuses[cid]
        assert status is not None and status.worker_id != "w0" and status.attempts >= 2
        assert "JOB_LEASE_EXPIRED" in [e.code for e in status.error_history]
    attempts = sum(s.attempts for s in statuses.values() if s is not None)
    # Billed at the server: every job once, never more than once per attempt.
    assert 300 <= stats(sim_url)["generations"] <= attempts
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in names}
    logged = re.findall(r"Job completed: (\S+) in", "".join(logs.values()))
    assert len(logged) == len(set(logged))  # no job completed twice
    # Every completion is logged, but one the killed worker stored in the instant before its
    # log line (its job then holds w0's name and was never an orphan).
    unlogged = set(ids) - set(logged)
    assert all(statuses[c].worker_id == "w0" for c in unlogged), unlogged
    assert len(unlogged) <= 4  # its job slots
    assert sum(1 for log in logs.values() if "Job completed" in log) >= 3
    # Four "machines": none of them wrote a file of its own.
    assert all(not (tmp_path / f"{name}-logs").exists() for name in names)
    assert list(logs_dir.iterdir()) == []
