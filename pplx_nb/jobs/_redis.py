"""The job side in Redis (``PPLX_NB_STORE``): statuses, queued requests and the claim index.

Keys (see :class:`~pplx_nb._layout.RedisKeys`)::

    pplx_nb:conv:<id>:status     the job's status (the status.json shape, compact JSON)
    pplx_nb:conv:<id>:job        its queued request while the job is active (the job.json shape)
    pplx_nb:conv:<id>:lock       the conversation lock, the SAME key the store's appends take
    pplx_nb:jobs:queued          set: the conversations holding a queued request
    pplx_nb:jobs:pending         sorted set: queued markers, all scored 0
    pplx_nb:jobs:claimed         sorted set: claimed markers, scored by their lease deadline

The claim index is a sorted set and a few Lua scripts rather than a Stream with a consumer
group. Markers (:func:`~pplx_nb.jobs._index.marker_name`) already sort as priority, then enqueue
time, and members of equal score are ordered by their bytes, so ``ZPOPMIN`` on a set scored 0 is
"highest priority, then oldest" in one command; a Stream is FIFO only, would need one stream per
priority, and its pending-entries list cannot hold a job's lease across a requeue. A claim is
one script that pops the first pending marker and adds it to ``claimed`` with a deadline of the
server's ``TIME`` plus the lease, so exactly one caller gets each marker and no machine's clock
matters; it reads the job's status and request in the same script. Every write a worker makes to
its job renews the deadline in a script that first checks it has not passed (by the server's
clock again): a worker whose lease ran out is refused (``JOB_LEASE_EXPIRED``) even before
another process recovers the job, and recovery looks only at markers whose deadline has passed.

As with files, markers are hints: the statuses decide, and a status write made while this
process holds the conversation's lock checks in the same script that the lock is still its own
(a holder paused past the lock's expiry writes nothing).

The queue's everyday transitions (enqueue, claim, progress, complete) take no lock: each reads
the status in one round trip (or not at all: a worker remembers the status it last wrote) and
writes in one script that checks the lock is free (or this thread's), the conversation exists,
the status is byte for byte the one read and, for a worker, that its lease has not passed by the
server's clock, then writes the status, the request and the index's move together
(:class:`RedisSteps`). Anything else, or a check that fails, goes the locked way.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, cast

from pplx_nb._errors import (
    ConversationCorrupted,
    FilesystemError,
    PplxError,
    url_without_credentials,
)
from pplx_nb._fs import CONVERSATION_ID_RE, validate_conversation_id
from pplx_nb._layout import RedisKeys
from pplx_nb._logging import get_logger
from pplx_nb._models import JobRecord, JobState, JobStatus
from pplx_nb._redis import HeldLocks, RedisLock, client, command, redis_errors, run_script
from pplx_nb.jobs._backend import Outcome, StatusView, Step, StepsAtOnce
from pplx_nb.jobs._codec import encode, parse_record, parse_state, parse_status
from pplx_nb.jobs._index import ClaimIndex, conversation_of
from pplx_nb.jobs._redis_scripts import (
    ADD_CLAIMED,
    AGE,
    APPLY,
    CLAIM,
    CLAIM_VIEW,
    EXPIRED,
    GUARDED_WRITE,
    RENEW,
    REQUEUE,
    VIEW,
)

if TYPE_CHECKING:
    import redis

__all__ = ["RedisClaimIndex", "RedisStatusBackend", "RedisSteps"]

logger = get_logger("pplx_nb.jobs")

_BATCH = 512
"""Statuses read per ``MGET`` in listings."""
_REMEMBERED = 4096
"""Statuses a backend remembers (the last it wrote or read per conversation) for
:meth:`RedisSteps.view` without a round trip."""

_OUTCOMES: dict[int, Outcome] = {
    1: "done",
    0: "locked",
    -2: "changed",
    -3: "gone",
    -4: "lease",
    -5: "busy",
}


class RedisStatusBackend:
    """Job statuses and queued requests in the Redis database of ``url``.

    Args:
        url: the store's URL (``redis://HOST:PORT/DB``).
        keys: the key layout (default: every key under ``pplx_nb:``).
        lock_seconds: how long a conversation lock lives if its holder dies.
        lock_timeout: how long taking a conversation lock may wait before FILESYSTEM_ERROR.
    """

    def __init__(
        self,
        url: str,
        *,
        keys: RedisKeys | None = None,
        lock_seconds: float = 30.0,
        lock_timeout: float = 30.0,
    ) -> None:
        self.url = url
        self.keys = keys or RedisKeys()
        self.shown_url = url_without_credentials(url)
        self._locks = HeldLocks(url, ttl=lock_seconds, timeout=lock_timeout)
        self._seen: dict[str, bytes | None] = {}
        self._seen_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RedisStatusBackend(url={self.shown_url!r})"

    def joined(self, index: ClaimIndex) -> StepsAtOnce | None:
        """Transitions written at once with ``index`` when it lives in the same database."""
        if not isinstance(index, RedisClaimIndex) or index.url != self.url:
            return None
        keys = (self.keys.jobs("pending"), self.keys.jobs("claimed"))
        return RedisSteps(self, index) if (index.pending_key, index.claimed_key) == keys else None

    def remember(self, conversation_id: str, raw: bytes | None) -> None:
        """Remember ``raw`` as the conversation's stored status (the newest last)."""
        with self._seen_lock:
            self._seen.pop(conversation_id, None)
            self._seen[conversation_id] = raw
            if len(self._seen) > _REMEMBERED:
                self._seen.pop(next(iter(self._seen)), None)

    def forget(self, conversation_id: str) -> None:
        """Remember no status for the conversation (it is being written some other way)."""
        with self._seen_lock:
            self._seen.pop(conversation_id, None)

    def remembered(self, conversation_id: str) -> tuple[bool, bytes | None]:
        """Whether a status is remembered for the conversation, and which."""
        found = self._seen.get(conversation_id, b"")
        return (found != b"", found or None)

    @property
    def _redis(self) -> redis.Redis:
        return client(self.url)

    def _key(self, conversation_id: str, part: str) -> str:
        return self.keys.conversation(validate_conversation_id(conversation_id), part)

    def _where(self, conversation_id: str, part: str) -> str:
        return self._shown(self._key(conversation_id, part))

    def _shown(self, key: str) -> str:
        """A key as users see it: the URL (no credentials) and the key."""
        return f"{self.shown_url} {key}"

    # -- the lock and what exists ---------------------------------------------------------------

    def locked(self, conversation_id: str) -> contextlib.AbstractContextManager[RedisLock]:
        """The conversation's lock (``pplx_nb:conv:<id>:lock``): the one the store takes."""
        return self._locks.hold(self._key(conversation_id, "lock"))

    def present(self, conversation_id: str) -> bool:
        """Whether the conversation is stored (its meta hash exists)."""
        key = self._key(conversation_id, "meta")
        with redis_errors(self.url, "read"):
            return bool(command(self.url, "EXISTS", key))

    def conversation_ids(self) -> list[str]:
        """Every stored conversation's id (the store's index)."""
        with redis_errors(self.url, "list the conversations in"):
            found = cast(list[bytes], self._redis.zrange(self.keys.conversations, 0, -1))
        ids = (raw.decode("ascii", "replace") for raw in found)
        return [cid for cid in ids if CONVERSATION_ID_RE.match(cid)]

    # -- the status -----------------------------------------------------------------------------

    def state(self, conversation_id: str) -> JobState | None:
        """The status's state, checked with its attempts; ``None`` without a status."""
        raw = self.snapshot(conversation_id)
        return None if raw is None else parse_state(raw, self._where(conversation_id, "status"))

    def states(self, conversation_ids: Sequence[str]) -> list[JobState | None]:
        """:meth:`state` of each, ``MGET`` by batches of :data:`_BATCH`; a damaged status is
        ``None``."""
        states: list[JobState | None] = []
        for where, raw in self._raw_statuses(conversation_ids):
            try:
                states.append(None if raw is None else parse_state(raw, where))
            except ConversationCorrupted:
                states.append(None)
        return states

    def read(self, conversation_id: str) -> JobStatus | None:
        """The whole status; ``None`` if no job ever ran for the conversation."""
        raw = self.snapshot(conversation_id)
        return None if raw is None else parse_status(raw, self._where(conversation_id, "status"))

    def read_many(
        self, conversation_ids: Sequence[str]
    ) -> list[JobStatus | ConversationCorrupted | FilesystemError | None]:
        """:meth:`read` of each (or its error), ``MGET`` by batches of :data:`_BATCH`."""
        found: list[JobStatus | ConversationCorrupted | FilesystemError | None] = []
        for where, raw in self._raw_statuses(conversation_ids):
            try:
                found.append(None if raw is None else parse_status(raw, where))
            except ConversationCorrupted as exc:
                found.append(exc)
        return found

    def _raw_statuses(self, conversation_ids: Sequence[str]) -> Iterator[tuple[str, bytes | None]]:
        """Each status's place (for errors) and stored bytes, ``MGET`` by batches."""
        for start in range(0, len(conversation_ids), _BATCH):
            keys = [self._key(cid, "status") for cid in conversation_ids[start : start + _BATCH]]
            with redis_errors(self.url, "read job statuses in"):
                raws = cast(list[bytes | None], self._redis.mget(keys))
            yield from zip(map(self._shown, keys), raws, strict=True)

    def write(self, status: JobStatus) -> None:
        """Replace the status (refused if this thread's lock on it expired meanwhile)."""
        self._write(status.conversation_id, "status", encode(status))

    def snapshot(self, conversation_id: str) -> bytes | None:
        """The stored status as it is, or ``None``."""
        return self._get(conversation_id, "status")

    def restore(self, conversation_id: str, snapshot: bytes | None) -> None:
        """Put the status back as :meth:`snapshot` found it; never raises."""
        with contextlib.suppress(PplxError):
            self._write(conversation_id, "status", snapshot)

    # -- the queued request ---------------------------------------------------------------------

    def read_job(self, conversation_id: str) -> JobRecord | None:
        """The queued request, ``None`` if there is none."""
        raw = self._get(conversation_id, "job")
        return None if raw is None else parse_record(raw, self._where(conversation_id, "job"))

    def write_job(self, record: JobRecord) -> None:
        """Store the queued request and list its conversation in ``pplx_nb:jobs:queued``."""
        self._write(record.conversation_id, "job", encode(record))

    def remove_job(self, conversation_id: str) -> None:
        """Remove the queued request (absent is fine)."""
        self._write(conversation_id, "job", None)

    def has_job(self, conversation_id: str) -> bool:
        """Whether a queued request is stored."""
        key = self._key(conversation_id, "job")
        with redis_errors(self.url, "read"):
            return bool(command(self.url, "EXISTS", key))

    def queued_ids(self) -> list[str]:
        """The conversations listed in ``pplx_nb:jobs:queued`` (deleted ones are pruned)."""
        queued = self.keys.jobs("queued")
        with redis_errors(self.url, "list the queued jobs in"):
            found = cast(set[bytes], self._redis.smembers(queued))
            ids = sorted(
                cid
                for cid in (r.decode("ascii", "replace") for r in found)
                if CONVERSATION_ID_RE.match(cid)
            )
            pipe = self._redis.pipeline(transaction=False)
            for cid in ids:
                pipe.exists(self._key(cid, "job"))
            there = pipe.execute()
            gone = [cid for cid, exists in zip(ids, there, strict=True) if not exists]
            if gone:
                self._redis.srem(queued, *gone)
        return [cid for cid, exists in zip(ids, there, strict=True) if exists]

    def job_link(self, conversation_id: str) -> None:
        """Nothing to link to in Redis."""
        return None

    # -- helpers --------------------------------------------------------------------------------

    def _get(self, conversation_id: str, part: str) -> bytes | None:
        key = self._key(conversation_id, part)
        with redis_errors(self.url, "read a job status in"):
            return cast(bytes | None, command(self.url, "GET", key))

    def _write(self, conversation_id: str, part: str, value: bytes | None) -> None:
        """Set (or with ``None`` delete) one part, checking this thread's lock token if any."""
        keys = [self._key(conversation_id, "lock"), self._key(conversation_id, part)]
        token = self._locks.token(keys[0])
        args: list[Any] = [token, "del" if value is None else "set", value or b""]
        if part == "job":
            keys.append(self.keys.jobs("queued"))
            args.append(conversation_id)
        self.forget(conversation_id)
        with redis_errors(self.url, "write a job status in"):
            written = run_script(self.url, GUARDED_WRITE, keys, args)
        if written != 1:
            raise FilesystemError(
                f"The job of conversation {conversation_id} was not updated in the Redis store "
                f"at {self.shown_url}: its lock expired while this process held it. Try again.",
                conversation_id=conversation_id,
            )


class RedisClaimIndex:
    """The claim index in Redis: a pending sorted set in claim order, a claimed one by deadline.

    Args:
        url: the store's URL.
        lease_seconds: how long a claim or a renewal holds a job (PPLX_NB_JOB_LEASE_SECONDS).
        keys: the key layout.
    """

    def __init__(self, url: str, *, lease_seconds: float, keys: RedisKeys | None = None) -> None:
        self.url = url
        self.location = url_without_credentials(url)
        self.lease_ms = max(1, int(lease_seconds * 1000))
        keys = keys or RedisKeys()
        self.pending_key = self._pending = keys.jobs("pending")
        self.claimed_key = self._claimed = keys.jobs("claimed")

    def __repr__(self) -> str:
        return f"RedisClaimIndex(url={self.location!r})"

    def _run(self, doing: str, source: str, keys: list[str], args: list[Any]) -> Any:
        with redis_errors(self.url, doing):
            return run_script(self.url, source, keys, args)

    def add_pending(self, marker: str, link: str | None = None) -> None:
        """``ZADD pending 0 marker``."""
        with redis_errors(self.url, "queue a job in"):
            client(self.url).zadd(self._pending, {marker: 0})

    def add_claimed(self, marker: str) -> None:
        """Add ``marker`` to ``claimed`` with a fresh lease."""
        self._run("index a job in", ADD_CLAIMED, [self._claimed], [marker, self.lease_ms])

    def claim_next(self) -> str | None:
        """Pop the first pending marker into ``claimed``, its deadline by the server's clock.

        A marker that is not UTF-8 text (no marker pplx_nb writes) is dropped with a warning
        and the next one claimed.
        """
        while True:
            found = self._run(
                "claim a job in", CLAIM, [self._pending, self._claimed], [self.lease_ms]
            )
            if found is None:
                return None
            marker = self._decoded(bytes(found), self._claimed)
            if marker is not None:
                return marker

    def requeue(self, marker: str) -> None:
        """Move ``marker`` from ``claimed`` back to ``pending``."""
        self._run("requeue a job in", REQUEUE, [self._pending, self._claimed], [marker])

    def drop(self, marker: str) -> None:
        """Remove ``marker`` from both sets."""
        with redis_errors(self.url, "remove a job from"):
            pipe = client(self.url).pipeline(transaction=True)
            pipe.zrem(self._pending, marker)
            pipe.zrem(self._claimed, marker)
            pipe.execute()

    def indexed(self, marker: str) -> bool:
        """Whether ``marker`` is in either set."""
        with redis_errors(self.url, "read the job index in"):
            pipe = client(self.url).pipeline(transaction=False)
            pipe.zscore(self._pending, marker)
            pipe.zscore(self._claimed, marker)
            return any(score is not None for score in pipe.execute())

    def pending(self) -> list[str]:
        """Every pending marker in claim order."""
        return self._members(self._pending)

    def claimed(self) -> list[str]:
        """Every claimed marker, earliest deadline first."""
        return self._members(self._claimed)

    def _members(self, key: str) -> list[str]:
        with redis_errors(self.url, "read the job index in"):
            found = cast(list[bytes], client(self.url).zrange(key, 0, -1))
        return [marker for raw in found if (marker := self._decoded(raw, key)) is not None]

    def recoverable(self, claimed: list[str]) -> list[str]:
        """The claimed markers whose deadline has passed by the server's clock."""
        _, expired = self._run("read the job index in", EXPIRED, [self._claimed], [])
        decoded = (self._decoded(bytes(raw), self._claimed) for raw in expired)
        return [marker for marker in decoded if marker is not None]

    def _decoded(self, raw: bytes, key: str) -> str | None:
        """``raw`` as text; a damaged marker (not UTF-8) is removed from ``key`` with a warning.

        Markers are hints: nothing is lost with it, since recovery rebuilds the marker of any
        pending or running job from its status.
        """
        try:
            return raw.decode()
        except UnicodeDecodeError:
            logger.warning(
                "Dropped a damaged entry %r (not UTF-8 text) from %s in the Redis store at %s",
                raw[:80],
                key,
                self.location,
            )
            with redis_errors(self.url, "remove a damaged job marker from"):
                client(self.url).zrem(key, raw)
            return None

    def renew(self, marker: str, heartbeat: str | None) -> bool:
        """Push the deadline a lease ahead unless it has passed (or the marker is not claimed)."""
        renewed = self._run(
            "renew a job's lease in", RENEW, [self._claimed], [marker, self.lease_ms]
        )
        return bool(renewed)

    def held(self, marker: str) -> bool:
        """Whether ``marker`` is claimed and its deadline has not passed."""
        now, deadline = self._run("read the job index in", AGE, [self._claimed], [marker])
        return deadline is not None and float(deadline) >= int(now)

    def lease_age(self, marker: str, heartbeat: str | None) -> float:
        """Seconds since the last renewal, by the server's clock (0 when not claimed)."""
        now, deadline = self._run("read the job index in", AGE, [self._claimed], [marker])
        if deadline is None:
            return 0.0
        return max(0.0, (int(now) - float(deadline) + self.lease_ms) / 1000)


class RedisSteps:
    """Job transitions on Redis each written in one script, checked instead of locked.

    See the module docstring; :class:`~pplx_nb.jobs._backend.StepsAtOnce` says what each method
    promises.
    """

    def __init__(self, statuses: RedisStatusBackend, index: RedisClaimIndex) -> None:
        self._statuses = statuses
        self._index = index

    def view(
        self,
        conversation_id: str,
        *,
        fresh: bool = True,
        record: bool = False,
        marker: str | None = None,
    ) -> StatusView:
        """The status now, in one round trip; or without one, the status last seen here."""
        statuses = self._statuses
        where = statuses._where(conversation_id, "status")
        if not (fresh or record or marker):
            known, raw = statuses.remembered(conversation_id)
            if known:
                return StatusView(conversation_id, where, present=True, raw=raw)
        keys = [
            statuses._key(conversation_id, "meta"),
            statuses._key(conversation_id, "status"),
            statuses._key(conversation_id, "job"),
            self._index.claimed_key,
        ]
        with redis_errors(statuses.url, "read a job status in"):
            present, raw, job, live = run_script(
                statuses.url, VIEW, keys, ["1" if record else "0", marker or ""]
            )
        statuses.remember(conversation_id, raw)
        found = None if not job else parse_record(job, statuses._where(conversation_id, "job"))
        return StatusView(conversation_id, where, bool(present), raw, found, bool(live))

    def claim_next(self) -> tuple[str, StatusView | None] | None:
        """Claim the next marker and read its conversation's status and request, in one
        script (see :class:`~pplx_nb.jobs._backend.StepsAtOnce`)."""
        statuses, index = self._statuses, self._index
        keys, args = (
            [index.pending_key, index.claimed_key],
            [index.lease_ms, statuses.keys.conversation_base],
        )
        while True:
            with redis_errors(statuses.url, "claim a job in"):
                found = run_script(statuses.url, CLAIM_VIEW, keys, args)
            if found is None:
                return None
            marker = index._decoded(bytes(found[0]), index.claimed_key)
            if marker is not None:
                return marker, self._claimed_view(marker, found[1:])

    def _claimed_view(self, marker: str, found: list[Any]) -> StatusView | None:
        """The view :data:`~pplx_nb.jobs._redis_scripts.CLAIM_VIEW` read with the claim
        (``None``: read it again the usual way)."""
        conversation_id = conversation_of(marker)
        if not found or not CONVERSATION_ID_RE.match(conversation_id):
            return None
        present, raw, job = found
        statuses = self._statuses
        try:
            record = None if not job else parse_record(job, statuses._where(conversation_id, "job"))
        except ConversationCorrupted:
            return None  # read again where the error is reported
        statuses.remember(conversation_id, raw)
        where = statuses._where(conversation_id, "status")
        return StatusView(conversation_id, where, bool(present), raw, record)

    def unread(self, conversation_id: str) -> StatusView:
        """A view that read nothing (see :attr:`Step.idle`)."""
        where = self._statuses._where(conversation_id, "status")
        return StatusView(conversation_id, where, present=True, raw=None)

    def apply(self, view: StatusView, step: Step) -> Outcome:
        """Write ``step`` in one script if what ``view`` read still holds."""
        statuses = self._statuses
        cid = view.conversation_id
        keys = [
            *(statuses._key(cid, part) for part in ("lock", "meta", "status", "job")),
            statuses.keys.jobs("queued"),
            self._index.pending_key,
            self._index.claimed_key,
        ]
        raw = encode(step.status)
        record = "del" if step.remove_record else ("set" if step.record is not None else "")
        args: list[Any] = [
            statuses._locks.token(keys[0]),
            "idle" if step.idle else "0" if view.raw is None else "1",
            view.raw or b"",
            raw,
            record,
            encode(step.record) if step.record is not None else b"",
            cid,
            "1" if step.renew else "0",
            step.index,
            step.marker,
            self._index.lease_ms,
        ]
        with redis_errors(statuses.url, "write a job status in"):
            outcome = _OUTCOMES[int(run_script(statuses.url, APPLY, keys, args))]
        if outcome == "done":
            statuses.remember(cid, raw)
        elif outcome != "lease":
            statuses.forget(cid)
        return outcome
