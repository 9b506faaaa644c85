"""Healing the queue: requeue jobs whose worker died, and rebuild markers a crash left out.

Markers are only hints, so recovery trusts the statuses: a claimed marker whose job is running
without heartbeats for a lease loses its attempt (:func:`~pplx_nb.jobs._transitions.expire_lease`),
one whose claimant died before taking the job goes back to pending, one of an ended or replaced
job is dropped; a pending or running job without a marker gets one back. A job the TypeScript
perplexity-mcp-server queued (its fields, none of our ids) is taken over once it has stayed
pending for a lease.

Leases are judged by the claim index: the file index by this process's own clock
(:mod:`pplx_nb.jobs._lease`: a heartbeat counts as stale once this process has seen it unchanged
for a lease), the Redis index by the deadline each renewal sets on the server's clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import datetime

from pplx_nb._errors import PplxError
from pplx_nb._fs import CONVERSATION_ID_RE
from pplx_nb._models import JobStatus, now_iso
from pplx_nb.jobs import _transitions as transitions
from pplx_nb.jobs._backend import JobStatusBackend
from pplx_nb.jobs._events import failed, logger
from pplx_nb.jobs._index import PRIORITY_MAX, ClaimIndex, conversation_of, marker_name
from pplx_nb.jobs._lease import LeaseClock

__all__ = ["Recovery"]


class Recovery:
    """Recovers one queue's stale jobs and heals its index.

    Args:
        statuses: where the statuses live.
        index: the claim index (it judges the leases).
        lease_seconds: how long a heartbeat may stay unchanged.
        max_job_retries: retries after the first attempt (a lost attempt counts as failed).
        ended: called with the status of a job that failed for good (the lock held).
        clock: seconds from a monotonic clock, for how long a TypeScript job stayed pending.
    """

    def __init__(
        self,
        statuses: JobStatusBackend,
        index: ClaimIndex,
        *,
        lease_seconds: float,
        max_job_retries: int,
        ended: Callable[[JobStatus], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._statuses = statuses
        self._index = index
        self.lease_seconds = lease_seconds
        self.max_job_retries = max_job_retries
        self._ended = ended
        self._waiting = LeaseClock(clock)
        """When this process first saw each TypeScript job pending as it is now."""

    def run(self) -> int:
        """Recover every claimed job whose lease expired, then rebuild missing markers.

        Returns how many jobs were recovered or re-indexed. A damaged status is logged and
        skipped, never a reason to stop.
        """
        claimed = self._index.claimed()
        recovered = 0
        for marker in self._index.recoverable(claimed):
            try:
                recovered += self._recover(marker)
            except PplxError as exc:
                logger.error("Job %s cannot be recovered: %s", conversation_of(marker), exc)
        return recovered + self._rebuild(set(claimed))

    def _recover(self, marker: str) -> int:
        conversation_id = conversation_of(marker)
        statuses, index = self._statuses, self._index
        if not CONVERSATION_ID_RE.match(conversation_id) or not statuses.present(conversation_id):
            index.drop(marker)
            return 0
        with statuses.locked(conversation_id):
            status = statuses.read(conversation_id)
            if status is None or status.queue_key != marker or status.done:
                index.drop(marker)
                return 0
            if status.status == "pending":
                # A claimant died between renaming the marker and taking the job.
                if index.lease_age(marker, status.updated_at) <= self.lease_seconds:
                    return 0
                index.requeue(marker)
                return 1
            age = index.lease_age(marker, status.heartbeat_at or status.updated_at)
            if age <= self.lease_seconds:
                return 0
            status, retry = transitions.expire_lease(
                status, age, self.lease_seconds, self.max_job_retries, now_iso()
            )
            statuses.write(status)
            if retry:
                index.requeue(marker)
            else:
                self._ended(status)
                statuses.remove_job(conversation_id)
                index.drop(marker)
        info = status.error_history[-1]
        failed(conversation_id, status.job_id, status.attempts, info, retry)
        return 1

    def _rebuild(self, claimed: set[str]) -> int:
        known = set(self._index.pending()) | claimed
        rebuilt = adopted = 0
        foreign: list[str] = []
        ids = self._statuses.queued_ids()
        for conversation_id, status in zip(ids, self._statuses.read_many(ids), strict=True):
            try:
                if isinstance(status, PplxError):
                    raise status
                if status is not None and status.queue_key is None:
                    foreign.append(conversation_id)
                    adopted += self._adopt(conversation_id, status)
                else:
                    rebuilt += self._rebuild_marker(conversation_id, status, known)
            except PplxError as exc:
                logger.error("Job %s cannot be indexed: %s", conversation_id, exc)
        self._waiting.keep_only(foreign)
        if rebuilt:
            logger.warning("Job index: re-created %d missing marker(s)", rebuilt)
        return rebuilt + adopted

    def _adopt(self, conversation_id: str, status: JobStatus) -> int:
        """Take over a job the TypeScript server queued once no worker has taken it for a lease.

        That server's own worker takes its jobs within 2 s, so a job still pending after a lease
        has none running (the server was closed right after queueing it, or runs without async
        jobs). Its request stays readable to that server (see :func:`transitions.adopt`).
        """
        if status.status != "pending":
            return 0
        if self._waiting.saw(conversation_id, status.updated_at) <= self.lease_seconds:
            return 0
        statuses = self._statuses
        with statuses.locked(conversation_id):
            current = statuses.read(conversation_id)
            record = statuses.read_job(conversation_id)
            if (
                current is None
                or current.status != "pending"
                or current.queue_key is not None
                or record is None
                or not record.foreign
            ):
                return 0
            priority = max(-PRIORITY_MAX, min(PRIORITY_MAX, record.priority))
            marker = marker_name(priority, _micros(record.created_at), conversation_id)
            record = record.model_copy(update={"priority": priority})
            status, record = transitions.adopt(current, record, uuid.uuid4().hex, marker, now_iso())
            statuses.write_job(record)
            statuses.write(status)
            self._index.add_pending(marker, statuses.job_link(conversation_id))
        logger.info("Job %s was queued by the TypeScript server: taken over", conversation_id)
        return 1

    def _rebuild_marker(
        self, conversation_id: str, status: JobStatus | None, known: set[str]
    ) -> int:
        statuses, index = self._statuses, self._index
        marker = status.queue_key if status else None
        if marker is None or marker in known:
            return 0
        with statuses.locked(conversation_id):
            status = statuses.read(conversation_id)
            if status is None or status.queue_key != marker:
                return 0
            if index.indexed(marker):
                return 0
            if status.status == "pending":
                index.add_pending(marker, statuses.job_link(conversation_id))
            elif status.status == "in_progress":
                index.add_claimed(marker)
            else:
                return 0
        return 1


def _micros(stamp: str | None) -> int:
    """An ISO 8601 instant in microseconds since the epoch (now, when it is not one)."""
    try:
        return int(datetime.fromisoformat(stamp or "").timestamp() * 1_000_000)
    except ValueError:
        return time.time_ns() // 1000
