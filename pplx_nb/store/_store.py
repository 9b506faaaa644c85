"""ConversationStore: create, load, append, list, fork, delete and prune stored conversations.

The façade validates what goes in (messages through :class:`Message`, ids before any file access)
and builds models from what comes out; the backend keeps the bytes: files
(:mod:`pplx_nb.store._file`), or Redis when ``PPLX_NB_STORE`` is set (:mod:`pplx_nb.store._redis`).
Nothing is cached: every call reads the store, which is the single source of truth. What it needs
to know about jobs (a conversation's job state; dropping a deleted conversation's job) it asks
the job side through :class:`~pplx_nb.store._base.JobStates`.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic
from pydantic.alias_generators import to_camel

from pplx_nb._errors import (
    ConversationCorrupted,
    ConversationNotFound,
    FilesystemError,
    PplxError,
    ValidationError,
)
from pplx_nb._fs import DEFAULT_MAX_FILE_BYTES, validate_conversation_id
from pplx_nb._logging import get_logger
from pplx_nb._models import (
    ACTIVE_JOB_STATES,
    Conversation,
    ConversationSummary,
    JobState,
    Message,
)
from pplx_nb._option_names import option_error
from pplx_nb._reread import read_settled
from pplx_nb.store._answering import AnsweringMarker
from pplx_nb.store._base import JobStates, StoreBackend
from pplx_nb.store._document import (
    SUMMARY_KEY,
    body,
    check_lines,
    corrupted,
    first_problem,
    header,
    last_role,
    parse,
    split,
)
from pplx_nb.store._file import FileBackend
from pplx_nb.store._lazy import LazyConversation
from pplx_nb.store._redis import RedisBackend

if TYPE_CHECKING:
    from pplx_nb._config import Settings

__all__ = ["ConversationStore"]

logger = get_logger("pplx_nb.store")


_RESERVED = frozenset(
    ("conversationId", "createdAt", "updatedAt", "messageCount", "messages", SUMMARY_KEY)
)
_SEALS = 1024
"""How many conversations' validated histories a store remembers (see ``_check_history``)."""


class ConversationStore:
    """Conversations on disk, one directory each, shared safely by kernels, workers and MCP servers.

    With ``settings.store_url`` (``PPLX_NB_STORE``) set and no ``root``, they live in that Redis
    database instead (:mod:`pplx_nb.store._redis`), and nothing is written under the folder.

    Args:
        root: the conversation-logs directory; ``None`` uses ``settings.store_url`` if set, else
            ``settings.logs_dir()`` (``CONVERSATION_LOGS_DIR``, default ``./conversation-logs``).
        settings: where the default root and the file size limit come from (default: read
            from the environment when ``root`` is not given).
        durable: fsync every conversation write and its directory, so it survives a power loss.
        jobs: the job side to ask about a conversation's job (default: the job queue over the
            same folder).

    Attributes:
        last_skipped: the errors of the conversations the last :meth:`list` skipped (corrupted or
            unreadable files), each also logged as a warning.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        settings: Settings | None = None,
        durable: bool = False,
        jobs: JobStates | None = None,
    ) -> None:
        if root is None:
            from pplx_nb._config import Settings

            settings = settings or Settings.from_env()
            path = settings.logs_dir()
        else:
            path = Path(root).expanduser().absolute()
        self._root = path
        self._settings = settings
        limit = settings.max_file_bytes if settings is not None else DEFAULT_MAX_FILE_BYTES
        self._redis: RedisBackend | None = None
        if root is None and settings is not None and settings.store_url:
            self._redis = RedisBackend(settings.store_url)
            self._backend: StoreBackend = self._redis
        else:
            self._backend = FileBackend(path, durable=durable, max_file_bytes=limit)
        self._max_file_bytes = limit
        self._jobs = jobs
        self.last_skipped: builtins.list[PplxError] = []
        self._seals: dict[str, tuple[int, int]] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> ConversationStore:
        """The store ``settings`` name: Redis with ``store_url`` set, else the logs folder."""
        return cls(settings=settings)

    def __repr__(self) -> str:
        if self._redis is not None:
            return f"ConversationStore(url={self._redis.shown_url!r})"
        return f"ConversationStore(root={str(self._root)!r})"

    @property
    def root(self) -> Path:
        """The conversation-logs directory (on Redis: the one files would use; nothing is
        written there)."""
        return self._root

    @property
    def location(self) -> str:
        """Where the conversations live, for users: the folder, or the Redis URL (without
        credentials)."""
        return self._redis.shown_url if self._redis is not None else str(self._root)

    @property
    def is_redis(self) -> bool:
        """Whether the conversations live in Redis (``PPLX_NB_STORE``)."""
        return self._redis is not None

    @property
    def _job_side(self) -> JobStates:
        """The job side this store asks about jobs (built on first use unless one was given)."""
        if self._jobs is None:
            # The one place the store reaches for the job side: its public queue.
            from pplx_nb.jobs import FileStatusBackend, JobQueue

            if self._redis is not None and self._settings is not None:
                self._jobs = JobQueue.from_settings(self._settings, answers=self)
            else:
                statuses = FileStatusBackend(self._root, max_file_bytes=self._max_file_bytes)
                self._jobs = JobQueue(self._root, statuses=statuses, answers=self)
        return self._jobs

    # -- writing --------------------------------------------------------------------------------

    def create(self, messages: Sequence[Message | Mapping[str, Any]], **meta: Any) -> Conversation:
        """Store a new conversation and return it (with its fresh id and ``path``).

        ``meta`` adds top-level fields, e.g. ``parent_conversation_id=...`` (snake_case or
        camelCase; stored camelCase).
        """
        stored_meta = _meta(meta)
        data = self._backend.create(_message_dicts(messages), stored_meta)
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
                seen[:] = self._check_history(stored, conversation_id, appended.message_count)
            if check is not None:
                check(stored)

        new = _message_dicts(messages)
        data = append(conversation_id, new, check=checked, then=then)
        span = body(data)
        if seen and span is not None:
            # The history as validated, then the lines just written (validated Messages): if
            # the bytes are anything else, the next append will not find them sealed.
            count, length, crc = seen
            tail = memoryview(data)[span[0] + length : span[1]]
            self._seal(conversation_id, count + len(new), zlib.crc32(tail, crc))
        return self._appended(data, conversation_id)

    def _check_history(
        self, data: bytes, conversation_id: str, message_count: int
    ) -> builtins.list[int]:
        """CONVERSATION_CORRUPTED unless every message of the stored document ``data`` (whose
        header says ``message_count``) validates; for a canonical document, its count and the
        length and CRC-32 of its message lines.

        Validating a long history costs several times an append, so the histories this store
        validated (loaded, created or appended to) are remembered by their count and CRC-32:
        an append then only checks that the bytes are still those (well under a millisecond
        per megabyte). Nothing else is remembered: the store is still read every time.
        """
        span = body(data)
        if span is None:
            self._conversation(data, conversation_id)
            return []
        lines = memoryview(data)[span[0] : span[1]]
        seal = (message_count, zlib.crc32(lines))
        if self._seals.get(conversation_id) != seal:
            self._conversation(data, conversation_id)  # seals a canonical document
            if self._seals.get(conversation_id) != seal:
                return []
        return [message_count, len(lines), seal[1]]

    def _seal(self, conversation_id: str, message_count: int, crc: int) -> None:
        """Remember that the conversation's ``message_count`` message lines with CRC-32 ``crc``
        validate (the oldest remembered is forgotten past :data:`_SEALS`)."""
        self._seals.pop(conversation_id, None)
        self._seals[conversation_id] = (message_count, crc)
        if len(self._seals) > _SEALS:
            del self._seals[next(iter(self._seals))]

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
        return self._close_question(self._backend.append, conversation_id, closing, check, then)

    def close_question_locked(self, conversation_id: str, closing: Message) -> bool:
        """:meth:`close_question` for a caller that holds the conversation lock (the job side,
        in the step that ends a job without an answer)."""
        return self._close_question(self._backend.append_locked, conversation_id, closing)

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
        when it was cancelled (tagged ``closesJob``), or after that question while it is still
        open; return whether it did.

        For the report of a run that had finished when its job was cancelled: it is paid for,
        so it takes the place of the notice, even when the conversation has moved on since.
        ``check`` and ``then`` are as for :meth:`append` (``then`` runs only when stored).
        """
        where = self._backend.document_location(conversation_id)

        def place(stored: bytes) -> int:
            self._appended(stored, conversation_id)
            if check is not None:
                check(stored)
            messages = parse(stored, conversation_id, where)["messages"]
            for index in range(len(messages) - 1, -1, -1):
                if _closes_cancelled(messages[index], job_id):
                    return index
            # An open question is the job's only while no answer of another is on its way.
            last = messages[-1]["role"] if messages else None
            if last == "user" and self._backend.answering(conversation_id) is None:
                return len(messages)
            raise _Answered

        validate_conversation_id(conversation_id)
        try:
            self._backend.place(conversation_id, answer.to_json_dict(), where=place, then=then)
        except _Answered:
            return False
        return True

    def _close_question(
        self,
        append: Callable[..., bytes],
        conversation_id: str,
        closing: Message,
        check: Callable[[bytes], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> bool:
        where = self._backend.document_location(conversation_id)

        def open_question(stored: bytes) -> None:
            if check is not None:
                check(stored)
            if last_role(stored, conversation_id, where) != "user":
                raise _Answered

        try:
            self._append(append, conversation_id, (closing,), open_question, then)
        except _Answered:
            return False
        return True

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

    def renew_answering(self, conversation_id: str, token: str, seconds: float) -> None:
        """Keep the mark ``token`` names live ``seconds`` more (a long answer streaming), if it
        is still the conversation's. The caller holds the conversation lock."""
        validate_conversation_id(conversation_id)
        self._backend.renew_answering(conversation_id, token, seconds)

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

    def fork(self, conversation_id: str) -> Conversation:
        """A new conversation with a copy of this one's messages and ``parentConversationId``."""
        document = self.read_raw(conversation_id)
        data = self._backend.create(document["messages"], {"parentConversationId": conversation_id})
        return self._conversation(data, None)

    def delete(self, conversation_id: str) -> None:
        """Remove the conversation and everything stored with it (job status included)."""
        jobs = self._job_side
        self._backend.delete(conversation_id, before=lambda: jobs.forget(conversation_id))

    def prune(self, older_than: timedelta) -> int:
        """Delete conversations not updated for ``older_than``; return how many were deleted.

        Conversations with a pending or running job, and ones that cannot be read, are kept.
        """
        if not isinstance(older_than, timedelta) or older_than < timedelta(0):
            raise ValidationError(
                f"prune(older_than=...) needs a non-negative timedelta, got {older_than!r}, "
                "e.g. timedelta(days=30).",
            )
        try:
            cutoff = datetime.now(UTC) - older_than
        except OverflowError:
            return 0  # before year 1: no conversation is that old
        cutoff_ms = int(cutoff.timestamp() * 1000)
        deleted = 0
        for conversation_id in self._backend.ids():
            if int(conversation_id[9:]) >= cutoff_ms:
                continue
            try:
                summary = self._backend.summary(conversation_id)
                if self._job_side.job_state(conversation_id) in ACTIVE_JOB_STATES:
                    continue
                if _parse_instant(summary.get("updatedAt"), "updatedAt") >= cutoff:
                    continue
                self.delete(conversation_id)
            except (
                ConversationNotFound,
                ConversationCorrupted,
                FilesystemError,
                ValidationError,
            ) as exc:
                logger.info("prune: keeping %s (%s)", conversation_id, exc)
                continue
            deleted += 1
        return deleted

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
        document.pop(SUMMARY_KEY, None)
        return document

    def job_state(self, conversation_id: str) -> JobState | None:
        """The state of the conversation's job (``pending`` ... ``cancelled``), ``None`` without
        one; asked of the job side, as :meth:`list` does."""
        return self._job_side.job_state(validate_conversation_id(conversation_id))

    def job_states(self, conversation_ids: Sequence[str]) -> builtins.list[JobState | None]:
        """:meth:`job_state` of each conversation, asked in one batch (one round trip on Redis)."""
        return self._job_side.job_states([validate_conversation_id(c) for c in conversation_ids])

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
        low = _to_ms(since, "since")
        high = _to_ms(until, "until")
        needle = text.casefold() if text else None
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise option_error(
                "{given} is not accepted; give a whole number of 0 or more.", "limit", limit
            )
        candidates: builtins.list[str] = []
        for conversation_id in self._backend.ids():
            created_ms = int(conversation_id[9:])
            if high is not None and created_ms > high:
                continue
            if low is not None and created_ms < low:
                break
            candidates.append(conversation_id)
        found: builtins.list[ConversationSummary] = []
        skipped: builtins.list[PplxError] = []
        for chunk in _chunks(candidates, limit):
            if limit is not None and len(found) >= limit:
                break
            summaries = self._backend.summaries(chunk)
            states = self._job_side.job_states(chunk)
            documents = self._backend.read_many(chunk) if needle else [None] * len(chunk)
            for conversation_id, read, state, document in zip(
                chunk, summaries, states, documents, strict=True
            ):
                if limit is not None and len(found) >= limit:
                    break
                try:
                    if isinstance(read, PplxError):
                        raise read
                    summary = read
                    summary["jobStatus"] = state
                    if (tool and tool not in summary.get("tools", ())) or (
                        model and model not in summary.get("models", ())
                    ):
                        continue
                    if needle and not self._contains(conversation_id, needle, document):
                        continue
                    found.append(self._summary_model(conversation_id, summary))
                except ConversationNotFound:
                    continue  # deleted meanwhile, or a folder whose conversation is being created
                except (ConversationCorrupted, FilesystemError) as exc:
                    logger.warning("Skipping conversation %s: %s", conversation_id, exc)
                    skipped.append(exc)
        self.last_skipped = skipped
        return found

    def documents(
        self, ids: Sequence[str] | None = None
    ) -> Iterator[tuple[str, dict[str, Any] | PplxError]]:
        """Each conversation's document as :meth:`read_raw` returns it, or the error reading it
        gave (``ids`` default: every conversation, newest first), read in batches.

        For bulk readers such as :mod:`pplx_nb.export`: one round trip per batch on Redis.
        """
        chosen = self._backend.ids() if ids is None else [*ids]
        for chunk in _chunks(chosen, None):
            for conversation_id, read in zip(chunk, self._backend.read_many(chunk), strict=True):
                try:
                    yield conversation_id, self._document(conversation_id, read)
                except (ConversationNotFound, ConversationCorrupted, FilesystemError) as exc:
                    yield conversation_id, exc

    def _contains(self, conversation_id: str, needle: str, read: bytes | PplxError | None) -> bool:
        """Whether a message of the conversation (its document ``read`` in a batch) holds
        ``needle``."""
        messages = self._document(conversation_id, read)["messages"]
        return any(needle in message["content"].casefold() for message in messages)

    def _document(self, conversation_id: str, read: bytes | PplxError | None) -> dict[str, Any]:
        """The document of a batch read, read again patiently if it did not parse."""
        if isinstance(read, PplxError):
            raise read
        if read is not None:
            where = self._backend.document_location(conversation_id)
            with contextlib.suppress(ConversationCorrupted):  # perhaps caught mid-rewrite
                document = parse(read, conversation_id, where)
                document.pop(SUMMARY_KEY, None)
                return document
        return self.read_raw(conversation_id)

    def _summary_model(self, conversation_id: str, summary: dict[str, Any]) -> ConversationSummary:
        try:
            return ConversationSummary.model_validate(summary)
        except pydantic.ValidationError as exc:
            where = self._backend.document_location(conversation_id)
            raise corrupted(conversation_id, where, first_problem(exc)) from exc

    def _check_id(self, inner: object, conversation_id: str) -> None:
        """CONVERSATION_CORRUPTED when the document names another conversation than its folder.

        A folder copied under another id would otherwise be answered, and billed, under the
        wrong id.
        """
        if inner != conversation_id:
            where = self._backend.document_location(conversation_id)
            raise corrupted(
                conversation_id,
                where,
                f"it says it is conversation {inner!r}, not {conversation_id} (a copied or "
                f"renamed folder). Set its conversationId to {conversation_id}, or move it back "
                "to the folder it names",
            )

    def _conversation(self, data: bytes, conversation_id: str | None) -> Conversation:
        try:
            conversation = Conversation.model_validate_json(data)
        except pydantic.ValidationError as exc:
            cid = conversation_id or "?"
            where = self._backend.document_location(cid) if conversation_id else str(self._root)
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
            self._seal(cid, canonical.message_count, zlib.crc32(lines))
        if conversation.__pydantic_extra__:
            conversation.__pydantic_extra__.pop(SUMMARY_KEY, None)
        conversation.message_count = len(conversation.messages)
        conversation.path = self._backend.location(conversation_id or conversation.conversation_id)
        return conversation


_FIRST_BATCH = 64
_LARGEST_BATCH = 512


def _chunks(ids: Sequence[str], limit: int | None) -> Iterator[Sequence[str]]:
    """``ids`` in batches that grow from the first (``limit`` ids when given, so a short
    listing reads little) to a few hundred: one round trip each on Redis."""
    size = max(1, min(limit, _FIRST_BATCH)) if limit is not None else _FIRST_BATCH
    start = 0
    while start < len(ids):
        yield ids[start : start + size]
        start += size
        size = min(size * 4, _LARGEST_BATCH)


def _message_dicts(messages: Iterable[Message | Mapping[str, Any]]) -> list[dict[str, Any]]:
    result = []
    for number, message in enumerate(messages):
        if isinstance(message, Message):
            result.append(message.to_json_dict())
            continue
        if not isinstance(message, Mapping):
            raise ValidationError(
                f"Message {number} is a {type(message).__name__}; pass a Message or a dict "
                "like {'role': 'user', 'content': '...'}.",
            )
        try:
            result.append(Message.model_validate(message).to_json_dict())
        except pydantic.ValidationError as exc:
            raise ValidationError(
                f"Message {number} is invalid: {first_problem(exc)}. A message needs a role "
                "(system, user or assistant) and a string content.",
            ) from exc
    return result


def _meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    stored = {}
    for key, value in meta.items():
        name = to_camel(key)
        if name in _RESERVED:
            raise ValidationError(
                f"{key!r} is set by the store itself and cannot be passed to create().",
            )
        if name == "parentConversationId" and value is not None:
            validate_conversation_id(value)
        try:
            json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise ValidationError(
                f"Metadata {key!r} must be JSON-serialisable (str, number, list, dict ...).",
            ) from exc
        if value is not None:
            stored[name] = value
    return stored


def _parse_instant(value: object, name: str) -> datetime:
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise option_error(
                "{given} is not an ISO 8601 instant, e.g. 2025-01-24T15:00:00Z.", name, value
            ) from exc
    else:
        raise ValidationError(
            f"{name} must be a datetime or an ISO 8601 string, got {type(value).__name__}.",
        )
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _to_ms(value: datetime | str | None, name: str) -> int | None:
    if value is None:
        return None
    return int(_parse_instant(value, name).timestamp() * 1000)


def _closes_cancelled(message: Mapping[str, Any], job_id: str) -> bool:
    """Whether ``message`` is the turn that closed the question of cancelled job ``job_id``."""
    unanswered = message.get("unanswered")
    return (
        message.get("closesJob") == job_id
        and isinstance(unanswered, dict)
        and unanswered.get("state") == "cancelled"
    )


class _Answered(Exception):
    """The conversation's last question already has an answer (or it has none): nothing to close."""
