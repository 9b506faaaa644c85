"""The answer guard: an answer always lands right after its question.

After the system message a conversation's turns alternate user / assistant (DESIGN.md). A question
answered on the spot is stored, asked, and its answer stored; a second follow-up stored in between
would split the pair. So asking goes through here::

    ticket = guard.ask(question, model, conversation_id)   # stored + marked as being answered
    ticket.renew()                                         # a long stream keeps the mark live
    ticket.note_run(remote_id)                             # the paid run answering, in the mark
    ticket.answer(message)                                 # stored, mark gone, in one locked step
    ticket.abandon(error)                                  # the call failed: mark gone and
                                                           # the question closed, saying why

Queued research stores its question and its job in one step the same way (:meth:`AnswerGuard.
enqueue`), and the idle check refuses a question while a job or an answer of the conversation is
under way. This module owns that rule: it alone takes the conversation lock (the store's
``locked`` and ``append(check=, then=)``), runs the idle check (the job side's
``check_idle``, the store's ``answering``) and sets or ends the mark (the store's
``mark_answering`` / ``renew_answering`` / ``clear_answering``, which expect the lock held).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pplx_nb._config import Settings
from pplx_nb._errors import (
    JobInProgress,
    LeaseLost,
    PplxError,
    RunRequiresAction,
    SubmissionUnknown,
    redact,
)
from pplx_nb._logging import get_logger
from pplx_nb._models import (
    Conversation,
    JobParams,
    JobRequest,
    JobStatus,
    Message,
    UnansweredState,
    closing_turn,
)

if TYPE_CHECKING:
    from pplx_nb.jobs import JobQueue
    from pplx_nb.store import ConversationStore, Placed

__all__ = ["AnswerGuard", "Ticket"]

logger = get_logger("pplx_nb.research")

_RENEW_SECONDS = 60.0
"""How often a streaming answer pushes its mark's deadline ahead."""


class AnswerGuard:
    """Stores questions so that their answers follow them, for one store and its job queue.

    Args:
        settings: the timeouts and retries an answer's deadline is made of.
        store: the conversations.
        queue: the job queue of the same folder (called when first needed).
    """

    def __init__(
        self, settings: Settings, store: ConversationStore, queue: Callable[[], JobQueue]
    ) -> None:
        self._settings = settings
        self._store = store
        self._queue = queue

    def refuse_if_busy(self, conversation_id: str) -> None:
        """JobInProgress while the conversation's job or an answer of it is under way.

        Takes no lock: a fast check before any work, and the check :meth:`ask` and
        :meth:`enqueue` run again under the lock when they store.
        """
        self._queue().check_idle(conversation_id)
        marker = self._store.answering(conversation_id)
        if marker is not None:
            raise JobInProgress(
                f"Conversation {conversation_id} is still answering the follow-up asked at "
                f"{marker.started_at or 'an earlier moment'}. Wait for that answer, then "
                "follow up: asked now, the two questions and answers would interleave.",
                conversation_id=conversation_id,
            )

    def answering_since(self, conversation_id: str) -> str | None:
        """When the question still being answered was asked (ISO 8601), or None if none is."""
        marker = self._store.answering(conversation_id)
        return None if marker is None else marker.started_at

    def ask(
        self,
        question: Message,
        model: str,
        conversation_id: str | None = None,
        *,
        seed: Sequence[Message] = (),
    ) -> Ticket:
        """Store ``question`` (in a new conversation after ``seed`` when no id) and mark it.

        Raises JobInProgress, leaving nothing stored, while the conversation is busy.
        """
        seconds = self.deadline(model)
        store = self._store
        if conversation_id is None:
            conversation_id = store.create([*seed, question]).conversation_id
            try:
                token = self._mark(conversation_id, seconds)
            except BaseException:
                _discard(store, conversation_id)
                raise
            return Ticket(store, conversation_id, token, seconds, created=True)
        self._close_open_question(conversation_id)
        tokens: list[str] = []
        store.append(
            conversation_id,
            question,
            check=lambda _: self.refuse_if_busy(conversation_id),
            then=lambda: tokens.append(store.mark_answering(conversation_id, seconds)),
        )
        return Ticket(store, conversation_id, tokens[0], seconds)

    def _mark(self, conversation_id: str, seconds: float) -> str:
        """Mark a stored question as being answered if nothing else is (one locked step)."""
        with self._store.locked(conversation_id):
            self.refuse_if_busy(conversation_id)
            return self._store.mark_answering(conversation_id, seconds)

    def _close_open_question(self, conversation_id: str) -> None:
        """Close a question another program (or a process that died) left without an answer,
        before a new one follows it: two questions in a row would break the conversation for
        every program that replays it. Not while a job or an answer of it is under way.

        Whatever was answering it may have been paid before it stopped: the closing turn says its
        cost is unknown, and names the run a process that died while a paid run answered left in
        its mark, so that the run can still be read."""
        self._store.close_question(
            conversation_id,
            closing_turn(
                "interrupted",
                cost_unknown=True,
                remote_id=self._store.answering_run(conversation_id),
            ),
            check=lambda _: self.refuse_if_busy(conversation_id),
        )

    def enqueue(
        self,
        question: Message | None,
        tool: str,
        request: JobRequest,
        conversation_id: str | None = None,
        *,
        seed: Sequence[Message] = (),
        params: JobParams | None = None,
    ) -> JobStatus:
        """Store ``question`` and queue its job in one step (all or nothing).

        No ``conversation_id``: a new conversation of ``seed`` and the question. No ``question``:
        the conversation's stored unanswered question is queued again. ``params`` is the job as
        the TypeScript server's worker reads it (see :meth:`Turn.job_params`).
        """
        queue = self._queue()
        if conversation_id is None:
            assert question is not None
            conversation_id = self._store.create([*seed, question]).conversation_id
            try:
                return self._enqueue_stored(conversation_id, tool, request, params)
            except BaseException:
                # A question without its job would wait for an answer forever.
                _discard(self._store, conversation_id)
                raise
        if question is None:
            return self._enqueue_stored(conversation_id, tool, request, params)
        self._close_open_question(conversation_id)
        queued: list[JobStatus] = []
        target = conversation_id
        self._store.append(
            target,
            question,
            check=lambda _: self.refuse_if_busy(target),
            then=lambda: queued.append(queue.enqueue_locked(target, tool, request, params=params)),
        )
        return queued[0]

    def _enqueue_stored(
        self,
        conversation_id: str,
        tool: str,
        request: JobRequest,
        params: JobParams | None,
    ) -> JobStatus:
        """Queue the job of a stored question if nothing else is under way (one locked step)."""
        with self._store.locked(conversation_id):
            self.refuse_if_busy(conversation_id)
            return self._queue().enqueue_locked(conversation_id, tool, request, params=params)

    def answer_job(
        self, conversation_id: str, message: Message, check_owner: Callable[[bytes], None]
    ) -> Conversation:
        """Store a job's answer if ``check_owner`` (run under the lock) lets its attempt write."""
        return self._store.append(conversation_id, message, check=check_owner)

    def answer_late(self, conversation_id: str, job_id: str, message: Message) -> JobStatus | None:
        """Store the report of job ``job_id`` that reached no attempt owning the job: its run
        had finished when the job was cancelled, or the attempt that read it had lost its lease.
        It is paid for, so it is stored (in place of the turn that closed the job's question,
        if one did) and the job ends ``completed``, in one locked step, once, whoever brings it
        first (the canceller, an attempt past its lease, the job's next attempt). Returns the
        job's status after: ``completed`` when the report is stored, now or before."""
        queue = self._queue()
        with contextlib.suppress(LeaseLost):
            self._store.answer_closed(
                conversation_id,
                message,
                job_id,
                check=lambda document: queue.check_late_report(conversation_id, job_id, document),
                then=lambda: queue.finish_late_locked(conversation_id, job_id),
            )
        return queue.status(conversation_id)

    def answer_kept(
        self,
        conversation_id: str,
        message: Message,
        is_question: Callable[[Mapping[str, Any]], bool],
        token: str | None,
    ) -> Placed:
        """Store a paid answer the store could not take when it arrived, right after its
        question (``is_question`` picks it) or in place of the turn that closed it; the
        question's mark ``token``, when the failure left it behind, ends in the same locked
        step."""
        store = self._store
        then = None if token is None else lambda: store.clear_answering(conversation_id, token)
        return store.answer_question(conversation_id, message, is_question, then=then)

    def deadline(self, model: str) -> float:
        """The longest an answer can take: every attempt's timeout plus a minute of back-off."""
        from pplx_nb.api.request import is_deep_research

        settings = self._settings
        timeout_ms = settings.deep_research_timeout_ms if is_deep_research(model) else 0
        per_attempt = max(timeout_ms, settings.timeout_ms) / 1000 + 60
        return per_attempt * (settings.max_retries + 1)


class Ticket:
    """A stored question being answered: :meth:`answer` or :meth:`abandon` ends it.

    Made by :meth:`AnswerGuard.ask`; ``created`` says whether the question opened a new
    conversation.
    """

    def __init__(
        self,
        store: ConversationStore,
        conversation_id: str,
        token: str,
        seconds: float,
        *,
        created: bool = False,
    ) -> None:
        self._store = store
        self.conversation_id = conversation_id
        self.created = created
        self._token: str | None = token
        self._seconds = seconds
        self._renewed = time.monotonic()
        self.remote_id: str | None = None
        """The paid run answering the question, once the API named it."""

    def __repr__(self) -> str:
        state = "open" if self._token is not None else "closed"
        return f"Ticket({self.conversation_id!r}, {state})"

    @property
    def token(self) -> str | None:
        """The token of the question's answering mark while the ticket is open, else ``None``."""
        return self._token

    def renew(self) -> None:
        """Keep the mark live another deadline; call it as the answer arrives (cheap: at most
        one write a minute)."""
        if self._token is None or time.monotonic() - self._renewed <= _RENEW_SECONDS:
            return
        self._renewed = time.monotonic()
        with contextlib.suppress(PplxError), self._store.locked(self.conversation_id):
            self._store.renew_answering(self.conversation_id, self._token, self._seconds)

    def note_run(self, remote_id: str) -> None:
        """Record the paid run answering the question, in its mark, before waiting for it: a
        process killed meanwhile leaves the run's id to whoever closes the question. Never
        raises: the run goes on, and this ticket still names it when the question closes."""
        self.remote_id = remote_id
        if self._token is None:
            return
        try:
            with self._store.locked(self.conversation_id):
                self._store.renew_answering(
                    self.conversation_id, self._token, self._seconds, remote_id
                )
        except PplxError as exc:
            logger.warning(
                "Could not record run %s of %s (%s); it is named when the question closes",
                remote_id,
                self.conversation_id,
                exc,
            )

    def answer(self, message: Message) -> Conversation:
        """Store the answer; the mark ends in the same locked step."""
        token, store, conversation_id = self._token, self._store, self.conversation_id
        conversation = store.append(
            conversation_id,
            message,
            then=None if token is None else lambda: store.clear_answering(conversation_id, token),
        )
        self._token = None
        return conversation

    def abandon(self, error: BaseException | None = None, *, discard: bool = False) -> None:
        """End the mark without an answer.

        With ``error`` (why there is none), the question is closed by an assistant turn saying
        so, in the same locked step (see :func:`~pplx_nb._models.closing_turn`); ``discard``
        instead removes a conversation this ticket created (its first question failed at no
        cost: there is nothing to retry).
        """
        token, self._token = self._token, None
        store, conversation_id = self._store, self.conversation_id
        if discard and self.created:
            _discard(store, conversation_id)
            return
        if error is not None:
            then = None if token is None else lambda: store.clear_answering(conversation_id, token)
            named = error.request_id if isinstance(error, SubmissionUnknown) else None
            run = self.remote_id or named
            spent = error if isinstance(error, RunRequiresAction) else None
            closing = closing_turn(
                *_unanswered(error),
                remote_id=run,
                cost=spent.cost if spent else None,
                usage=spent.usage if spent else None,
            )
            with contextlib.suppress(PplxError):
                if store.close_question(conversation_id, closing, then=then):
                    return
        if token is not None:
            with contextlib.suppress(PplxError), store.locked(conversation_id):
                store.clear_answering(conversation_id, token)


def _discard(store: ConversationStore, conversation_id: str) -> None:
    """Remove a conversation whose question will get no answer (best effort)."""
    with contextlib.suppress(PplxError):
        store.delete(conversation_id)


def _unanswered(error: BaseException) -> tuple[UnansweredState, str | None, str | None]:
    """Why a question got no answer: a failure (its code, its message without secrets), or an
    interruption (cancelled, Ctrl-C, a stream closed early)."""
    if isinstance(error, PplxError):
        return "failed", error.code, redact(error.message)
    if isinstance(error, Exception):
        return "failed", PplxError.code, redact(f"{type(error).__name__}: {error}")
    return "interrupted", None, None
