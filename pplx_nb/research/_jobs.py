"""Queued research seen from the façade: the job queue, the in-process worker, and waiting for a
job's answer without depending on a worker that may not exist."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from pplx_nb._config import Settings
from pplx_nb._errors import APITimeoutError, PplxError, error_from_code
from pplx_nb._logging import get_logger
from pplx_nb._models import Answer, JobResult, JobStatus
from pplx_nb.research._answers import stored_answer
from pplx_nb.research._deep import (
    DeepResearchRunner,
    related_questions_asked,
    stop_or_collect,
)
from pplx_nb.research._progress import ProgressCallback

if TYPE_CHECKING:
    from pplx_nb.api import AsyncClient
    from pplx_nb.jobs import JobQueue, Worker
    from pplx_nb.store import ConversationStore

__all__ = ["JobDesk"]

logger = get_logger("pplx_nb.research")

_UNCLAIMED_GRACE = 1.0
"""How long :meth:`JobDesk.wait` lets another worker claim a pending job first."""


class JobDesk:
    """The job queue beside a store and the worker this process may run for it.

    Args:
        settings: job retries and lease.
        store: the conversations.
        queue: the job queue beside them (opened with them, asking that store).
        runner: what the in-process worker runs for each job.
        run_here: whether queued jobs are run by this process's worker as soon as queued
            (async deep research on).
    """

    def __init__(
        self,
        settings: Settings,
        store: ConversationStore,
        queue: JobQueue,
        runner: Callable[[], DeepResearchRunner],
        *,
        run_here: bool,
    ) -> None:
        self._settings = settings
        self._store = store
        self._runner = runner
        self._run_here = run_here
        self._lock = threading.RLock()
        self._queue = queue
        self._worker: Worker | None = None

    @property
    def queue(self) -> JobQueue:
        """The job queue beside the store."""
        return self._queue

    def ensure_worker(self, concurrency: int = 4) -> Worker:
        """Start (once) the in-process worker that runs queued research jobs."""
        from pplx_nb.jobs import Worker

        queue = self.queue
        with self._lock:
            if self._worker is None:
                self._worker = Worker(queue, self._runner(), concurrency=concurrency)
                self._worker.start()
                logger.info("Background research worker started (concurrency %d)", concurrency)
            return self._worker

    def queued(self, status: JobStatus) -> JobStatus:
        """``status`` of a job just queued, its worker started when this process runs jobs."""
        if self._run_here and self._worker is None:
            self.ensure_worker()
        return status

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the in-process worker, if one runs: its running jobs get up to half of
        ``timeout`` to finish, then are released to the queue."""
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop(timeout)

    async def cancel(self, conversation_id: str, client: AsyncClient) -> JobStatus | None:
        """Cancel the conversation's pending or running job, and its remote run if it has one.

        Returns the job's status: ``cancelled``; or ``completed`` when its run had finished
        before the cancel reached it (its report, paid for, is then stored rather than dropped);
        or as it was when it had already ended. None when the conversation never had a job.
        The status returned (not the one stored) says under ``result`` whether the API
        confirmed the run's cancel (``remoteCancelled``), or that the job had ended before this
        call and nothing was sent (``alreadyEnded``).
        """
        before = self.queue.status(conversation_id)
        if before is None:
            return self.queue.cancel(conversation_id)  # CONVERSATION_NOT_FOUND without one
        if before.done:
            return _already_ended(before)
        status = self.queue.cancel(conversation_id)
        if status is None or status.status != "cancelled":
            return None if status is None else _already_ended(status)
        if status.remote_id is None:
            return status
        # The worker running the job also cancels the run when it notices the job is gone,
        # but it may be dead, or far from its next heartbeat: ask now. A run the API will not
        # stop may have finished: its report is then read and kept.
        request = status.request or {}
        stopped, report = await stop_or_collect(
            client,
            status.remote_id,
            related=related_questions_asked(request),
            hold=status.job_id,
        )
        if report is not None and status.job_id is not None:
            kept = self._runner().keep_report(
                conversation_id, status.job_id, status.tool_name, request, report
            )
            if kept is not None and kept.status == "completed":
                return _already_ended(kept)
            stopped = False  # it ended with a report nobody could store: say to check usage
        if not stopped:
            logger.warning(
                "The API did not confirm the cancel of run %s (conversation %s); it may still "
                "run and be billed: check your Perplexity usage",
                status.remote_id,
                conversation_id,
            )
        result: JobResult = {**(status.result or {}), "remoteCancelled": stopped}
        return status.model_copy(update={"result": result})

    async def wait(
        self,
        conversation_id: str,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Answer:
        """Wait until the conversation's job ends; return its answer or raise its error.

        A job still pending after a second with no worker of this process running, or running
        on a worker that stopped heartbeating, starts the in-process worker.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        unclaimed_until = time.monotonic() + _UNCLAIMED_GRACE
        last_progress: tuple[int, str] | None = None
        while True:
            status = self.queue.status(conversation_id)
            if status is None:
                return self._answer(conversation_id)
            if status.done:
                return self._finished(status)
            if self._worker is None and (
                self._run_here or (time.monotonic() > unclaimed_until and self._unserved(status))
            ):
                if not self._run_here:
                    logger.info(
                        "No worker has claimed the job of %s; running it in this process",
                        conversation_id,
                    )
                self.ensure_worker()
            if on_progress and status.progress is not None:
                key = (status.progress.percentage, status.progress.message)
                if key != last_progress:
                    last_progress = key
                    on_progress(status.progress)
            if deadline is not None and time.monotonic() > deadline:
                raise APITimeoutError(
                    f"The job of conversation {conversation_id} is still {status.status} after "
                    f"{timeout:.0f} s. It goes on in the background: wait again, or check "
                    "`get_conversation_history` later.",
                    conversation_id=conversation_id,
                )
            await asyncio.sleep(0.1)

    def _unserved(self, status: JobStatus) -> bool:
        """Whether no live worker holds ``status``'s job: pending, or its lease has lapsed."""
        if status.status == "pending":
            return True
        beat = status.heartbeat_at or status.updated_at
        try:
            age = time.time() - datetime.fromisoformat(beat).timestamp()
        except ValueError:
            return True
        return age > self.queue.lease_seconds

    def _finished(self, status: JobStatus) -> Answer:
        if status.status == "completed":
            return self._answer(status.conversation_id, status.job_id)
        if status.error is not None:
            raise error_from_code(status.error.code, status.error.message)
        raise PplxError(
            f"The job of conversation {status.conversation_id} was {status.status}. "
            "Start it again with a follow-up in research mode."
        )

    def _answer(self, conversation_id: str, job_id: str | None = None) -> Answer:
        conversation = self._store.load(conversation_id)
        where = self._store.conversation_location(conversation_id)
        return stored_answer(conversation, where, job_id)


def _already_ended(status: JobStatus) -> JobStatus:
    """``status`` of a job that had ended before the cancel: nothing of it was cancelled now."""
    result: JobResult = {**(status.result or {}), "alreadyEnded": True}
    return status.model_copy(update={"result": result})
