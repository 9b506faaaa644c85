"""Researcher: the one façade over the API client, the store, the job queue and context.

Notebook magics and MCP tools are thin adapters over this class; it is the only place where a
question becomes an API request and an answer becomes stored turns. Async methods are the core; each
has a sync twin that runs on one background event-loop thread, so it also works inside a running
Jupyter kernel.

    r = Researcher()
    answer = r.search("How do I cancel an asyncio task?")
    more = r.followup(answer.conversation_id, "and wait for it to finish?")
    job = r.deep_research("Compare asyncio, trio and curio", wait=False)
    report = r.wait(job.conversation_id)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import os
import threading
import time
import weakref
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Callable,
    Generator,
    Iterator,
    Sequence,
)
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn

from pydantic.alias_generators import to_camel, to_snake

from pplx_nb import __version__
from pplx_nb._config import Settings
from pplx_nb._errors import (
    APIError,
    APITimeoutError,
    InvalidInput,
    NetworkError,
    PplxError,
    RunTimedOut,
    SubmissionUnknown,
    ValidationError,
    error_from_code,
    not_unicode,
)
from pplx_nb._logging import get_logger
from pplx_nb._metrics import Metrics
from pplx_nb._models import (
    Answer,
    Conversation,
    ConversationSummary,
    JobState,
    JobStatus,
    Message,
    Progress,
    now_iso,
)
from pplx_nb._options import SEARCH_OPTIONS, check_options
from pplx_nb._pricing import estimate_cost

if TYPE_CHECKING:
    from pplx_nb.api import AsyncClient, Request, ResponseCache
    from pplx_nb.jobs import Job, JobContext, JobQueue, Worker
    from pplx_nb.store import ConversationStore

__all__ = [
    "DEEP_RESEARCH_MODEL",
    "MAX_QUERY_CHARS",
    "SEARCH_OPTIONS",
    "SYSTEM_PROMPT",
    "Mode",
    "Researcher",
]

logger = get_logger("pplx_nb.research")

Mode = Literal["search", "research"]
ProgressCallback = Callable[[Progress], object]

SYSTEM_PROMPT = (
    "You are an advanced research assistant. Answer accurately and concisely, ground every claim "
    "in your search results and cite them with [n] markers. When the conversation continues, use "
    "its earlier turns as context."
)
DEEP_RESEARCH_MODEL = "sonar-deep-research"
MAX_QUERY_CHARS = 32_000
_REQUEST_FIELDS = SEARCH_OPTIONS - {"model", "show_thinking"}
_TOOLS = {
    ("search", False): "perplexity_search",
    ("research", False): "perplexity_deep_research",
    ("search", True): "perplexity_search_followup",
    ("research", True): "perplexity_deep_research_followup",
}
_PROGRESS_EVERY = 5.0
_UNCLAIMED_GRACE = 1.0
"""How long :meth:`Researcher.await_job` lets another worker claim a pending job first."""
_RENEW_SECONDS = 60.0
"""How often a streaming answer pushes its ``.answering`` marker's deadline ahead."""


@dataclass
class _Turn:
    """One question on its way to the API, and what to store once it is answered."""

    conversation_id: str | None
    messages: list[dict[str, str]]
    user: Message
    tool: str
    model: str
    opts: dict[str, Any]
    seed: list[Message] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    answering: str | None = None
    """The token of the conversation's ``.answering`` marker while the answer is on its way."""

    @property
    def show_thinking(self) -> bool:
        return bool(self.opts.get("show_thinking"))


class _ProgressTracker:
    """Turns a growing answer into the seed's progress steps and reports them at least every 5 s."""

    def __init__(self, callback: ProgressCallback | None) -> None:
        self._callback = callback
        self._started = time.monotonic()
        self.current = Progress(percentage=25, message="Querying Perplexity API...", attempt=1)

    def update(self, percentage: int, message: str) -> None:
        elapsed = int((time.monotonic() - self._started) * 1000)
        self.current = Progress(
            percentage=percentage, message=message, elapsed_ms=elapsed, attempt=1
        )
        self.emit()

    def emit(self) -> None:
        if self._callback is not None:
            self.current.elapsed_ms = int((time.monotonic() - self._started) * 1000)
            self._callback(self.current)

    def text_grew(self, chars: int) -> None:
        if self.current.percentage < 50:
            self.update(50, "Processing response...")
        elif chars > 0:
            pct = 75 + min(20, int(20 * (1 - math.exp(-chars / 4000))))
            if pct != self.current.percentage:
                self.update(pct, "Finalizing research report...")

    async def ticker(self) -> None:
        while True:
            await asyncio.sleep(_PROGRESS_EVERY)
            self.emit()


class Researcher:
    """Ask, research, follow up and look back: the façade shared by notebooks and the MCP server.

    Args:
        settings: configuration (default: read from the environment).
        store: the conversation store (default: one over ``settings.conversation_logs_dir``).
        client: an API client to use for every call (default: one per event loop, sharing a cache).
        async_deep_research: queue deep research as background jobs (default: the
            PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH setting, else False).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        store: ConversationStore | None = None,
        client: AsyncClient | None = None,
        async_deep_research: bool | None = None,
    ) -> None:
        from pplx_nb.store import ConversationStore

        self._settings = settings or Settings.from_env()
        self._store = store or ConversationStore(settings=self._settings)
        self._fixed_client = client
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncClient] = (
            weakref.WeakKeyDictionary()
        )
        self._cache: Any = None
        self._lock = threading.RLock()
        self._queue: JobQueue | None = None
        self._worker: Worker | None = None
        self._metrics = Metrics()
        if async_deep_research is None:
            async_deep_research = bool(self._settings.enable_async_deep_research)
        self._async = async_deep_research

    def __repr__(self) -> str:
        return (
            f"Researcher(store={str(self._store.root)!r}, async_deep_research={self._async}, "
            f"offline={self._settings.is_offline})"
        )

    # -- properties -------------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        """The settings in use."""
        return self._settings

    @property
    def store(self) -> ConversationStore:
        """The conversation store every exchange lands in."""
        return self._store

    @property
    def async_deep_research(self) -> bool:
        """Whether deep research is queued as a background job by default."""
        return self._async

    @property
    def queue(self) -> JobQueue:
        """The job queue over the store's directory."""
        if self._queue is None:
            from pplx_nb.jobs import JobQueue

            with self._lock:
                if self._queue is None:
                    self._queue = JobQueue(
                        self._store.root,
                        max_job_retries=self._settings.max_job_retries,
                        lease_seconds=self._settings.job_lease_seconds,
                    )
        return self._queue

    # -- the client, one per event loop -------------------------------------------------------

    def _new_client(self) -> AsyncClient:
        from pplx_nb.api import AsyncClient, ResponseCache

        with self._lock:
            if self._cache is None:
                self._cache = ResponseCache(
                    ttl=self._settings.cache_ttl, max_size=self._settings.cache_max_size
                )
        return AsyncClient(self._settings, cache=self._cache)

    def _client(self) -> AsyncClient:
        """The client of the running event loop (connections are bound to their loop)."""
        if self._fixed_client is not None:
            return self._fixed_client
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients.setdefault(loop, self._new_client())
        return client

    # -- building turns -------------------------------------------------------------------------

    @staticmethod
    def _check_query(query: object) -> tuple[str, list[str]]:
        """The query to send and store (key-shaped text replaced by ``***``), and notes."""
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("The query is empty: ask a question in words.")
        if len(query) > MAX_QUERY_CHARS:
            raise ValidationError(
                f"The query is {len(query):,} characters; the limit is {MAX_QUERY_CHARS:,}. "
                "Shorten it, or attach long material as a file."
            )
        try:
            query.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise not_unicode("The query", exc.start) from None
        from pplx_nb import context

        return context.scrub_secrets(query.strip(), "Your question")

    def _model(self, mode: Mode, opts: dict[str, Any]) -> str:
        model = opts.get("model")
        if model:
            return str(model)
        return DEEP_RESEARCH_MODEL if mode == "research" else self._settings.model

    def _build_request(
        self, messages: list[dict[str, str]], model: str, opts: dict[str, Any]
    ) -> Request:
        from pplx_nb.api import Request

        fields = {key: value for key, value in opts.items() if key in _REQUEST_FIELDS}
        return Request(messages=messages, model=model, **fields)

    attach_from_working_directory: bool = True
    """Whether files may come from the working directory as well as PPLX_NB_FILE_ROOTS.

    Turn it off where the process may run from ``/`` (an MCP server): then only the configured
    roots count.
    """

    def _attach(
        self, query: str, files: Sequence[str | Path] | None, history: Sequence[Message]
    ) -> tuple[str, list[dict[str, Any]] | None, list[str]]:
        """The question with new files embedded, the file records to store, and notes."""
        if not files:
            return query, None, []
        from pplx_nb import context

        prepared = context.prepare_files(
            files,
            history,
            roots=self._settings.file_roots,
            working_directory=self.attach_from_working_directory,
        )
        content = f"{query}\n\n{prepared.text}" if prepared.text else query
        return content, list(prepared.records) or None, list(prepared.notes)

    @contextlib.contextmanager
    def _counted(self) -> Iterator[None]:
        """Count a request refused while its turn is built (bad input, unknown conversation)."""
        started = time.perf_counter()
        try:
            yield
        except Exception:
            self._record(started, None, ok=False)
            raise

    def _new_turn(
        self, query: str, mode: Mode, files: Sequence[str | Path] | None, opts: dict[str, Any]
    ) -> _Turn:
        with self._counted():
            return self._build_new_turn(query, mode, files, opts)

    def _build_new_turn(
        self, query: str, mode: Mode, files: Sequence[str | Path] | None, opts: dict[str, Any]
    ) -> _Turn:
        query, told = self._check_query(query)
        opts = check_options(opts)
        model = self._model(mode, opts)
        content, records, notes = self._attach(query, files, [])
        notes = [*told, *notes]
        system = Message(role="system", content=SYSTEM_PROMPT, timestamp=now_iso())
        user = Message(role="user", content=content, timestamp=now_iso(), files=records)
        messages = _fitted_messages([system, user], model, notes)
        tool = _TOOLS[mode, False]
        return _Turn(None, messages, user, tool, model, opts, seed=[system], notes=notes)

    async def _followup_turn(
        self,
        conversation_id: str,
        query: str,
        mode: Mode,
        fork: bool,
        files: Sequence[str | Path] | None,
        opts: dict[str, Any],
    ) -> _Turn:
        with self._counted():
            return await self._build_followup_turn(conversation_id, query, mode, fork, files, opts)

    async def _build_followup_turn(
        self,
        conversation_id: str,
        query: str,
        mode: Mode,
        fork: bool,
        files: Sequence[str | Path] | None,
        opts: dict[str, Any],
    ) -> _Turn:
        from pplx_nb import context

        query, told = self._check_query(query)
        opts = check_options(opts)
        self._refuse_if_running(conversation_id)
        # A fork starts as a copy of this history; it is made last, so a refused turn leaves none.
        history = context.chain_messages(self._store, conversation_id)
        model = self._model(mode, opts)
        # A file counts as already embedded only if its turn survives the context budget.
        question = Message(role="user", content=query)
        visible = context.fit_history([*history, question], model).messages[:-1]
        content, records, notes = self._attach(query, files, visible)
        notes = [*told, *notes]

        search_query = query
        reformulated: str | None = None
        if context.is_follow_up(query, history):
            use_model = not self._settings.is_offline
            if use_model:
                # Rewriting the question is a paid call: fail first if its turn cannot be stored.
                self._store.check_writable(conversation_id)
            client = self._client() if use_model else None
            candidate = await context.areformulate(query, history, client, use_model=use_model)
            if candidate and candidate.strip() != query:
                reformulated = search_query = candidate.strip()

        user = Message(
            role="user",
            content=content,
            timestamp=now_iso(),
            files=records,
            reformulated_query=reformulated,
        )
        sent = content.replace(query, search_query, 1) if reformulated else content
        messages = _fitted_messages([*history, user], model, notes)
        messages[-1] = {"role": "user", "content": sent}
        if fork:
            conversation_id = self._store.fork(conversation_id).conversation_id
        return _Turn(conversation_id, messages, user, _TOOLS[mode, True], model, opts, notes=notes)

    def _refuse_if_running(self, conversation_id: str) -> None:
        """Fail fast, before any API call; :meth:`_ask` checks again when it stores the question."""
        self.queue.check_idle(conversation_id)

    def _ask(self, turn: _Turn, *, queued: bool = False) -> JobStatus | None:
        """Store a follow-up's question, refused while a job runs or another answer is due.

        ``queued`` also queues its job; otherwise the question is marked as being answered
        (``turn.answering``) until :meth:`_complete` stores the answer or :meth:`_run` fails.
        The check, the append and the enqueue or mark happen under the conversation lock, so
        two follow-ups racing on one conversation cannot both get through, and an answer
        always lands right after its question.
        """
        conversation_id = turn.conversation_id
        assert conversation_id is not None
        queued_as: list[JobStatus] = []

        def enqueue() -> None:
            request = _job_request(turn)
            queued_as.append(
                self.queue.enqueue(conversation_id, turn.tool, request, lock_held=True)
            )

        def mark() -> None:
            turn.answering = self.queue.mark_answering(conversation_id, self._answer_deadline(turn))

        with self._counted():
            self._store.append(
                conversation_id,
                turn.user,
                check=lambda _: self.queue.check_idle(conversation_id),
                then=enqueue if queued else mark,
            )
        return queued_as[0] if queued_as else None

    def _answer_deadline(self, turn: _Turn) -> float:
        """The longest an answer can take: every attempt's timeout plus a minute of back-off."""
        from pplx_nb.api.request import is_deep_research

        settings = self._settings
        timeout_ms = settings.deep_research_timeout_ms if is_deep_research(turn.model) else 0
        per_attempt = max(timeout_ms, settings.timeout_ms) / 1000 + 60
        return per_attempt * (settings.max_retries + 1)

    def _renew_answering(self, turn: _Turn) -> None:
        """Keep a long streaming answer's ``.answering`` marker live for another deadline."""
        if turn.answering is not None and turn.conversation_id is not None:
            with contextlib.suppress(PplxError):
                self.queue.renew_answering(
                    turn.conversation_id, turn.answering, self._answer_deadline(turn)
                )

    def _stop_answering(self, turn: _Turn) -> None:
        """Remove the turn's ``.answering`` marker if it still has one (the answer failed)."""
        token, turn.answering = turn.answering, None
        if token is not None and turn.conversation_id is not None:
            with contextlib.suppress(PplxError):
                self.queue.clear_answering(turn.conversation_id, token)

    # -- running turns --------------------------------------------------------------------------

    def _assistant_message(self, turn: _Turn, answer: Answer, **extra: Any) -> Message:
        return Message(
            role="assistant",
            content=answer.text,
            timestamp=now_iso(),
            tool=turn.tool,
            model=answer.model or turn.model,
            sources=answer.sources or None,
            usage=answer.usage,
            cost=answer.cost,
            related_questions=answer.related_questions or None,
            thinking=answer.thinking if turn.show_thinking else None,
            images=[_rekeyed(image, to_camel) for image in answer.images] or None,
            notes=list(turn.notes) or None,
            **extra,
        )

    def _complete(self, turn: _Turn, answer: Answer) -> Answer:
        if answer.cost is None:
            answer.cost = estimate_cost(answer.model or turn.model, answer.usage)
        assistant = self._assistant_message(turn, answer)
        conversation_id, token = turn.conversation_id, turn.answering
        assert conversation_id is not None, "the question is stored before it is asked"
        # The answer and the end of its .answering marker land in one locked step.
        conversation = self._store.append(
            conversation_id,
            assistant,
            then=None
            if token is None
            else lambda: self.queue.clear_answering(conversation_id, token, lock_held=True),
        )
        turn.answering = None
        answer.conversation_id = conversation.conversation_id
        answer.conversation_path = str(self._store.path(conversation.conversation_id))
        answer.reformulated_query = turn.user.reformulated_query
        answer.notes = list(turn.notes)
        if not turn.show_thinking:
            answer.thinking = None
        self._record(turn.started, answer, ok=True)
        return answer

    def _record(self, started: float, answer: Answer | None, *, ok: bool) -> None:
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

    async def _run(
        self, turn: _Turn, *, stream: bool, on_progress: ProgressCallback | None = None
    ) -> AsyncGenerator[str | Answer, None]:
        tracker = _ProgressTracker(on_progress) if on_progress else None
        ticker: asyncio.Future[None] | None = None
        opened = False
        try:
            if turn.conversation_id is None:
                # The question is stored before the answer is bought: a store that cannot be
                # written fails here, at no cost.
                opened = True
                self._open(turn)
            # Inside the try: a turn whose request cannot even be built must still give up
            # its .answering marker.
            client = self._client()
            request = self._build_request(turn.messages, turn.model, turn.opts)
            if tracker:
                ticker = asyncio.ensure_future(tracker.ticker())
                tracker.emit()
            if not stream:
                answer = await client.ask(request)
            else:
                answer = None
                chars = 0
                # Closed explicitly: left to the garbage collector, a stream abandoned mid-way
                # closes its HTTP response outside any event loop.
                renewed = time.monotonic()
                async with contextlib.aclosing(client.stream(request)) as items:
                    async for item in items:
                        if isinstance(item, str):
                            chars += len(item)
                            if tracker:
                                tracker.text_grew(chars)
                            if time.monotonic() - renewed > _RENEW_SECONDS:
                                renewed = time.monotonic()
                                self._renew_answering(turn)
                            yield item
                        else:
                            answer = item
                if answer is None:
                    raise PplxError("The answer stream ended without a final answer; retry.")
        except BaseException as exc:
            self._record(turn.started, None, ok=False)
            self._stop_answering(turn)
            if isinstance(exc, SubmissionUnknown) and turn.conversation_id is not None:
                raise _unknown_for(exc, turn.conversation_id) from exc
            if opened and not _may_be_billed(turn, exc):
                self._discard(turn)
            raise
        finally:
            if ticker:
                ticker.cancel()
        assert answer is not None
        try:
            completed = self._complete(turn, answer)
        finally:
            self._stop_answering(turn)
        # After storing: a progress callback that raises must not cost the paid answer.
        if tracker:
            tracker.update(100, "Completed")
        yield completed

    def _open(self, turn: _Turn) -> None:
        """Store a new conversation's question, marked as being answered (see :meth:`_ask`)."""
        conversation = self._store.create([*turn.seed, turn.user])
        turn.conversation_id = conversation.conversation_id
        turn.answering = self.queue.mark_answering(
            turn.conversation_id, self._answer_deadline(turn), lock_held=False
        )

    def _discard(self, turn: _Turn) -> None:
        """Remove a new conversation whose first question failed at no cost (nothing to retry)."""
        if turn.conversation_id is not None:
            with contextlib.suppress(PplxError):
                self._store.delete(turn.conversation_id)

    @staticmethod
    async def _last(items: AsyncIterator[str | Answer]) -> Answer:
        answer: Answer | None = None
        async for item in items:
            if isinstance(item, Answer):
                answer = item
        assert answer is not None
        return answer

    # -- async core -----------------------------------------------------------------------------

    async def asearch(
        self, query: str, *, files: Sequence[str | Path] | None = None, **opts: Any
    ) -> Answer:
        """Ask a question with web search; starts and stores a NEW conversation."""
        turn = self._new_turn(query, "search", files, opts)
        return await self._last(self._run(turn, stream=False))

    async def astream_search(
        self, query: str, *, files: Sequence[str | Path] | None = None, **opts: Any
    ) -> AsyncGenerator[str | Answer, None]:
        """Like :meth:`asearch`, yielding text deltas as they arrive, then the stored Answer."""
        turn = self._new_turn(query, "search", files, opts)
        async with contextlib.aclosing(self._run(turn, stream=True)) as items:
            async for item in items:
                yield item

    async def adeep_research(
        self,
        query: str,
        *,
        wait: bool | None = None,
        files: Sequence[str | Path] | None = None,
        on_progress: ProgressCallback | None = None,
        **opts: Any,
    ) -> Answer | JobStatus:
        """Exhaustive research on a NEW conversation.

        Queued as a background job (returns its :class:`JobStatus` at once) when ``wait`` is False,
        or when it is None and async deep research is on; otherwise blocks, reporting progress.
        """
        turn = self._new_turn(query, "research", files, opts)
        if self._queued(wait):
            return self._enqueue(turn)
        return await self._last(self._run(turn, stream=True, on_progress=on_progress))

    async def afollowup(
        self,
        conversation_id: str,
        query: str,
        *,
        mode: Mode = "search",
        fork: bool = False,
        wait: bool | None = None,
        files: Sequence[str | Path] | None = None,
        on_progress: ProgressCallback | None = None,
        **opts: Any,
    ) -> Answer | JobStatus:
        """Continue a conversation in either mode, with its whole history as context.

        Raises JobInProgress while the conversation's job is pending or running. ``fork`` continues
        in a new child conversation and leaves the original as it was.
        """
        if mode not in ("search", "research"):
            raise ValidationError(f"Unknown mode {mode!r}: use 'search' or 'research'.")
        turn = await self._followup_turn(conversation_id, query, mode, fork, files, opts)
        if mode == "research" and self._queued(wait):
            return self._enqueue(turn)
        self._ask(turn)
        stream = mode == "research"
        return await self._last(self._run(turn, stream=stream, on_progress=on_progress))

    async def aretry(
        self,
        conversation_id: str,
        *,
        wait: bool | None = None,
        on_progress: ProgressCallback | None = None,
        **opts: Any,
    ) -> Answer | JobStatus:
        """Ask a conversation's unanswered last question again as deep research, deliberately.

        For a deep research that ended with SUBMISSION_UNKNOWN (its run may have been billed:
        check your Perplexity usage first), TIMEOUT_ERROR or another failure. This pays for a
        new run. The earlier job's model and options are reused unless ``opts`` override them;
        queued or waited for as ``wait`` and the async setting say, like :meth:`adeep_research`.

        Raises JobInProgress while a job or answer of the conversation is under way, and
        ValidationError when its last question already has an answer.
        """
        from pplx_nb import context
        from pplx_nb._fs import validate_conversation_id

        with self._counted():
            self._refuse_if_running(validate_conversation_id(conversation_id))
            conversation = self._store.load(conversation_id)
            question = conversation.messages[-1] if conversation.messages else None
            if question is None or question.role != "user":
                raise ValidationError(
                    f"Conversation {conversation_id} has no unanswered question to retry: its "
                    "last question has an answer. Ask again with a follow-up."
                )
            status = self.queue.status(conversation_id)
            earlier = dict((status.model_extra or {}).get("request") or {}) if status else {}
            opts = check_options({**dict(earlier.get("opts") or {}), **opts})
            model = str(opts.get("model") or earlier.get("model") or DEEP_RESEARCH_MODEL)
            notes = [str(note) for note in earlier.get("notes") or []]
            messages = _fitted_messages(
                context.chain_messages(self._store, conversation_id), model, notes
            )
            if earlier.get("searchQuery"):
                messages[-1] = {"role": "user", "content": str(earlier["searchQuery"])}
            asked = sum(1 for m in conversation.messages if m.role == "user")
            tool = status.tool_name if status else _TOOLS["research", asked > 1]
            turn = _Turn(conversation_id, messages, question, tool, model, opts, notes=notes)
        logger.info("Resubmitting the question of %s deliberately", conversation_id)
        if self._queued(wait):
            with self._counted():
                queued = self.queue.enqueue(conversation_id, tool, _job_request(turn))
            if self._async and self._worker is None:
                self.start_worker()
            self._record(turn.started, None, ok=True)
            return queued
        with self._counted():
            turn.answering = self.queue.mark_answering(
                conversation_id, self._answer_deadline(turn), lock_held=False
            )
        return await self._last(self._run(turn, stream=True, on_progress=on_progress))

    async def astream_followup(
        self,
        conversation_id: str,
        query: str,
        *,
        fork: bool = False,
        files: Sequence[str | Path] | None = None,
        **opts: Any,
    ) -> AsyncGenerator[str | Answer, None]:
        """Like :meth:`afollowup` in search mode, yielding text deltas, then the stored Answer."""
        turn = await self._followup_turn(conversation_id, query, "search", fork, files, opts)
        self._ask(turn)
        # A consumer that stops early closes this generator, not _run: aclosing closes _run too,
        # so the question's .answering marker goes at once rather than at garbage collection.
        async with contextlib.aclosing(self._run(turn, stream=True)) as items:
            async for item in items:
                yield item

    async def await_job(
        self,
        conversation_id: str,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Answer:
        """Wait until the conversation's job ends; return its answer or raise its error.

        A job still pending after a second with no worker of this Researcher running (a plain
        script: ``deep_research(wait=False)`` then ``wait()``), or running on a worker that
        stopped heartbeating, starts the in-process worker, so the wait never depends on a
        worker that may not exist.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        unclaimed_until = time.monotonic() + _UNCLAIMED_GRACE
        last_progress: tuple[int, str] | None = None
        while True:
            status = self.queue.status(conversation_id)
            if status is None:
                return self._stored_answer(self._store.load(conversation_id))
            if status.done:
                return self._finished(status)
            if self._worker is None and (
                self._async or (time.monotonic() > unclaimed_until and self._unserved(status))
            ):
                if not self._async:
                    logger.info(
                        "No worker has claimed the job of %s; running it in this process",
                        conversation_id,
                    )
                self.start_worker()
            if on_progress and status.progress is not None:
                key = (status.progress.percentage, status.progress.message)
                if key != last_progress:
                    last_progress = key
                    on_progress(status.progress)
            if deadline is not None and time.monotonic() > deadline:
                raise APITimeoutError(
                    f"The job of conversation {conversation_id} is still {status.status} after "
                    f"{timeout:.0f} s. It goes on in the background: wait again, or check "
                    "`get_conversation_history` later.",
                    conversation_id=conversation_id,
                )
            await asyncio.sleep(0.1)

    def _unserved(self, status: JobStatus) -> bool:
        """Whether no live worker holds ``status``'s job: pending, or its lease has lapsed."""
        if status.status == "pending":
            return True
        beat = status.heartbeat_at or status.updated_at
        try:
            age = time.time() - datetime.fromisoformat(beat).timestamp()
        except ValueError:
            return True
        return age > self.queue.lease_seconds

    def _finished(self, status: JobStatus) -> Answer:
        if status.status == "completed":
            return self._stored_answer(self._store.load(status.conversation_id))
        if status.error is not None:
            raise error_from_code(status.error.code, status.error.message)
        raise PplxError(
            f"The job of conversation {status.conversation_id} was {status.status}. "
            "Start it again with a follow-up in research mode."
        )

    def _stored_answer(self, conversation: Conversation) -> Answer:
        message = conversation.last_answer()
        if message is None:
            raise PplxError(
                f"Conversation {conversation.conversation_id} has no answer yet. "
                "Follow up to ask again."
            )
        return Answer(
            text=message.content,
            sources=message.sources or [],
            related_questions=message.related_questions or [],
            images=[_rekeyed(image, to_snake) for image in message.images or ()],
            thinking=message.thinking,
            model=message.model,
            usage=message.usage,
            cost=message.cost,
            conversation_id=conversation.conversation_id,
            conversation_path=str(self._store.path(conversation.conversation_id)),
            reformulated_query=_previous_user(conversation, message),
            notes=list(message.notes or ()),
        )

    # -- jobs -----------------------------------------------------------------------------------

    def _queued(self, wait: bool | None) -> bool:
        return not wait if wait is not None else self._async

    def _enqueue(self, turn: _Turn) -> JobStatus:
        if turn.conversation_id is None:
            conversation = self._store.create([*turn.seed, turn.user])
            turn.conversation_id = conversation.conversation_id
            try:
                status = self.queue.enqueue(turn.conversation_id, turn.tool, _job_request(turn))
            except BaseException:
                # All or nothing: a question without its job would wait for an answer forever.
                self._discard(turn)
                raise
        else:
            queued = self._ask(turn, queued=True)
            assert queued is not None
            status = queued
        if self._async and self._worker is None:
            self.start_worker()
        self._record(turn.started, None, ok=True)
        return status

    async def execute_job(self, job: Job, ctx: JobContext) -> None:
        """Run one queued research job (the Worker's runner): submit, poll, store the report once.

        The API's background mode is used, with the remote id recorded first, so a job recovered
        after a crash resumes polling instead of paying for the research twice. A job whose answer
        is already in the conversation (crash between storing and completing) is not run again.
        """
        from pplx_nb import context

        conversation = self._store.load(job.conversation_id)
        if any(
            m.model_extra and m.model_extra.get("jobId") == job.job_id
            for m in conversation.messages
        ):
            return
        opts = dict(job.request.get("opts") or {})
        model = str(job.request.get("model") or DEEP_RESEARCH_MODEL)
        history = context.chain_messages(self._store, job.conversation_id)
        messages = _fitted_messages(history, model, job.request.get("notes") or [])
        if messages and messages[-1]["role"] == "user" and job.request.get("searchQuery"):
            messages[-1] = {"role": "user", "content": str(job.request["searchQuery"])}
        request = self._build_request(messages, model, opts)
        started = time.perf_counter()
        # One client per job: nothing stays bound to the worker's loop after it stops.
        async with self._fixed_client or self._new_client() as client:
            remote_id = ctx.remote_id
            if remote_id is None:
                await ctx.report(25, "Querying Perplexity API...")
                remote_id = await self._submit(client, request, ctx)
            answer = await self._poll(client, request, remote_id, ctx)
        turn = _Turn(
            job.conversation_id,
            messages,
            conversation.messages[-1],
            job.tool,
            model,
            opts,
            notes=[str(note) for note in job.request.get("notes") or []],
        )
        if answer.cost is None:
            answer.cost = estimate_cost(answer.model or model, answer.usage)
        assistant = self._assistant_message(turn, answer, jobId=job.job_id)
        self._store.append(job.conversation_id, assistant, check=ctx.check_owner)
        self._record(started, answer, ok=True)

    async def _submit(self, client: AsyncClient, request: Request, ctx: JobContext) -> str:
        """Start the job's background run once, recording its id before anything else.

        Never sent blindly a second time: an earlier attempt that began a submission and never
        learnt its outcome (its worker died while the reply was arriving), or a reply lost now,
        ends the job with SUBMISSION_UNKNOWN.
        """
        from pplx_nb.jobs import LeaseLost

        conversation_id = ctx.job.conversation_id
        if ctx.submission_unfinished:
            from pplx_nb.api import submission_unknown

            raise submission_unknown(
                "The background run request",
                "an earlier attempt stopped while its reply was arriving",
                conversation_id,
            )
        await ctx.begin_submission()
        try:
            remote_id = await client.submit_background(request)
        except SubmissionUnknown as exc:
            raise _unknown_for(exc, conversation_id) from exc
        except PplxError:
            await ctx.end_submission()
            raise
        try:
            await ctx.record_remote_id(remote_id)
        except LeaseLost:
            raise
        except PplxError as exc:
            # The run is paid for: poll it from memory rather than give it up. Should this
            # worker die too, the recorded start makes the next attempt SUBMISSION_UNKNOWN.
            logger.warning(
                "Could not record run %s of %s (%s); polling it anyway",
                remote_id,
                conversation_id,
                exc,
            )
        return remote_id

    async def _poll(
        self, client: AsyncClient, request: Request, remote_id: str, ctx: JobContext
    ) -> Answer:
        from pplx_nb.jobs._estimate import expected_research_seconds, research_progress

        """Poll a background run until it ends, through outages, until its deadline.

        Transient failures (5xx, 429, 408/409, timeouts, broken connections) are waited out
        with backoff; only the run's end, a permanent error or PERPLEXITY_DEEP_RESEARCH_TIMEOUT
        after submission ends the attempt. At the deadline the run is cancelled (best effort).
        """
        loop = asyncio.get_running_loop()
        budget = self._settings.deep_research_timeout_ms / 1000
        submitted = ctx.submitted_at or time.time()
        deadline = loop.time() + (submitted + budget - time.time())
        started = time.monotonic()
        expected = expected_research_seconds(self._settings)
        delay = 0.1
        reported = 25
        outage = 0
        while True:
            if loop.time() >= deadline:
                await self._time_out(client, remote_id, ctx, budget)
            try:
                async with asyncio.timeout_at(deadline):
                    answer = await client.poll_background(
                        remote_id, related=request.return_related_questions
                    )
            except InvalidInput as exc:
                if exc.status_code != 404:
                    raise
                logger.warning("Remote run %s is unknown to the API; starting over", remote_id)
                unknown, remote_id = remote_id, await self._submit(client, request, ctx)
                deadline = loop.time() + budget
                await ctx.note_error(
                    InvalidInput(
                        f"The background run {unknown} is unknown to the API (it expired or was "
                        f"never stored: {exc.message}); it was resubmitted as {remote_id}.",
                        status_code=404,
                    )
                )
                continue
            except APIError as exc:
                if not _transient(exc):
                    raise
                pause = min(client.retry.delay(exc, min(outage, 6)), deadline - loop.time())
                outage += 1
                logger.warning(
                    "Polling run %s failed (%s); trying again in %.1f s (until its deadline)",
                    remote_id,
                    exc.code if exc.status_code is None else f"HTTP {exc.status_code}",
                    max(pause, 0),
                )
                await asyncio.sleep(max(pause, 0))
                continue
            except TimeoutError:
                continue  # the deadline passed mid-poll: cancelled at the top of the loop
            outage = 0
            if answer is not None:
                await ctx.report(95, "Finalizing research report...")
                return answer
            pct, message = research_progress(time.monotonic() - started, expected)
            if pct != reported:
                reported = pct
                await ctx.report(pct, message)
            await asyncio.sleep(min(delay, max(deadline - loop.time(), 0)))
            delay = min(delay * 1.5, 3.0)

    async def _time_out(
        self, client: AsyncClient, remote_id: str, ctx: JobContext, budget: float
    ) -> NoReturn:
        """Cancel a run past its deadline and end the job with TIMEOUT_ERROR (not retried)."""
        cancelled = await client.cancel_background(remote_id)
        conversation_id = ctx.job.conversation_id
        what = "cancelled" if cancelled else "left running (the API did not confirm a cancel)"
        raise RunTimedOut(
            f"The deep research of conversation {conversation_id} was still running "
            f"{budget:g} s after it was submitted (PERPLEXITY_DEEP_RESEARCH_TIMEOUT); its run "
            f"{remote_id} was {what}. The conversation stays open: follow up to ask again, or "
            "allow more time with PERPLEXITY_DEEP_RESEARCH_TIMEOUT (milliseconds).",
            conversation_id=conversation_id,
            remote_id=remote_id,
            cancelled=cancelled,
        )

    def start_worker(self, concurrency: int = 4) -> Worker:
        """Start (once) the in-process background worker that runs queued research jobs."""
        from pplx_nb.jobs import Worker

        with self._lock:
            if self._worker is None:
                self._worker = Worker(self.queue, self.execute_job, concurrency=concurrency)
                self._worker.start()
                logger.info("Background research worker started (concurrency %d)", concurrency)
            return self._worker

    # -- reading --------------------------------------------------------------------------------

    def history(self, conversation_id: str, include_system: bool = False) -> Conversation:
        """The stored conversation; the system prompt is left out unless ``include_system``."""
        conversation = self._store.load(conversation_id)
        if not include_system:
            kept = [m for m in conversation.messages if m.role != "system"]
            conversation = conversation.model_copy(update={"messages": kept})
        return conversation

    def status(self, conversation_id: str) -> JobStatus | None:
        """The job status of a conversation, or None if no job ever ran for it."""
        from pplx_nb._fs import validate_conversation_id

        return self.queue.status(validate_conversation_id(conversation_id))

    def jobs(self, states: tuple[JobState, ...] | None = None) -> list[JobStatus]:
        """Every research job on disk, newest first, optionally only those in ``states``.

        A damaged status.json is skipped with a warning instead of hiding the other jobs.
        """
        return self.queue.jobs(states)

    def conversations(self, **filters: Any) -> list[ConversationSummary]:
        """Stored conversations, newest first (filters: since, until, tool, model, text, limit)."""
        return self._store.list(**filters)

    def metrics(self) -> dict[str, Any]:
        """Request counts, latency p50/p95/p99 in ms, API calls, tokens, cost."""
        snapshot = self._metrics.snapshot()
        if self._cache is not None:
            snapshot["cache"] = dataclasses.asdict(self._cache.stats())
        return snapshot

    def health(self) -> dict[str, Any]:
        """healthy | degraded | unhealthy, with version, uptime and the checks behind it."""
        checks = {
            "api": self._api_reachable(),
            "cache": self._cache_consistent(),
            "store": self._store_writable(),
            "memory": _rss_mb() < 1024,
        }
        if not checks["store"]:
            state = "unhealthy"
        elif all(checks.values()):
            state = "healthy"
        else:
            state = "degraded"
        return {
            "status": state,
            "version": __version__,
            "uptime": round(time.monotonic() - self._metrics.started, 3),
            "checks": checks,
            "offline": self._settings.is_offline,
        }

    def _api_reachable(self) -> bool:
        import httpx2

        from pplx_nb.api import resolve_endpoint

        try:
            base_url = resolve_endpoint(self._settings).base_url
            response = httpx2.get(f"{base_url}/v1/models", timeout=2.0)
        except Exception:
            return False
        return response.status_code < 500

    def _cache_consistent(self) -> bool:
        """The response cache, if any, answers and holds no more than its caps allow.

        No probe entry is written: in a full cache it would evict a real answer.
        """
        cache: ResponseCache | None = self._cache
        if cache is None:
            return True
        try:
            stats = cache.stats()
        except Exception:
            return False
        return 0 <= stats.entries <= cache.max_size and 0 <= stats.bytes <= cache.max_bytes

    def _store_writable(self) -> bool:
        probe = self._store.root / f".health-{os.getpid()}-{threading.get_ident()}"
        try:
            self._store.root.mkdir(parents=True, exist_ok=True)
            probe.write_bytes(b"ok")
            probe.unlink()
        except OSError:
            return False
        return True

    # -- sync twins ---------------------------------------------------------------------------

    def search(
        self, query: str, *, files: Sequence[str | Path] | None = None, **opts: Any
    ) -> Answer:
        """Sync :meth:`asearch`."""
        from pplx_nb._sync import run_sync

        return run_sync(self.asearch(query, files=files, **opts))

    def stream_search(
        self, query: str, *, files: Sequence[str | Path] | None = None, **opts: Any
    ) -> Generator[str | Answer, None, None]:
        """Sync :meth:`astream_search`: consume deltas on the calling thread."""
        from pplx_nb._sync import iterate_sync

        return iterate_sync(self.astream_search(query, files=files, **opts))

    def deep_research(
        self,
        query: str,
        *,
        wait: bool | None = None,
        files: Sequence[str | Path] | None = None,
        on_progress: ProgressCallback | None = None,
        **opts: Any,
    ) -> Answer | JobStatus:
        """Sync :meth:`adeep_research`."""
        from pplx_nb._sync import run_sync

        return run_sync(
            self.adeep_research(query, wait=wait, files=files, on_progress=on_progress, **opts)
        )

    def followup(
        self,
        conversation_id: str,
        query: str,
        *,
        mode: Mode = "search",
        fork: bool = False,
        wait: bool | None = None,
        files: Sequence[str | Path] | None = None,
        on_progress: ProgressCallback | None = None,
        **opts: Any,
    ) -> Answer | JobStatus:
        """Sync :meth:`afollowup`."""
        from pplx_nb._sync import run_sync

        return run_sync(
            self.afollowup(
                conversation_id,
                query,
                mode=mode,
                fork=fork,
                wait=wait,
                files=files,
                on_progress=on_progress,
                **opts,
            )
        )

    def retry(
        self,
        conversation_id: str,
        *,
        wait: bool | None = None,
        on_progress: ProgressCallback | None = None,
        **opts: Any,
    ) -> Answer | JobStatus:
        """Sync :meth:`aretry`."""
        from pplx_nb._sync import run_sync

        return run_sync(self.aretry(conversation_id, wait=wait, on_progress=on_progress, **opts))

    def stream_followup(
        self,
        conversation_id: str,
        query: str,
        *,
        fork: bool = False,
        files: Sequence[str | Path] | None = None,
        **opts: Any,
    ) -> Generator[str | Answer, None, None]:
        """Sync :meth:`astream_followup`."""
        from pplx_nb._sync import iterate_sync

        return iterate_sync(
            self.astream_followup(conversation_id, query, fork=fork, files=files, **opts)
        )

    def wait(
        self,
        conversation_id: str,
        timeout: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Answer:
        """Sync :meth:`await_job`."""
        from pplx_nb._sync import run_sync

        return run_sync(self.await_job(conversation_id, timeout=timeout, on_progress=on_progress))

    def close(self, timeout: float = 30.0) -> None:
        """Stop the background worker and close the API clients of every event loop used.

        The worker's running jobs get up to half of ``timeout`` to finish before they are
        released for another worker.
        """
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop(timeout)
        clients = list(self._clients.items())
        self._clients.clear()
        for loop, client in clients:
            if loop.is_closed():
                continue
            with contextlib.suppress(Exception):
                if not loop.is_running():
                    loop.run_until_complete(client.aclose())
                elif _running_loop() is loop:
                    loop.create_task(client.aclose())
                else:
                    asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(timeout=5)

    async def aclose(self) -> None:
        """Like :meth:`close`, awaiting the client of the running loop."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Researcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _transient(error: APIError) -> bool:
    """Whether a failed poll is worth waiting out: 5xx, 429, 408/409, timeouts, broken links."""
    status = error.status_code
    if status is None:
        return isinstance(error, NetworkError) or (
            isinstance(error, APITimeoutError) and not isinstance(error, RunTimedOut)
        )
    return status in (408, 409, 429) or status >= 500


def _unknown_for(error: SubmissionUnknown, conversation_id: str) -> SubmissionUnknown:
    """``error`` again, its advice naming the conversation to resubmit."""
    from pplx_nb.api import submission_unknown

    if error.details.get("conversation_id") == conversation_id:
        return error
    what = str(error.details.get("what") or "The request")
    cause = str(error.details.get("cause") or "reply lost")
    return submission_unknown(what, cause, conversation_id)


def _may_be_billed(turn: _Turn, error: BaseException) -> bool:
    """Whether a failed new turn may have cost something, so its question stays to retry."""
    from pplx_nb.api.request import is_deep_research

    if isinstance(error, SubmissionUnknown):
        return True
    # Interrupted mid-answer (cancelled, Ctrl-C): a paid run may be under way.
    return is_deep_research(turn.model) and not isinstance(error, Exception)


def _job_request(turn: _Turn) -> dict[str, Any]:
    """What a queued research job needs to run ``turn`` later (job.json ``request``)."""
    return {
        "model": turn.model,
        "opts": turn.opts,
        "searchQuery": turn.messages[-1]["content"],
        **({"notes": turn.notes} if turn.notes else {}),
    }


def _fitted_messages(
    messages: Sequence[Message], model: str, notes: Sequence[str] = ()
) -> list[dict[str, str]]:
    """``messages`` fitted to ``model``'s context window, as the API wants them.

    ``notes`` (e.g. a file already in the history) and, when older turns had to be left out, a
    note saying so go into the system prompt: the model reads them there, and the question —
    the search text — stays the question.
    """
    from pplx_nb import context

    fitted = context.fit_history(messages, model)
    _refuse_oversized(fitted.messages, model)
    told = [*([fitted.note] if fitted.note else []), *notes]
    return _with_system_notes(_wire_messages(fitted.messages), told)


def _refuse_oversized(messages: Sequence[Message], model: str) -> None:
    """Refuse what is over ``model``'s window with every earlier turn left out.

    The API would answer such a request with a 400 after the upload; the estimate is cheap, and
    the files attached to the newest question are what can be made smaller.
    """
    from pplx_nb.context import context_window
    from pplx_nb.context._budget import message_tokens

    window = context_window(model)
    budget = window - window // 5  # what fit_history allows: a fifth stays free for the answer
    used = sum(message_tokens(m) for m in messages)
    if used <= budget:
        return
    files = next((m.files or [] for m in reversed(messages) if m.role == "user"), [])
    sizes = ", ".join(
        f"{record.get('path')} ({record.get('bytes', 0):,} bytes)" for record in files
    )
    advice = (
        f"Attached files: {sizes}. Attach fewer or smaller files (an excerpt of each)."
        if sizes
        else "Shorten the question."
    )
    raise ValidationError(
        f"The question is about {used:,} tokens (estimated, with the system prompt), over the "
        f"{budget:,} tokens that fit in the {window:,}-token context window of {model} with room "
        f"left for the answer, even with every earlier turn left out. {advice}",
        estimated_tokens=used,
        window=window,
        files=[{"path": r.get("path"), "bytes": r.get("bytes")} for r in files],
    )


def _with_system_notes(
    messages: list[dict[str, str]], notes: Sequence[str]
) -> list[dict[str, str]]:
    """``messages`` with ``notes`` added to the system prompt (put first if there is none)."""
    if not notes:
        return messages
    text = "\n".join(notes)
    if messages and messages[0]["role"] == "system":
        return [{"role": "system", "content": f"{messages[0]['content']}\n\n{text}"}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def _wire_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    """Messages as the API wants them: roles alternate after the system prompt.

    A user turn left without an answer (its call failed) is dropped when another user turn follows.
    """
    out: list[dict[str, str]] = []
    for message in messages:
        if out and out[-1]["role"] == message.role == "user":
            out[-1] = {"role": "user", "content": message.content}
        elif out and out[-1]["role"] == message.role == "assistant":
            out[-1] = {
                "role": "assistant",
                "content": out[-1]["content"] + "\n\n" + message.content,
            }
        else:
            out.append({"role": message.role, "content": message.content})
    return out


def _previous_user(conversation: Conversation, answer: Message) -> str | None:
    index = conversation.messages.index(answer)
    for message in reversed(conversation.messages[:index]):
        if message.role == "user":
            return message.reformulated_query
    return None


def _rekeyed(image: dict[str, Any], convert: Callable[[str], str]) -> dict[str, Any]:
    """An image record with its keys converted: camelCase on disk, snake_case in Answer."""
    return {convert(key): value for key, value in image.items()}


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as handle:
            pages = int(handle.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
