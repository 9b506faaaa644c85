"""A worker that loses its lease while it holds a paid run hands the run over, never drops it.

The store is paused while a deep-research submission is on its way back (Debian's
``redis-server`` stopped with SIGSTOP), or the worker itself is (a worker process stopped with
SIGSTOP, on the file store), for longer than the lease. The run is billed at the simulator
behind :class:`support.misbehaving.Misbehaving`, so the tests count what was paid for there
(``background_runs``) against what was stored.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import TEST_KEY
from support import redis_server
from support.misbehaving import Misbehaving

from pplx_nb import Researcher, Settings
from pplx_nb._errors import PplxError
from pplx_nb._models import JobStatus, Message
from pplx_nb.backends import open_queue
from pplx_nb.jobs import JobQueue
from pplx_nb.sim import stats

REPO = Path(__file__).resolve().parent.parent


class _Pause:
    """Stops process ``pid`` (SIGSTOP) the first time it is called, and lets it go on
    (SIGCONT) ``seconds`` later, or at :meth:`resume`."""

    def __init__(self, pid: int, seconds: float | None = None) -> None:
        self.pid = pid
        self.seconds = seconds
        self.stopped = threading.Event()
        self.timer: threading.Timer | None = None

    def __call__(self) -> None:
        if self.stopped.is_set():
            return
        os.kill(self.pid, signal.SIGSTOP)
        self.stopped.set()
        if self.seconds is not None:
            self.timer = threading.Timer(self.seconds, self.resume)
            self.timer.start()

    def resume(self) -> None:
        if self.stopped.is_set():
            os.kill(self.pid, signal.SIGCONT)


@contextlib.contextmanager
def _pausing(pid: int, seconds: float | None = None) -> Iterator[_Pause]:
    """A :class:`_Pause` of ``pid``, which goes on by the end of the block whatever happens."""
    pause = _Pause(pid, seconds)
    try:
        yield pause
    finally:
        if pause.timer is not None:
            pause.timer.cancel()
        pause.resume()


def _ended(queue: JobQueue, conversation_id: str, timeout: float) -> JobStatus:
    """The job's status once it has ended (reads that fail while the store is paused are
    tried again)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(PplxError):
            status = queue.status(conversation_id)
            if status is not None and status.done:
                return status
        time.sleep(0.1)
    raise AssertionError(f"the job of {conversation_id} did not end in {timeout:g} s")


def _requeue_past_lease(queue: JobQueue, timeout: float) -> None:
    """Recover the paused worker's job once this process has seen its heartbeat unchanged for
    a lease."""
    deadline = time.monotonic() + timeout
    while queue.recover_stale() != 1:
        assert time.monotonic() < deadline, "the lease never ran out"
        time.sleep(0.1)


def _answers(messages: list[Message]) -> list[Message]:
    """The answers stored (not the turns that close a question as not answered)."""
    return [m for m in messages if m.role == "assistant" and m.unanswered is None]


def _settings(base_url: str, logs_dir: Path, **update: Any) -> Settings:
    return Settings(
        api_key=TEST_KEY,
        base_url=base_url,
        offline=False,
        conversation_logs_dir=logs_dir,
        timeout_ms=5_000,
        **update,
    )


def _queued(r: Researcher) -> str:
    queued = r.deep_research("Describe the json module", wait=False)
    assert isinstance(queued, JobStatus)
    return queued.conversation_id


def _assert_paid_once_and_stored_once(
    sim_url: str, status: JobStatus, messages: list[Message]
) -> None:
    assert stats(sim_url)["background_runs"] == 1, "billed once"
    assert status.status == "completed", status
    answers = _answers(messages)
    assert len(answers) == 1, "stored once"
    assert answers[0].job_id == status.job_id
    assert [m.role for m in messages] == ["user", "assistant"]
    assert "SUBMISSION_UNKNOWN" not in [e.code for e in status.error_history]


@pytest.fixture
def redis() -> Iterator[redis_server.RedisServer]:
    """A Redis of this test's own: it is stopped on purpose."""
    with redis_server.start() as server:
        yield server


def _research_with_redis_stopped(
    redis: redis_server.RedisServer, sim_url: str, logs_dir: Path, *, when: str
) -> tuple[JobStatus, list[Message]]:
    """Queue a deep research and stop Redis for 13 s (lease 3 s) as the reply ``when`` names
    (``submission``: the run's id; ``report``: the finished run, polled) comes back; the job's
    status once it ended and its conversation."""
    settings = _settings(sim_url, logs_dir, store_url=redis.url(0), job_lease_seconds=3)
    with Misbehaving(sim_url) as bad, _pausing(redis.process.pid, seconds=13) as pause:
        if when == "submission":
            bad.on_submission = pause
        else:
            bad.on_report = pause
            bad.refuse_streams = True  # polled: the report comes whole, in one reply
        with Researcher(
            settings.model_copy(update={"base_url": bad.url}), async_deep_research=True
        ) as r:
            cid = _queued(r)
            status = _ended(r.queue, cid, timeout=120)
            messages = r.history(cid).messages
        assert pause.stopped.is_set()
    return status, messages


def test_redis_stopped_past_the_lease_mid_submission_bills_one_run_and_stores_its_report(
    redis: redis_server.RedisServer, sim_url: str, logs_dir: Path
) -> None:
    """The run's id cannot be recorded (the store's reads time out after 10 s), the lease runs
    out, and Redis comes back: the run is handed to the next attempt, which follows it to its
    report, stored once; nothing is paid twice."""
    status, messages = _research_with_redis_stopped(redis, sim_url, logs_dir, when="submission")
    _assert_paid_once_and_stored_once(sim_url, status, messages)


def test_redis_stopped_past_the_lease_as_the_report_comes_stores_it_once_without_a_retry(
    redis: redis_server.RedisServer, sim_url: str, logs_dir: Path
) -> None:
    """The worker holds the paid report when it finds its lease gone. It stores it all the
    same, once, and the job ends completed without another attempt."""
    status, messages = _research_with_redis_stopped(redis, sim_url, logs_dir, when="report")
    _assert_paid_once_and_stored_once(sim_url, status, messages)
    assert status.attempts == 1 and (status.result or {})["handedOver"] is True


def test_a_worker_paused_past_its_lease_mid_submission_hands_its_run_to_the_next_attempt(
    sim_url: str, logs_dir: Path, tmp_path: Path
) -> None:
    """On the file store: the worker process stops (SIGSTOP) as the run's id comes back,
    another process requeues its job once the lease ran out, and the worker goes on. It
    records the run for the job's next attempt, which follows it instead of submitting."""
    settings = _settings(sim_url, logs_dir, job_lease_seconds=2)
    with Misbehaving(sim_url) as bad:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("PPLX_NB_", "PERPLEXITY_"))
        }
        env |= {
            "PYTHONPATH": str(REPO / "tests"),
            "CONVERSATION_LOGS_DIR": str(logs_dir),
            "PERPLEXITY_BASE_URL": bad.url,
            "PERPLEXITY_API_KEY": TEST_KEY,
            "PPLX_NB_OFFLINE": "false",
            "PPLX_NB_JOB_LEASE_SECONDS": "2",
            "PERPLEXITY_TIMEOUT": "5000",
            "LOG_LEVEL": "info",
        }
        command = [sys.executable, "-m", "pplx_nb.worker", "--poll-interval", "0.05"]
        with Researcher(settings.model_copy(update={"base_url": bad.url})) as r:
            cid = _queued(r)
            log = tmp_path / "worker.log"
            with log.open("wb") as out:
                worker = subprocess.Popen(command, cwd=REPO, env=env, stdout=out, stderr=out)
            try:
                with _pausing(worker.pid) as pause:
                    bad.on_submission = pause
                    assert pause.stopped.wait(60), "the worker never submitted the run"
                    queue = open_queue(settings)
                    _requeue_past_lease(queue, timeout=30)
                    requeued = queue.status(cid)
                    assert requeued is not None and requeued.status == "pending"
                    assert requeued.remote_id is None and requeued.submitting_at is not None
                status = _ended(queue, cid, timeout=60)
                messages = r.history(cid).messages
            finally:
                worker.send_signal(signal.SIGTERM)
                worker.wait(timeout=30)
    _assert_paid_once_and_stored_once(sim_url, status, messages)
    assert status.attempts == 2 and status.remote_id is not None
    assert [e.code for e in status.error_history] == ["JOB_LEASE_EXPIRED"]
    assert f"Run {status.remote_id} of {cid} is recorded" in log.read_text()
