"""Researcher: the one façade over the API client, the store, the job queue and context."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from pplx_nb._config import Settings
from pplx_nb._errors import ValidationError
from pplx_nb._fs import validate_conversation_id
from pplx_nb._logging import get_logger
from pplx_nb._metrics import Metrics
from pplx_nb._models import (
    Answer,
    Conversation,
    ConversationSummary,
    JobState,
    JobStatus,
    Message,
)
from pplx_nb._options import SearchOptions, WebSearchFilters
from pplx_nb._sync import sync_twin
from pplx_nb.backends import Backends, open_backends
from pplx_nb.research import _health
from pplx_nb.research._answers import stored_answer
from pplx_nb.research._clients import ClientPool
from pplx_nb.research._costs import CostsBy, Since, costs_frame
from pplx_nb.research._deep import DeepResearchRunner
from pplx_nb.research._guard import AnswerGuard, Ticket
from pplx_nb.research._jobs import JobDesk
from pplx_nb.research._kept import KeptAnswers
from pplx_nb.research._progress import ProgressCallback
from pplx_nb.research._runner import TurnRunner, last
from pplx_nb.research._turns import Mode, Turn, TurnBuilder
from pplx_nb.research._web import WebSearcher

if TYPE_CHECKING:
    import pandas as pd

    from pplx_nb._web_results import WebResults
    from pplx_nb.api import AsyncClient
    from pplx_nb.budget import CostEstimate, PeriodStanding
    from pplx_nb.jobs import JobQueue, JobRunner, Worker
    from pplx_nb.store import ConversationStore

__all__ = ["Researcher"]

logger = get_logger("pplx_nb.research")


class Researcher:
    """Ask, research, follow up and look back: the façade shared by notebooks and the MCP server.

    Async methods are the core; each has a sync twin (``search`` for ``asearch``, ``wait`` for
    ``await_job``) that runs on one background event-loop thread, so it also works inside a
    running Jupyter kernel.

    Args:
        settings: configuration (default: read from the environment).
        backends: where conversations and jobs live (default: what ``settings`` name, see
            :func:`pplx_nb.backends.open_backends`; ``open_backends(settings, memory=True)``
            keeps them in this process).
        client: an API client to use for every call (default: one per event loop, sharing a cache).
        async_deep_research: queue deep research as background jobs (default: the
            PERPLEXITY_ENABLE_ASYNC_DEEP_RESEARCH setting, else False).
    """

    attach_from_working_directory: bool = True
    """Whether files may come from the working directory as well as PPLX_NB_FILE_ROOTS.

    Turn it off where the process may run from ``/`` (an MCP server): then only the configured
    roots count.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        backends: Backends | None = None,
        client: AsyncClient | None = None,
        async_deep_research: bool | None = None,
    ) -> None:
        self._settings = settings or Settings.from_env()
        backends = backends or open_backends(self._settings)
        self._store = backends.conversation_store()
        if async_deep_research is None:
            async_deep_research = bool(self._settings.enable_async_deep_research)
        self._async = async_deep_research
        self._metrics = Metrics()
        self._clients = ClientPool(self._settings, client, backends.budget)
        queue = backends.job_queue(self._store)
        self._jobs = JobDesk(
            self._settings, self._store, queue, lambda: self._deep, run_here=self._async
        )
        self._guard = AnswerGuard(self._settings, self._store, lambda: self._jobs.queue)
        self._kept = KeptAnswers(self._settings, self._store, self._guard)
        self._runner = TurnRunner(
            self._store, self._guard, self._clients, self._metrics, self._kept
        )
        self._turns = TurnBuilder(
            self._settings,
            self._store,
            self._guard.refuse_if_busy,
            self._clients.current,
            lambda: self.attach_from_working_directory,
            self._runner.counted,
        )
        self._deep = DeepResearchRunner(
            self._settings, self._store, self._guard, self._clients, self._runner, self._kept
        )
        self._web = WebSearcher(self._store, self._clients, self._metrics)

    def __repr__(self) -> str:
        return (
            f"Researcher(store={self._store.location!r}, async_deep_research={self._async}, "
            f"offline={self._settings.is_offline})"
        )

    @property
    def settings(self) -> Settings:
        """The settings in use."""
        return self._settings

    @property
    def store(self) -> ConversationStore:
        """The conversation store every exchange lands in."""
        return self._store

    @property
    def queue(self) -> JobQueue:
        """The job queue beside the store (in its Redis database with ``PPLX_NB_STORE``)."""
        return self._jobs.queue

    @property
    def async_deep_research(self) -> bool:
        """Whether deep research is queued as a background job by default."""
        return self._async

    # -- asking ---------------------------------------------------------------------------------

    async def asearch(
        self,
        query: str,
        *,
        files: Sequence[str | Path] | None = None,
        **opts: Unpack[SearchOptions],
    ) -> Answer:
        """Ask a question with web search; starts and stores a NEW conversation."""
        turn = self._turns.new(query, "search", files, opts)
        return await last(self._runner.run(turn, stream=False))

    async def astream_search(
        self,
        query: str,
        *,
        files: Sequence[str | Path] | None = None,
        on_activity: ProgressCallback | None = None,
        **opts: Unpack[SearchOptions],
    ) -> AsyncGenerator[str | Answer, None]:
        """Like :meth:`asearch`, yielding text deltas as they arrive, then the stored Answer.

        ``on_activity`` is told what the run reports doing ("Searching: 2 queries", "Read 8
        results", ...) as it goes, when the API says so (the Agent API does).
        """
        turn = self._turns.new(query, "search", files, opts)
        run = self._runner.run(turn, stream=True, on_activity=on_activity)
        async with contextlib.aclosing(run) as items:
            async for item in items:
                yield item

    async def adeep_research(
        self,
        query: str,
        *,
        wait: bool | None = None,
        files: Sequence[str | Path] | None = None,
        on_progress: ProgressCallback | None = None,
        **opts: Unpack[SearchOptions],
    ) -> Answer | JobStatus:
        """Exhaustive research on a NEW conversation.

        Queued as a background job (returns its :class:`JobStatus` at once) when ``wait`` is False,
        or when it is None and async deep research is on; otherwise blocks, reporting progress.
        """
        turn = self._turns.new(query, "research", files, opts)
        if self._queued(wait):
            await self._check_budget(turn)
            return self._enqueue(turn)
        return await last(self._runner.run(turn, stream=True, on_progress=on_progress))

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
        **opts: Unpack[SearchOptions],
    ) -> Answer | JobStatus:
        """Continue a conversation in either mode, with its whole history as context.

        Raises JobInProgress while the conversation's job is pending or running. ``fork`` continues
        in a new child conversation and leaves the original as it was. A paid answer the store
        could not take earlier is stored first (FILESYSTEM_ERROR, at no cost, while it still
        cannot).
        """
        if mode not in ("search", "research"):
            raise ValidationError(f"Unknown mode {mode!r}: use 'search' or 'research'.")
        self._restore(conversation_id)
        turn = await self._turns.followup(conversation_id, query, mode, fork, files, opts)
        await self._check_budget(turn)
        if mode == "research" and self._queued(wait):
            return self._enqueue(turn)
        ticket = self._ask(turn)
        stream = mode == "research"
        return await last(self._runner.run(turn, ticket, stream=stream, on_progress=on_progress))

    async def astream_followup(
        self,
        conversation_id: str,
        query: str,
        *,
        fork: bool = False,
        files: Sequence[str | Path] | None = None,
        on_activity: ProgressCallback | None = None,
        **opts: Unpack[SearchOptions],
    ) -> AsyncGenerator[str | Answer, None]:
        """Like :meth:`afollowup` in search mode, yielding text deltas, then the stored Answer
        (``on_activity`` as for :meth:`astream_search`)."""
        self._restore(conversation_id)
        turn = await self._turns.followup(conversation_id, query, "search", fork, files, opts)
        await self._check_budget(turn)
        ticket = self._ask(turn)
        # A consumer that stops early closes this generator, not the run: aclosing closes the run
        # too, so the question's ticket ends at once rather than at garbage collection.
        run = self._runner.run(turn, ticket, stream=True, on_activity=on_activity)
        async with contextlib.aclosing(run) as items:
            async for item in items:
                yield item

    async def aretry(
        self,
        conversation_id: str,
        *,
        wait: bool | None = None,
        on_progress: ProgressCallback | None = None,
        **opts: Unpack[SearchOptions],
    ) -> Answer | JobStatus:
        """Store a conversation's kept answer, or ask its unanswered last question again as
        deep research, deliberately.

        When an answer was paid for and the store could not take it (FILESYSTEM_ERROR whose
        ``.answer`` is set), that kept answer is stored and returned: nothing is paid again.
        Otherwise, for a deep research that ended with SUBMISSION_UNKNOWN (its run may have
        been billed: check your Perplexity usage first), TIMEOUT_ERROR or another failure, this
        pays for a new run. The earlier job's model and options are reused unless ``opts``
        override them; queued or waited for as ``wait`` and the async setting say, like
        :meth:`adeep_research`.

        Raises JobInProgress while a job or answer of the conversation is under way, and
        ValidationError when its last question already has an answer.
        """
        with self._runner.counted():
            conversation_id = validate_conversation_id(conversation_id)
            kept = self._kept.restore(conversation_id)
            if kept is not None:
                where = self._store.conversation_location(conversation_id)
                return stored_answer(self._store.load(conversation_id), where, turn=kept)
            status = self._jobs.queue.status(conversation_id)
            turn = self._turns.retry(conversation_id, status, opts)
        logger.info("Resubmitting the question of %s deliberately", conversation_id)
        if self._queued(wait):
            with self._runner.counted():
                queued = self._guard.enqueue(
                    turn.user,
                    turn.tool,
                    turn.job_request(),
                    conversation_id,
                    params=turn.job_params(),
                )
            self._jobs.queued(queued)
            self._runner.record(turn.started, None, ok=True)
            return queued
        with self._runner.counted():
            ticket = self._guard.ask(turn.user, turn.model, conversation_id)
        return await last(self._runner.run(turn, ticket, stream=True, on_progress=on_progress))

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
        return await self._jobs.wait(conversation_id, timeout, on_progress)

    async def acancel(self, conversation_id: str) -> JobStatus | None:
        """Cancel the conversation's queued or running deep research, and its run at the API.

        A pending job leaves the queue; a running one is marked ``cancelled`` at once (its
        worker, here or in another process, stops at its next heartbeat) and its remote run is
        cancelled through the API, by this call when the run's id is known and by the worker
        otherwise. A cancelled run reports no usage: its cost is recorded as unknown
        (``result.costUnknown`` in the status). The question is closed by a turn saying it was
        cancelled, so the conversation takes follow-ups right away.

        Returns the job's status: ``cancelled``, or unchanged when the job had already ended;
        None when the conversation never had a job. Raises CONVERSATION_NOT_FOUND for an
        unknown conversation, VALIDATION_ERROR for a malformed id.
        """
        with self._runner.counted():
            conversation_id = validate_conversation_id(conversation_id)
            return await self._jobs.cancel(conversation_id, self._clients.current())

    async def aweb_search(
        self,
        query: str | list[str],
        *,
        max_results: int = 10,
        save: bool = False,
        **filters: Unpack[WebSearchFilters],
    ) -> WebResults:
        """Ranked web results from the Search API: no answer is generated, nothing is stored.

        ``query`` is a question, or a list of up to 5 searched in one request (their results
        together, each page once). Billed per request ($5 per 1,000), not per token.
        ``filters`` take the API's names: ``search_domain_filter``, ``search_recency_filter``,
        ``search_after_date_filter``, ``search_before_date_filter``,
        ``last_updated_after_filter``, ``last_updated_before_filter``, ``search_mode``,
        ``country``, ``search_language_filter``, ``max_tokens``, ``max_tokens_per_page``,
        ``search_context_size``. ``save=True`` also
        stores the query and the results as a NEW conversation (``conversation_id`` of the
        result), which follow-ups can continue. The result is a list of
        :class:`~pplx_nb._models.Source`, best first, that renders as a table.
        """
        return await self._web.search(query, max_results, save, filters)

    async def aestimate(
        self, query: str, *, mode: Mode = "search", **opts: Unpack[SearchOptions]
    ) -> CostEstimate:
        """What asking ``query`` in ``mode`` (``"search"`` or ``"research"``) with ``opts``
        may cost, before anything is sent: low, expected and high (what a ``PPLX_NB_BUDGET``
        cap reserves), with the basis of the figures. Sends nothing paid and stores nothing;
        works without caps."""
        turn = self._turns.new(query, mode, None, opts)
        return await self._clients.current().estimate(turn.request())

    def budget(self) -> list[PeriodStanding]:
        """Where each ``PPLX_NB_BUDGET`` cap stands in this store's ledger (cap, spent,
        reserved, left, when it resets), the per-request cap first; empty without caps."""
        guard = self._clients.budget
        return guard.standing() if guard is not None else []

    search = sync_twin(asearch)
    estimate = sync_twin(aestimate)
    stream_search = sync_twin(astream_search)
    deep_research = sync_twin(adeep_research)
    followup = sync_twin(afollowup)
    stream_followup = sync_twin(astream_followup)
    retry = sync_twin(aretry)
    wait = sync_twin(await_job, name="wait")
    cancel = sync_twin(acancel)
    web_search = sync_twin(aweb_search)

    # -- jobs -----------------------------------------------------------------------------------

    def ensure_worker(self, concurrency: int = 4) -> Worker:
        """Start (once) the in-process background worker that runs queued research jobs."""
        return self._jobs.ensure_worker(concurrency)

    def answering_since(self, conversation_id: str) -> str | None:
        """When the follow-up still being answered was asked (ISO 8601), or None if none is."""
        return self._guard.answering_since(conversation_id)

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
        return self._jobs.queue.status(validate_conversation_id(conversation_id))

    def jobs(self, states: tuple[JobState, ...] | None = None) -> list[JobStatus]:
        """Every research job on disk, newest first, optionally only those in ``states``.

        A damaged status.json is skipped with a warning instead of hiding the other jobs.
        """
        return self._jobs.queue.jobs(states)

    def conversations(self, **filters: Any) -> list[ConversationSummary]:
        """Stored conversations, newest first (filters: since, until, tool, model, text, limit)."""
        return self._store.list(**filters)

    def costs(self, *, by: CostsBy | None = None, since: Since | None = None) -> pd.DataFrame:
        """What the answers in the store cost, as a pandas DataFrame (the notebook extra).

        Read from the store, so it counts every kernel's, MCP server's and worker's answers.
        ``by=None``: one row per paid turn, oldest first: ``timestamp`` (UTC),
        ``conversation_id``, ``turn``, ``mode`` (``search``, ``research``, ``web``),
        ``model``, ``cost_usd``, ``cost_estimated`` (worked out from the price table: the API
        reported none) and ``cost_unknown`` (a run that was or may have been paid for and
        reported no cost: a cancelled deep research; its ``cost_usd`` is NaN). ``by="day"``
        (UTC), ``"model"`` or ``"mode"``: one row per group with ``cost_usd`` (the known costs'
        sum), ``turns``, ``estimated_costs`` and ``unknown_costs``.

        ``since``: only turns answered from then on: a datetime (UTC when it has no zone), a
        date, or text such as ``"2026-11-01"`` or ``"7d"`` (also ``12h``, ``2w``).
        """
        return costs_frame(self._store, by=by, since=since)

    def metrics(self) -> dict[str, Any]:
        """Request counts, latency p50/p95/p99 in ms, API calls, tokens, cost."""
        snapshot = self._metrics.snapshot()
        cache = self._clients.cache
        if cache is not None:
            snapshot["cache"] = dataclasses.asdict(cache.stats())
        return snapshot

    async def ahealth(self) -> dict[str, Any]:
        """healthy | degraded | unhealthy, with version, uptime and the checks behind it."""
        return await _health.health(
            self._settings,
            self._clients.current,
            self._clients.cache,
            self._store,
            self._metrics.started,
        )

    health = sync_twin(ahealth)

    # -- closing --------------------------------------------------------------------------------

    def close(self, timeout: float = 30.0) -> None:
        """Stop the background worker and close the API clients of every event loop used.

        The worker's running jobs get up to half of ``timeout`` to finish before they are
        released for another worker.
        """
        self._jobs.stop(timeout)
        self._clients.close()

    async def aclose(self) -> None:
        """Like :meth:`close`, awaiting the client of the running loop."""
        await self._clients.aclose_current()
        await asyncio.to_thread(self.close)

    def __enter__(self) -> Researcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers --------------------------------------------------------------------------------

    def _ask(self, turn: Turn) -> Ticket:
        """Store a follow-up's question, refused while a job runs or another answer is due."""
        assert turn.conversation_id is not None
        with self._runner.counted():
            return self._guard.ask(turn.user, turn.model, turn.conversation_id)

    def _restore(self, conversation_id: str) -> Message | None:
        """Store the conversation's kept answer first, if it has one; the turn stored."""
        with self._runner.counted():
            return self._kept.restore(validate_conversation_id(conversation_id))

    def _queued(self, wait: bool | None) -> bool:
        return not wait if wait is not None else self._async

    async def _check_budget(self, turn: Turn) -> None:
        """Refuse a turn no ``PPLX_NB_BUDGET`` cap has room for before its question is stored
        (a follow-up's, a queued job's), so the refusal leaves nothing behind. A new
        conversation answered now needs no such check: one that fails at no cost is removed."""
        await self._clients.current().check_budget(turn.request())

    def _enqueue(self, turn: Turn) -> JobStatus:
        """Store the turn's question and queue its job (a follow-up refused while busy)."""
        counted = self._runner.counted() if turn.conversation_id else contextlib.nullcontext()
        with counted:
            status = self._guard.enqueue(
                turn.user,
                turn.tool,
                turn.job_request(),
                turn.conversation_id,
                seed=turn.seed,
                params=turn.job_params(),
            )
        turn.conversation_id = status.conversation_id
        self._jobs.queued(status)
        self._runner.record(turn.started, None, ok=True)
        return status


def job_runner(researcher: Researcher) -> JobRunner:
    """The runner a :class:`~pplx_nb.jobs.Worker` calls for each queued research job.

    ``python -m pplx_nb.worker`` drains the queue with it; the in-process worker of
    :meth:`Researcher.ensure_worker` uses the same one.
    """
    return researcher._deep
