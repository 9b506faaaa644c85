"""A claimed job, the context its runner reports through, and the runner's signature."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from pplx_nb._errors import LeaseLost, PplxError
from pplx_nb._logging import get_logger
from pplx_nb._models import JobParams, JobRequest

if TYPE_CHECKING:
    from pplx_nb.jobs._queue import JobQueue

__all__ = ["START_PROGRESS", "Job", "JobContext", "JobRunner", "LeaseLost"]

logger = get_logger("pplx_nb.jobs")

START_PROGRESS = (25, "Querying Perplexity API...")
"""The progress a claim records: a runner's first identical report only heartbeats."""


@dataclass(frozen=True)
class Job:
    """One claimed attempt at a job, as handed to a runner.

    ``job_id`` is fixed at enqueue and tags the answer the runner stores; ``attempt`` and
    ``worker_id`` fence every write back to the queue.
    """

    job_id: str
    conversation_id: str
    tool: str
    request: JobRequest
    priority: int
    attempt: int
    enqueued_at: str
    worker_id: str
    marker: str = field(repr=False)
    claimed_at: float = field(default_factory=time.time, repr=False)
    remote_id: str | None = None
    submitted_at: str | None = None
    """When the run ``remote_id`` was submitted (ISO 8601): its deadline counts from then."""
    submitting: bool = False
    """A submission was begun and never recorded as ended: a run may exist without a known id."""
    params: JobParams = field(default_factory=JobParams)
    """The TypeScript server's parameters of the job (``query``, ``reasoning_effort``): all a job
    that server queued has instead of ``request``."""

    @property
    def elapsed_ms(self) -> int:
        """Milliseconds since this attempt was claimed."""
        return int((time.time() - self.claimed_at) * 1000)


class JobContext:
    """What a runner uses to talk back to the queue while it works on one job.

    Args:
        queue: the queue the job was claimed from.
        job: the claimed job.
    """

    def __init__(self, queue: JobQueue, job: Job) -> None:
        self._queue = queue
        self.job = job
        self._remote_id = job.remote_id
        self._submitted_at = _epoch(job.submitted_at) if job.remote_id else None
        self._submitting = job.submitting and job.remote_id is None
        self._last: tuple[int, str] = START_PROGRESS
        self._unrecorded: str | None = None

    @property
    def attempt(self) -> int:
        """The attempt number, 1 for the first run."""
        return self.job.attempt

    @property
    def remote_id(self) -> str | None:
        """The id of a background run already submitted for this job (poll it), or None."""
        return self._remote_id

    async def report(self, percentage: int, message: str) -> None:
        """Record progress in status.json (also a heartbeat); identical repeats only heartbeat.

        A run followed without its id recorded (:meth:`follow_unrecorded`) is recorded first.
        While the attempt holds a run, a store that fails is logged, not raised: progress is
        not worth giving up a paid run for.

        Raises:
            LeaseLost: the job is no longer this worker's; stop working on it.
        """
        try:
            if self._unrecorded is not None:
                await self.record_remote_id(self._unrecorded)
            if self._last == (percentage, message):
                self._queue.heartbeat(self.job)
                return
            self._queue.progress(self.job, percentage, message)
        except LeaseLost:
            raise
        except PplxError as exc:
            if self._remote_id is None and self._unrecorded is None:
                raise
            logger.warning("Progress of job %s not recorded: %s", self.job.conversation_id, exc)
            return
        self._last = (percentage, message)

    def follow_unrecorded(self, remote_id: str) -> None:
        """Follow run ``remote_id``, whose id the store could not take yet: each progress
        report tries again to record it."""
        self._unrecorded = remote_id

    @property
    def unrecorded_run(self) -> str | None:
        """A run this attempt follows whose id is recorded nowhere yet, or None."""
        return self._unrecorded

    @property
    def submitted_at(self) -> float | None:
        """When the background run was submitted (seconds since the epoch), or None."""
        return self._submitted_at

    @property
    def submission_unfinished(self) -> bool:
        """Whether an earlier attempt began a paid submission and never learnt its outcome."""
        return self._submitting

    async def begin_submission(self) -> None:
        """Record that a paid submission is being sent (see :meth:`JobQueue.begin_submission`)."""
        self._queue.begin_submission(self.job)
        self._submitting = True

    async def end_submission(self) -> None:
        """Record that the submission provably started no run."""
        self._queue.end_submission(self.job)
        self._submitting = False

    async def record_remote_id(self, remote_id: str) -> None:
        """Persist the id of a background run, so a recovered job resumes polling it."""
        self._queue.set_remote_id(self.job, remote_id)
        self._remote_id = remote_id
        self._unrecorded = None
        self._submitting = False
        if self._submitted_at is None:
            self._submitted_at = time.time()

    @property
    def lease_seconds(self) -> float:
        """How long the job stays this attempt's without a heartbeat reaching the queue."""
        return self._queue.lease_seconds

    async def hand_over_run(self, remote_id: str) -> bool:
        """Record run ``remote_id``, which this attempt submitted, for the job's next attempt
        to follow, though the job may no longer be this attempt's (see
        :meth:`JobQueue.hand_over_run`); whether the job now follows it."""
        return self._queue.hand_over_run(self.job, remote_id)

    def adopt_handed_over_run(self) -> str | None:
        """The run an earlier attempt submitted and handed over after this attempt was claimed
        (read now), which this attempt then follows; ``None`` when there is none."""
        try:
            status = self._queue.status(self.job.conversation_id)
        except PplxError:
            return None
        if status is None or status.job_id != self.job.job_id or status.remote_id is None:
            return None
        self._remote_id = status.remote_id
        self._submitted_at = _epoch(status.submitted_at) or time.time()
        self._submitting = False
        return self._remote_id

    def check_owner(self, document: bytes) -> None:
        """Fence the answer's append: LeaseLost unless this attempt still owns the job.

        Also LeaseLost when ``document`` (the conversation, read under its lock) already holds
        the job's answer. Pass it as the store append's ``check``.
        """
        self._queue.check_owner(self.job, document)

    def cancelled(self) -> bool:
        """Whether this job was cancelled (read now): its remote run should be stopped too."""
        try:
            status = self._queue.status(self.job.conversation_id)
        except PplxError:
            return False
        return (
            status is not None
            and status.status == "cancelled"
            and status.job_id in (None, self.job.job_id)
        )

    async def note_error(self, error: BaseException) -> None:
        """Add an error the runner recovered from (e.g. an expired remote run) to errorHistory."""
        self._queue.note_error(self.job, error)


def _epoch(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp).timestamp()
    except ValueError:
        return None


JobRunner = Callable[[Job, JobContext], Awaitable[object]]
"""Runs one job to its end and stores its answer in the conversation itself.

The answer message must carry ``jobId = job.job_id``, and a runner must skip the run (return at
once) when the conversation already holds a message with that ``jobId``: a worker can die between
storing the answer and marking the job completed, and the retry must not answer twice. Raise a
:class:`PplxError` to fail the attempt; the queue decides whether it is retried.
"""
