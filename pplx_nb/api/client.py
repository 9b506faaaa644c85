"""The Perplexity client: ``ask``, ``stream`` and background runs over either protocol.

:class:`AsyncClient` owns HTTP (one pooled ``httpx2.AsyncClient``), timeouts, retries and the
response cache; the protocol adapter picked by ``Settings.api_style`` owns the wire format.
:class:`Client` is the same API for synchronous callers, usable inside a running Jupyter kernel::

    async with AsyncClient(settings) as client:
        answer = await client.ask(Request(messages=[{"role": "user", "content": "What is BM25?"}]))
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import AsyncGenerator, Callable, Generator, Mapping
from contextlib import aclosing
from types import TracebackType
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx2

from pplx_nb import __version__
from pplx_nb._config import Settings
from pplx_nb._errors import (
    APIError,
    APIServerError,
    APITimeoutError,
    NetworkError,
    RemoteRunFailed,
    SubmissionUnknown,
)
from pplx_nb._logging import get_logger
from pplx_nb._models import Answer
from pplx_nb._pricing import Price, finite_cost, storable_cost
from pplx_nb._redact import register_secret
from pplx_nb._sync import iterate_sync, run_sync
from pplx_nb._web_results import WebResults
from pplx_nb.api._activity import Activity
from pplx_nb.api._adapter import Adapter, Call, StreamParser
from pplx_nb.api._body import paced_lines, read_capped
from pplx_nb.api._failures import (
    from_status,
    submission_unknown,
    transport_errors,
    unread_words,
)
from pplx_nb.api._sse import Event, events
from pplx_nb.api._throttle import RateLimitHeaders, throttle_for
from pplx_nb.api.agent import AgentAdapter, AgentStream
from pplx_nb.api.cache import ResponseCache, cache_key
from pplx_nb.api.endpoint import resolve_endpoint
from pplx_nb.api.models import ModelPrices, prices_path
from pplx_nb.api.request import Request, is_deep_research
from pplx_nb.api.retry import RetryPolicy, outcome_unknown, unread
from pplx_nb.api.search import parse_results, search_call
from pplx_nb.api.sonar import SonarAdapter

__all__ = ["ActivityCallback", "AsyncClient", "Client", "RunCallback"]

ActivityCallback = Callable[[Activity], object]
"""Told what a run is doing each time its reasoning events change it."""
RunCallback = Callable[[str], object]
"""Told the id of the run answering a stream, as soon as the API names it."""

logger = get_logger("pplx_nb.api")
_LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=32)


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Loading the CA bundle takes ≈35 ms; httpx2 would do it again for every client.
    return httpx2.create_ssl_context()


class AsyncClient:
    """Asks Perplexity (or any compatible server) questions; async, safe to share in one loop.

    Every request it sends first takes its turn from ``throttle`` (``PPLX_NB_RATE_LIMIT`` and
    the API's rate-limit pauses, shared by the clients of this process or of the Redis store).

    Args:
        settings: configuration; ``None`` reads the environment (:meth:`Settings.from_env`).
        transport: an ``httpx2`` transport to use instead of the network (tests).
        cache: a response cache, possibly shared; default: a private one sized by the settings.
        retry: the retry policy; default: ``Settings.max_retries`` with the standard backoff.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        transport: httpx2.AsyncBaseTransport | None = None,
        cache: ResponseCache | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.settings = settings if settings is not None else Settings.from_env()
        endpoint = resolve_endpoint(self.settings)
        # A proxy's user:password travels as Basic auth, never in a URL that errors or logs
        # (httpx2's own request log too) could show.
        self.base_url, auth = _split_credentials(endpoint.base_url)
        self.offline = endpoint.offline
        self._key = endpoint.api_key.get_secret_value() if endpoint.api_key else None
        # Whatever its shape: a server that echoes it back must not make it show anywhere.
        register_secret(self._key)
        self._adapter: Adapter = (
            AgentAdapter() if self.settings.api_style == "agent" else SonarAdapter()
        )
        self.cache = (
            cache
            if cache is not None
            else ResponseCache(ttl=self.settings.cache_ttl, max_size=self.settings.cache_max_size)
        )
        self.retry = retry if retry is not None else RetryPolicy(self.settings.max_retries)
        self.throttle = throttle_for(self.settings)
        headers = {
            "user-agent": f"pplx_nb/{__version__}",
            "accept": "application/json",
            "content-type": "application/json",
        }
        if self._key:
            headers["authorization"] = f"Bearer {self._key}"
        self.prices = ModelPrices(
            prices_path(self.settings.cache_dir(), self.base_url), self._models_body
        )
        self._http = httpx2.AsyncClient(
            base_url=self.base_url,
            auth=auth,
            headers=headers,
            transport=transport,
            timeout=self.settings.timeout_ms / 1000,
            limits=_LIMITS,
            verify=_tls_context(),
        )

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
        await self._http.aclose()

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
        paid = is_deep_research(model)
        raw = await self._send(call, self._timeout(request, model), paid=paid)
        try:
            parsed = self._adapter.parse(raw, request, model)
        except APIServerError as error:
            if paid and unread(error):  # paid for, and not the server failing
                raise submission_unknown(self._what(call), error) from error
            raise
        answer = await self._priced(parsed, model)
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
        model = request.model or self.settings.model
        call = self._adapter.chat(request, model, stream=True)
        timeout = self._timeout(request, model)
        paid = is_deep_research(model)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        retries = 0
        while True:
            yielded = False
            parser = self._adapter.stream_parser(request, model)
            await self.throttle.admit(self._what(call), deadline - loop.time())
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
                if yielded or not self._may_resend(error, retries, paid=paid):
                    raise
                await self._pause(call, error, retries)
                retries += 1
        adapter = self._adapter
        remote_id = parser.response_id if isinstance(parser, AgentStream) else None
        if remote_id is None or not isinstance(parser, AgentStream):
            raise submission_unknown(self._what(call), cut) from cut
        assert isinstance(adapter, AgentAdapter)  # its parser is an AgentStream
        logger.warning(
            "The stream of run %s broke (%s); reading the run back by its id",
            remote_id,
            cut.code if cut.status_code is None else f"HTTP {cut.status_code}",
        )
        read = self._read_back(
            adapter, call, remote_id, parser, request, deadline, cut, on_activity
        )
        async with aclosing(read) as items:
            async for item in items:
                yield item

    async def submit_background(self, request: Request) -> str:
        """Start ``request`` as a background run on the API; returns its remote id.

        Sent again only when the request provably never reached the API; when its outcome is
        unknown (sent, then the reply was lost, or could not be read: too large, not the API's
        format, no run id) it raises SubmissionUnknown instead.
        """
        model = request.model or self.settings.model
        call = self._adapter.submit(request, model)
        timeout = self._seconds(request.timeout_ms or self.settings.timeout_ms)
        raw = await self._send(call, timeout, paid=True)
        try:
            remote_id = self._adapter.submitted(raw)
        except RemoteRunFailed:
            raise
        except APIServerError as error:
            # A reply that cannot be read may still mean the run started.
            raise submission_unknown(self._what(call), error) from error
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
        followed = self._followed(adapter, remote_id, parser, loop.time() + budget)
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
        pause = 0.5
        while loop.time() < deadline:
            try:
                answer = await self._poll_before(remote_id, related, deadline)
            except APIError:
                raise
            except TimeoutError:  # the deadline, mid-poll
                break
            if answer is not None:
                yield answer
                return
            await asyncio.sleep(min(pause, max(deadline - loop.time(), 0)))
            pause = min(pause * 1.5, 3.0)
        raise APITimeoutError(
            f"Run {remote_id} was still running at the end of the request's timeout "
            "(PERPLEXITY_DEEP_RESEARCH_TIMEOUT for deep research). It goes on at the API: "
            "retry later to read its report, or allow more time (milliseconds).",
            reason="deadline",
            request_id=remote_id,
        )

    async def _followed(
        self, adapter: AgentAdapter, remote_id: str, parser: AgentStream, deadline: float
    ) -> AsyncGenerator[str | Activity | Answer, None]:
        """Run ``remote_id``'s events after ``parser.sequence``, fed to ``parser``: its text
        deltas and each new Activity as they come, then its Answer. A stream that breaks is
        opened again after the last event seen, as often in a row without a new event as the
        retry policy allows; other failures raise (see :meth:`follow_background`)."""
        loop = asyncio.get_running_loop()
        seen = parser.activity
        failures = 0
        while True:
            before = parser.sequence
            call = adapter.follow(remote_id, before if before is not None else 0)
            left = deadline - loop.time()
            await self.throttle.admit(self._what(call), left, run_left=left)
            try:
                opened = self._events(call, deadline, failures, only_events=True)
                async with aclosing(opened) as stream:
                    async for event in stream:
                        delta = parser.feed(event)
                        if delta:
                            yield delta
                        if parser.activity is not None and parser.activity != seen:
                            seen = parser.activity
                            yield seen
                answer = await self._priced(parser.finish(), "")
            except RemoteRunFailed:
                raise
            except APIError as error:
                if parser.sequence != before:
                    failures = 0
                retry = _resumable(error) and self.retry.should_retry(error, failures)
                if not retry or loop.time() >= deadline:
                    raise
                await self._pause(call, error, failures)
                failures += 1
                continue
            yield answer
            return

    async def _read_back(
        self,
        adapter: AgentAdapter,
        call: Call,
        remote_id: str,
        parser: AgentStream,
        request: Request,
        deadline: float,
        cut: APIError,
        on_activity: ActivityCallback | None,
    ) -> AsyncGenerator[str | Answer, None]:
        """The rest of run ``remote_id``, whose stream (``call``) broke with ``cut``: its
        events after the last one ``parser`` saw, else (the API does not stream it again) its
        state, polled until it ends or ``deadline``. SubmissionUnknown, naming the run, when it
        cannot be read (not stored, expired, unreachable): it may still be billed, and nothing
        is sent again."""
        seen = parser.activity
        try:
            async with aclosing(self._followed(adapter, remote_id, parser, deadline)) as items:
                async for item in items:
                    if isinstance(item, Activity):
                        if on_activity is not None and item != seen:
                            seen = item
                            on_activity(item)
                        continue
                    yield item
            return
        except RemoteRunFailed:
            raise
        except APIError as error:
            logger.info(
                "Run %s cannot be streamed again (%s); polling it",
                remote_id,
                error.code if error.status_code is None else f"HTTP {error.status_code}",
            )
        yield await self._polled_until(call, remote_id, request, deadline, cut)

    async def _polled_until(
        self, call: Call, remote_id: str, request: Request, deadline: float, cut: APIError
    ) -> Answer:
        """The answer of run ``remote_id`` once it ends, polled with backoff until ``deadline``;
        transient failures are waited out. SubmissionUnknown (naming the run, and what cut its
        stream when that was a reply it could not read) when the run cannot be read: unknown to
        the API (404: not stored, or expired), a lasting failure, the deadline."""
        loop = asyncio.get_running_loop()
        related = request.return_related_questions
        what = self._what(call)
        before = unread_words(cut, "its stream")

        def lost(happened: str) -> SubmissionUnknown:
            cause = f"its run {remote_id} {happened}"
            return submission_unknown(
                what,
                f"{before}; {cause}" if before else cause,
                remote_id=remote_id,
                unreadable=bool(before),
            )

        pause, failures = 0.5, 0
        while True:
            try:
                answer = await self._poll_before(remote_id, related, deadline)
            except RemoteRunFailed:
                raise
            except APIError as error:
                if error.status_code == 404 or not _resumable(error) or failures >= 6:
                    raise lost(f"could not be read back: {error.code}") from error
                failures += 1
                await asyncio.sleep(
                    min(self.retry.delay(error, failures), max(deadline - loop.time(), 0))
                )
                answer = None
            except TimeoutError as error:  # the deadline, mid-poll (not an APITimeoutError)
                raise lost("was still running at the deadline") from error
            if answer is not None:
                return answer
            if loop.time() >= deadline:
                raise lost("was still running at the deadline")
            await asyncio.sleep(min(pause, max(deadline - loop.time(), 0)))
            pause = min(pause * 1.5, 3.0)

    async def _poll_before(self, remote_id: str, related: bool, deadline: float) -> Answer | None:
        """One :meth:`poll_background` of a run whose deadline is ``deadline`` (loop time):
        its own timeout (PERPLEXITY_TIMEOUT) never carries the wait past it (TimeoutError)."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout_at(deadline):
            return await self.poll_background(
                remote_id, related=related, run_left=deadline - loop.time()
            )

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
            await self._send(
                call, self._seconds(self.settings.timeout_ms), retry=retry, run_left=0.0
            )
        except APIError as error:
            logger.info("Could not cancel background run %s: %s", remote_id, error.code)
            return False
        logger.info("Background run %s cancelled", remote_id)
        return True

    async def web_search(
        self, query: str | list[str], *, max_results: int = 10, **filters: Any
    ) -> WebResults:
        """Ranked web results for ``query`` from the Search API (``POST /search``), no answer.

        Billed per request, not per token, and it generates nothing: retried like any request.
        ``filters`` are the API's own names (:data:`~pplx_nb.api.search.SEARCH_FILTERS`).
        """
        call = search_call(query, max_results=max_results, **filters)
        raw = await self._send(call, self._seconds(self.settings.timeout_ms))
        label = query if isinstance(query, str) else " · ".join(query)
        return WebResults(parse_results(raw), query=label)

    async def reachable(self, timeout: float = 2.0) -> bool:
        """Whether the API answers at all: ``GET /v1/models`` within ``timeout`` seconds, below
        HTTP 500 (one attempt, no retry; any failure gives False). For health checks, so it
        takes no turn under the rate limit: polled by a load balancer, it must neither spend
        the requests meant for research nor report an API that is only busy as down."""
        try:
            async with asyncio.timeout(timeout):
                response = await self._http.get("/v1/models", timeout=timeout)
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
        raw = await self._send(call, self._seconds(self.settings.timeout_ms), run_left=run_left)
        answer = self._adapter.polled(raw, related=related)
        return None if answer is None else await self._priced(answer, "")

    # -- plumbing -----------------------------------------------------------------------------

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

    async def _models_body(self, timeout: float) -> bytes:
        """``GET /v1/models``: one attempt within ``timeout`` seconds."""
        return await self._send(Call("GET", "/v1/models"), timeout, retry=False)

    @staticmethod
    def _seconds(milliseconds: int) -> float:
        return milliseconds / 1000

    def _timeout(self, request: Request, model: str) -> float:
        if request.timeout_ms is not None:
            return request.timeout_ms / 1000
        if is_deep_research(model):
            return self.settings.deep_research_timeout_ms / 1000
        return self.settings.timeout_ms / 1000

    def _what(self, call: Call) -> str:
        return f"{call.method} {self.base_url}{call.path}"

    async def _pause(self, call: Call, error: APIError, retries: int) -> None:
        delay = self.retry.delay(error, retries)
        logger.info(
            "%s failed (%s); retry %d of %d in %.2f s",
            self._what(call),
            error.code if error.status_code is None else f"HTTP {error.status_code}",
            retries + 1,
            self.retry.max_retries,
            delay,
        )
        await asyncio.sleep(delay)

    @property
    def _max_bytes(self) -> int:
        return int(self.settings.max_response_mb * 2**20)

    def _may_resend(self, error: APIError, retries: int, *, paid: bool) -> bool:
        if paid:
            return self.retry.should_resend_paid(error, retries)
        return self.retry.should_retry(error, retries)

    async def _send(
        self,
        call: Call,
        timeout: float,
        *,
        paid: bool = False,
        retry: bool = True,
        run_left: float | None = None,
    ) -> bytes:
        """The body of a successful response to ``call``, after the retries the policy allows.

        ``paid``: sent again only when it provably never reached the API; an unknown outcome
        raises SubmissionUnknown. ``retry=False``: one attempt. ``run_left``: ``call`` reads
        or stops a paid run with that many seconds left (see :meth:`Throttle.admit`).
        """
        what = self._what(call)
        loop = asyncio.get_running_loop()
        run_deadline = None if run_left is None else loop.time() + run_left
        retries = 0
        while True:
            left = None if run_deadline is None else run_deadline - loop.time()
            await self.throttle.admit(what, timeout, run_left=left)
            try:
                logger.debug("%s (attempt %d)", what, retries + 1)
                # httpx2's timeout bounds each read; a body that trickles in must not outlast
                # the whole request's timeout.
                with transport_errors(what, timeout, secret=self._key):
                    async with (
                        asyncio.timeout(timeout),
                        self._http.stream(
                            call.method, call.path, content=call.body, timeout=timeout
                        ) as response,
                    ):
                        body = await read_capped(response, self._max_bytes, what)
                await self.throttle.observe(response.status_code, response.headers)
                if response.status_code < 300:
                    return body
                raise from_status(
                    response.status_code,
                    body,
                    response.headers,
                    what=what,
                    retries=retries,
                    secret=self._key,
                )
            except APIError as error:
                if paid and outcome_unknown(error):
                    raise submission_unknown(what, error) from error
                if not retry or not self._may_resend(error, retries, paid=paid):
                    raise
                await self._pause(call, error, retries)
                retries += 1

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
        async with aclosing(self._events(call, deadline, retries)) as stream:
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

    async def _events(
        self, call: Call, deadline: float, retries: int, *, only_events: bool = False
    ) -> AsyncGenerator[Event, None]:
        """The events of one streamed response to ``call``; an error status raises.

        ``only_events``: a reply that is not ``text/event-stream`` (a server that ignores
        ``stream=true``) raises APIServerError instead of being read.
        """
        what = self._what(call)
        loop = asyncio.get_running_loop()
        timeout = max(deadline - loop.time(), 0.001)
        idle = self._seconds(self.settings.timeout_ms)
        logger.debug("%s, streamed (attempt %d)", what, retries + 1)
        # A run's stream answers at once even when the run itself is slow: a server that
        # keeps it waiting longer than PERPLEXITY_TIMEOUT has stalled.
        opened_by = min(deadline, loop.time() + idle) if only_events else deadline
        with transport_errors(what, timeout, secret=self._key):
            async with asyncio.timeout_at(opened_by):
                response = await self._http.send(
                    self._http.build_request(
                        call.method,
                        call.path,
                        content=call.body,
                        headers={"accept": "text/event-stream"},
                        timeout=timeout,
                    ),
                    stream=True,
                )
            try:
                await self.throttle.observe(response.status_code, response.headers)
                if response.status_code >= 300:
                    async with asyncio.timeout_at(deadline):
                        body = await read_capped(response, self._max_bytes, what)
                    raise from_status(
                        response.status_code,
                        body,
                        response.headers,
                        what=what,
                        retries=retries,
                        secret=self._key,
                    )
                kind = response.headers.get("content-type", "")
                if only_events and not kind.startswith("text/event-stream"):
                    raise APIServerError(
                        f"{what} answered with {kind or 'no content type'}, not an event "
                        "stream: this server does not stream runs."
                    )
                lines = paced_lines(response, what, deadline, idle, self._max_bytes)
                async with aclosing(lines):
                    async for event in events(lines):
                        yield event
            finally:
                await response.aclose()


def _resumable(error: APIError) -> bool:
    """Whether a broken run stream is worth opening again: a dropped or silent connection, or
    a server error; not a refusal (the server cannot stream this run)."""
    status = error.status_code
    if status is None:
        return isinstance(error, NetworkError | APITimeoutError)
    return status in (408, 429) or status >= 500


def _split_credentials(url: str) -> tuple[str, httpx2.BasicAuth | None]:
    """``url`` without its ``user:password@``, and those credentials as Basic auth."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.netloc.rpartition("@")[2]
    bare = urlunsplit(parts._replace(netloc=host))
    return bare, httpx2.BasicAuth(unquote(parts.username or ""), unquote(parts.password or ""))


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
    ) -> None:
        self._async = AsyncClient(settings, transport=transport, cache=cache, retry=retry)

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

    def close(self) -> None:
        """Close the connection pool."""
        run_sync(self._async.aclose())

    def ask(self, request: Request) -> Answer:
        """See :meth:`AsyncClient.ask`."""
        return run_sync(self._async.ask(request))

    def stream(
        self,
        request: Request,
        *,
        on_activity: ActivityCallback | None = None,
        on_run: RunCallback | None = None,
    ) -> Generator[str | Answer, None, None]:
        """See :meth:`AsyncClient.stream`; deltas are yielded in the calling thread."""
        return iterate_sync(self._async.stream(request, on_activity=on_activity, on_run=on_run))

    def submit_background(self, request: Request) -> str:
        """See :meth:`AsyncClient.submit_background`."""
        return run_sync(self._async.submit_background(request))

    def poll_background(
        self, remote_id: str, *, related: bool = False, run_left: float | None = None
    ) -> Answer | None:
        """See :meth:`AsyncClient.poll_background`."""
        return run_sync(self._async.poll_background(remote_id, related=related, run_left=run_left))

    def follow_background(
        self, remote_id: str, *, related: bool = False, timeout: float | None = None
    ) -> Generator[Activity | Answer, None, None]:
        """See :meth:`AsyncClient.follow_background`; items are yielded in the calling thread."""
        return iterate_sync(
            self._async.follow_background(remote_id, related=related, timeout=timeout)
        )

    def read_run(
        self, remote_id: str, request: Request, *, on_activity: ActivityCallback | None = None
    ) -> Generator[Answer, None, None]:
        """See :meth:`AsyncClient.read_run`; the answer is yielded in the calling thread."""
        return iterate_sync(self._async.read_run(remote_id, request, on_activity=on_activity))

    def cancel_background(self, remote_id: str, *, retry: bool = False) -> bool:
        """See :meth:`AsyncClient.cancel_background`."""
        return run_sync(self._async.cancel_background(remote_id, retry=retry))

    def web_search(
        self, query: str | list[str], *, max_results: int = 10, **filters: Any
    ) -> WebResults:
        """See :meth:`AsyncClient.web_search`."""
        return run_sync(self._async.web_search(query, max_results=max_results, **filters))

    def reachable(self, timeout: float = 2.0) -> bool:
        """See :meth:`AsyncClient.reachable`."""
        return run_sync(self._async.reachable(timeout))
