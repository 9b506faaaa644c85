"""The Worker against the simulator over loopback: in a thread, and as real processes."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support.runners import sim_runner
from support.waiting import poll_until

from pplx_nb import Settings
from pplx_nb._models import JobStatus, Message
from pplx_nb.backends import open_backends, open_queue, open_store
from pplx_nb.jobs import Job, JobContext, JobQueue, JobRunner, Worker
from pplx_nb.store import ConversationStore

# support.runners streams Sonar chat completions, served by the simulator's Sonar mode only.
pytestmark = pytest.mark.sim_sonar

REPO = Path(__file__).resolve().parent.parent
TOOL = "perplexity_deep_research"
LEASE_SECONDS = 6


@pytest.fixture
def worker_env(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment a worker reads: the simulator, the test key, the logs directory."""
    env = {
        "PERPLEXITY_BASE_URL": settings.base_url,
        "PERPLEXITY_API_KEY": settings.api_key.get_secret_value() if settings.api_key else "",
        "PPLX_NB_OFFLINE": "false",
        "CONVERSATION_LOGS_DIR": str(settings.conversation_logs_dir),
        # Long enough that a loaded 2-core machine (a busy CI box) never lets a live worker's
        # lease expire; the lease-expiry tests wait for it explicitly.
        "PPLX_NB_JOB_LEASE_SECONDS": str(LEASE_SECONDS),
        "PERPLEXITY_MAX_JOB_RETRIES": "2",
        "LOG_LEVEL": "info",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest.fixture
def store(settings: Settings) -> ConversationStore:
    return open_store(root=settings.logs_dir())


@pytest.fixture
def queue(worker_env: dict[str, str]) -> JobQueue:
    """The queue as a worker configured by ``worker_env`` sees it (6 s lease, 2 job retries)."""
    return open_queue(Settings.from_env())


def _submit(
    store: ConversationStore, queue: JobQueue, query: str = "asyncio tasks", **request: Any
) -> str:
    conversation = store.create([Message(role="user", content=query)])
    cid = conversation.conversation_id
    queue.enqueue(cid, TOOL, {"query": query, **request})
    return cid


def _status(queue: JobQueue, cid: str) -> JobStatus:
    status = queue.status(cid)
    assert status is not None
    return status


def _job_id(item: JobStatus | Message) -> object:
    return item.job_id


def _replies(store: ConversationStore, cid: str) -> list[Message]:
    return [m for m in store.load(cid).messages if m.role == "assistant"]


@contextmanager
def _running(queue: JobQueue, runner: JobRunner, **options: Any) -> Iterator[Worker]:
    """A worker on its background thread for the block, stopped (drained) after it."""
    worker = Worker(queue, runner, poll_interval=0.02, **options)
    worker.start()
    try:
        yield worker
    finally:
        worker.stop(timeout=5)


def _sleeper(cancelled: list[str]) -> JobRunner:
    """A runner that sleeps until cancelled, recording the job ids it was cancelled on."""

    async def runner(job: Job, ctx: JobContext) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(job.job_id)
            raise

    return runner


class _RecordingQueue(JobQueue):
    """Reads status.json back after every progress write, as a poller would see it."""

    seen: list[tuple[str, int, str]]

    def progress(self, job: Job, percentage: int, message: str) -> None:
        super().progress(job, percentage, message)
        status = self.status(job.conversation_id)
        assert status is not None and status.progress is not None
        self.seen.append((status.status, status.progress.percentage, status.progress.message))


def test_a_job_runs_to_completion_with_progress_in_order(
    worker_env: dict[str, str], store: ConversationStore, settings: Settings
) -> None:
    parts = open_backends(root=settings.logs_dir())
    queue = _RecordingQueue(parts.statuses, parts.index, answers=store, lease_seconds=2)
    queue.seen = []
    cid = _submit(store, queue, "How do I cancel an asyncio task?")
    first = queue.status(cid)
    assert first is not None and first.status == "pending"
    started: list[tuple[str, int, str]] = []

    async def runner(job: Job, ctx: JobContext) -> object:
        status = queue.status(job.conversation_id)
        assert status is not None and status.progress is not None
        started.append((status.status, status.progress.percentage, status.progress.message))
        return await sim_runner(job, ctx)

    with _running(queue, runner, concurrency=1):
        poll_until(lambda: (s := queue.status(cid)) is not None and s.done, 20, what="completion")
    assert started == [("in_progress", 25, "Querying Perplexity API...")]
    assert queue.seen[0] == ("in_progress", 50, "Processing response...")
    later = [pct for _, pct, _ in queue.seen[1:]]
    assert later and later == sorted(later) and all(75 <= p <= 95 for p in later)
    assert {msg for _, _, msg in queue.seen[1:]} == {"Finalizing research report..."}
    final = queue.status(cid)
    assert final is not None and final.status == "completed" and final.attempts == 1
    assert final.progress is not None and final.progress.elapsed_ms > 0
    (reply,) = _replies(store, cid)
    assert reply.content and _job_id(reply) == _job_id(final) is not None
    assert not (settings.logs_dir() / cid / "job.json").exists()


def test_a_job_that_fails_twice_succeeds_on_the_third_attempt(
    store: ConversationStore, queue: JobQueue
) -> None:
    cid = _submit(store, queue, fail_attempts=2)
    with _running(queue, sim_runner, concurrency=2):
        poll_until(lambda: (s := queue.status(cid)) is not None and s.done, 20, what="completion")
    status = queue.status(cid)
    assert status is not None and status.status == "completed" and status.attempts == 3
    assert [(e.attempt, e.code) for e in status.error_history] == [
        (1, "API_SERVER_ERROR"),
        (2, "API_SERVER_ERROR"),
    ]
    assert len(_replies(store, cid)) == 1


def test_a_job_that_always_fails_ends_failed_after_three_attempts(
    store: ConversationStore, settings: Settings, queue: JobQueue
) -> None:
    cid = _submit(store, queue, fail_attempts=99)
    with _running(queue, sim_runner, concurrency=1):
        poll_until(lambda: (s := queue.status(cid)) is not None and s.done, 20, what="failure")
    status = queue.status(cid)
    assert status is not None and status.status == "failed" and status.attempts == 3
    assert len(status.error_history) == 3
    assert status.error is not None and status.error.code == "API_SERVER_ERROR"
    directory = settings.logs_dir() / cid
    assert not (directory / "job.json").exists()
    assert (directory / "status.json").exists() and (directory / "conversation.json").exists()
    (closing,) = _replies(store, cid)  # the question is closed as not answered, saying why
    assert closing.unanswered is not None and closing.unanswered.code == "API_SERVER_ERROR"


def test_jobs_run_concurrently_up_to_the_limit(
    settings: Settings, store: ConversationStore
) -> None:
    queue = open_queue(root=settings.logs_dir())
    ids = [_submit(store, queue) for _ in range(6)]
    active, peak = 0, 0

    async def runner(job: Job, ctx: JobContext) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.2)
        active -= 1

    with _running(queue, runner, concurrency=3):
        poll_until(lambda: all(_status(queue, c).done for c in ids), 10, what="all jobs")
    assert peak == 3


def test_stopping_a_worker_releases_a_job_still_running(
    settings: Settings, store: ConversationStore
) -> None:
    queue = open_queue(root=settings.logs_dir())
    cid = _submit(store, queue)
    cancelled: list[str] = []
    runner = _sleeper(cancelled)
    worker = Worker(queue, runner, concurrency=1, poll_interval=0.02, drain_seconds=0.2)
    worker.start()
    poll_until(lambda: _status(queue, cid).status == "in_progress", 5, what="claim")
    worker.stop(timeout=5)
    assert not worker.running and len(cancelled) == 1
    status = queue.status(cid)
    assert status is not None and status.status == "pending" and status.attempts == 0


def test_a_stop_timeout_shortens_that_drain_only(
    settings: Settings, store: ConversationStore
) -> None:
    queue = open_queue(root=settings.logs_dir())
    cid = _submit(store, queue)
    cancelled: list[str] = []
    worker = Worker(queue, _sleeper(cancelled), poll_interval=0.02, drain_seconds=30)
    worker.start()
    poll_until(lambda: _status(queue, cid).status == "in_progress", 5, what="claim")
    started = time.monotonic()
    worker.stop(timeout=1)
    assert time.monotonic() - started < 1 and not worker.running and len(cancelled) == 1
    assert _status(queue, cid).status == "pending"
    assert worker.drain_seconds == 30


def test_cancelling_a_running_job_stops_its_runner(
    settings: Settings, store: ConversationStore
) -> None:
    queue = open_queue(root=settings.logs_dir(), lease_seconds=0.3)
    cid = _submit(store, queue)
    cancelled: list[str] = []
    runner = _sleeper(cancelled)
    with _running(queue, runner, concurrency=1):
        poll_until(lambda: _status(queue, cid).status == "in_progress", 5, what="claim")
        queue.cancel(cid)
        poll_until(lambda: bool(cancelled), 5, what="the runner to be cancelled")
    status = queue.status(cid)
    assert status is not None and status.status == "cancelled"


# -- worker processes --------------------------------------------------------------------------


@pytest.fixture
def spawn(worker_env: dict[str, str]) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(
        log: Path,
        *args: str,
        runner: str | None = "support.runners:sim_runner",
        clock_skew: float = 0.0,
    ) -> subprocess.Popen[bytes]:
        env = {**os.environ, **worker_env, "PYTHONPATH": str(REPO / "tests")}
        skewed = ["-m", "support.skewed_clock", str(clock_skew)] if clock_skew else ["-m"]
        command = [sys.executable, *skewed, "pplx_nb.worker", "--poll-interval", "0.05", *args]
        if runner is not None:
            command += ["--runner", runner]
        with log.open("wb") as out:
            proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=out)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_worker_process_exits_zero_on_sigterm_and_releases_its_job(
    spawn: Callable[..., subprocess.Popen[bytes]],
    store: ConversationStore,
    tmp_path: Path,
    queue: JobQueue,
) -> None:
    cid = _submit(store, queue, sleep=30)
    proc = spawn(tmp_path / "w.log", "--drain", "0.2")
    poll_until(lambda: _status(queue, cid).status == "in_progress", 30, what="claim")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    status = queue.status(cid)
    assert status is not None and status.status == "pending" and status.attempts == 0
    log = (tmp_path / "w.log").read_text()
    assert "Job dequeued" in log and "Job released" in log


def test_worker_process_runs_a_researcher_job_by_default(
    spawn: Callable[..., subprocess.Popen[bytes]],
    store: ConversationStore,
    tmp_path: Path,
    queue: JobQueue,
) -> None:
    from pplx_nb import Researcher

    researcher = Researcher(Settings.from_env(), async_deep_research=False)
    try:
        queued = researcher.deep_research("How does json.dumps handle floats?", wait=False)
    finally:
        researcher.close()
    assert isinstance(queued, JobStatus) and queued.status == "pending"
    cid = queued.conversation_id
    proc = spawn(tmp_path / "w.log", "--concurrency", "2", runner=None)
    poll_until(lambda: _status(queue, cid).done, 60, what="the research job")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    status = _status(queue, cid)
    assert status.status == "completed" and status.remote_id
    (reply,) = _replies(store, cid)
    assert reply.content and _job_id(reply) == _job_id(status)
    log = (tmp_path / "w.log").read_text()
    assert "Job completed" in log and "tokens n/a" not in log


@pytest.mark.slow
def test_four_worker_processes_drain_500_jobs_each_exactly_once(
    spawn: Callable[..., subprocess.Popen[bytes]],
    store: ConversationStore,
    tmp_path: Path,
    queue: JobQueue,
    settings: Settings,
) -> None:
    from pplx_nb.sim import stats

    ids = [_submit(store, queue, f"asyncio question {i}") for i in range(500)]
    procs = [spawn(tmp_path / f"w{i}.log", "--concurrency", "4") for i in range(4)]
    poll_until(lambda: queue.pending_count() == 0, 180, what="the queue to drain")
    poll_until(lambda: all(_status(queue, c).done for c in ids), 60, what="the last jobs")
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    assert [proc.wait(timeout=30) for proc in procs] == [0, 0, 0, 0]
    # Invariants, not exact attempt counts: on a loaded machine a lease may still expire and a
    # job be claimed twice, but it is answered once and completed once.
    statuses = [_status(queue, c) for c in ids]
    assert all(s.status == "completed" and s.attempts >= 1 for s in statuses)
    for cid, status in zip(ids, statuses, strict=True):
        (reply,) = _replies(store, cid)
        assert _job_id(reply) == _job_id(status) is not None
    logs = [(tmp_path / f"w{i}.log").read_text() for i in range(4)]
    assert sum(log.count("Job completed") for log in logs) == 500
    assert sum(log.count("Job dequeued") for log in logs) == sum(s.attempts for s in statuses)
    assert sum(1 for log in logs if "Job completed" in log) >= 2
    # Billed at the server: every job at least once, never more than once per attempt.
    assert 500 <= stats(settings.base_url)["generations"] <= sum(s.attempts for s in statuses)


@pytest.mark.slow
# 3600: the dead worker's clock ran an hour ahead, so its last heartbeat is dated an hour later;
# the job still waits no more than a lease from the survivor's first look.
@pytest.mark.parametrize("doomed_clock_skew", [0, 3600])
def test_a_job_of_a_killed_worker_completes_once_on_another_after_the_lease(
    spawn: Callable[..., subprocess.Popen[bytes]],
    store: ConversationStore,
    tmp_path: Path,
    queue: JobQueue,
    doomed_clock_skew: float,
) -> None:
    cid = _submit(store, queue, sleep=1.5)
    doomed = spawn(tmp_path / "doomed.log", "--worker-id", "doomed", clock_skew=doomed_clock_skew)
    poll_until(lambda: _status(queue, cid).worker_id == "doomed", 30, what="the first claim")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(timeout=10)
    survivor = spawn(tmp_path / "survivor.log", "--worker-id", "survivor")
    poll_until(lambda: _status(queue, cid).done, 30, what="completion on the survivor")
    survivor.send_signal(signal.SIGTERM)
    assert survivor.wait(timeout=20) == 0
    status = queue.status(cid)
    assert status is not None and status.status == "completed"
    assert status.worker_id == "survivor" and status.attempts == 2
    assert [e.code for e in status.error_history] == ["JOB_LEASE_EXPIRED"]
    assert len(_replies(store, cid)) == 1


def test_an_unexpected_exception_in_a_runner_is_recorded_and_retried(
    settings: Settings, store: ConversationStore
) -> None:
    queue = open_queue(root=settings.logs_dir(), max_job_retries=1)
    cid = _submit(store, queue)

    async def runner(job: Job, ctx: JobContext) -> None:
        raise KeyError("missing-field")

    with _running(queue, runner, concurrency=1):
        poll_until(lambda: _status(queue, cid).done, 10, what="failure")
    status = queue.status(cid)
    assert status is not None and status.status == "failed" and status.attempts == 2
    assert status.error is not None and "KeyError" in status.error.message


def test_a_worker_whose_logs_folder_is_a_file_backs_off_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    not_a_folder = tmp_path / "conversation-logs"
    not_a_folder.write_text("")

    async def runner(job: Job, ctx: JobContext) -> None:
        raise AssertionError("nothing can be claimed")

    with (
        caplog.at_level(logging.INFO, logger="pplx_nb.jobs"),
        _running(open_queue(root=not_a_folder, lease_seconds=60), runner) as worker,
    ):
        poll_until(lambda: "Trying again in 4 s" in caplog.text, 30, what="the third, longer pause")
        assert worker.running
    # At a 0.02 s poll a loop without backoff logs ~50 errors a second; this one logs 3 by 3 s.
    tries = [r for r in caplog.records if r.levelno == logging.ERROR][:3]
    pauses = [r.getMessage().rpartition("Trying again in ")[2] for r in tries]
    assert pauses == ["1 s.", "2 s.", "4 s."]
    gaps = [later.created - earlier.created for earlier, later in itertools.pairwise(tries)]
    assert gaps[0] >= 0.9 and gaps[1] >= 1.9, gaps
    assert all(str(not_a_folder) in r.getMessage() for r in tries)
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--concurrency", "0", "--runner", "json:dumps"], "concurrency must be at least 1"),
        (["--runner", "no_such_module:run"], "No module named 'no_such_module'"),
        (["--runner", "json:no_such_function"], "has no attribute 'no_such_function'"),
    ],
)
def test_worker_process_with_unusable_arguments_exits_2_saying_why(
    worker_env: dict[str, str], args: list[str], said: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pplx_nb.worker", *args],
        cwd=REPO,
        env={**os.environ, **worker_env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "The worker cannot start" in done.stderr and said in done.stderr
    assert "Traceback" not in done.stderr


def test_worker_process_with_a_bad_environment_exits_2_naming_the_setting(
    worker_env: dict[str, str],
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pplx_nb.worker"],
        cwd=REPO,
        env={**os.environ, **worker_env, "PPLX_NB_JOB_LEASE_SECONDS": "abc"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "VALIDATION_ERROR: invalid configuration" in done.stderr
    assert "PPLX_NB_JOB_LEASE_SECONDS" in done.stderr or "job_lease_seconds" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.slow
def test_a_worker_whose_clock_runs_ahead_leaves_healthy_jobs_alone(
    spawn: Callable[..., subprocess.Popen[bytes]],
    store: ConversationStore,
    tmp_path: Path,
    queue: JobQueue,
) -> None:
    cid = _submit(store, queue, sleep=6)  # six 1-second leases, kept alive by heartbeats
    healthy = spawn(tmp_path / "healthy.log", "--worker-id", "healthy")
    poll_until(lambda: _status(queue, cid).worker_id == "healthy", 30, what="the first claim")
    ahead = spawn(tmp_path / "ahead.log", "--worker-id", "ahead", clock_skew=120)
    poll_until(lambda: _status(queue, cid).done, 60, what="completion")
    for proc in (healthy, ahead):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    status = _status(queue, cid)
    assert status.status == "completed" and status.worker_id == "healthy"
    assert status.attempts == 1 and status.error_history == []
    assert "Job dequeued" not in (tmp_path / "ahead.log").read_text()
    assert len(_replies(store, cid)) == 1
