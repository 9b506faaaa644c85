"""The Perplexity client: ``ask``, ``stream`` and background runs over either protocol.

:class:`AsyncClient` owns HTTP (one pooled ``httpx2.AsyncClient``), timeouts, retries and the
response cache; the protocol adapter picked by ``Settings.api_style`` owns the wire format.
:class:`Client` is the same API for synchronous callers, usable inside a running Jupyter kernel::

    async with AsyncClient(settings) as client:
        answer = await client.ask(Request(messages=[{"role": "user", "content": "What is BM25?"}]))
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing, asynccontextmanager
from types import TracebackType
from typing import Any

import httpx2

from pplx_nb import __version__
from pplx_nb._config import Settings
from pplx_nb._errors import (
    APIError,
    APIServerError,
    RemoteRunFailed,
    RunRequiresAction,
    SubmissionUnknown,
)
from pplx_nb._logging import get_logger
from pplx_nb._models import Answer
from pplx_nb._pricing import SEARCH_API_FEE, Price, finite_cost, storable_cost
from pplx_nb._redact import register_secret
from pplx_nb._sync import sync_twin
from pplx_nb._web_results import WebResults
from pplx_nb.api._activity import Activity
from pplx_nb.api._adapter import Adapter, Call, StreamParser
from pplx_nb.api._failures import submission_unknown
from pplx_nb.api._runs import ActivityCallback, RunReader
from pplx_nb.api._throttle import RateLimitHeaders, Throttle, throttle_for
from pplx_nb.api._wire import Wire, split_credentials
from pplx_nb.api.agent import AgentAdapter, AgentStream
from pplx_nb.api.cache import ResponseCache, cache_key
from pplx_nb.api.endpoint import resolve_endpoint
from pplx_nb.api.models import ModelPrices, prices_path
from pplx_nb.api.request import Request, is_deep_research
from pplx_nb.api.retry import RetryPolicy, outcome_unknown, unread
from pplx_nb.api.search import parse_results, search_call
from pplx_nb.api.sonar import SonarAdapter
from pplx_nb.budget import BudgetGuard, CostEstimate, estimate_run, estimate_web_search

__all__ = ["ActivityCallback", "AsyncClient", "Client", "RunCallback"]

RunCallback = Callable[[str], object]
"""Told the id of the run answering a stream, as soon as the API names it."""

logger = get_logger("pplx_nb.api")


class AsyncClient:
    """Asks Perplexity (or any compatible server) questions; async, safe to share in one loop.

    Every request it sends first takes its turn from ``throttle`` (``PPLX_NB_RATE_LIMIT`` and
    the API's rate-limit pauses, shared by the clients of this process or of the Redis store).

    Args:
        settings: configuration; ``None`` reads the environment (:meth:`Settings.from_env`).
        transport: an ``httpx2`` transport to use instead of the network (tests).
        cache: a response cache, possibly shared; default: a private one sized by the settings.
        retry: the retry policy; default: ``Settings.max_retries`` with the standard backoff.
        budget: the spend caps every paid request is checked against before it is sent
            (``PPLX_NB_BUDGET``, opened beside the store); default: none, nothing checked.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        transport: httpx2.AsyncBaseTransport | None = None,
        cache: ResponseCache | None = None,
        retry: RetryPolicy | None = None,
        budget: BudgetGuard | None = None,
    ) -> None:
        self.settings = settings if settings is not None else Settings.from_env()
        self.budget = budget
        endpoint = resolve_endpoint(self.settings)
        # A proxy's user:password travels as Basic auth, never in a URL that errors or logs
        # (httpx2's own request log too) could show.
        self.base_url, auth = split_credentials(endpoint.base_url)
        self.offline = endpoint.offline
        key = endpoint.api_key.get_secret_value() if endpoint.api_key else None
        # Whatever its shape: a server that echoes it back must not make it show anywhere.
        register_secret(key)
        self._adapter: Adapter = (
            AgentAdapter() if self.settings.api_style == "agent" else SonarAdapter()
        )
        self.cache = (
            cache
            if cache is not None
            else ResponseCache(ttl=self.settings.cache_ttl, max_size=self.settings.cache_max_size)
        )
        headers = {
            "user-agent": f"pplx_nb/{__version__}",
            "accept": "application/json",
            "content-type": "application/json",
        }
        if key:
            headers["authorization"] = f"Bearer {key}"
        self.prices = ModelPrices(
            prices_path(self.settings.cache_dir(), self.base_url), self._models_body
        )
        self._wire = Wire(
            self.base_url,
            headers=headers,
            throttle=throttle_for(self.settings),
            retry=retry if retry is not None else RetryPolicy(self.settings.max_retries),
            secret=key,
            idle_timeout=self._seconds(self.settings.timeout_ms),
            max_bytes=int(self.settings.max_response_mb * 2**20),
            auth=auth,
            transport=transport,
        )
        self._runs = RunReader(self._wire, self._priced, self._poll)

    @property
    def retry(self) -> RetryPolicy:
        """The retry policy in use."""
        return self._wire.retry

    @property
    def throttle(self) -> Throttle:
        """Where each request takes its turn (``PPLX_NB_RATE_LIMIT``, the API's pauses)."""
        return self._wire.throttle

    @property
    def api_style(self) -> str:
        """``"agent"`` or ``"sonar"``: the protocol this client speaks."""
        return self._adapter.style

    @property
    def rate_limit(self) -> RateLimitHeaders | None:
        """The rate-limit headers of the last response that had any, seen by any client of
        this process with the same API, store and ``PPLX_NB_RATE_LIMIT``; ``None`` before one."""
        return self.throttle.last

    def __repr__(self) -> str:
        return (
            f"AsyncClient(base_url={self.base_url!r}, api_style={self.api_style!r}, "
            f"offline={self.offline})"
        )

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._wire.aclose()

    # -- public calls -------------------------------------------------------------------------

    async def ask(self, request: Request) -> Answer:
        """The complete answer to ``request`` (from the cache when an identical one is fresh)."""
        model = request.model or self.settings.model
        call = self._adapter.chat(request, model, stream=False)
        key = None
        if request.use_cache and self.cache.enabled:
            key = cache_key(self.api_style, self.base_url, call.path, call.body or b"")
            hit = self.cache.get(key)
            if hit is not None:
                logger.debug("Cache hit for %s %s (model %s)", call.method, call.path, model)
                return hit
        paid = is_deep_research(request.tier(model))
        async with self._charged(request) as bill:
            raw = await self._wire.send(call, self._timeout(request, model), paid=paid)
            try:
                parsed = self._adapter.parse(raw, request, model)
            except APIServerError as error:
                if paid and unread(error):  # paid for, and not the server failing
                    raise submission_unknown(self._wire.what(call), error) from error
                raise
            answer = bill.paid(await self._priced(parsed, model))
        if key is not None:
            self.cache.put(key, answer, len(raw))
        return answer

    async def stream(
        self,
        request: Request,
        *,
        on_activity: ActivityCallback | None = None,
        on_run: RunCallback | None = None,
    ) -> AsyncGenerator[str | Answer, None]:
        """Answer text as it arrives (``str`` deltas, ``<think>`` excluded), then one Answer.

        ``on_activity`` is told what the run is doing (searching, reading results, fetching
        pages, writing) each time its reasoning events move it on (Agent API only); ``on_run``
        is told the run's id once, as soon as the API names it (Agent API only), so that a
        caller can record it before waiting for a paid answer.

        The mode's timeout bounds the whole call, and a stream that sends no new event for
        ``PERPLEXITY_TIMEOUT`` ends with TIMEOUT_ERROR (keep-alive comments are not progress).
        A failure before the first delta is retried like any request (a deep-research answer
        only when it provably never reached the API); a stream that breaks after text was
        yielded raises NetworkError rather than returning a truncated answer. A paid stream
        (deep research, stored) that breaks after the API named its run is read back by that id
        — its events after the last one seen, else its state — never sent again; one that
        breaks before, or whose run cannot be read back, raises SubmissionUnknown.
        """
        async with self._charged(request) as bill:
            streamed = self._stream(request, on_activity, on_run)
            async with aclosing(streamed) as items:
                async for item in items:
                    yield bill.paid(item) if isinstance(item, Answer) else item

    async def _stream(
        self,
        request: Request,
        on_activity: ActivityCallback | None,
        on_run: RunCallback | None,
    ) -> AsyncGenerator[str | Answer, None]:
        model = request.model or self.settings.model
        call = self._adapter.chat(request, model, stream=True)
        timeout = self._timeout(request, model)
        paid = is_deep_research(request.tier(model))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        retries = 0
        while True:
            yielded = False
            parser = self._adapter.stream_parser(request, model)
            await self.throttle.admit(self._wire.what(call), deadline - loop.time())
            try:
                attempt = self._stream_once(call, parser, deadline, retries, on_activity, on_run)
                async with aclosing(attempt) as items:
                    async for item in items:
                        yielded = yielded or isinstance(item, str)
                        yield await self._priced(item, model) if isinstance(item, Answer) else item
                return
            except APIError as error:
                if paid and outcome_unknown(error):
                    cut = error
                    break
                if yielded or not self._wire.may_resend(error, retries, paid=paid):
                    raise
                await self._wire.pause(call, error, retries)
                retries += 1
        adapter = self._adapter
        if not isinstance(parser, AgentStream) or parser.response_id is None:
            raise submission_unknown(self._wire.what(call), cut) from cut
        assert isinstance(adapter, AgentAdapter)  # its parser is an AgentStream
        related = request.return_related_questions
        read = self._runs.read_back(adapter, call, parser, related, deadline, cut, on_activity)
        async with aclosing(read) as items:
            async for item in items:
                yield item

    async def submit_background(self, request: Request, *, hold: str | None = None) -> str:
        """Start ``request`` as a background run on the API; returns its remote id.

        Sent again only when the request provably never reached the API; when its outcome is
        unknown (sent, then the reply was lost, or could not be read: too large, not the API's
        format, no run id) it raises SubmissionUnknown instead.

        With a :attr:`budget`, the run's worst case is reserved first under ``hold`` (a job's
        id; default: a new one) and stays reserved once the run started: whoever reads the
        run's end settles that hold (:meth:`BudgetGuard.settle`), in any process.
        """
        model = request.model or self.settings.model
        call = self._adapter.submit(request, model)
        timeout = self._seconds(request.timeout_ms or self.settings.timeout_ms)
        async with self._charged(request, hold) as bill:
            raw = await self._wire.send(call, timeout, paid=True)
            try:
                remote_id = self._adapter.submitted(raw)
            except RemoteRunFailed:
                raise
            except APIServerError as error:
                # A reply that cannot be read may still mean the run started.
                raise submission_unknown(self._wire.what(call), error) from error
            bill.leave_open()
        logger.info("Background run %s started (model %s)", remote_id, model)
        return remote_id

    @property
    def follows_runs(self) -> bool:
        """Whether background runs can be followed by their event stream (Agent API)."""
        return isinstance(self._adapter, AgentAdapter)

    async def follow_background(
        self, remote_id: str, *, related: bool = False, timeout: float | None = None
    ) -> AsyncGenerator[Activity | Answer, None]:
        """A background run followed through its stream of events: what it is doing (an
        :class:`Activity` each time that changes), then its Answer.

        Reads ``GET /v1/responses/{id}?stream=true&starting_after=N``. A stream that breaks is
        opened again after the last event seen, as often in a row without a new event as the
        retry policy allows. Nothing is ever submitted. ``timeout`` (default
        PERPLEXITY_DEEP_RESEARCH_TIMEOUT) bounds the whole call; ``related``: the run's
        request asked for related questions.

        Raises RemoteRunFailed when the run fails or is cancelled; any other APIError means the
        run could not be followed this way (a server that does not stream runs, an expired
        cursor, an unknown id, a stream that keeps breaking): poll it instead.
        """
        adapter = self._adapter
        if not isinstance(adapter, AgentAdapter):
            raise APIServerError(
                f"The {self.api_style} API cannot stream a background run; poll it instead."
            )
        loop = asyncio.get_running_loop()
        budget = timeout if timeout is not None else self.settings.deep_research_timeout_ms / 1000
        parser = adapter.follow_parser(related)
        followed = self._runs.follow(adapter, remote_id, parser, loop.time() + budget)
        async with aclosing(followed) as items:
            async for item in items:
                if not isinstance(item, str):
                    yield item

    async def read_run(
        self, remote_id: str, request: Request, *, on_activity: ActivityCallback | None = None
    ) -> AsyncGenerator[Answer, None]:
        """The Answer of run ``remote_id``, started earlier for ``request``, read by its id:
        followed through its events (Agent API), else polled until it ends. Nothing is ever
        submitted, so nothing is paid for again. The request's timeout (for deep research
        PERPLEXITY_DEEP_RESEARCH_TIMEOUT) bounds the whole call; ``on_activity`` as for
        :meth:`stream`.

        Raises InvalidInput (``status_code`` 404) when the API no longer has the run (never
        stored, or expired), RemoteRunFailed when it failed or was cancelled, APITimeoutError
        when it is still running at the deadline.
        """
        model = request.model or self.settings.model
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout(request, model)
        related = request.return_related_questions
        if self.follows_runs:
            followed = self.follow_background(
                remote_id, related=related, timeout=deadline - loop.time()
            )
            try:
                async with aclosing(followed) as items:
                    async for item in items:
                        if isinstance(item, Answer):
                            yield item
                            return
                        if on_activity is not None:
                            on_activity(item)
            except RemoteRunFailed:
                raise
            except APIError as error:
                if error.status_code == 404:
                    raise
                logger.info("Run %s cannot be followed (%s); polling it", remote_id, error.code)
        yield await self._runs.poll_until(remote_id, related, deadline)

    async def cancel_background(self, remote_id: str, *, retry: bool = False) -> bool:
        """Ask the API to cancel a background run (best effort); True if it did.

        One attempt, or with ``retry`` the retries of any request (asking twice to stop a run
        costs nothing); sent even while the API asked to pause requests, as the run bills until
        it stops. A server without the cancel endpoint (404, 405), a run that has already ended
        (400) or any other failure gives False.
        """
        call = self._adapter.cancel(remote_id)
        if call is None:
            return False
        try:
            await self._wire.send(
                call, self._seconds(self.settings.timeout_ms), retry=retry, run_left=0.0
            )
        except APIError as error:
            logger.info("Could not cancel background run %s: %s", remote_id, error.code)
            return False
        logger.info("Background run %s cancelled", remote_id)
        return True

    async def web_search(
        self, /, query: str | list[str], *, max_results: int = 10, **filters: Any
    ) -> WebResults:
        """Ranked web results for ``query`` from the Search API (``POST /search``), no answer.

        Billed per request, not per token, and it generates nothing: retried like any request.
        ``filters`` are the API's own names (:data:`~pplx_nb.api.search.SEARCH_FILTERS`).
        """
        call = search_call(query, max_results=max_results, **filters)
        async with self._charged(None) as bill:
            raw = await self._wire.send(call, self._seconds(self.settings.timeout_ms))
            bill.cost = SEARCH_API_FEE
        label = query if isinstance(query, str) else " · ".join(query)
        return WebResults(parse_results(raw), query=label)

    async def reachable(self, timeout: float = 2.0) -> bool:
        """Whether the API answers at all: ``GET /v1/models`` within ``timeout`` seconds, below
        HTTP 500 (one attempt, no retry; any failure gives False). For health checks, so it
        takes no turn under the rate limit: polled by a load balancer, it must neither spend
        the requests meant for research nor report an API that is only busy as down."""
        try:
            async with asyncio.timeout(timeout):
                response = await self._wire.http.get("/v1/models", timeout=timeout)
        except Exception:
            return False
        return response.status_code < 500

    async def poll_background(
        self, remote_id: str, *, related: bool = False, run_left: float | None = None
    ) -> Answer | None:
        """The answer of a background run once done; ``None`` while it is queued or running.

        ``related``: the run's request set ``return_related_questions`` (the Agent API gives
        them as a trailing list, split off the text only when they were asked for).
        ``run_left``: seconds left before the run's deadline; a pause the API asked for that
        would last past it is not waited for, so a finished run is still read in time.

        Raises APIServerError when the run failed, InvalidInput (``status_code`` 404) when the
        API does not know ``remote_id``.
        """
        call = self._adapter.poll(remote_id)
        raw = await self._wire.send(
            call, self._seconds(self.settings.timeout_ms), run_left=run_left
        )
        answer = self._adapter.polled(raw, related=related)
        return None if answer is None else await self._priced(answer, "")

    async def estimate(self, request: Request) -> CostEstimate:
        """What ``request`` may cost (low, expected, high) and why: from the model prices
        (``GET /v1/models``, else the static table), its effort and max tokens, and what runs
        of the same kind cost before in this store when a :attr:`budget` keeps its ledger."""
        model = request.model or self.settings.model
        deep = is_deep_research(request.tier(model))
        kind = _kind(request, model)
        history = None
        if self.budget is not None:
            history = await asyncio.to_thread(self.budget.history, kind)
        try:
            prices = await self.prices.get()
        except Exception as exc:
            logger.warning("Model prices unreadable (%s); using the static table", exc)
            prices = {}
        return estimate_run(
            kind=kind,
            models=(model, request.effort) if request.effort else (model,),
            deep=deep,
            prompt_chars=sum(len(str(m.get("content") or "")) for m in request.messages),
            max_tokens=request.max_tokens,
            prices=prices,
            history=history,
        )

    async def check_budget(self, request: Request) -> None:
        """BudgetExceeded when ``request``'s worst case would not fit the :attr:`budget` now;
        nothing is reserved (sending it reserves). No budget: nothing is checked."""
        if self.budget is not None:
            await asyncio.to_thread(self.budget.check, await self.estimate(request))

    # -- plumbing -----------------------------------------------------------------------------

    @asynccontextmanager
    async def _charged(
        self, request: Request | None, hold: str | None = None
    ) -> AsyncIterator[_Bill]:
        """The budget around one paid request (``None``: a Search API request): its worst
        case reserved before the block, which sends it (BudgetExceeded: nothing is sent), and
        the hold settled after it (see :class:`_Bill`). Without a budget: nothing at all."""
        bill = _Bill()
        guard = self.budget
        if guard is None:
            yield bill
            return
        if request is None:
            estimate, kind = estimate_web_search(), "web_search"
        else:
            estimate = await self.estimate(request)
            kind = _kind(request, request.model or self.settings.model)
        hold = await asyncio.to_thread(guard.reserve, estimate, kind, hold)
        try:
            yield bill
        except BaseException as error:
            # Blocking, but brief: an async generator being closed may not await.
            bill.finish(guard, hold, error)
            raise
        await asyncio.to_thread(bill.finish, guard, hold, None)

    async def _priced(self, answer: Answer, model: str) -> Answer:
        """``answer`` with its cost estimated from the model prices when the API reported
        usage but no cost (an answer without usage keeps its cost unknown).

        Never raises: the answer is paid for by now. A reported cost that is not a finite
        number is estimated instead; prices that cannot be read give way to the static table,
        and an estimate that cannot be made leaves the cost unknown.
        """
        if answer.cost is not None and finite_cost(answer.cost):
            return answer
        prices: Mapping[str, Price] = {}
        if answer.usage is not None:
            try:
                prices = await self.prices.get()
            except Exception as exc:
                logger.warning("Model prices unreadable (%s); using the static table", exc)
        answer.cost = storable_cost(answer.cost, answer.model or model, answer.usage, prices)
        return answer

    async def _poll(self, remote_id: str, related: bool, run_left: float) -> Answer | None:
        return await self.poll_background(remote_id, related=related, run_left=run_left)

    async def _models_body(self, timeout: float) -> bytes:
        """``GET /v1/models``: one attempt within ``timeout`` seconds."""
        return await self._wire.send(Call("GET", "/v1/models"), timeout, retry=False)

    @staticmethod
    def _seconds(milliseconds: int) -> float:
        return milliseconds / 1000

    def _timeout(self, request: Request, model: str) -> float:
        if request.timeout_ms is not None:
            return request.timeout_ms / 1000
        if is_deep_research(request.tier(model)):
            return self.settings.deep_research_timeout_ms / 1000
        return self.settings.timeout_ms / 1000

    async def _stream_once(
        self,
        call: Call,
        parser: StreamParser,
        deadline: float,
        retries: int,
        on_activity: ActivityCallback | None = None,
        on_run: RunCallback | None = None,
    ) -> AsyncGenerator[str | Answer, None]:
        seen: Activity | None = None
        async with aclosing(self._wire.events(call, deadline, retries)) as stream:
            async for event in stream:
                delta = parser.feed(event)
                if on_run is not None and isinstance(parser, AgentStream) and parser.response_id:
                    on_run(parser.response_id)
                    on_run = None
                if on_activity is not None and parser.activity not in (None, seen):
                    seen = parser.activity
                    on_activity(seen)
                if delta:
                    yield delta
        yield parser.finish()


def _kind(request: Request, model: str) -> str:
    """The kind of run ``request`` is, for the ledger's history: ``search:low``,
    ``research:deep-research`` (by its effort, else its model)."""
    tier = request.tier(model).lower()
    return f"{'research' if is_deep_research(tier) else 'search'}:{tier}"


class _Bill:
    """How one paid request ended, for its budget hold.

    ``cost`` set (:meth:`paid`): settled to it, or kept at its reservation when the API
    reported no cost (a run stopped ``requires_action``: to the cost it reported);
    :meth:`leave_open`: a background run started, whose end settles it later; neither, after
    a failure that provably cost nothing (the API refused it, or nothing reached it):
    released; any other failure (a run that failed, an outcome unknown): kept as spent.
    """

    __slots__ = ("cost", "open", "settled")

    def __init__(self) -> None:
        self.cost: float | None = None
        self.settled = False
        self.open = False

    def paid(self, answer: Answer) -> Answer:
        """Settle to ``answer``'s cost (unknown: the reservation stays spent)."""
        self.cost = answer.cost.total_cost if answer.cost is not None else None
        self.settled = True
        return answer

    def leave_open(self) -> None:
        """A background run started: its hold stays reserved until the run ends."""
        self.open = True

    def finish(self, guard: BudgetGuard, hold: str, error: BaseException | None) -> None:
        """Settle, keep or release ``hold`` as the request ended (``error``: how it failed)."""
        if self.open:
            return
        if isinstance(error, RunRequiresAction) and not self.settled:
            self.cost = error.cost.total_cost if error.cost is not None else None
            self.settled = True  # billed for the work it did before it stopped
        if self.settled or self.cost is not None:
            guard.settle(hold, self.cost)
        elif isinstance(error, APIError) and not (
            isinstance(error, SubmissionUnknown | RemoteRunFailed) or outcome_unknown(error)
        ):
            guard.release(hold)  # refused before any work: a 4xx, or never sent
        else:
            guard.settle(hold, None)  # a run that failed, or an outcome unknown


class Client:
    """The synchronous twin of :class:`AsyncClient`, safe to call inside a running event loop.

    Each call runs on pplx_nb's shared background event-loop thread (:mod:`pplx_nb._sync`);
    :meth:`stream` returns an ordinary iterator consumed in the calling thread.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        transport: httpx2.AsyncBaseTransport | None = None,
        cache: ResponseCache | None = None,
        retry: RetryPolicy | None = None,
        budget: BudgetGuard | None = None,
    ) -> None:
        self._async = AsyncClient(
            settings, transport=transport, cache=cache, retry=retry, budget=budget
        )

    @property
    def settings(self) -> Settings:
        """The settings in use."""
        return self._async.settings

    @property
    def cache(self) -> ResponseCache:
        """The response cache (``client.cache.stats()``)."""
        return self._async.cache

    @property
    def rate_limit(self) -> RateLimitHeaders | None:
        """See :attr:`AsyncClient.rate_limit`."""
        return self._async.rate_limit

    def __repr__(self) -> str:
        return "Client" + repr(self._async).removeprefix("AsyncClient")

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _twin_of(self) -> AsyncClient:
        return self._async

    close = sync_twin(AsyncClient.aclose, name="close", via=_twin_of)
    ask = sync_twin(AsyncClient.ask, via=_twin_of)
    stream = sync_twin(AsyncClient.stream, via=_twin_of)
    submit_background = sync_twin(AsyncClient.submit_background, via=_twin_of)
    poll_background = sync_twin(AsyncClient.poll_background, via=_twin_of)
    follow_background = sync_twin(AsyncClient.follow_background, via=_twin_of)
    read_run = sync_twin(AsyncClient.read_run, via=_twin_of)
    cancel_background = sync_twin(AsyncClient.cancel_background, via=_twin_of)
    web_search = sync_twin(AsyncClient.web_search, via=_twin_of)
    estimate = sync_twin(AsyncClient.estimate, via=_twin_of)
    check_budget = sync_twin(AsyncClient.check_budget, via=_twin_of)
    reachable = sync_twin(AsyncClient.reachable, via=_twin_of)
