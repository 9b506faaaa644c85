"""Background deep-research jobs: a queue next to the conversations, and a worker that drains it.

    from pplx_nb.jobs import JobQueue, Worker

    queue = open_backends(settings).job_queue()      # pplx_nb.backends
    queue.enqueue(conversation_id, "perplexity_deep_research", {"searchQuery": "..."})
    worker = Worker(queue, job_runner(researcher), concurrency=4)  # pplx_nb.research
    worker.start()            # a background thread; worker.stop() drains and releases
    queue.status(conversation_id).progress

Lifecycle: pending → in_progress → completed | failed | cancelled, in ``status.json`` (see
DESIGN.md), as pure transitions over :class:`~pplx_nb.JobStatus` (:mod:`._transitions`). Claims
are atomic (renames of marker files, or a Lua script in Redis), so a job runs on one worker at a
time; a worker that stops heartbeating loses its lease, its job is requeued, and anything it
writes afterwards is refused (:class:`LeaseLost`, ``JOB_LEASE_EXPIRED``).
:func:`format_status_message` is a status as the MCP tools show it (rendered in ``_markdown``).

Seams: statuses live behind :class:`JobStatusBackend` (:class:`FileStatusBackend` keeps them in
each conversation's folder, :class:`RedisStatusBackend` in Redis, :class:`MemoryStatusBackend` in
this process), the claim index behind :class:`ClaimIndex` (:class:`JobIndex`,
:class:`RedisClaimIndex`, :class:`MemoryClaimIndex`), and the queue asks the conversation store
only through :class:`AnswerLookup` (``ConversationStore`` implements it); the store asks the job
side through :class:`JobSide`. The job side imports nothing of the store: both are given their
parts by :func:`pplx_nb.backends.open_backends`, the one place that picks files, Redis or memory.
"""

from __future__ import annotations

from pplx_nb._errors import LeaseLost
from pplx_nb._markdown import job_status_markdown as format_status_message
from pplx_nb.jobs._backend import AnswerLookup, JobStatusBackend
from pplx_nb.jobs._files import FileStatusBackend
from pplx_nb.jobs._index import ClaimIndex, JobIndex
from pplx_nb.jobs._job import Job, JobContext, JobRunner
from pplx_nb.jobs._memory import MemoryClaimIndex, MemoryStatusBackend
from pplx_nb.jobs._queue import NON_RETRYABLE, JobQueue
from pplx_nb.jobs._redis import RedisClaimIndex, RedisStatusBackend
from pplx_nb.jobs._side import JobSide
from pplx_nb.jobs._worker import Worker

__all__ = [
    "NON_RETRYABLE",
    "AnswerLookup",
    "ClaimIndex",
    "FileStatusBackend",
    "Job",
    "JobContext",
    "JobIndex",
    "JobQueue",
    "JobRunner",
    "JobSide",
    "JobStatusBackend",
    "LeaseLost",
    "MemoryClaimIndex",
    "MemoryStatusBackend",
    "RedisClaimIndex",
    "RedisStatusBackend",
    "Worker",
    "format_status_message",
]
