"""Running a turn on the spot: ask or stream, report progress, store the answer, count it.

A failure gives up the question's ticket; a new conversation whose first question failed at no
cost is removed, one that may have been billed is kept so that the question can be retried.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING

from pplx_nb._errors import (
    FilesystemError,
    InvalidInput,
    PplxError,
    RemoteRunFailed,
    RunRequiresAction,
    SubmissionUnknown,
)
from pplx_nb._logging import get_logger
from pplx_nb._metrics import Metrics
from pplx_nb._models import Answer, Progress
from pplx_nb.research._answers import assistant_message, priced
from pplx_nb.research._clients import ClientPool
from pplx_nb.research._guard import AnswerGuard, Ticket
from pplx_nb.research._kept import KeptAnswers
from pplx_nb.research._progress import COMPLETED, ProgressCallback, Tracker, activity_step
from pplx_nb.research._turns import Turn

if TYPE_CHECKING:
    from pplx_nb.api import Activity, AsyncClient, Request
    from pplx_nb.store import ConversationStore

__all__ = ["TurnRunner", "last", "submission_unknown", "unknown_for"]

logger = get_logger("pplx_nb.research")

_NOT_FOUND = 404
UNSEARCHED = (
    "No web search was made for this answer: it is the model's own knowledge, without sources. "
    "Ask again to have it searched."
)
"""The note on a search answer whose run did not search, though it was told to."""


class TurnRunner:
    """Asks the API for a turn's answer and stores it after its question.

    Args:
        store: where answers are stored (and their paths come from).
        guard: stores questions and answers in order.
        clients: the client of the running loop.
        metrics: counts every request, refused or answered.
        kept: where a paid answer the store cannot take is kept until it can.
    """

    def __init__(
        self,
        store: ConversationStore,
        guard: AnswerGuard,
        clients: ClientPool,
        metrics: Metrics,
        kept: KeptAnswers,
    ) -> None:
        self._store = store
        self._guard = guard
        self._clients = clients
        self._metrics = metrics
        self._kept = kept

    @contextlib.contextmanager
    def counted(self) -> Iterator[None]:
        """Count a request refused before it is asked (bad input, unknown conversation)."""
        started = time.perf_counter()
        try:
            yield
        except Exception:
            self.record(started, None, ok=False)
            raise

    def record(self, started: float, answer: Answer | None, *, ok: bool) -> None:
        """Count one request that began at ``started`` (``time.perf_counter``)."""
        tokens = answer.usage.total_tokens if answer and answer.usage else 0
        cost = answer.cost.total_cost if answer and answer.cost else 0.0
        cached = bool(answer and answer.cached)
        self._metrics.record(
            time.perf_counter() - started,
            ok=ok,
            cached=cached,
            api_calls=0 if cached or not ok else 1,
            tokens=tokens,
            cost=0.0 if cached else cost,
        )

    async def run(
        self,
        turn: Turn,
        ticket: Ticket | None = None,
        *,
        stream: bool,
        on_progress: ProgressCallback | None = None,
        on_activity: ProgressCallback | None = None,
    ) -> AsyncGenerator[str | Answer, None]:
        """Text deltas (when ``stream``), then the stored :class:`Answer`.

        Without a ``ticket`` the turn opens a new conversation first: its question is stored
        before the answer is bought, so a store that cannot be written fails at no cost.
        ``on_progress`` follows every step (with a heartbeat); ``on_activity`` only what the
        run itself reports doing (searching, reading, writing: Agent API streams).
        """
        report = "research" in turn.tool
        tracker = Tracker(on_progress, report=report) if on_progress else None
        told = _told(tracker, on_activity, report=report)
        try:
            if ticket is None:
                ticket = self._guard.ask(turn.user, turn.model, seed=turn.seed)
                turn.conversation_id = ticket.conversation_id
            # Inside the try: a turn whose request cannot even be built still gives up its ticket.
            client = self._clients.current()
            request = turn.request()
            with tracker.ticking() if tracker else contextlib.nullcontext():
                if stream:
                    answer = None
                    # Closed explicitly: left to the garbage collector, a stream abandoned
                    # mid-way closes its HTTP response outside any event loop.
                    # A paid run's id goes into the question's mark as soon as the API names it:
                    # killed while waiting, this process leaves it for whoever closes the
                    # question.
                    source = (
                        _collected(client, turn, request, ticket, told)
                        if turn.remote_id is not None
                        else client.stream(
                            request,
                            on_activity=told,
                            on_run=ticket.note_run if _paid(turn) else None,
                        )
                    )
                    async with contextlib.aclosing(_watched(source, ticket, tracker)) as items:
                        async for item in items:
                            if isinstance(item, str):
                                yield item
                            else:
                                answer = item
                    if answer is None:
                        raise PplxError("The answer stream ended without a final answer; retry.")
                else:
                    answer = await client.ask(request)
        except BaseException as exc:
            replacement = self._failed(turn, ticket, exc)
            if replacement is not None:
                raise replacement from exc
            raise
        yield self._store_answer(turn, ticket, answer, tracker)

    def _store_answer(
        self, turn: Turn, ticket: Ticket, answer: Answer, tracker: Tracker | None
    ) -> Answer:
        """Store the paid ``answer`` (the ticket given up whatever happens), then say so."""
        try:
            completed = self._complete(turn, ticket, answer)
        finally:
            ticket.abandon()
        # After storing: a progress callback that raises must not cost the paid answer.
        if tracker:
            tracker.update(COMPLETED)
        return completed

    def _failed(
        self, turn: Turn, ticket: Ticket | None, error: BaseException
    ) -> BaseException | None:
        """Give the question up after ``error``; what to raise instead of it, if anything."""
        self.record(turn.started, None, ok=False)
        if ticket is not None:
            ticket.abandon(error, discard=not _may_be_billed(turn, error))
        if isinstance(error, SubmissionUnknown) and turn.conversation_id is not None:
            return unknown_for(error, turn.conversation_id)
        return None

    def _complete(self, turn: Turn, ticket: Ticket, answer: Answer) -> Answer:
        priced(answer, turn.model)
        notes = [*turn.notes, *([UNSEARCHED] if turn.grounded and answer.searched is False else [])]
        message = assistant_message(
            answer,
            tool=turn.tool,
            model=turn.model,
            notes=notes,
            show_thinking=turn.show_thinking,
        )
        try:
            conversation_id = ticket.answer(message).conversation_id
        except FilesystemError as exc:
            self.record(turn.started, answer, ok=False)
            cid = ticket.conversation_id
            token = ticket.token
            raise self._kept.keep(exc, cid, turn.user, message, answer, token=token) from exc
        answer.conversation_id = conversation_id
        answer.conversation_path = self._store.conversation_location(conversation_id)
        answer.reformulated_query = turn.user.reformulated_query
        answer.notes = notes
        if not turn.show_thinking:
            answer.thinking = None
        self.record(turn.started, answer, ok=True)
        return answer


def _told(
    tracker: Tracker | None, on_activity: ProgressCallback | None, *, report: bool
) -> Callable[[Activity], None] | None:
    """What to tell of a run's activity: the tracker, and ``on_activity`` in progress terms."""
    if tracker is None and on_activity is None:
        return None

    def told(activity: Activity) -> None:
        if tracker is not None:
            tracker.activity(activity)
        if on_activity is not None:
            percentage, message = activity_step(activity, report=report)
            on_activity(Progress(percentage=percentage, message=message, attempt=1))

    return told


async def _collected(
    client: AsyncClient,
    turn: Turn,
    request: Request,
    ticket: Ticket,
    told: Callable[[Activity], None] | None,
) -> AsyncGenerator[str | Answer, None]:
    """The report of the run already started for ``turn``'s question, read by its id; only
    when the API no longer has that run, or it failed, is the question asked again (and paid
    for) as a new run."""
    assert turn.remote_id is not None
    ticket.note_run(turn.remote_id)
    try:
        read = client.read_run(turn.remote_id, request, on_activity=told)
        async with contextlib.aclosing(read) as answers:
            async for answer in answers:
                yield answer
        return
    except InvalidInput as error:
        if error.status_code != _NOT_FOUND:
            raise
        why = "the API no longer has it"
    except RemoteRunFailed as error:
        why = f"it ended without a report ({error.message})"
    logger.warning(
        "Run %s of %s cannot be collected (%s); asking again as a new run",
        turn.remote_id,
        turn.conversation_id,
        why,
    )
    ticket.remote_id = None
    again = client.stream(request, on_activity=told, on_run=ticket.note_run)
    async with contextlib.aclosing(again) as items:
        async for item in items:
            yield item


async def _watched(
    items: AsyncGenerator[str | Answer, None], ticket: Ticket, tracker: Tracker | None
) -> AsyncGenerator[str | Answer, None]:
    """``items`` passed on, reporting the text's growth and keeping the ticket live."""
    chars = 0
    async with contextlib.aclosing(items):
        async for item in items:
            if isinstance(item, str):
                chars += len(item)
                if tracker:
                    tracker.text_grew(chars)
                ticket.renew()
            yield item


async def last(items: AsyncIterator[str | Answer]) -> Answer:
    """The Answer that ends ``items`` (the deltas before it are dropped)."""
    answer: Answer | None = None
    async for item in items:
        if isinstance(item, Answer):
            answer = item
    assert answer is not None
    return answer


def unknown_for(error: SubmissionUnknown, conversation_id: str) -> SubmissionUnknown:
    """``error`` again, its advice naming the conversation to resubmit."""
    if error.details.get("conversation_id") == conversation_id:
        return error
    what = str(error.details.get("what") or "The request")
    cause = str(error.details.get("cause") or "reply lost")
    return submission_unknown(what, cause, conversation_id, remote_id=error.request_id)


def submission_unknown(
    what: str, cause: str, conversation_id: str, *, remote_id: str | None = None
) -> SubmissionUnknown:
    """SUBMISSION_UNKNOWN for ``what``, sent for ``conversation_id`` and its reply lost."""
    from pplx_nb.api import submission_unknown as unknown

    return unknown(what, cause, conversation_id, remote_id=remote_id)


def _may_be_billed(turn: Turn, error: BaseException) -> bool:
    """Whether a failed turn may have cost something, so its question stays to retry."""
    if isinstance(error, SubmissionUnknown | RunRequiresAction):
        return True
    # Interrupted mid-answer (cancelled, Ctrl-C): a paid run may be under way.
    return _paid(turn) and not isinstance(error, Exception)


def _paid(turn: Turn) -> bool:
    """Whether the turn buys a deep research (stored, so its run can be read back by id)."""
    from pplx_nb.api.request import is_deep_research

    return is_deep_research(turn.model)
