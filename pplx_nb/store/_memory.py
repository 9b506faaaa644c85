"""The memory backend: conversations as the bytes ``conversation.json`` would hold, in this process.

The store's part of a :class:`~pplx_nb._memory.MemorySpace` (the job side keeps its statuses in
the same space, :mod:`pplx_nb.jobs._memory`). Documents are the canonical bytes the file backend
writes, so the façade reads them the same way; the ``.answering`` mark is the marker's JSON.
Made by :func:`pplx_nb.backends.open_backends` with ``memory=True``: for tests and one-process
experiments, gone with the process.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pplx_nb._errors import PplxError
from pplx_nb._fs import id_from_ms, validate_conversation_id
from pplx_nb._layout import ANSWERING_FILE, CONVERSATION_FILE
from pplx_nb._memory import MemorySpace
from pplx_nb._models import now_iso
from pplx_nb.store import _answering as answering
from pplx_nb.store._answering import AnsweringMarker
from pplx_nb.store._document import (
    appended,
    encode,
    new_document,
    parse,
    replaced,
    summarize,
)
from pplx_nb.store._file import not_found, or_error

__all__ = ["MemoryBackend"]

WHERE = "memory"
"""What a memory store's location reads (no folder, no URL)."""


class MemoryBackend:
    """Conversations in ``space`` (a fresh one by default); the :class:`StoreBackend` methods.

    Args:
        space: where the conversations live, shared with the job side's memory backend.
    """

    def __init__(self, space: MemorySpace | None = None) -> None:
        self.space = space or MemorySpace()
        self.where = WHERE
        self._next_ms = 0

    def __repr__(self) -> str:
        return f"MemoryBackend({self.space!r})"

    def location(self, conversation_id: str) -> str:
        """``memory <id>``."""
        return f"{WHERE} {validate_conversation_id(conversation_id)}"

    def document_location(self, conversation_id: str) -> str:
        """``memory <id>/conversation.json``."""
        return f"{self.location(conversation_id)}/{CONVERSATION_FILE}"

    # -- writing --------------------------------------------------------------------------------

    def create(self, messages: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> bytes:
        """Claim the next free millisecond's id and store the conversation."""
        unix_ms = max(time.time_ns() // 1_000_000, self._next_ms)
        with self.space.guard:
            while id_from_ms(unix_ms) in self.space.folders:
                unix_ms += 1
            conversation_id = id_from_ms(unix_ms)
            self._next_ms = unix_ms + 1
            stamp = now_iso(datetime.fromtimestamp(unix_ms / 1000, UTC))
            data = new_document(conversation_id, stamp, messages, meta)
            self.space.folders[conversation_id] = {CONVERSATION_FILE: data}
        return data

    def put(self, conversation_id: str, document: Mapping[str, Any]) -> bool:
        """Store ``document`` under its own id unless that id is taken (migrating a store)."""
        validate_conversation_id(conversation_id)
        with self.space.guard:
            if conversation_id in self.space.folders:
                return False
            self.space.folders[conversation_id] = {CONVERSATION_FILE: encode(document)}
        return True

    def append(
        self,
        conversation_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        check: Callable[[bytes], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> bytes:
        """Append under the conversation's lock; ``check`` and ``then`` as the file backend's."""
        with self.locked(conversation_id):
            return self.append_locked(conversation_id, messages, check=check, then=then)

    def append_locked(
        self,
        conversation_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        check: Callable[[bytes], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> bytes:
        """:meth:`append` for a caller that holds the conversation's lock."""
        data = self.read(conversation_id)
        if check is not None:
            check(data)
        where = self.document_location(conversation_id)
        new = appended(data, messages, now_iso(), conversation_id, where)
        self._write_then(conversation_id, new, data, then)
        return new

    def place(
        self,
        conversation_id: str,
        message: Mapping[str, Any],
        *,
        where: Callable[[bytes], int],
        then: Callable[[], None] | None = None,
    ) -> bytes:
        """Put ``message`` at the index ``where(document)`` returns (the message count: after
        the last), under the conversation's lock; ``then`` as for :meth:`append`."""
        with self.locked(conversation_id):
            data = self.read(conversation_id)
            index = where(data)
            document = parse(data, conversation_id, self.document_location(conversation_id))
            if index == len(document["messages"]):
                return self.append_locked(conversation_id, [message], then=then)
            new = replaced(document, index, message, now_iso())
            self._write_then(conversation_id, new, data, then)
            return new

    def _write_then(
        self, conversation_id: str, new: bytes, old: bytes, then: Callable[[], None] | None
    ) -> None:
        """Write ``new``, then run ``then``; if it raises, ``old`` is put back."""
        self.space.put(conversation_id, CONVERSATION_FILE, new)
        if then is not None:
            try:
                then()
            except BaseException:
                self.space.put(conversation_id, CONVERSATION_FILE, old)
                raise

    def check_writable(self, conversation_id: str | None = None) -> None:
        """Memory can always be written; only an unknown conversation is refused."""
        if conversation_id is not None and not self.space.present(conversation_id):
            raise not_found(conversation_id, WHERE)

    def delete(self, conversation_id: str, *, before: Callable[[], None] | None = None) -> None:
        """Remove the conversation and every part kept with it, under its lock."""
        with self.locked(conversation_id):
            if before is not None:
                before()
            self.space.drop(conversation_id)

    # -- the question being answered ------------------------------------------------------------

    @contextlib.contextmanager
    def _held(self, conversation_id: str) -> Iterator[None]:
        lock = self.space.lock(validate_conversation_id(conversation_id))
        with lock:
            if not self.space.present(conversation_id):
                raise not_found(conversation_id, WHERE)
            yield

    def locked(self, conversation_id: str) -> contextlib.AbstractContextManager[None]:
        """The conversation's lock (not re-entrant); CONVERSATION_NOT_FOUND without it."""
        return self._held(conversation_id)

    def mark_answering(self, conversation_id: str, seconds: float) -> str:
        """Set the mark for ``seconds`` (lock held); returns its token."""
        token = uuid.uuid4().hex
        self._set_mark(conversation_id, answering.fields(token, now_iso(), seconds))
        return token

    def renew_answering(
        self, conversation_id: str, token: str, seconds: float, remote_id: str | None = None
    ) -> None:
        """Push the mark ``token`` names ``seconds`` ahead, with its run (lock held)."""
        current = self._mark(conversation_id)
        if current is not None and current.get("token") == token:
            fields = answering.renewed(current, token, seconds, remote_id)
            self._set_mark(conversation_id, fields)

    def clear_answering(self, conversation_id: str, token: str) -> None:
        """Remove the mark if ``token`` still names it (lock held; never raises)."""
        with contextlib.suppress(PplxError):
            current = self._mark(conversation_id)
            if current is not None and current.get("token") == token:
                self.space.remove(conversation_id, ANSWERING_FILE)

    def answering(self, conversation_id: str) -> AnsweringMarker | None:
        """The conversation's live mark, or ``None``."""
        return answering.live_marker(self._mark(conversation_id))

    def answering_run(self, conversation_id: str) -> str | None:
        """The paid run the conversation's mark names, live or not."""
        current = self._mark(conversation_id)
        return None if current is None else answering.marked_run(current)

    def _mark(self, conversation_id: str) -> dict[str, Any] | None:
        raw = self.space.get(validate_conversation_id(conversation_id), ANSWERING_FILE)
        return None if raw is None else dict(json.loads(raw))

    def _set_mark(self, conversation_id: str, fields: dict[str, Any]) -> None:
        self.space.put(conversation_id, ANSWERING_FILE, json.dumps(fields).encode())

    # -- reading --------------------------------------------------------------------------------

    def read(self, conversation_id: str) -> bytes:
        """The document's bytes."""
        data = self.space.get(validate_conversation_id(conversation_id), CONVERSATION_FILE)
        if data is None:
            raise not_found(conversation_id, WHERE)
        return data

    def exists(self, conversation_id: str) -> bool:
        """Whether the conversation is stored."""
        return self.space.present(validate_conversation_id(conversation_id))

    def ids(self) -> list[str]:
        """Every conversation id, newest first."""
        return sorted(self.space.ids(), reverse=True)

    def summary(self, conversation_id: str) -> dict[str, Any]:
        """The light summary, computed from the document."""
        where = self.document_location(conversation_id)
        summary = summarize(parse(self.read(conversation_id), conversation_id, where))
        summary["path"] = self.location(conversation_id)
        return summary

    def summaries(self, conversation_ids: Sequence[str]) -> list[dict[str, Any] | PplxError]:
        """:meth:`summary` of each id (or its error)."""
        return [or_error(self.summary, conversation_id) for conversation_id in conversation_ids]

    def read_many(self, conversation_ids: Sequence[str]) -> list[bytes | PplxError]:
        """:meth:`read` of each id (or its error)."""
        return [or_error(self.read, conversation_id) for conversation_id in conversation_ids]
