"""ConversationStore: create, load, append, list, fork, delete and prune stored conversations.

The façade validates what goes in (messages through :class:`Message`, ids before any file access)
and builds models from what comes out; the backend keeps the bytes: files
(:mod:`pplx_nb.store._file`), Redis (:mod:`pplx_nb.store._redis`) or memory
(:mod:`pplx_nb.store._memory`), whichever :func:`pplx_nb.backends.open_backends` opened.
Nothing is cached: every call reads the store, which is the single source of truth. What it needs
to know about jobs (a conversation's job state; dropping a deleted conversation's job) it asks
the job side through :class:`~pplx_nb.store._base.JobStates`. Listing (:mod:`._listing`),
pruning (:mod:`._pruning`), closing questions (:mod:`._closing`), the history check
(:mod:`._seals`) and checking what goes in (:mod:`._input`) live in modules of their own.
"""

from __future__ import annotations

import builtins
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pydantic

from pplx_nb._errors import (
    ConversationCorrupted,
    PplxError,
    ValidationError,
)
from pplx_nb._fs import validate_conversation_id
from pplx_nb._logging import get_logger
from pplx_nb._models import (
    Conversation,
    ConversationSummary,
    JobState,
    Message,
)
from pplx_nb._reread import read_settled
from pplx_nb.store import _closing, _input, _listing, _pruning
from pplx_nb.store._answering import AnsweringMarker
from pplx_nb.store._base import JobStates, StoreBackend
from pplx_nb.store._document import (
    SUMMARY_KEY,
    body,
    check_lines,
    corrupted,
    first_problem,
    header,
    misplaced,
    parse,
    split,
)
from pplx_nb.store._lazy import LazyConversation
from pplx_nb.store._seals import Seals

__all__ = ["ConversationStore"]

logger = get_logger("pplx_nb.store")


class ConversationStore:
    """Conversations shared safely by kernels, workers and MCP servers, kept by ``backend``.

    :func:`pplx_nb.backends.open_backends` opens the backend the settings name (the logs
    folder, the Redis database of ``PPLX_NB_STORE``, or memory) and the job side beside it;
    ``open_backends(settings).conversation_store()`` (or :func:`pplx_nb.backends.open_store`)
    is this store over them.

    Args:
        backend: where the conversations live (:class:`~pplx_nb.store.StoreBackend`).
        jobs: the job side to ask about a conversation's job (its state in listings; dropping
            a deleted conversation's job), kept beside the same conversations.

    Attributes:
        last_skipped: the errors of the conversations the last :meth:`list` skipped (corrupted or
            unreadable files), each also logged as a warning.
    """

    def __init__(self, backend: StoreBackend, *, jobs: JobStates) -> None:
        self._backend = backend
        self._jobs = jobs
        self.last_skipped: builtins.list[PplxError] = []
        self._seals = Seals()

    def __repr__(self) -> str:
        return f"ConversationStore(location={self.location!r})"

    @property
    def backend(self) -> StoreBackend:
        """Where the conversations live."""
        return self._backend

    @property
    def location(self) -> str:
        """Where the conversations live, for users: the folder, or the Redis URL (without
        credentials)."""
        return self._backend.where

    # -- writing --------------------------------------------------------------------------------

    def create(self, messages: Sequence[Message | Mapping[str, Any]], **meta: Any) -> Conversation:
        """Store a new conversation and return it (with its fresh id and ``path``).

        ``meta`` adds top-level fields, e.g. ``parent_conversation_id=...`` (snake_case or
        camelCase; stored camelCase).
        """
        stored_meta = _input.stored_meta(meta)
        data = self._backend.create(_input.message_dicts(messages), stored_meta)
        return self._conversation(data, None)

    def append(
        self,
        conversation_id: str,
        *messages: Message | Mapping[str, Any],
        check: Callable[[bytes], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> Conversation:
        """Append messages to a stored conversation atomically and return the updated conversation.

        Appends from several threads or processes are serialised; none is lost. The history in
        the returned conversation is validated when first used, so appending to a long
        conversation costs no more than writing it.

        ``check`` receives the stored document bytes while the conversation is locked and may
        raise to refuse the append (nothing is written); ``then`` runs after the write, still
        locked, and if it raises the append is undone. Together they make "look, append, act"
        one step for other writers of the conversation directory (the job queue). Neither may
        take the conversation lock itself.
        """
        return self._append(self._backend.append, conversation_id, messages, check, then)

    def _append(
        self,
        append: Callable[..., bytes],
        conversation_id: str,
        messages: Sequence[Message | Mapping[str, Any]],
        check: Callable[[bytes], None] | None,
        then: Callable[[], None] | None,
    ) -> Conversation:
        """:meth:`append` through the backend's ``append`` or ``append_locked``."""
        validate_conversation_id(conversation_id)
        if not messages:
            raise ValidationError(
                "Nothing to append: pass at least one message, e.g. "
                "store.append(conversation_id, {'role': 'user', 'content': '...'}).",
            )

        seen: builtins.list[int] = []

        def checked(stored: bytes) -> None:
            # A document the store cannot return must be refused before the append, or a
            # retry after CONVERSATION_CORRUPTED would store the messages twice.
            appended = self._appended(stored, conversation_id)
            if isinstance(appended, LazyConversation):  # else validated whole already
                seen[:] = self._seals.check_history(
                    stored, conversation_id, appended.message_count, self._conversation
                )
            if check is not None:
                check(stored)

        new = _input.message_dicts(messages)
        data = append(conversation_id, new, check=checked, then=then)
        span = body(data)
        if seen and span is not None:
            # The history as validated, then the lines just written (validated Messages): if
            # the bytes are anything else, the next append will not find them sealed.
            count, length, crc = seen
            tail = memoryview(data)[span[0] + length : span[1]]
            self._seals.seal(conversation_id, count + len(new), zlib.crc32(tail, crc))
        return self._appended(data, conversation_id)

    def close_question(
        self,
        conversation_id: str,
        closing: Message,
        *,
        check: Callable[[bytes], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> bool:
        """Append ``closing`` (see :func:`~pplx_nb._models.closing_turn`) if the conversation
        ends with a question that has no answer; return whether it did.

        Decided under the conversation's lock, so closing twice closes once and an answer stored
        meanwhile is never followed by a closing turn. ``check`` and ``then`` are as for
        :meth:`append` (``then`` runs only when the turn was appended).
        """
        append = self._appending(self._backend.append)
        return _closing.close_question(self._backend, append, conversation_id, closing, check, then)

    def close_question_locked(self, conversation_id: str, closing: Message) -> bool:
        """:meth:`close_question` for a caller that holds the conversation lock (the job side,
        in the step that ends a job without an answer)."""
        append = self._appending(self._backend.append_locked)
        return _closing.close_question(self._backend, append, conversation_id, closing)

    def answer_closed(
        self,
        conversation_id: str,
        answer: Message,
        job_id: str,
        *,
        check: Callable[[bytes], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> bool:
        """Store ``answer`` in place of the turn that closed the question of job ``job_id``
        when it was cancelled or failed (tagged ``closesJob``), or after that question while it
        is still open; return whether it did.

        For the report of a run that had finished when its job was cancelled, or that an
        attempt which lost its lease hands over: it is paid for, so it takes the place of the
        notice, even when the conversation has moved on since.
        ``check`` and ``then`` are as for :meth:`append` (``then`` runs only when stored).
        """
        return _closing.answer_closed(
            self._backend, self._appended, conversation_id, answer, job_id, check, then
        )

    def answer_question(
        self,
        conversation_id: str,
        answer: Message,
        is_question: Callable[[Mapping[str, Any]], bool],
        *,
        then: Callable[[], None] | None = None,
    ) -> _closing.Placed:
        """Store ``answer`` right after the last stored message ``is_question`` picks (a
        camelCase message dict): appended while that question is still open, or in place of
        the turn that closed it as not answered, even after follow-ups. Returns ``"stored"``,
        ``"answered"`` (it has an answer: nothing written) or ``"missing"`` (no such question).

        For a paid answer the store could not take when it arrived. ``then`` is as for
        :meth:`append` (it runs only when stored).
        """
        return _closing.answer_question(
            self._backend, self._appended, conversation_id, answer, is_question, then
        )

    def _appending(self, append: Callable[..., bytes]) -> _closing.AppendChecked:
        """:meth:`_append` through the backend's ``append`` or ``append_locked``."""

        def appending(
            conversation_id: str,
            messages: Sequence[Message],
            check: Callable[[bytes], None],
            then: Callable[[], None] | None,
        ) -> Conversation:
            return self._append(append, conversation_id, messages, check, then)

        return appending

    def _appended(self, data: bytes, conversation_id: str) -> Conversation:
        """The conversation in ``data``, its messages validated lazily when its header allows."""
        fields = header(data)
        if fields is None or "messageCount" not in fields:
            return self._conversation(data, conversation_id)
        self._check_id(fields.get("conversationId"), conversation_id)
        fields.pop(SUMMARY_KEY, None)
        try:
            return LazyConversation.from_header(
                fields,
                data,
                self._backend.location(conversation_id),
                self._backend.document_location(conversation_id),
            )
        except pydantic.ValidationError:
            return self._conversation(data, conversation_id)

    def check_writable(self, conversation_id: str | None = None) -> None:
        """FILESYSTEM_ERROR unless the conversation can be written now (read-only, disk full).

        For callers about to pay for something they will store there. Without an id: whether
        new conversations can be stored (the logs folder is created if missing).
        """
        if conversation_id is not None:
            validate_conversation_id(conversation_id)
        self._backend.check_writable(conversation_id)

    # -- the question being answered ------------------------------------------------------------

    def locked(self, conversation_id: str) -> AbstractContextManager[None]:
        """Hold the conversation's lock: the one :meth:`append` and :meth:`delete` take.

        For steps that span the store and the job side (store a question and mark it, queue a
        job only if nothing else is under way). Not re-entrant: inside it, call only the methods
        that say the caller holds the lock, never :meth:`append`. CONVERSATION_NOT_FOUND without
        the conversation.
        """
        validate_conversation_id(conversation_id)
        return self._backend.locked(conversation_id)

    def mark_answering(self, conversation_id: str, seconds: float) -> str:
        """Record that a question of the conversation is being answered now, for at most
        ``seconds`` (the ``.answering`` marker); returns the token that ends it.

        The caller holds the conversation lock (:meth:`locked`, or an append's ``then``, so the
        question and its mark are stored in one step). Until :meth:`clear_answering`,
        :meth:`answering` reports it and the answer guard refuses other questions.
        """
        validate_conversation_id(conversation_id)
        return self._backend.mark_answering(conversation_id, seconds)

    def renew_answering(
        self, conversation_id: str, token: str, seconds: float, remote_id: str | None = None
    ) -> None:
        """Keep the mark ``token`` names live ``seconds`` more (a long answer streaming), if it
        is still the conversation's; ``remote_id`` records the paid run answering, as soon as
        the API names it. The caller holds the conversation lock."""
        validate_conversation_id(conversation_id)
        self._backend.renew_answering(conversation_id, token, seconds, remote_id)

    def clear_answering(self, conversation_id: str, token: str) -> None:
        """End the mark ``token`` names (its answer is stored, or the question failed); a newer
        mark stays. Never raises. The caller holds the conversation lock (an append's ``then``
        stores the answer and ends its mark in one step)."""
        validate_conversation_id(conversation_id)
        self._backend.clear_answering(conversation_id, token)

    def answering(self, conversation_id: str) -> AnsweringMarker | None:
        """The live mark of a question of the conversation being answered now, or ``None``.

        A mark past its deadline, or left on this machine by a process that is gone, is not
        live (on Windows only the deadline counts). Takes no lock.
        """
        validate_conversation_id(conversation_id)
        return self._backend.answering(conversation_id)

    def answering_run(self, conversation_id: str) -> str | None:
        """The paid run recorded by the conversation's mark, live or not: a process that died
        answering leaves it there for whoever closes its question. Takes no lock."""
        validate_conversation_id(conversation_id)
        return self._backend.answering_run(conversation_id)

    def fork(self, conversation_id: str) -> Conversation:
        """A new conversation with a copy of this one's messages and ``parentConversationId``."""
        document = self.read_raw(conversation_id)
        data = self._backend.create(document["messages"], {"parentConversationId": conversation_id})
        return self._conversation(data, None)

    def delete(self, conversation_id: str) -> None:
        """Remove the conversation and everything stored with it (job status included)."""
        jobs = self._jobs
        self._backend.delete(conversation_id, before=lambda: jobs.forget(conversation_id))

    def prune(self, older_than: timedelta) -> int:
        """Delete conversations not updated for ``older_than``; return how many were deleted.

        Conversations with a pending or running job, and ones that cannot be read, are kept.
        """
        return _pruning.prune(
            self._backend, lambda cid: self._jobs.job_state(cid), self.delete, older_than
        )

    # -- reading --------------------------------------------------------------------------------

    def load(self, conversation_id: str) -> Conversation:
        """The stored conversation, with ``path`` set to its directory."""
        validate_conversation_id(conversation_id)
        return read_settled(
            self._backend.document_location(conversation_id),
            lambda: self._conversation(self._backend.read(conversation_id), conversation_id),
            (ConversationCorrupted,),
        )

    def read_raw(self, conversation_id: str) -> dict[str, Any]:
        """The stored document as a plain camelCase dict (checked for shape, not validated).

        For bulk readers such as :mod:`pplx_nb.export`, which need no pydantic models.
        """
        where = self._backend.document_location(conversation_id)
        document = read_settled(
            where,
            lambda: parse(self._backend.read(conversation_id), conversation_id, where),
            (ConversationCorrupted,),
        )
        self._check_id(document.get("conversationId"), conversation_id)
        document.pop(SUMMARY_KEY, None)
        return document

    def job_state(self, conversation_id: str) -> JobState | None:
        """The state of the conversation's job (``pending`` ... ``cancelled``), ``None`` without
        one; asked of the job side, as :meth:`list` does."""
        return self._jobs.job_state(validate_conversation_id(conversation_id))

    def job_states(self, conversation_ids: Sequence[str]) -> builtins.list[JobState | None]:
        """:meth:`job_state` of each conversation, asked in one batch (one round trip on Redis)."""
        return self._jobs.job_states([validate_conversation_id(c) for c in conversation_ids])

    def job_answer(
        self, conversation_id: str, job_id: str, document: bytes | None = None
    ) -> Message | None:
        """The answer a job stored: the last message tagged ``jobId = job_id``, or ``None``.

        ``document`` is the stored document when the caller already holds it (an append's
        ``check``); otherwise it is read. What the job side asks the store (``AnswerLookup``).
        """
        if document is None:
            document = self._backend.read(conversation_id)
        where = self._backend.document_location(conversation_id)
        for message in reversed(parse(document, conversation_id, where)["messages"]):
            if message.get("jobId") == job_id:
                return Message.model_validate(message)
        return None

    def exists(self, conversation_id: str) -> bool:
        """Whether a conversation with this id is stored (VALIDATION_ERROR for a malformed id)."""
        return self._backend.exists(conversation_id)

    def path(self, conversation_id: str) -> Path:
        """The conversation's directory (whether or not it exists); the id is validated first.

        On Redis there is none: use :meth:`conversation_location`.
        """
        return Path(self._backend.location(conversation_id))

    def conversation_location(self, conversation_id: str) -> str:
        """Where the conversation lives, for users: its directory, or its Redis keys (the URL
        without credentials and ``pplx_nb:conv:<id>``); the id is validated first."""
        return self._backend.location(conversation_id)

    def ids(self) -> builtins.list[str]:
        """Every stored conversation id, newest first."""
        return self._backend.ids()

    def list(
        self,
        *,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        tool: str | None = None,
        model: str | None = None,
        text: str | None = None,
        limit: int | None = None,
    ) -> builtins.list[ConversationSummary]:
        """Summaries of stored conversations, newest first.

        Args:
            since: only conversations created at or after this instant (datetime or ISO 8601;
                naive means UTC).
            until: only conversations created at or before this instant.
            tool: only conversations with a message from this tool (e.g. ``perplexity_search``).
            model: only conversations with a message from this model.
            text: only conversations with a message containing this text (case-insensitive;
                this one reads whole conversations).
            limit: at most this many summaries.

        A corrupted or unreadable conversation is skipped with a warning and kept in
        :attr:`last_skipped`; it never breaks the listing of the others.
        """
        found, self.last_skipped = _listing.list_summaries(
            self._backend,
            lambda ids: self._jobs.job_states(ids),
            self.read_raw,
            since=since,
            until=until,
            tool=tool,
            model=model,
            text=text,
            limit=limit,
        )
        return found

    def documents(
        self, ids: Sequence[str] | None = None
    ) -> Iterator[tuple[str, dict[str, Any] | PplxError]]:
        """Each conversation's document as :meth:`read_raw` returns it, or the error reading it
        gave (``ids`` default: every conversation, newest first), read in batches.

        For bulk readers such as :mod:`pplx_nb.export`: one round trip per batch on Redis.
        """
        return _listing.documents(self._backend, self.read_raw, ids)

    def _check_id(self, inner: object, conversation_id: str) -> None:
        """CONVERSATION_CORRUPTED when the document names another conversation than its folder
        (see :func:`misplaced`)."""
        if inner != conversation_id:
            where = self._backend.document_location(conversation_id)
            raise misplaced(inner, conversation_id, where)

    def _conversation(self, data: bytes, conversation_id: str | None) -> Conversation:
        try:
            conversation = Conversation.model_validate_json(data)
        except pydantic.ValidationError as exc:
            cid = conversation_id or "?"
            where = self._backend.document_location(cid) if conversation_id else self.location
            parse(data, cid, where)  # names a JSON syntax error precisely
            raise corrupted(cid, where, first_problem(exc)) from exc
        if conversation_id is not None:
            self._check_id(conversation.conversation_id, conversation_id)
        canonical = split(data)
        if canonical is not None:
            cid = conversation.conversation_id
            where = self._backend.document_location(cid)
            extra = conversation.__pydantic_extra__ or {}
            check_lines(canonical, extra, len(conversation.messages), cid, where)
            lines = memoryview(data)[canonical.body_start : canonical.body_end]
            self._seals.seal(cid, canonical.message_count, zlib.crc32(lines))
        if conversation.__pydantic_extra__:
            conversation.__pydantic_extra__.pop(SUMMARY_KEY, None)
        conversation.message_count = len(conversation.messages)
        conversation.path = self._backend.location(conversation_id or conversation.conversation_id)
        return conversation
