"""The job side in memory: statuses and queued requests in a :class:`~pplx_nb._memory.MemorySpace`,
and a claim index of sorted markers.

A status is kept as the bytes ``status.json`` would hold (and a request as ``job.json``'s), next
to the conversation the store's memory backend keeps in the same space, under the same lock; so a
deleted conversation takes its job with it, as a deleted folder does. The index judges leases by
this process's clock (:mod:`pplx_nb.jobs._lease`), as the file index does. Made by
:func:`pplx_nb.backends.open_backends` with ``memory=True``.
"""

from __future__ import annotations

import bisect
import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from pplx_nb._errors import ConversationNotFound
from pplx_nb._fs import validate_conversation_id
from pplx_nb._layout import JOB_FILE, STATUS_FILE
from pplx_nb._memory import MemorySpace
from pplx_nb._models import JobRecord, JobState, JobStatus
from pplx_nb.jobs._backend import OneAtATime
from pplx_nb.jobs._codec import encode, parse_record, parse_state, parse_status
from pplx_nb.jobs._lease import WatchedLeases

__all__ = ["MemoryClaimIndex", "MemoryStatusBackend"]


class MemoryStatusBackend(OneAtATime):
    """Job statuses and queued requests beside the conversations of ``space``."""

    def __init__(self, space: MemorySpace) -> None:
        self.space = space

    def __repr__(self) -> str:
        return f"MemoryStatusBackend({self.space!r})"

    @contextlib.contextmanager
    def locked(self, conversation_id: str) -> Iterator[None]:
        """The conversation's lock, the one the store's memory backend takes."""
        with self.space.lock(validate_conversation_id(conversation_id)):
            yield

    def present(self, conversation_id: str) -> bool:
        """Whether the conversation is in the space."""
        return self.space.present(validate_conversation_id(conversation_id))

    def conversation_ids(self) -> list[str]:
        """Every conversation of the space."""
        return self.space.ids()

    def state(self, conversation_id: str) -> JobState | None:
        """The status's state, checked with its attempts; ``None`` without one."""
        raw = self.space.get(validate_conversation_id(conversation_id), STATUS_FILE)
        return None if raw is None else parse_state(raw, self._where(conversation_id))

    def read(self, conversation_id: str) -> JobStatus | None:
        """The whole status; ``None`` if no job ever ran for the conversation."""
        raw = self.space.get(validate_conversation_id(conversation_id), STATUS_FILE)
        return None if raw is None else parse_status(raw, self._where(conversation_id))

    def write(self, status: JobStatus) -> None:
        """Replace the status (the bytes status.json would hold)."""
        self._put(status.conversation_id, STATUS_FILE, encode(status))

    def snapshot(self, conversation_id: str) -> bytes | None:
        """The status's bytes as they are, or ``None``."""
        return self.space.get(validate_conversation_id(conversation_id), STATUS_FILE)

    def restore(self, conversation_id: str, snapshot: bytes | None) -> None:
        """Put the status back as :meth:`snapshot` found it."""
        if snapshot is None:
            self.space.remove(conversation_id, STATUS_FILE)
        else:
            self.space.put(conversation_id, STATUS_FILE, snapshot)

    def read_job(self, conversation_id: str) -> JobRecord | None:
        """The queued request; ``None`` if there is none."""
        raw = self.space.get(validate_conversation_id(conversation_id), JOB_FILE)
        return None if raw is None else parse_record(raw, self._where(conversation_id, JOB_FILE))

    def write_job(self, record: JobRecord) -> None:
        """Store the queued request."""
        self._put(record.conversation_id, JOB_FILE, encode(record))

    def remove_job(self, conversation_id: str) -> None:
        """Remove the queued request (absent is fine)."""
        self.space.remove(conversation_id, JOB_FILE)

    def has_job(self, conversation_id: str) -> bool:
        """Whether a queued request is stored."""
        return self.space.get(conversation_id, JOB_FILE) is not None

    def queued_ids(self) -> list[str]:
        """The conversations holding a queued request."""
        return [cid for cid in self.space.ids() if self.has_job(cid)]

    def job_link(self, conversation_id: str) -> None:
        """``None``: there is no file to link a marker to."""
        return None

    def _put(self, conversation_id: str, part: str, data: bytes) -> None:
        if not self.space.put(validate_conversation_id(conversation_id), part, data):
            raise ConversationNotFound(
                f"Conversation {conversation_id} does not exist (it was deleted).",
                conversation_id=conversation_id,
            )

    @staticmethod
    def _where(conversation_id: str, part: str = STATUS_FILE) -> str:
        return f"memory {conversation_id}/{part}"


class MemoryClaimIndex(WatchedLeases):
    """Pending markers kept sorted (claim order), claimed ones in a set; one lock for both.
    Leases are judged by this process's clock (:class:`WatchedLeases`), as the file index's."""

    location = "memory"

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        self._lock = threading.Lock()
        self._pending: list[str] = []
        self._claimed: set[str] = set()

    def __repr__(self) -> str:
        return f"MemoryClaimIndex(pending={len(self._pending)}, claimed={len(self._claimed)})"

    def add_pending(self, marker: str, link: str | None = None) -> None:
        """Queue ``marker`` (idempotent)."""
        with self._lock:
            self._add(marker)

    def _add(self, marker: str) -> None:
        at = bisect.bisect_left(self._pending, marker)
        if at == len(self._pending) or self._pending[at] != marker:
            self._pending.insert(at, marker)

    def add_claimed(self, marker: str) -> None:
        """Record ``marker`` as claimed (rebuilding the index)."""
        with self._lock:
            self._claimed.add(marker)

    def claim_next(self) -> str | None:
        """Move the first pending marker to claimed and return it."""
        with self._lock:
            if not self._pending:
                return None
            marker = self._pending.pop(0)
            self._claimed.add(marker)
            return marker

    def requeue(self, marker: str) -> None:
        """Move a claimed marker back to pending."""
        with self._lock:
            self._claimed.discard(marker)
            self._add(marker)

    def drop(self, marker: str) -> None:
        """Remove the marker wherever it is."""
        with self._lock:
            self._claimed.discard(marker)
            at = bisect.bisect_left(self._pending, marker)
            if at < len(self._pending) and self._pending[at] == marker:
                del self._pending[at]

    def indexed(self, marker: str) -> bool:
        """Whether the marker is pending or claimed."""
        with self._lock:
            return marker in self._claimed or marker in self._pending

    def pending(self) -> list[str]:
        """Every pending marker, in claim order."""
        with self._lock:
            return list(self._pending)

    def claimed(self) -> list[str]:
        """Every claimed marker."""
        with self._lock:
            return sorted(self._claimed)
