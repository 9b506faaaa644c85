"""Worker: claims jobs from a JobQueue and runs them, several at once, through a runner it is given.

The worker knows nothing about HTTP or conversations: it claims, heartbeats every lease/3, and
completes, fails or releases; the runner does the work. It runs as a coroutine (:meth:`Worker.run`),
on its own background thread and event loop (:meth:`Worker.start`, used inside a kernel or the MCP
server), or as a process (``python -m pplx_nb.worker``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from pplx_nb._errors import LeaseLost, PplxError, StoreUnavailable, ValidationError
from pplx_nb._logging import get_logger
from pplx_nb.jobs._events import result_meta_of
from pplx_nb.jobs._job import Job, JobContext, JobRunner
from pplx_nb.jobs._queue import JobQueue

__all__ = ["Worker"]

logger = get_logger("pplx_nb.jobs")

_LONGEST_PAUSE = 30.0
"""Seconds between tries at most while the store cannot be reached (Redis) or used (a logs
folder that is a file or cannot be written)."""


class Worker:
    """Runs queued jobs through ``runner``, up to ``concurrency`` at a time.

    Args:
        queue: where jobs come from.
        runner: ``async runner(job, ctx)``; it stores the answer itself (see :data:`JobRunner`).
        concurrency: jobs run at once.
        worker_id: the name written to status.json (default: host, pid and a random suffix).
        poll_interval: seconds between looks at an empty queue.
        drain_seconds: on stop, how long running jobs may take to finish before being released.
    """

    def __init__(
        self,
        queue: JobQueue,
        runner: JobRunner,
        *,
        concurrency: int = 4,
        worker_id: str | None = None,
        poll_interval: float = 0.2,
        drain_seconds: float = 10.0,
    ) -> None:
        if concurrency < 1:
            raise ValidationError(
                f"Worker concurrency must be at least 1, got {concurrency!r} "
                "(python -m pplx_nb.worker --concurrency N)."
            )
        self.queue = queue
        self.runner = runner
        self.concurrency = concurrency
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.poll_interval = poll_interval
        self.drain_seconds = drain_seconds
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._drain_cap = math.inf
        self._pause = 0.0
        self._resume_at = 0.0

    def __repr__(self) -> str:
        return f"Worker(id={self.worker_id!r}, concurrency={self.concurrency})"

    # -- as a background thread ----------------------------------------------------------------

    def start(self) -> None:
        """Run the worker on a daemon thread with its own event loop; returns once it runs."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._started.clear()
        self._drain_cap = math.inf
        self._thread = threading.Thread(
            target=asyncio.run, args=(self._main(),), name=f"pplx-worker-{self.worker_id}"
        )
        self._thread.daemon = True
        self._thread.start()
        self._started.wait(timeout=10)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._started.set()
        await self.run(self._stop)

    @property
    def running(self) -> bool:
        """Whether the background thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop claiming, let running jobs finish (at most ``drain_seconds``), release the rest.

        Waits up to ``timeout`` seconds for the thread to end; the drain then lasts at most half
        of that.
        """
        loop, stop, thread = self._loop, self._stop, self._thread
        if loop is None or stop is None or thread is None:
            return
        self._drain_cap = timeout / 2
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(stop.set)
        thread.join(timeout)

    # -- the loop ------------------------------------------------------------------------------

    async def run(self, stop_event: asyncio.Event) -> None:
        """Claim and run jobs until ``stop_event`` is set; then drain and release what is left."""
        running: set[asyncio.Task[None]] = set()
        stopping = asyncio.ensure_future(stop_event.wait())
        next_recovery = 0.0
        logger.info("Worker %s started (concurrency %d)", self.worker_id, self.concurrency)
        try:
            while not stop_event.is_set():
                if time.monotonic() >= max(next_recovery, self._resume_at):
                    next_recovery = time.monotonic() + self.queue.lease_seconds / 2
                    # Recovery looks into every conversation directory (≈0.1 s for 10,000):
                    # off the loop, so running jobs keep streaming and heartbeating meanwhile.
                    await asyncio.to_thread(self._recover)
                while (
                    len(running) < self.concurrency
                    and not stop_event.is_set()
                    and time.monotonic() >= self._resume_at
                ):
                    job = self._claim()
                    if job is None:
                        break
                    running.add(asyncio.create_task(self._execute(job)))
                full = len(running) >= self.concurrency
                # When full, still wake up for the periodic recovery of other workers' jobs.
                timeout = self.queue.lease_seconds / 2 if full else self.poll_interval
                timeout = max(timeout, self._resume_at - time.monotonic())
                await asyncio.wait(
                    {stopping, *running}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
                )
                running = {task for task in running if not task.done()}
        finally:
            stopping.cancel()
            await self._drain(running)
            logger.info("Worker %s stopped", self.worker_id)

    async def _drain(self, running: set[asyncio.Task[None]]) -> None:
        if not running:
            return
        _, left = await asyncio.wait(running, timeout=min(self.drain_seconds, self._drain_cap))
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)

    def _claim(self) -> Job | None:
        try:
            job = self.queue.claim(self.worker_id)
        except (PplxError, OSError) as exc:
            self._failed("claim a job", exc)
            return None
        self._reachable()
        return job

    def _recover(self) -> None:
        try:
            self.queue.recover_stale()
        except (PplxError, OSError) as exc:
            self._failed("recover stale jobs", exc)

    def _failed(self, doing: str, exc: PplxError | OSError) -> None:
        """Wait longer before the next try (1 s, doubling up to 30 s), and say so: a store that
        cannot be reached as a warning, one that cannot be used (a logs folder that is a file)
        as an error. Without the pause a store that keeps failing would be tried, and logged,
        at every poll."""
        self._pause = min(max(self._pause * 2, 1.0), _LONGEST_PAUSE)
        self._resume_at = time.monotonic() + self._pause
        if isinstance(exc, StoreUnavailable):
            logger.warning(
                "Worker %s cannot reach the store: %s Trying again in %g s.",
                self.worker_id,
                exc,
                self._pause,
            )
            return
        logger.error(
            "Worker %s could not %s: %s Trying again in %g s.",
            self.worker_id,
            doing,
            exc,
            self._pause,
        )

    def _reachable(self) -> None:
        if self._pause:
            self._pause = 0.0
            logger.info("Worker %s reaches the store again", self.worker_id)

    # -- one job -------------------------------------------------------------------------------

    async def _execute(self, job: Job) -> None:
        ctx = JobContext(self.queue, job)
        work: asyncio.Task[object] = asyncio.create_task(_run(self.runner, job, ctx))
        lost: list[LeaseLost] = []
        beat = asyncio.create_task(self._heartbeat(job, work, lost))
        try:
            await asyncio.wait({work})
        except asyncio.CancelledError:
            if not work.done():
                work.cancel()
                with contextlib.suppress(BaseException):
                    await work
                if lost:
                    self._on_lost(job, lost)
                else:
                    self._settle(self.queue.release, job)
                return
            # The job ended just as the worker was stopped: settle it below.
        finally:
            beat.cancel()
        if lost:
            self._on_lost(job, lost)
        elif work.cancelled():
            self._settle(self.queue.release, job)
        elif isinstance(error := work.exception(), LeaseLost):
            self._on_lost(job, [error])
        elif isinstance(error, Exception):
            self._settle(self.queue.fail, job, _as_pplx_error(error))
        elif error is not None:
            raise error
        else:
            self._settle(self.queue.complete, job, **result_meta_of(work.result()))

    async def _heartbeat(self, job: Job, work: asyncio.Task[Any], lost: list[LeaseLost]) -> None:
        interval = self.queue.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                self.queue.heartbeat(job)
            except LeaseLost as exc:
                lost.append(exc)
                work.cancel()
                return
            except PplxError as exc:
                logger.warning("Heartbeat of %s failed: %s", job.conversation_id, exc)

    def _settle(self, action: Callable[..., object], job: Job, *args: Any, **kwargs: Any) -> None:
        try:
            action(job, *args, **kwargs)
        except LeaseLost as exc:
            self._on_lost(job, [exc])
        except PplxError as exc:
            logger.error(
                "Worker %s could not record the end of job %s: %s (the lease will requeue it)",
                self.worker_id,
                job.conversation_id,
                exc,
            )

    def _on_lost(self, job: Job, lost: list[LeaseLost]) -> None:
        if JobContext(self.queue, job).cancelled():
            logger.info(
                "Worker %s stopped job %s: it was cancelled", self.worker_id, job.conversation_id
            )
            return
        if self._finished(job):
            logger.info(
                "Worker %s stopped job %s: its run had finished when the job was cancelled or "
                "this worker's lease ran out, and its report is stored",
                self.worker_id,
                job.conversation_id,
            )
            return
        reason = str(lost[0]) if lost else "it is no longer owned by this worker"
        logger.warning("Worker %s stopped job %s: %s", self.worker_id, job.conversation_id, reason)

    def _finished(self, job: Job) -> bool:
        """Whether ``job`` is completed (read now), however its report came to be stored."""
        try:
            status = self.queue.status(job.conversation_id)
        except PplxError:
            return False
        return status is not None and status.status == "completed" and status.job_id == job.job_id


async def _run(runner: JobRunner, job: Job, ctx: JobContext) -> object:
    return await runner(job, ctx)


def _as_pplx_error(exc: Exception) -> PplxError:
    if isinstance(exc, PplxError):
        return exc
    return PplxError(
        f"The job stopped on an unexpected error: {type(exc).__name__}: {exc}. It will be "
        "retried; if it keeps failing, report it with the conversation id."
    )
