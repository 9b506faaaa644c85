"""The Redis backend: conversations in one Redis database (``PPLX_NB_STORE``), for teams.

The store's keys (see :class:`~pplx_nb._layout.RedisKeys` for all of them)::

    pplx_nb:conversations            sorted set: every conversation id, scored by its creation (ms)
    pplx_nb:conv:<id>:meta           hash: the document's top-level fields, each a JSON value
    pplx_nb:conv:<id>:messages       list: one compact JSON message per entry, oldest first
    pplx_nb:conv:<id>:lock           the conversation lock (RedisLock), shared with the job side
    pplx_nb:conv:<id>:answering      a question's answer is on its way (expires by itself)

:meth:`RedisBackend.read` returns the same canonical ``conversation.json`` bytes as the file
backend, assembled from the stored JSON pieces without decoding them, so the store parses a
conversation once whichever backend holds it. The meta hash carries the listing summary
(``pplxSummary``), so a summary costs one ``HGETALL``.

Creating claims the id and writes the conversation in one Lua script, so a reader never sees
half a conversation. An id is taken while the index or any key of the conversation holds it (the
next millisecond on a collision; for ``migrate``, a conflict): a leftover is never written into.

An append takes the conversation's lock and reads the conversation in one script, then writes
in one more (:mod:`~pplx_nb.store._redis_scripts`) that checks the lock is still its holder's and
the list as long as read, and lets go of the lock when nothing else follows. The lock is held
only for one read-modify-write, far below its expiry; a holder that dies frees it then.

A value that is not what the store writes (a message that is not JSON, a meta hash without its
fields, a key holding another type of value) makes that conversation CONVERSATION_CORRUPTED and
no other: batch reads take each reply on its own, so listings and exports skip it. Every Redis
call goes through :func:`~pplx_nb._redis.redis_errors`: an unreachable server is a
FILESYSTEM_ERROR naming the URL (without credentials) within seconds.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from pplx_nb._errors import FilesystemError, PplxError, url_without_credentials
from pplx_nb._fs import CONVERSATION_ID_RE, id_from_ms, validate_conversation_id
from pplx_nb._layout import RedisKeys
from pplx_nb._models import now_iso
from pplx_nb._redis import (
    HeldLocks,
    RedisLock,
    client,
    command,
    hash_reply,
    redis_errors,
    run_script,
)
from pplx_nb.store import _answering as answering
from pplx_nb.store._answering import AnsweringMarker
from pplx_nb.store._document import (
    SUMMARY_KEY,
    assemble,
    corrupted,
    dumps,
    parse,
    summarize,
    summary_field,
    summary_of_header,
)
from pplx_nb.store._file import not_found, or_error
from pplx_nb.store._redis_meta import (
    REQUIRED,
    decoded,
    document_of,
    header_fields,
    summary_of_meta,
)
from pplx_nb.store._redis_scripts import APPEND, CREATE, READ, REPLACE, UNDO

if TYPE_CHECKING:
    import redis

__all__ = ["RedisBackend"]

_SUMMARY_FIELDS = (*REQUIRED, "parentConversationId", SUMMARY_KEY)
_LEFTOVERS = ("status", "job", "answering")
"""Keys of a conversation besides its meta and messages that make its id taken (not its lock,
which a process holds for a moment, conversation or not)."""
_TYPES = {"meta": "hash", "messages": "list"}
"""The Redis type of each key :meth:`RedisBackend.read` reads."""


class RedisBackend:
    """Conversations in the Redis database of ``url``; see the module docstring for the keys.

    Args:
        url: the store's URL (``redis://HOST:PORT/DB``; the database number is honoured).
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
        self.where = self.shown_url
        self.lock_seconds = lock_seconds
        self.lock_timeout = lock_timeout
        self._next_ms = 0
        self._locks = HeldLocks(url, ttl=lock_seconds, timeout=lock_timeout)

    def __repr__(self) -> str:
        return f"RedisBackend(url={self.shown_url!r})"

    @property
    def _redis(self) -> redis.Redis:
        return client(self.url)

    def _errors(self, doing: str) -> contextlib.AbstractContextManager[None]:
        return redis_errors(self.url, doing)

    def _key(self, conversation_id: str, part: str) -> str:
        return self.keys.conversation(conversation_id, part)

    def location(self, conversation_id: str) -> str:
        """``redis://HOST:PORT/DB pplx_nb:conv:<id>`` (no credentials)."""
        base = self._key(validate_conversation_id(conversation_id), "meta").rpartition(":")[0]
        return f"{self.shown_url} {base}"

    def document_location(self, conversation_id: str) -> str:
        """The conversation's meta and messages keys, for error messages."""
        return f"{self.location(conversation_id)}:meta + :messages"

    # -- writing --------------------------------------------------------------------------------

    def create(self, messages: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> bytes:
        """Claim the next free millisecond's id and store the conversation, in one script."""
        lines = [dumps(dict(m)) for m in messages]
        summary = dumps(summary_field({}, messages))
        extra = [(name, dumps(value)) for name, value in meta.items()]
        unix_ms = max(time.time_ns() // 1_000_000, self._next_ms)
        while True:
            conversation_id = id_from_ms(unix_ms)
            stamp = dumps(now_iso(datetime.fromtimestamp(unix_ms / 1000, UTC)))
            fields = [
                ("conversationId", dumps(conversation_id)),
                ("createdAt", stamp),
                ("updatedAt", stamp),
                ("messageCount", dumps(len(lines))),
                *extra,
                (SUMMARY_KEY, summary),
            ]
            if self._store_new(conversation_id, fields, lines):
                break
            unix_ms += 1
        self._next_ms = unix_ms + 1
        return assemble(fields, lines)

    def put(self, conversation_id: str, document: Mapping[str, Any]) -> bool:
        """Store ``document`` under its own id unless that id is taken (migrating a store);
        whether it was stored."""
        validate_conversation_id(conversation_id)
        messages = document["messages"]
        counted = {**document, "messageCount": len(messages)}  # a stale count would be corrupted
        fields = [
            (name, dumps(value))
            for name, value in counted.items()
            if name not in ("messages", SUMMARY_KEY)
        ]
        fields.append((SUMMARY_KEY, dumps(summary_field({}, messages))))
        return self._store_new(conversation_id, fields, [dumps(dict(m)) for m in messages])

    def _store_new(
        self, conversation_id: str, fields: list[tuple[str, bytes]], lines: list[bytes]
    ) -> bool:
        """Claim ``conversation_id`` and write its fields and messages, in one script.

        The id is taken while the index or any key of the conversation holds it, whatever its
        type: a leftover is never merged into (nor a key of another type written half-way).
        """
        flat = [part for field in fields for part in field]
        keys = [
            self.keys.conversations,
            self._key(conversation_id, "meta"),
            self._key(conversation_id, "messages"),
            *(self._key(conversation_id, part) for part in _LEFTOVERS),
        ]
        args = [int(conversation_id[9:]), conversation_id, len(fields), *flat, *lines]
        with self._errors("store a conversation in"):
            return bool(run_script(self.url, CREATE, keys, args))

    def append(
        self,
        conversation_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        check: Callable[[bytes], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> bytes:
        """Append under the conversation's lock; ``check`` and ``then`` as the file backend's.

        Without ``then``, the script that pushes the messages lets go of the lock too.
        """
        with self._lock(validate_conversation_id(conversation_id)):
            return self._append_locked(conversation_id, messages, check, then, release=then is None)

    def append_locked(
        self,
        conversation_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        check: Callable[[bytes], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> bytes:
        """:meth:`append` for a caller that holds the conversation's lock.

        The write checks the lock's token when this thread holds the lock, and always that no
        message was pushed since the read; if ``then`` raises, the messages and fields are put
        back as they were.
        """
        return self._append_locked(conversation_id, messages, check, then, release=False)

    def _append_locked(
        self,
        conversation_id: str,
        messages: Sequence[Mapping[str, Any]],
        check: Callable[[bytes], None] | None,
        then: Callable[[], None] | None,
        *,
        release: bool,
    ) -> bytes:
        validate_conversation_id(conversation_id)
        meta, lines = self._fetch(conversation_id)
        data = document_of(conversation_id, self.document_location(conversation_id), meta, lines)
        if check is not None:
            check(data)
        new_lines = [dumps(dict(m)) for m in messages]
        previous = summary_of_meta(
            conversation_id, self.document_location(conversation_id), meta, lines
        )
        fields = {
            "updatedAt": dumps(now_iso()),
            "messageCount": dumps(len(lines) + len(new_lines)),
            SUMMARY_KEY: dumps(summary_field(previous, messages)),
        }
        self._push(conversation_id, len(lines), fields, new_lines, release)
        before = {name: meta[name.encode()] for name in fields if name.encode() in meta}
        meta.update((name.encode(), value) for name, value in fields.items())
        if then is not None:
            try:
                then()
            except BaseException:
                self._undo(conversation_id, len(lines), before)
                raise
        return assemble(
            header_fields(conversation_id, self.document_location(conversation_id), meta),
            [*lines, *new_lines],
        )

    def _push(
        self, cid: str, length: int, fields: dict[str, bytes], lines: list[bytes], release: bool
    ) -> None:
        """Push ``lines`` and set ``fields`` in one script (letting go of the lock if asked)."""
        keys = self._write_keys(cid)
        lock = self._locks.held(keys[0])
        token = (lock.token or "") if lock is not None else ""
        release = release and bool(token)
        args: list[Any] = [token, length, *fields.values(), int(release), *lines]
        with self._errors("append to a conversation in"):
            result = run_script(self.url, APPEND, keys, args)
        self._refused(cid, result, "Nothing was appended to")
        if release and lock is not None:
            lock.token = None  # the script let go of it

    def _write_keys(self, conversation_id: str) -> list[str]:
        """The lock, meta and messages keys, as the write scripts take them."""
        return [self._key(conversation_id, part) for part in ("lock", "meta", "messages")]

    def _refused(self, conversation_id: str, result: int, nothing: str) -> None:
        """Raise for a write script's refusal (a negative ``result``)."""
        if result == -3:
            raise not_found(conversation_id, self.shown_url)
        if result < 0:
            why = "its lock expired while this process held it"
            if result != -1:
                why = "another writer changed it without its lock"
            raise FilesystemError(
                f"{nothing} conversation {conversation_id} in the Redis store at "
                f"{self.shown_url}: {why}. Try again.",
                conversation_id=conversation_id,
            )

    def place(
        self,
        conversation_id: str,
        message: Mapping[str, Any],
        *,
        where: Callable[[bytes], int],
        then: Callable[[], None] | None = None,
    ) -> bytes:
        """Under the conversation's lock, put ``message`` where ``where(document)`` says: the
        index of the message it replaces, or the message count to append it (``where`` may
        raise to refuse). ``then`` as for :meth:`append`: if it raises, the message replaced
        is put back."""
        with self._lock(validate_conversation_id(conversation_id)):
            meta, lines = self._fetch(conversation_id)
            index = where(
                document_of(conversation_id, self.document_location(conversation_id), meta, lines)
            )
            if index == len(lines):
                return self.append_locked(conversation_id, [message], then=then)
            old, new = lines[index], dumps(dict(message))
            new_lines = [*lines[:index], new, *lines[index + 1 :]]
            document = b'{"messages": [' + b",".join(new_lines) + b"]}"
            messages = parse(document, conversation_id, self.document_location(conversation_id))
            summary = summary_field({}, messages["messages"])
            fields = {"updatedAt": dumps(now_iso()), SUMMARY_KEY: dumps(summary)}
            before = {name: meta[name.encode()] for name in fields if name.encode() in meta}
            swap = partial(self._replace, conversation_id, len(lines), index)
            swap(old, new, fields)
            if then is not None:
                try:
                    then()
                except BaseException:
                    swap(new, old, before)
                    raise
            meta.update((name.encode(), value) for name, value in fields.items())
            return document_of(
                conversation_id, self.document_location(conversation_id), meta, new_lines
            )

    def _replace(
        self, cid: str, length: int, index: int, old: bytes, new: bytes, fields: dict[str, bytes]
    ) -> None:
        """Swap message ``index`` from ``old`` to ``new`` and set ``fields``, in one script."""
        keys = self._write_keys(cid)
        pairs = [part for field in fields.items() for part in field]
        args: list[Any] = [self._locks.token(keys[0]), length, index, old, new, *pairs]
        with self._errors("replace a message in"):
            result = run_script(self.url, REPLACE, keys, args)
        self._refused(cid, result, "Nothing was replaced in")

    def _undo(self, conversation_id: str, length: int, old: dict[str, bytes]) -> None:
        """Put the list and fields back as they were before an append whose ``then`` failed."""
        pairs = [part for field in old.items() for part in field]
        with self._errors("undo an append in"):
            run_script(self.url, UNDO, self._write_keys(conversation_id)[1:], [length, *pairs])

    def check_writable(self, conversation_id: str | None = None) -> None:
        """FILESYSTEM_ERROR naming the URL unless the server takes writes now.

        One round trip: a ``DEL`` of a key that never exists is a write (refused by a read-only
        replica or a user without write rights) that changes nothing.
        """
        if conversation_id is not None:
            validate_conversation_id(conversation_id)
        with self._errors("write to"):
            self._redis.delete(self.keys.conversation("00000000-0000000000000", "lock"))

    def delete(self, conversation_id: str, *, before: Callable[[], None] | None = None) -> None:
        """Remove every key of the conversation and its index entry in one transaction.

        ``before`` runs under the lock, right before the removal.
        """
        with self.locked(conversation_id):
            if before is not None:
                before()
            with self._errors("delete a conversation in"):
                pipe = self._redis.pipeline(transaction=True)
                pipe.delete(*self.keys.all_of(conversation_id))
                pipe.zrem(self.keys.conversations, conversation_id)
                pipe.execute()

    # -- the lock and the question being answered -------------------------------------------

    def _lock(self, conversation_id: str) -> contextlib.AbstractContextManager[RedisLock]:
        """The conversation's RedisLock, taken with its meta and messages read (the
        :meth:`_fetch` that follows costs no round trip)."""
        return self._locks.hold(*self._write_keys(conversation_id))

    @contextlib.contextmanager
    def locked(self, conversation_id: str) -> Iterator[None]:
        """The conversation's lock, the one :meth:`append` takes (CONVERSATION_NOT_FOUND
        without the conversation). Nothing is read with it: what the block does may not."""
        validate_conversation_id(conversation_id)
        lock_key, meta_key = (self._key(conversation_id, part) for part in ("lock", "meta"))
        with self._locks.hold(lock_key, meta_key) as lock:  # whether it exists: same round trip
            if not lock.found:
                raise not_found(conversation_id, self.shown_url)
            yield

    def mark_answering(self, conversation_id: str, seconds: float) -> str:
        """Set the ``:answering`` key for ``seconds`` (lock held); returns its token."""
        token = uuid.uuid4().hex
        self._set_mark(conversation_id, answering.fields(token, now_iso(), seconds), seconds)
        return token

    def renew_answering(
        self, conversation_id: str, token: str, seconds: float, remote_id: str | None = None
    ) -> None:
        """Push the mark ``token`` names ``seconds`` ahead, with its run (lock held)."""
        current = self._mark(conversation_id)
        if current is not None and current.get("token") == token:
            fields = answering.renewed(current, token, seconds, remote_id)
            self._set_mark(conversation_id, fields, seconds)

    def clear_answering(self, conversation_id: str, token: str) -> None:
        """Remove the mark if ``token`` still names it (lock held; never raises)."""
        with contextlib.suppress(PplxError):
            current = self._mark(conversation_id)
            if current is not None and current.get("token") == token:
                with self._errors("clear a mark in"):
                    self._redis.delete(self._key(conversation_id, "answering"))

    def answering(self, conversation_id: str) -> AnsweringMarker | None:
        """The live mark, or ``None``: Redis drops it at its deadline, and one left on this
        machine by a process that is gone is not live either."""
        return answering.live_marker(self._mark(validate_conversation_id(conversation_id)))

    def answering_run(self, conversation_id: str) -> str | None:
        """The paid run the mark names, live or not (until Redis drops it at its deadline)."""
        current = self._mark(validate_conversation_id(conversation_id))
        return None if current is None else answering.marked_run(current)

    def _set_mark(self, conversation_id: str, fields: dict[str, Any], seconds: float) -> None:
        key = self._key(validate_conversation_id(conversation_id), "answering")
        with self._errors("mark a conversation in"):
            self._redis.set(key, dumps(fields), px=max(1, int(seconds * 1000)))

    def _mark(self, conversation_id: str) -> dict[str, Any] | None:
        import redis

        with self._errors("read a conversation in"):
            try:
                raw = command(self.url, "GET", self._key(conversation_id, "answering"))
            except redis.ResponseError as exc:
                if not _wrong_type(exc):
                    raise
                raw = None  # another type of value: as damaged as a mark that is not JSON
        try:
            found = json.loads(raw) if raw is not None else None
        except (ValueError, RecursionError):
            return None  # a damaged mark guards nothing, as with files
        return found if isinstance(found, dict) else None

    # -- reading --------------------------------------------------------------------------------

    def read(self, conversation_id: str) -> bytes:
        """The conversation's canonical document, read in one transaction."""
        meta, lines = self._fetch(validate_conversation_id(conversation_id))
        return document_of(conversation_id, self.document_location(conversation_id), meta, lines)

    def _fetch(self, conversation_id: str) -> tuple[dict[bytes, bytes], list[bytes]]:
        """The meta hash and the messages: as the lock read them if nothing was written since
        (the first read under it), else read in one transaction."""
        lock = self._locks.held(self._key(conversation_id, "lock"))
        if lock is not None and lock.read is not None:
            (meta, lines), lock.read = lock.read, None
            if not meta:
                raise not_found(conversation_id, self.shown_url)
            return meta, lines
        keys = [self._key(conversation_id, part) for part in ("meta", "messages")]
        with self._errors("read a conversation in"):
            found = self._checked(run_script(self.url, READ, keys, []), "read a conversation in")
        meta = self._reply(conversation_id, "meta", found[0])
        if not meta:
            raise not_found(conversation_id, self.shown_url)
        return hash_reply(meta), self._reply(conversation_id, "messages", found[1])

    def _replies(self, pipe: redis.client.Pipeline, doing: str) -> list[Any]:
        """The replies of ``pipe``, each key of another type than the store writes left in
        place as its error (see :meth:`_reply`); any other refusal is FILESYSTEM_ERROR."""
        return self._checked(pipe.execute(raise_on_error=False), doing)

    def _checked(self, found: list[Any], doing: str) -> list[Any]:
        """``found`` (replies, errors among them) unless an error is not a key's wrong type."""
        import redis

        for reply in found:
            if isinstance(reply, redis.ResponseError) and not _wrong_type(reply):
                with self._errors(doing):
                    raise reply
        return found

    def _reply(self, conversation_id: str, part: str, reply: Any) -> Any:
        """``reply`` from the conversation's ``part`` key; CONVERSATION_CORRUPTED for that
        conversation alone if the key holds another type of value than the store writes."""
        if isinstance(reply, Exception):
            key = self._key(conversation_id, part)
            raise corrupted(
                conversation_id,
                self.document_location(conversation_id),
                f"its key {key} holds another type of value than a {_TYPES[part]}",
            )
        return reply

    def exists(self, conversation_id: str) -> bool:
        """Whether the conversation's meta hash is stored."""
        key = self._key(validate_conversation_id(conversation_id), "meta")
        with self._errors("read"):
            return bool(command(self.url, "EXISTS", key))

    def ids(self) -> list[str]:
        """Every conversation id in the index, newest first."""
        with self._errors("list the conversations in"):
            found: list[bytes] = cast(Any, self._redis.zrevrange(self.keys.conversations, 0, -1))
        ids = (raw.decode("ascii", "replace") for raw in found)
        return [
            conversation_id for conversation_id in ids if CONVERSATION_ID_RE.match(conversation_id)
        ]

    def summary(self, conversation_id: str) -> dict[str, Any]:
        """The light summary from the meta hash (one ``HMGET``), computed if stale."""
        found = self.summaries([conversation_id])[0]
        if isinstance(found, PplxError):
            raise found
        return found

    def summaries(self, conversation_ids: Sequence[str]) -> list[dict[str, Any] | PplxError]:
        """Each conversation's light summary (or its error), one round trip for all of them."""
        with self._errors("read conversations in"):
            pipe = self._redis.pipeline(transaction=False)
            for conversation_id in conversation_ids:
                key = self._key(validate_conversation_id(conversation_id), "meta")
                pipe.hmget(key, _SUMMARY_FIELDS)
            found = self._replies(pipe, "read conversations in")
        return [
            or_error(partial(self._summary_of, values=values), conversation_id)
            for conversation_id, values in zip(conversation_ids, found, strict=True)
        ]

    def read_many(self, conversation_ids: Sequence[str]) -> list[bytes | PplxError]:
        """Each conversation's document (or its error), one transaction for all of them."""
        with self._errors("read conversations in"):
            pipe = self._redis.pipeline(transaction=True)
            for conversation_id in conversation_ids:
                validate_conversation_id(conversation_id)
                pipe.hgetall(self._key(conversation_id, "meta"))
                pipe.lrange(self._key(conversation_id, "messages"), 0, -1)
            found = self._replies(pipe, "read conversations in")
        results: list[bytes | PplxError] = []
        for n, conversation_id in enumerate(conversation_ids):
            meta, lines = found[2 * n], found[2 * n + 1]

            def document(cid: str, meta: Any = meta, lines: Any = lines) -> bytes:
                meta = self._reply(cid, "meta", meta)
                if not meta:
                    raise not_found(cid, self.shown_url)
                return document_of(
                    cid, self.document_location(cid), meta, self._reply(cid, "messages", lines)
                )

            results.append(or_error(document, conversation_id))
        return results

    def _summary_of(self, conversation_id: str, values: Any) -> dict[str, Any]:
        """The light summary of a conversation whose meta fields :data:`_SUMMARY_FIELDS` hold
        ``values`` (the reply of an ``HMGET``)."""
        found: list[bytes | None] = self._reply(conversation_id, "meta", values)
        meta = {
            name.encode(): value
            for name, value in zip(_SUMMARY_FIELDS, found, strict=True)
            if value is not None
        }
        if not meta:
            raise not_found(conversation_id, self.shown_url)
        fields = decoded(
            conversation_id, self.document_location(conversation_id), meta, _SUMMARY_FIELDS
        )
        missing = [name for name in REQUIRED if name not in fields]
        if missing:
            raise corrupted(
                conversation_id,
                self.document_location(conversation_id),
                f"its meta hash lacks {', '.join(missing)}",
            )
        summary = summary_of_header(fields)
        if summary is None:
            where = self.document_location(conversation_id)
            summary = summarize(parse(self.read(conversation_id), conversation_id, where))
        summary["path"] = self.location(conversation_id)
        return summary


def _wrong_type(error: redis.ResponseError) -> bool:
    """Whether Redis refused a command because its key holds another type of value."""
    return str(error).startswith("WRONGTYPE")
